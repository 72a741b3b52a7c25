//! How a model file is brought into memory (`--load-mode`, llama.cpp's
//! `--mmap` / `--no-mmap` / `--mlock` / `--direct-io`), and the `O_DIRECT`
//! reader behind `dio`.

use std::fmt;
use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;
use std::str::FromStr;

use super::error::GgufError;

/// Alignment of `O_DIRECT` transfers: buffer address, file offset and length
/// (4096 covers every common logical block size).
pub const DIO_ALIGN: usize = 4096;

/// Bytes per `O_DIRECT` read (a multiple of [`DIO_ALIGN`]).
const DIO_CHUNK: usize = 8 << 20;

/// How the model file is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LoadMode {
    /// The default: `none` where the file takes at most half of the
    /// memory available now ([`LoadMode::auto_for`]), else `mmap`.
    #[default]
    Auto,
    /// Memory-map the file read-only: weights are used where they lie (in
    /// the page cache), and a file larger than memory still runs.
    Mmap,
    /// Read the file into anonymous memory, asking for transparent huge
    /// pages: decoding streams the weights with a TLB miss per 2 MiB
    /// instead of per 4 KiB (measured faster and steadier than `mmap`,
    /// see docs/running.md).
    None,
    /// Map the file and lock it in memory (`mlock`); falls back to a plain
    /// mapping, saying why, when the lock is refused.
    Mlock,
    /// Map the file; a device backend that has page-locked host memory
    /// (CUDA) registers the host weights with its driver so that uploads
    /// are asynchronous DMA. Elsewhere the same as `Mmap`.
    Pin,
    /// Read the file with `O_DIRECT` through aligned staging buffers,
    /// bypassing the page cache; falls back to ordinary reads, saying why,
    /// where the filesystem refuses `O_DIRECT` (tmpfs).
    Dio,
}

impl LoadMode {
    /// Every mode, in the order the help lists them.
    pub const ALL: [LoadMode; 6] = [
        LoadMode::Auto,
        LoadMode::Mmap,
        LoadMode::None,
        LoadMode::Mlock,
        LoadMode::Pin,
        LoadMode::Dio,
    ];

    /// The flag value (`auto`, `mmap`, `none`, `mlock`, `pin`, `dio`).
    pub fn as_str(self) -> &'static str {
        match self {
            LoadMode::Auto => "auto",
            LoadMode::Mmap => "mmap",
            LoadMode::None => "none",
            LoadMode::Mlock => "mlock",
            LoadMode::Pin => "pin",
            LoadMode::Dio => "dio",
        }
    }

    /// What `auto` means for a file of `file_bytes` with `available` bytes
    /// of memory available (`MemAvailable`; `None` where unknown): `none`
    /// when the file takes at most half of it, so that the copy leaves
    /// room for the KV cache and everything else, else `mmap` (a mapping
    /// runs whatever the file's size).
    pub fn auto(file_bytes: u64, available: Option<u64>) -> LoadMode {
        match available {
            Some(a) if file_bytes <= a / 2 => LoadMode::None,
            _ => LoadMode::Mmap,
        }
    }

    /// [`LoadMode::auto`] for the file at `path` and this machine's
    /// `MemAvailable` (`/proc/meminfo`); `mmap` where either is unknown.
    pub fn auto_for(path: &Path) -> LoadMode {
        match std::fs::metadata(path) {
            Ok(m) => LoadMode::auto(m.len(), available_memory()),
            Err(_) => LoadMode::Mmap,
        }
    }
}

/// `MemAvailable` from `/proc/meminfo`, in bytes (`None` elsewhere).
pub fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&info)
}

