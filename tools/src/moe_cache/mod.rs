//! `llama-moe-cache`: replay a routing trace (`--expert-trace-out`) through
//! every cache policy at several sizes, compare each with Belady's optimum,
//! draw the curves and advise a `--moe-cache-mib` / `--moe-cache-policy`.
//! It also makes traces: from an external JSONL file (`--import-jsonl`,
//! [`import`]) or synthetic (`--synth-trace`,
//! [`llama::moe_cache::trace::synthetic`]), for a model's shape. `--predict`
//! replays the decode prediction of `--moe-predict history` on the trace
//! ([`predict`]).

pub mod advise;
pub mod import;
pub mod plot;
pub mod predict;
pub mod sweep;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use llama::moe_cache::predict::history::HistoryParams;
use llama::moe_cache::trace::synthetic::{self as synth_trace, SynthKind, SynthParams};
use llama::moe_cache::{PolicyKind, Trace, TraceHeader, DEFAULT_MAX_BATCH};

use sweep::{Row, SweepPolicy};

/// The tool's flags: the trace argument, and flags declared by the entries
/// of [`common::flags::table`] named as their fields.
#[derive(Parser, Debug)]
#[command(
    name = "llama-moe-cache",
    version,
    about = "Replay a routing trace through every expert cache policy and Belady's optimum; import or synthesize traces."
)]
pub struct Args {
    /// the trace written by llama-run / llama-bench --expert-trace-out
    /// (none with --import-jsonl or --synth-trace)
    #[arg(required_unless_present_any = ["import_jsonl", "synth_trace"], conflicts_with_all = ["import_jsonl", "synth_trace"])]
    pub trace: Option<PathBuf>,
    /// `--import-jsonl`.
    #[arg(long, requires = "model", conflicts_with = "synth_trace")]
    pub import_jsonl: Option<PathBuf>,
    /// `--synth-trace`.
    #[arg(long, requires = "model", value_parser = parse_kind)]
    pub synth_trace: Option<SynthKind>,
    /// `--tokens`.
    #[arg(long, requires = "synth_trace")]
    pub tokens: usize,
    /// `--trace-out`.
    #[arg(long)]
    pub trace_out: Option<PathBuf>,
    /// `--no-replay`.
    #[arg(long)]
    pub no_replay: bool,
    /// `--seed`.
    #[arg(long, requires = "synth_trace")]
    pub seed: u64,
    /// `--zipf-s`.
    #[arg(long, requires = "synth_trace")]
    pub zipf_s: Option<f64>,
    /// `--topic-len`.
    #[arg(long, requires = "synth_trace")]
    pub topic_len: Option<f64>,
    /// `--topic-experts`.
    #[arg(long, requires = "synth_trace")]
    pub topic_experts: Option<u32>,
    /// `--p-repeat`.
    #[arg(long, requires = "synth_trace")]
    pub p_repeat: Option<f64>,
    /// `--p-layer`.
    #[arg(long, requires = "synth_trace")]
    pub p_layer: Option<f64>,
    /// `--p-global`.
    #[arg(long, requires = "synth_trace")]
    pub p_global: Option<f64>,
    /// `--sizes`.
    #[arg(long, value_parser = parse_slots, conflicts_with = "mib")]
    pub sizes: Option<List<u32>>,
    /// `--mib`.
    #[arg(long, value_parser = parse_mib)]
    pub mib: Option<List<f64>>,
    /// `--policies`.
    #[arg(long, value_parser = parse_policies)]
    pub policies: Option<List<PolicyKind>>,
    /// `--max-batch`.
    #[arg(long)]
    pub max_batch: usize,
    /// `--tier`.
    #[arg(long)]
    pub tier: String,
    /// `--json`.
    #[arg(long)]
    pub json: bool,
    /// `--plot`.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// `--predict`.
    #[arg(long)]
    pub predict: bool,
    /// `--predict-decay`.
    #[arg(long, requires = "predict")]
    pub predict_decay: Option<f32>,
    /// `--predict-layer-weight`.
    #[arg(long, requires = "predict")]
    pub predict_layer_weight: Option<f32>,
    /// `--predict-min-score`.
    #[arg(long, requires = "predict")]
    pub predict_min_score: Option<f32>,
    /// `--advise`.
    #[arg(long, requires = "vram_mib")]
    pub advise: bool,
    /// `--vram-mib`.
    #[arg(long)]
    pub vram_mib: Option<f64>,
    /// `--link-gbps`.
    #[arg(long)]
    pub link_gbps: f64,
    /// `--model`.
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// A comma-separated list given to one flag.
#[derive(Clone, Debug, PartialEq)]
pub struct List<T>(pub Vec<T>);

fn list<T>(s: &str, one: impl Fn(&str) -> Result<T, String>) -> Result<List<T>, String> {
    let v: Vec<T> = s
        .split(',')
        .map(|t| one(t.trim()))
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("the list is empty".into());
    }
    Ok(List(v))
}

