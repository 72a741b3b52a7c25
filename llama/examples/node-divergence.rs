//! Where a model's logits on a CUDA device part from the CPU backend's:
//! runs a fixture (`STEM.gguf`, `.tokens`, `.gen`, `.logits`, `.genlogits`
//! as in `../shared/fixtures/models`) on the CPU and on `CUDA0` (the
//! emulated device where there is no GPU), prints each logits row's NMSE
//! against the fixture and between the two, and for one ubatch (the
//! prompt, or teacher-forced row K) every named F32 node of the graph
//! ([`llama::Context::set_node_dump`]): its relative difference
//! (`‖cuda − cpu‖ / ‖cpu‖`), how many values differ in their bits, and the
//! first node whose difference is above float rounding (1e-6).
//!
//! `cargo run --release -p llama --example node-divergence -- STEM [--row K]`

use std::sync::Arc;

use llama::device::open_device;
use llama::{Context, ContextParams, Model, ModelParams};

type Dump = Vec<(String, Vec<f32>)>;

struct Fixture {
    stem: String,
    tokens: Vec<i32>,
    gen: Vec<i32>,
    logits: Vec<f32>,
    genlogits: Vec<f32>,
}

fn read<T: bytemuck::Pod>(path: &str) -> Result<Vec<T>, String> {
    let b = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if !b.len().is_multiple_of(std::mem::size_of::<T>()) {
        return Err(format!(
            "{path}: {} bytes is not a whole number of values",
            b.len()
        ));
    }
    Ok(bytemuck::pod_collect_to_vec(&b))
}

/// Prompt rows, teacher-forced rows, and the dump of ubatch `dump_row`
/// (`None`: the prompt; `Some(k)`: teacher-forced row k).
fn run(
    fx: &Fixture,
    dev: &str,
    dump_row: Option<usize>,
) -> Result<(Vec<f32>, Vec<f32>, Dump), String> {
    let d = open_device(dev, 2, 32).map_err(|e| e.to_string())?;
    let params = ModelParams {
        device: d,
        progress: None,
        ..Default::default()
    };
    let model =
        Arc::new(Model::load(format!("{}.gguf", fx.stem), params).map_err(|e| e.to_string())?);
    let cp = ContextParams {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch: 512,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(model, cp).map_err(|e| e.to_string())?;
    let e = |e: llama::LlamaError| e.to_string();
    ctx.set_node_dump(dump_row.is_none());
    ctx.decode(&fx.tokens, true).map_err(e)?;
    let mut dump = ctx.node_dump().to_vec();
    let row = |ctx: &Context, i: usize| -> Result<Vec<f32>, String> {
        ctx.logits(i)
            .map(<[f32]>::to_vec)
            .ok_or_else(|| format!("no logits row {i}"))
    };
    let mut prompt = Vec::new();
    for i in 0..fx.tokens.len() {
        prompt.extend(row(&ctx, i)?);
    }
    let mut forced = Vec::new();
    for (i, &t) in fx.gen.iter().enumerate() {
        ctx.set_node_dump(dump_row == Some(i));
        ctx.decode(&[t], false).map_err(e)?;
        if dump_row == Some(i) {
            dump = ctx.node_dump().to_vec();
        }
        forced.extend(row(&ctx, 0)?);
    }
    Ok((prompt, forced, dump))
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    num / den.max(f64::MIN_POSITIVE)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: node-divergence STEM [--row K]";
    let stem = args.first().ok_or(usage)?.clone();
    let dump_row = match args.get(1).map(String::as_str) {
        None => None,
        Some("--row") => Some(
            args.get(2)
                .and_then(|k| k.parse::<usize>().ok())
                .ok_or("--row takes a teacher-forced row number")?,
        ),
        Some(a) => return Err(format!("unknown argument '{a}' ({usage})")),
    };
    let fx = Fixture {
        tokens: read(&format!("{stem}.tokens"))?,
        gen: read(&format!("{stem}.gen"))?,
        logits: read(&format!("{stem}.logits"))?,
        genlogits: read(&format!("{stem}.genlogits"))?,
        stem,
    };
    if fx.tokens.is_empty() || !fx.logits.len().is_multiple_of(fx.tokens.len()) {
        return Err("the logits do not hold one row per prompt token".into());
    }
    let n = fx.logits.len() / fx.tokens.len();
    if dump_row.is_some_and(|k| k >= fx.gen.len()) {
        return Err(format!(
            "--row: the fixture has {} teacher-forced rows",
            fx.gen.len()
        ));
    }
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({why}): CUDA0 is the emulated device");
        ggml_cuda::emulator::enable();
    }
    let (pc, fc, dc) = run(&fx, "CPU", dump_row)?;
    let (pg, fg, dg) = run(&fx, "CUDA0", dump_row)?;
    println!(
        "NMSE against the fixture: CPU prompt {:.3e} teacher-forced {:.3e}; CUDA0 prompt {:.3e} teacher-forced {:.3e}",
        nmse(&pc, &fx.logits),
        nmse(&fc, &fx.genlogits),
        nmse(&pg, &fx.logits),
        nmse(&fg, &fx.genlogits)
    );
    println!("| row | CPU | CUDA0 | CUDA0 vs CPU |\n| --- | ---: | ---: | ---: |");
    let rows = [
        ("prompt", &pc, &pg, &fx.logits),
        ("forced", &fc, &fg, &fx.genlogits),
    ];
    for (what, c, g, want) in rows {
        for r in 0..want.len() / n {
            let s = r * n..(r + 1) * n;
            println!(
                "| {what} {r} | {:.2e} | {:.2e} | {:.2e} |",
                nmse(&c[s.clone()], &want[s.clone()]),
                nmse(&g[s.clone()], &want[s.clone()]),
                nmse(&g[s.clone()], &c[s])
            );
        }
    }
    let what = dump_row.map_or("the prompt".to_string(), |k| {
        format!("teacher-forced row {k}")
    });
    println!("\nnodes of {what}:\n| node | values | rel. difference | values with other bits |\n| --- | ---: | ---: | ---: |");
    let mut first = None;
    for (name, g) in &dg {
        let Some((_, c)) = dc
            .iter()
            .find(|(k, _)| k == name)
            .filter(|(_, c)| c.len() == g.len())
        else {
            println!("| {name} | {} | (not on the CPU) | |", g.len());
            continue;
        };
        let rel = nmse(g, c).sqrt();
        let bits = g
            .iter()
            .zip(c)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        if rel > 1e-6 && first.is_none() {
            first = Some(name.clone());
        }
        println!("| {name} | {} | {rel:.2e} | {bits} |", g.len());
    }
    match first {
        Some(f) => println!("\nfirst node above 1e-6: {f}"),
        None => println!("\nno node above 1e-6"),
    }
    Ok(())
}
