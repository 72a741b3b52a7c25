//! The host expert cache's disk reader against `dd iflag=direct` (and
//! `fio`, where it is installed) on the same file, in one run.
//!
//! The file is read whole, as the host cache reads a layer's misses: in
//! batches of `--batch` requests (default 24: 8 misses of 3 roles) of
//! `--req-kib` KiB each (default 864: a Qwen3-30B-A3B Q4_K expert), each
//! batch one `DiskReader::read_batch` into a bank of slots, for every
//! in-flight count of `--in-flight` (default 4,8,16). `--dst` picks where
//! the slots lie: `bounce` (default; the file offsets start 32 bytes past
//! a block, as in a GGUF aligned to 32, so every byte goes through a
//! bounce buffer), `direct` (offsets and slots aligned: read straight into
//! the slots), or `both`. `old` is the reader's previous scheme, rebuilt
//! here for comparison: a zeroed aligned buffer allocated per request,
//! read whole, then copied to its slot, 4 requests in flight.
//!
//! Each of `--rounds` rounds (default 3) runs `dd if=FILE of=/dev/null
//! bs=4M iflag=direct`, each reader setting, and `fio` (`--rw=read
//! --bs=2M --direct=1`, psync with `numjobs` = the in-flight counts and
//! io_uring with that `iodepth`) where installed, in an order reversed
//! every other round, and prints MB/s; the summary gives each setting's
//! median and its ratio to dd's median.
//! `O_DIRECT` bypasses the page cache, so no cache needs dropping.
//!
//! `cargo bench -p llama --bench disk_read -- FILE [--rounds N]
//! [--in-flight 4,8,16] [--req-kib 864] [--batch 24] [--dst bounce|direct|both] [--old]`

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use ggml_core::gguf::{open_direct, DIO_ALIGN};
use llama::moe_cache::host::disk::{AlignedBuf, DiskReader, ReadReq};

struct Args {
    file: String,
    rounds: usize,
    in_flight: Vec<usize>,
    req: usize,
    batch: usize,
    dst: Vec<&'static str>,
    old: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        file: String::new(),
        rounds: 3,
        in_flight: vec![4, 8, 16],
        req: 864 << 10,
        batch: 24,
        dst: vec!["bounce"],
        old: false,
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> Result<usize, String> {
        v.as_deref()
            .unwrap_or("")
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{what} wants a positive number"))
    };
    while let Some(x) = it.next() {
        match x.as_str() {
            "--bench" => {}
            "--rounds" => a.rounds = num(it.next(), "--rounds")?,
            "--req-kib" => a.req = num(it.next(), "--req-kib")? << 10,
            "--batch" => a.batch = num(it.next(), "--batch")?,
            "--old" => a.old = true,
            "--in-flight" => {
                a.in_flight = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|s| num(Some(s.to_string()), "--in-flight"))
                    .collect::<Result<_, _>>()?
            }
            "--dst" => {
                a.dst = match it.next().as_deref() {
                    Some("bounce") => vec!["bounce"],
                    Some("direct") => vec!["direct"],
                    Some("both") => vec!["bounce", "direct"],
                    v => return Err(format!("--dst {v:?}: expected bounce, direct or both")),
                }
            }
            f if f.starts_with('-') => return Err(format!("unknown flag {f}")),
            f => a.file = f.to_string(),
        }
    }
    if a.file.is_empty() {
        return Err("no file: cargo bench -p llama --bench disk_read -- FILE".into());
    }
    Ok(a)
}

/// Offsets of the requests that read `len` bytes of the file, `req` each,
/// from `start`.
fn offsets(len: u64, start: u64, req: usize) -> Vec<u64> {
    (0..)
        .map(|i| start + i * req as u64)
        .take_while(|o| o + req as u64 <= len)
        .collect()
}