fn parse_slots(s: &str) -> Result<List<u32>, String> {
    list(s, |t| match t.parse::<u32>() {
        Ok(0) => Err("a size of 0 slots caches nothing (give sizes of 1 or more)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{t}' is not a number of slots")),
    })
}

fn parse_mib(s: &str) -> Result<List<f64>, String> {
    list(s, |t| match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("'{t}': give MiB as a number above 0")),
        Err(_) => Err(format!("'{t}' is not a number of MiB")),
    })
}

fn parse_kind(s: &str) -> Result<SynthKind, String> {
    s.parse()
}

fn parse_policies(s: &str) -> Result<List<PolicyKind>, String> {
    list(s, |t| t.parse::<PolicyKind>())
}

/// The synthesis parameters the flags give.
pub fn synth_params(a: &Args, kind: SynthKind) -> SynthParams {
    let d = SynthParams::new(kind);
    SynthParams {
        kind,
        seed: a.seed,
        zipf_s: a.zipf_s.unwrap_or(d.zipf_s),
        topic_len: a.topic_len.unwrap_or(d.topic_len),
        topic_experts: a.topic_experts.unwrap_or(d.topic_experts),
        p_repeat: a.p_repeat.unwrap_or(d.p_repeat),
        p_layer: a.p_layer.unwrap_or(d.p_layer),
        p_global: a.p_global.unwrap_or(d.p_global),
    }
}

fn model_header(m: &std::path::Path) -> Result<TraceHeader> {
    let loaded = common::cli::load_model(
        "llama-moe-cache",
        Some(m),
        &common::cli::PlacementArgs::default(),
        1,
    )?;
    Ok(TraceHeader::from_model(&loaded.model))
}

/// The trace to replay: read, imported or synthesized (and written to
/// `--trace-out`), with the name to give it in messages.
fn make_trace(a: &Args) -> Result<(Trace, String)> {
    let (trace, name) = match (&a.trace, &a.import_jsonl, a.synth_trace, &a.model) {
        (Some(t), _, _, _) => {
            let trace = Trace::read(t).map_err(anyhow::Error::msg)?;
            (trace, t.display().to_string())
        }
        (None, Some(inp), _, Some(m)) => {
            let header = model_header(m)?;
            if header.layers.is_empty() {
                bail!("{} has no MoE layer to import a trace for", m.display());
            }
            let text = std::fs::read_to_string(inp)
                .with_context(|| format!("cannot read {}", inp.display()))?;
            let imp = import::import_jsonl(&text, header)
                .map_err(|e| anyhow::anyhow!("{}: {e}", inp.display()))?;
            eprintln!(
                "llama-moe-cache: imported {} records: {} tokens in {} sequence(s), {} MoE layers",
                imp.records,
                imp.trace.ubatches.len(),
                imp.sequences,
                imp.trace.header.layers.len()
            );
            (imp.trace, inp.display().to_string())
        }
        (None, None, Some(kind), Some(m)) => {
            if a.tokens == 0 {
                bail!("--tokens 0: give 1 or more tokens");
            }
            let header = model_header(m)?;
            if header.layers.is_empty() {
                bail!("{} has no MoE layer to synthesize a trace for", m.display());
            }
            let p = synth_params(a, kind);
            p.check(header.n_expert, header.n_expert_used)
                .map_err(|e| anyhow::anyhow!("--synth-trace {kind}: {e}"))?;
            let tokens = synth_trace::generate(
                &p,
                header.layers.len(),
                header.n_expert,
                header.n_expert_used,
                a.tokens,
            );
            let n = a.tokens.min(1300);
            eprintln!(
                "llama-moe-cache: synthesized {} tokens of {kind} routing ({}): {:.1}% of (layer, expert) pairs active within {n} tokens, median reuse distance {}",
                a.tokens,
                header.shape(),
                100.0 * synth_trace::active_fraction(&tokens, n, header.n_expert),
                synth_trace::median_reuse_distance(&tokens, header.n_expert)
                    .map_or("-".to_string(), |d| format!("{d} tokens"))
            );
            (
                Trace::from_tokens(header, &tokens),
                format!("synthetic {kind} trace"),
            )
        }
        _ => bail!(
            "give a trace file, --import-jsonl IN.jsonl -m MODEL, or --synth-trace KIND -m MODEL"
        ),
    };
    if let Some(out) = &a.trace_out {
        if a.trace.is_some() {
            bail!("--trace-out: give it with --import-jsonl or --synth-trace (the trace file is already one)");
        }
        std::fs::write(out, trace.to_bytes())
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("llama-moe-cache: wrote {}", out.display());
    }
    Ok((trace, name))
}

