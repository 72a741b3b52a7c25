//! `--advise`: the smallest cache within 2 points of the best hit rate that
//! fits the device, as flags a user can paste.

use llama::moe_cache::cache::layout::{split_budget, GroupShape};

use super::sweep::{Row, Size};

/// How far below the best decode hit rate a smaller cache may be.
pub const TOLERANCE: f64 = 0.02;

/// The advice: a size and a policy, with what they are expected to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    /// `--moe-cache-mib` value (a budget the live cache splits into the
    /// same slots as the sweep's size).
    pub mib: String,
    /// The policy.
    pub policy: String,
    /// Expected decode hit rate.
    pub hit_rate: f64,
    /// Expected bytes uploaded per decoded token.
    pub bytes_per_token: f64,
}

/// The shortest `--moe-cache-mib` text whose budget the live cache splits
/// into exactly `slots` (the budget given, when sized by MiB).
pub fn budget_text(groups: &[GroupShape], size: &Size) -> String {
    if let Some(m) = size.budget_mib {
        return format!("{m}");
    }
    let bytes: u64 = groups
        .iter()
        .zip(&size.slots)
        .map(|(g, &s)| g.bank_bytes(s))
        .sum();
    for digits in 0..7 {
        let scale = 10f64.powi(digits);
        let mib = (bytes as f64 / 1048576.0 * scale).ceil() / scale;
        if split_budget(groups, (mib * 1048576.0) as u64) == size.slots {
            return format!("{mib:.*}", digits as usize);
        }
    }
    format!("{}", bytes as f64 / 1048576.0)
}

/// Advice among `rows` (`sizes[i]` is the size of `rows` with `mib ==
/// sizes[i].mib`) for a device of `vram_mib` MiB; `None` when no size fits.
pub fn advise(
    groups: &[GroupShape],
    sizes: &[Size],
    rows: &[Row],
    vram_mib: f64,
) -> Option<Advice> {
    let fits: Vec<&Size> = sizes.iter().filter(|s| s.mib <= vram_mib).collect();
    let live = |s: &Size| {
        rows.iter()
            .filter(move |r| r.policy != "belady" && r.mib == s.mib)
            .collect::<Vec<_>>()
    };
    let best = fits
        .iter()
        .flat_map(|s| live(s))
        .map(|r| r.hit_rate_decode)
        .fold(f64::NEG_INFINITY, f64::max);
    let mut fits = fits;
    fits.sort_by(|a, b| a.mib.total_cmp(&b.mib));
    for s in fits {
        // the best policy at this size; ties go to the first listed
        let mut pick: Option<&Row> = None;
        for r in live(s) {
            if pick.is_none_or(|p| r.hit_rate_decode > p.hit_rate_decode) {
                pick = Some(r);
            }
        }
        if let Some(r) = pick.filter(|r| r.hit_rate_decode >= best - TOLERANCE - 1e-12) {
            return Some(Advice {
                mib: budget_text(groups, s),
                policy: r.policy.clone(),
                hit_rate: r.hit_rate_decode,
                bytes_per_token: r.bytes_per_token,
            });
        }
    }
    None
}