/// MB/s of our reader with `n` in flight, batches of `batch` requests.
fn ours(path: &Path, offs: &[u64], a: &Args, n: usize, dst: &str) -> Result<f64, String> {
    let mut r = DiskReader::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(note) = r.note() {
        println!("  {note}");
    }
    r.set_reads_in_flight(n)?;
    // slots at a block boundary (direct) or 32 bytes past one, as the
    // file offsets are
    let shift = if dst == "direct" { 0 } else { 32 };
    let stride = a.req.next_multiple_of(DIO_ALIGN);
    let mut bank = AlignedBuf::new(a.batch * stride + DIO_ALIGN);
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for chunk in offs.chunks(a.batch) {
        let mem = &mut bank.as_mut_slice()[shift..];
        let reqs = chunk
            .iter()
            .zip(mem.chunks_mut(stride))
            .map(|(&off, slot)| ReadReq {
                off,
                dst: vec![&mut slot[..a.req]],
            })
            .collect();
        let done = r.read_batch(reqs).map_err(|e| e.to_string())?;
        bytes += done.iter().map(|d| d.disk_bytes).sum::<u64>();
    }
    Ok(bytes as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// MB/s of the previous scheme: per request a zeroed aligned buffer,
/// one whole read, a copy to the slot; 4 threads.
fn old(path: &Path, offs: &[u64], a: &Args) -> Result<f64, String> {
    let f = open_direct(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bank = vec![0u8; a.batch * a.req];
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for chunk in offs.chunks(a.batch) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<parking_lot::Mutex<&mut [u8]>> = bank
            .chunks_mut(a.req)
            .map(parking_lot::Mutex::new)
            .collect();
        let got: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0u64;
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&off) = chunk.get(i) else { break };
                            let al = DIO_ALIGN as u64;
                            let lo = off - off % al;
                            let hi = (off + a.req as u64).next_multiple_of(al);
                            let mut buf = AlignedBuf::new((hi - lo) as usize);
                            let m = buf.as_mut_slice();
                            let mut k = 0;
                            while k < m.len() {
                                match f.read_at(&mut m[k..], lo + k as u64) {
                                    Ok(0) | Err(_) => break,
                                    Ok(r) => k += r,
                                }
                            }
                            let skip = (off - lo) as usize;
                            slots[i].lock().copy_from_slice(&m[skip..skip + a.req]);
                            n += k as u64;
                        }
                        n
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        bytes += got;
    }
    Ok(bytes as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// MB/s of `dd if=FILE of=/dev/null bs=4M iflag=direct`.
fn dd(path: &Path) -> Result<f64, String> {
    let out = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["of=/dev/null", "bs=4M", "iflag=direct"])
        .output()
        .map_err(|e| format!("dd: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    // "N bytes (...) copied, S s, R MB/s"
    let line = err.lines().last().unwrap_or("");
    let bytes: f64 = line
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("dd said {err:?}"))?;
    let secs: f64 = line
        .split("copied, ")
        .nth(1)
        .and_then(|w| w.split(' ').next())
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("dd said {err:?}"))?;
    Ok(bytes / secs / 1e6)
}

/// MB/s of fio's sequential direct read of the file with `engine` and `n`
/// jobs (psync) or `n` in flight (io_uring); `None` without fio.
fn fio(path: &Path, engine: &str, n: usize) -> Option<f64> {
    let mut c = Command::new("fio");
    c.args([
        "--name=r",
        "--rw=read",
        "--bs=2M",
        "--direct=1",
        "--output-format=terse",
        "--terse-version=3",
    ])
    .arg(format!("--filename={}", path.display()))
    .arg(format!("--ioengine={engine}"));
    if engine == "psync" {
        // n jobs each reading a share of the file
        // (a multiple of the read size: direct reads want aligned offsets)
        let size = std::fs::metadata(path).ok()?.len() / n as u64 / (2 << 20) * (2 << 20);
        c.arg(format!("--numjobs={n}"))
            .arg("--group_reporting")
            .arg(format!("--size={size}"))
            .arg(format!("--offset_increment={size}"));
    } else {
        c.arg(format!("--iodepth={n}"));
    }
    let out = c.output().ok()?;
    if !out.status.success() {
        return None;
    }
    // terse v3: field 7 is the read bandwidth in KiB/s
    let s = String::from_utf8_lossy(&out.stdout);
    let kib: f64 = s.lines().last()?.split(';').nth(6)?.parse().ok()?;
    Some(kib * 1024.0 / 1e6)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("disk_read: {e}");
            std::process::exit(2);
        }
    };
    let path = Path::new(&a.file);
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) => {
            eprintln!("disk_read: {}: {e}", path.display());
            std::process::exit(2);
        }
    };
    let has_fio = Command::new("fio").arg("--version").output().is_ok();
    println!(
        "disk_read: {} ({len} bytes), requests of {} KiB in batches of {}, {} rounds; fio {}; load {}",
        path.display(),
        a.req >> 10,
        a.batch,
        a.rounds,
        if has_fio { "found" } else { "not installed" },
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    let mut add = |name: String, v: f64| {
        println!("  {name}: {v:.0} MB/s");
        match rows.iter_mut().find(|(n, _)| *n == name) {
            Some((_, vs)) => vs.push(v),
            None => rows.push((name, vec![v])),
        }
    };
    // every setting of a round, in an order that alternates between rounds
    #[derive(Clone, Copy)]
    enum Setting {
        Dd,
        Ours(&'static str, usize),
        Old(&'static str),
        Fio(&'static str, usize),
    }
    let mut settings = vec![Setting::Dd];
    for &dst in &a.dst {
        settings.extend(a.in_flight.iter().map(|&n| Setting::Ours(dst, n)));
        if a.old {
            settings.push(Setting::Old(dst));
        }
    }
    if has_fio {
        for &n in &a.in_flight {
            settings.push(Setting::Fio("psync", n));
            settings.push(Setting::Fio("io_uring", n));
        }
    }
    let offs = |dst: &str| offsets(len, if dst == "direct" { 0 } else { 32 }, a.req);
    for round in 1..=a.rounds {
        println!("round {round}");
        let mut order = settings.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for s in order {
            match s {
                Setting::Dd => match dd(path) {
                    Ok(v) => add("dd iflag=direct bs=4M".into(), v),
                    Err(e) => println!("  dd: {e}"),
                },
                Setting::Ours(dst, n) => match ours(path, &offs(dst), &a, n, dst) {
                    Ok(v) => add(format!("ours, {dst}, {n} in flight"), v),
                    Err(e) => println!("  ours: {e}"),
                },
                Setting::Old(dst) => match old(path, &offs(dst), &a) {
                    Ok(v) => add(format!("previous scheme, {dst}, 4 in flight"), v),
                    Err(e) => println!("  previous scheme: {e}"),
                },
                Setting::Fio(engine, n) => {
                    if let Some(v) = fio(path, engine, n) {
                        add(format!("fio {engine}, {n} in flight"), v);
                    }
                }
            }
        }
    }
    let dd_med = rows
        .iter()
        .find(|(n, _)| n.starts_with("dd"))
        .map(|(_, v)| median(&mut v.clone()))
        .unwrap_or(0.0);
    println!("| reader | MB/s per round | median | vs dd's median |");
    println!("| --- | --- | --- | --- |");
    for (name, v) in &rows {
        let m = median(&mut v.clone());
        let per: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        let ratio = if dd_med > 0.0 { m / dd_med } else { 0.0 };
        println!("| {name} | {} | {m:.0} | {ratio:.2} |", per.join(", "));
    }
}