/// Memory this process may still use: `MemAvailable`, or less where the
/// process's memory cgroup leaves less ([`cgroup_memory_left`]).
pub fn available_memory() -> Option<u64> {
    match (mem_available(), cgroup_memory_left()) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

/// What the process's memory cgroup leaves: its limit (cgroup v2
/// `memory.max`, v1 `memory.limit_in_bytes`) less what its members use
/// beyond the page cache they could drop (`inactive_file`); `None` without
/// a limit.
pub fn cgroup_memory_left() -> Option<u64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |p: String| std::fs::read_to_string(p).ok();
    for line in cg.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        let (dir, limit, usage, inactive) = if ctrl.is_empty() {
            (
                format!("/sys/fs/cgroup{path}"),
                "memory.max",
                "memory.current",
                "inactive_file",
            )
        } else if ctrl.split(',').any(|c| c == "memory") {
            (
                format!("/sys/fs/cgroup/memory{path}"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            )
        } else {
            continue;
        };
        let Some(l) = read(format!("{dir}/{limit}")) else {
            continue;
        };
        let Some(limit) = parse_limit(&l) else {
            continue;
        };
        let used = read(format!("{dir}/{usage}"))
            .and_then(|u| u.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let cache = read(format!("{dir}/memory.stat"))
            .and_then(|s| stat_value(&s, inactive))
            .unwrap_or(0);
        return Some(limit.saturating_sub(used.saturating_sub(cache)));
    }
    None
}

/// A cgroup limit file's value: bytes, or `None` for no limit (`max`, or
/// v1's huge "unlimited" value).
fn parse_limit(s: &str) -> Option<u64> {
    let v: u64 = s.trim().parse().ok()?;
    (v < 1 << 60).then_some(v)
}

/// The value of `key` in a `memory.stat` text.
fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == key).then(|| f.next()?.parse().ok())?
    })
}

/// The `MemAvailable:` line of a `/proc/meminfo` text, in bytes.
fn parse_mem_available(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut f = line.split_whitespace().skip(1);
    let n: u64 = f.next()?.parse().ok()?;
    match f.next() {
        Some("kB") => n.checked_mul(1024),
        _ => None,
    }
}

impl fmt::Display for LoadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LoadMode {
    type Err = String;
    fn from_str(s: &str) -> Result<LoadMode, String> {
        LoadMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown load mode '{s}' (auto, mmap, none, mlock, pin, dio)"))
    }
}

/// The `DIO_ALIGN`-aligned window of `len` bytes inside `v`.
fn aligned_window(v: &mut [u8], len: usize) -> &mut [u8] {
    let pad = v.as_ptr().align_offset(DIO_ALIGN);
    &mut v[pad..pad + len]
}

/// Read the whole file at `path` with `O_DIRECT` (page cache bypassed)
/// through an aligned staging buffer into owned memory. A size that is not
/// a multiple of the alignment is fine (the last read is short). Where the
/// filesystem refuses `O_DIRECT` (`EINVAL`, as tmpfs does), the file is
/// read the ordinary way and the second value says so.
pub fn read_direct(path: &Path) -> Result<(Vec<u8>, Option<String>), GgufError> {
    read_direct_with(path, open_direct)
}

/// [`read_direct`] with the opener given (tests refuse `O_DIRECT` with it).
fn read_direct_with(
    path: &Path,
    open: fn(&Path) -> std::io::Result<File>,
) -> Result<(Vec<u8>, Option<String>), GgufError> {
    let io = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let fallback = |why: String| -> Result<(Vec<u8>, Option<String>), GgufError> {
        let bytes = std::fs::read(path).map_err(io)?;
        let note = format!(
            "--load-mode dio: {why}; read '{}' through the page cache instead",
            path.display()
        );
        Ok((bytes, Some(note)))
    };
    let file = match open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::PermissionDenied => {
            return Err(io(e))
        }
        Err(e) => return fallback(format!("the filesystem refuses O_DIRECT ({e})")),
    };
    let len = file.metadata().map_err(io)?.len();
    let len = usize::try_from(len).map_err(|_| {
        io(std::io::Error::other(format!(
            "{len} bytes do not fit in memory"
        )))
    })?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|e| {
        io(std::io::Error::new(
            ErrorKind::OutOfMemory,
            format!("{len} bytes: {e}"),
        ))
    })?;
    let mut staging_mem = vec![0u8; DIO_CHUNK + DIO_ALIGN];
    let staging = aligned_window(&mut staging_mem, DIO_CHUNK);
    while out.len() < len {
        // offsets stay multiples of DIO_CHUNK until the final short read
        let n = match read_at(&file, staging, out.len() as u64) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && out.is_empty() => {
                return fallback(format!("the filesystem refuses O_DIRECT reads ({e})"));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        if n == 0 {
            return Err(io(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!(
                    "the file shrank while being read: {} of {len} bytes",
                    out.len()
                ),
            )));
        }
        let take = n.min(len - out.len());
        out.extend_from_slice(&staging[..take]);
        if n < staging.len() && out.len() < len {
            // a short read before the end: offsets are no longer aligned
            return Err(io(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("short O_DIRECT read at offset {}", out.len() - take),
            )));
        }
    }
    Ok((out, None))
}

