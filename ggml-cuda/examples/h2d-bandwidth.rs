//! `h2d-bandwidth`: host-to-device GB/s of a pinned and a pageable copy
//! (256 MiB by default), timed with CUDA events.
//!
//! ```sh
//! cargo run --release -p ggml-cuda --example h2d-bandwidth -- [--mib N] [--reps N] [--device N] [--json]
//! ```
//!
//! Prints `pinned   X GB/s` and `pageable Y GB/s` (GB = 10^9 bytes), or
//! with `--json` one JSON object (`device`, `device_name`, `bytes`, `reps`,
//! `pinned_gbs`, `pageable_gbs`). On a machine without a CUDA device it
//! prints `no CUDA device: ...` (with `--json`: `{"skipped": "no CUDA
//! device: ..."}`) and exits 0; a bad flag exits 2, a failed measurement 1.

use std::process::ExitCode;

use ggml_core::BackendError;

#[derive(Debug)]
struct Opts {
    mib: usize,
    reps: usize,
    device: usize,
    json: bool,
}

const USAGE: &str = "usage: h2d-bandwidth [--mib N (default 256)] [--reps N (default 5)] [--device N (default 0)] [--json]";

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        mib: 256,
        reps: 5,
        device: 0,
        json: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |flag: &str| -> Result<usize, String> {
            let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            v.parse::<usize>()
                .map_err(|_| format!("{flag} {v}: not a whole number"))
        };
        match a.as_str() {
            "--mib" => o.mib = num("--mib")?,
            "--reps" => o.reps = num("--reps")?,
            "--device" => o.device = num("--device")?,
            "--json" => o.json = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if o.mib == 0 || o.reps == 0 {
        return Err("--mib and --reps must be at least 1".into());
    }
    if o.mib > 1 << 20 {
        return Err(format!("--mib {}: at most {} (1 TiB)", o.mib, 1 << 20));
    }
    Ok(o)
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("h2d-bandwidth: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match ggml_cuda::measure_h2d_bandwidth(o.device, o.mib << 20, o.reps) {
        Ok(r) => {
            if o.json {
                println!(
                    "{{\"device\": \"CUDA{}\", \"device_name\": {}, \"emulated\": {}, \"bytes\": {}, \"reps\": {}, \"pinned_gbs\": {:.3}, \"pageable_gbs\": {:.3}}}",
                    o.device,
                    json_str(&r.device_name),
                    r.emulated,
                    r.bytes,
                    r.reps,
                    r.pinned_gbs,
                    r.pageable_gbs
                );
            } else {
                println!(
                    "h2d-bandwidth: CUDA{} ({}), {} MiB copies, median of {}",
                    o.device, r.device_name, o.mib, r.reps
                );
                let what = if r.emulated {
                    " (emulated: host memory copies, not a GPU measurement)"
                } else {
                    ""
                };
                println!("pinned   {:.2} GB/s{what}", r.pinned_gbs);
                println!("pageable {:.2} GB/s{what}", r.pageable_gbs);
            }
            ExitCode::SUCCESS
        }
        Err(BackendError::NoDevice(m)) => {
            let m = if m.starts_with("no CUDA device") {
                m
            } else {
                format!("no CUDA device: {m}")
            };
            if o.json {
                println!("{{\"skipped\": {}}}", json_str(&m));
            } else {
                println!("{m}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("h2d-bandwidth: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Opts, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn flags() {
        let o = p("").unwrap();
        assert_eq!((o.mib, o.reps, o.device, o.json), (256, 5, 0, false));
        let o = p("--mib 16 --reps 3 --device 1 --json").unwrap();
        assert_eq!((o.mib, o.reps, o.device, o.json), (16, 3, 1, true));
        assert!(p("--mib").unwrap_err().contains("--mib needs a value"));
        assert!(p("--mib x").unwrap_err().contains("not a whole number"));
        assert!(p("--reps 0").unwrap_err().contains("at least 1"));
        assert!(p("--bogus")
            .unwrap_err()
            .contains("unknown argument '--bogus'"));
        assert_eq!(json_str("a\"b\\"), "\"a\\\"b\\\\\"");
    }
}
