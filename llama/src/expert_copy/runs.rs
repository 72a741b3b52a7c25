//! Grouping the used experts of a 3-D expert tensor into byte ranges: one
//! range per run of consecutive used experts, padded where the device's
//! kernels read past an expert.

use std::ops::Range;

/// Runs `[first, last + 1)` of consecutive `true` entries.
pub fn expert_runs(used: &[bool]) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < used.len() {
        if used[i] {
            let start = i;
            while i < used.len() && used[i] {
                i += 1;
            }
            runs.push(start..i);
        } else {
            i += 1;
        }
    }
    runs
}

/// Byte ranges to copy for the used experts of a tensor whose experts are
/// `expert_bytes` apart (`nb[2]`) in a span of `total_bytes`: one range per
/// run, extended by `overhang` bytes (clamped to the tensor) so that
/// kernels reading past the last expert of a run find valid data; runs
/// whose padding reaches the next run are merged, so no byte goes twice.
pub fn copy_ranges(
    used: &[bool],
    expert_bytes: usize,
    total_bytes: usize,
    overhang: usize,
) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for r in expert_runs(used) {
        let start = r.start * expert_bytes;
        let end = (r.end * expert_bytes + overhang).min(total_bytes);
        match out.last_mut() {
            // a padded run reaching into the next one: copy both as one range
            Some(prev) if prev.end >= start => prev.end = prev.end.max(end),
            _ => out.push(start..end),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_at_the_ends_and_singletons() {
        let u = [true, true, false, true, false, false, true];
        assert_eq!(expert_runs(&u), vec![0..2, 3..4, 6..7]);
        assert_eq!(expert_runs(&[false; 4]), Vec::<Range<usize>>::new());
        assert_eq!(expert_runs(&[true; 4]), vec![0..4]);
        assert_eq!(copy_ranges(&u, 10, 70, 3), vec![0..23, 30..43, 60..70]);
    }
}