/// Opens `path` for reading with `O_DIRECT` (reads bypass the page cache;
/// buffers, offsets and lengths must be multiples of [`DIO_ALIGN`]). Errs
/// where the filesystem refuses the flag (tmpfs), and off Linux.
#[cfg(target_os = "linux")]
pub fn open_direct(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Off Linux there is no `O_DIRECT`: always an `Unsupported` error.
#[cfg(not(target_os = "linux"))]
pub fn open_direct(_path: &Path) -> std::io::Result<File> {
    Err(std::io::Error::new(
        ErrorKind::Unsupported,
        "O_DIRECT is a Linux open flag",
    ))
}

#[cfg(unix)]
fn read_at(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(f, buf, off)
}

#[cfg(not(unix))]
fn read_at(_f: &File, _buf: &mut [u8], _off: u64) -> std::io::Result<usize> {
    Err(std::io::Error::new(
        ErrorKind::Unsupported,
        "positioned reads are not available",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_mode_and_names_bad_ones() {
        for m in LoadMode::ALL {
            assert_eq!(m.as_str().parse::<LoadMode>(), Ok(m));
        }
        let e = "x".parse::<LoadMode>().unwrap_err();
        assert!(
            e.contains("unknown load mode 'x'") && e.contains("pin"),
            "{e}"
        );
    }

    #[test]
    fn auto_reads_a_file_that_takes_at_most_half_the_available_memory() {
        const G: u64 = 1 << 30;
        assert_eq!(LoadMode::auto(17 * G, Some(64 * G)), LoadMode::None);
        assert_eq!(LoadMode::auto(32 * G, Some(64 * G)), LoadMode::None);
        assert_eq!(LoadMode::auto(33 * G, Some(64 * G)), LoadMode::Mmap);
        assert_eq!(LoadMode::auto(1, None), LoadMode::Mmap);
        let info =
            "MemTotal:       24591184 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(parse_mem_available(info), Some(20_000_000 * 1024));
        assert_eq!(parse_mem_available("MemAvailable: 12\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("759169024\n"), Some(759169024));
        let stat = "cache 10\ntotal_inactive_file 4096\ninactive_file 12\n";
        assert_eq!(stat_value(stat, "total_inactive_file"), Some(4096));
        assert_eq!(stat_value(stat, "inactive_file"), Some(12));
        assert_eq!(stat_value(stat, "active_file"), None);
        assert_eq!(
            LoadMode::auto_for(Path::new("/no/such/file")),
            LoadMode::Mmap
        );
    }

    fn refuse(_: &Path) -> std::io::Result<File> {
        Err(std::io::Error::from_raw_os_error(libc::EINVAL))
    }

    #[test]
    fn a_refused_o_direct_falls_back_saying_why() {
        let dir = std::env::temp_dir();
        let p = dir.join(format!("ggml-dio-fallback-{}.bin", std::process::id()));
        let want: Vec<u8> = (0..DIO_ALIGN + 3).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &want).unwrap();
        let r = read_direct_with(&p, refuse);
        let _ = std::fs::remove_file(&p);
        let (got, note) = r.unwrap();
        assert_eq!(got, want);
        let n = note.unwrap();
        assert!(
            n.contains("refuses O_DIRECT") && n.contains("page cache"),
            "{n}"
        );
    }

    #[test]
    fn aligned_window_is_aligned() {
        let mut v = vec![0u8; 3 * DIO_ALIGN];
        let w = aligned_window(&mut v, DIO_ALIGN);
        assert_eq!(w.as_ptr() as usize % DIO_ALIGN, 0);
        assert_eq!(w.len(), DIO_ALIGN);
    }
}