/// Run the tool.
pub fn run(a: &Args) -> Result<()> {
    if a.no_replay && a.trace_out.is_none() {
        bail!("--no-replay without --trace-out: nothing to do (give --trace-out OUT.trace)");
    }
    if a.no_replay && a.trace.is_some() {
        bail!("--no-replay: give it with --import-jsonl or --synth-trace");
    }
    let (trace, name) = make_trace(a)?;
    if a.no_replay {
        return Ok(());
    }
    if trace.ubatches.is_empty() {
        bail!("{name}: the trace holds no ubatch");
    }
    if let (Some(m), Some(tp)) = (&a.model, &a.trace) {
        let h = model_header(m)?;
        let tl: Vec<u32> = trace.header.layers.iter().map(|l| l.layer).collect();
        let ml: Vec<u32> = h.layers.iter().map(|l| l.layer).collect();
        if h.n_layer != trace.header.n_layer
            || h.n_expert != trace.header.n_expert
            || h.n_expert_used != trace.header.n_expert_used
            || tl != ml
        {
            bail!(
                "{} was recorded on another model: the trace has {}, {} has {}",
                tp.display(),
                trace.header.shape(),
                m.display(),
                h.shape()
            );
        }
    }
    if a.max_batch == 0 {
        bail!("--max-batch 0: give 1 or more tokens");
    }
    let tier: sweep::Tier = a
        .tier
        .parse()
        .map_err(|e| anyhow::anyhow!("--tier {}: {e}", a.tier))?;
    let groups = trace.header.groups();
    if groups.is_empty() {
        bail!("{name}: no layer of the trace can be cached");
    }
    let sizes = match (&a.sizes, &a.mib) {
        (Some(s), _) => sweep::sizes_from_slots(&groups, &s.0)?,
        (None, Some(m)) => sweep::sizes_from_mib(&groups, &m.0)?,
        (None, None) => sweep::default_sizes(&groups),
    };
    let mut policies: Vec<SweepPolicy> = a
        .policies
        .clone()
        .map_or(PolicyKind::ALL.to_vec(), |l| l.0)
        .into_iter()
        .map(SweepPolicy::Live)
        .collect();
    policies.push(SweepPolicy::Belady);
    let n = (sizes.len() * policies.len()) as u64;
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| indicatif::ProgressBar::new(n));
    let mut rows: Vec<Row> = Vec::new();
    for s in &sizes {
        for &p in &policies {
            rows.push(sweep::run(&trace, &groups, s, p, a.max_batch, tier)?);
            if let Some(b) = &bar {
                b.inc(1);
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let mut predicted: Vec<predict::PredictRow> = Vec::new();
    if a.predict {
        let d = HistoryParams::default();
        let params = HistoryParams {
            decay: a.predict_decay.unwrap_or(d.decay),
            layer_weight: a.predict_layer_weight.unwrap_or(d.layer_weight),
            min_upload_score: a.predict_min_score.unwrap_or(d.min_upload_score),
        };
        params.check().map_err(anyhow::Error::msg)?;
        let policy = a
            .policies
            .as_ref()
            .and_then(|l| l.0.first().copied())
            .unwrap_or_default();
        for s in &sizes {
            predicted.push(predict::run(
                &trace,
                &groups,
                s,
                policy,
                a.max_batch,
                params,
            )?);
        }
    }
    if a.json {
        if a.predict {
            let v = serde_json::json!({"sweep": rows, "predict": predicted});
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
    } else {
        print!("{}", table(&rows));
        if a.predict {
            print!("{}", predict::table(&predicted));
        }
    }
    if let Some(p) = &a.plot {
        let title = format!(
            "{}: hit rate by cache size ({} ubatches)",
            trace.header.model,
            trace.ubatches.len()
        );
        plot::draw(p, &title, &rows).with_context(|| format!("cannot draw {}", p.display()))?;
    }
    if a.advise {
        let vram = a.vram_mib.unwrap_or(0.0);
        let Some(adv) = advise::advise(&groups, &sizes, &rows, vram) else {
            bail!("--advise: no size of the sweep fits {vram} MiB (give smaller --sizes or --mib)");
        };
        let link_s = adv.bytes_per_token / (a.link_gbps * 1e9);
        let mb = if a.max_batch != DEFAULT_MAX_BATCH {
            format!(" --moe-cache-max-batch {}", a.max_batch)
        } else {
            String::new()
        };
        println!(
            "--moe-cache-mib {} --moe-cache-policy {}{mb}  # expected decode hit rate {:.1}%, {:.0} bytes and {:.3} ms of link at {} GB/s per decoded token",
            adv.mib,
            adv.policy,
            adv.hit_rate * 100.0,
            adv.bytes_per_token,
            link_s * 1e3,
            a.link_gbps
        );
    }
    Ok(())
}

/// The table: one line per (size, policy), with the hit rate as a
/// fraction of Belady's at the same size.
pub fn table(rows: &[Row]) -> String {
    // 8 wide, as always; wider only when a policy's name needs it
    let w = rows
        .iter()
        .map(|r| r.policy.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut t = format!(
        "{:>w$} {:>6} {:>10} {:>10} {:>10} {:>7} {:>9} {:>9} {:>14}\n",
        "policy", "slots", "MiB", "hits", "misses", "hit%", "decode%", "of_belady", "bytes/token"
    );
    for r in rows {
        let opt = rows
            .iter()
            .find(|o| o.policy == "belady" && o.mib == r.mib)
            .map_or(0.0, |o| o.hit_rate);
        let frac = if opt > 0.0 { r.hit_rate / opt } else { 1.0 };
        t.push_str(&format!(
            "{:>w$} {:>6} {:>10.2} {:>10} {:>10} {:>7.2} {:>9.2} {:>9.3} {:>14.0}\n",
            r.policy,
            r.slots,
            r.mib,
            r.hits,
            r.misses,
            r.hit_rate * 100.0,
            r.hit_rate_decode * 100.0,
            frac,
            r.bytes_per_token
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(policy: &str, hits: u64) -> Row {
        Row {
            policy: policy.to_string(),
            slots: 32,
            mib: 1.5,
            hits,
            misses: 100 - hits,
            hit_rate: hits as f64 / 100.0,
            bytes_per_token: 10.0,
            hit_rate_decode: hits as f64 / 100.0,
        }
    }

    #[test]
    fn the_policy_column_widens_only_for_a_long_name() {
        let short = table(&[row("hlfu", 20), row("belady", 40)]);
        assert_eq!(
            short.lines().nth(1).unwrap(),
            format!(
                "{:>8} {:>6} {:>10.2} {:>10} {:>10} {:>7.2} {:>9.2} {:>9.3} {:>14.0}",
                "hlfu", 32, 1.5, 20, 80, 20.0, 20.0, 0.5, 10.0
            )
        );
        let long = table(&[
            row("hlfu", 20),
            row("nextuse-nopredict", 30),
            row("belady", 40),
        ]);
        // every line as wide as the others, each column ending at the same place
        let lines: Vec<&str> = long.lines().collect();
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{long}");
        let hits_end = lines[0].find("hits").unwrap() + 4;
        for l in &lines[1..] {
            assert!(l[..hits_end].ends_with(char::is_numeric), "{long}");
        }
        assert!(lines[2].starts_with("nextuse-nopredict "), "{long}");
    }
}
