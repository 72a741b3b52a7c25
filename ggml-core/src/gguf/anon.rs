//! A file read whole into anonymous memory that asks the kernel for
//! transparent huge pages (`MADV_HUGEPAGE`): `--load-mode none`.
//!
//! Decoding streams every used expert's rows once per token, so in 4 KiB
//! pages it takes a TLB miss (a page walk) every 4 KiB, and the hardware
//! prefetchers stop at each 4 KiB page boundary. In 2 MiB pages both go
//! away; with Linux's default THP setting (`madvise`) anonymous memory only
//! gets them when asked, and a file mapping (the page cache) does not get
//! them at all. Where the kernel has no huge page to give (THP off,
//! fragmented memory), the memory is ordinary pages and nothing else
//! changes.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use memmap2::{Mmap, MmapMut};

use super::error::GgufError;

/// Read the whole file at `path` into a private anonymous mapping
/// (huge pages asked for); returns the read-only mapping and the file's
/// length (the mapping is at least one byte long).
pub(super) fn read_anon(path: &Path) -> Result<(Mmap, usize), GgufError> {
    let io = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let len = usize::try_from(len).map_err(|_| {
        io(std::io::Error::other(format!(
            "{len} bytes do not fit in memory"
        )))
    })?;
    let mut m = MmapMut::map_anon(len.max(1)).map_err(|e| {
        io(std::io::Error::new(
            ErrorKind::OutOfMemory,
            format!("{len} bytes of memory: {e}"),
        ))
    })?;
    // a hint: refused (no THP in this kernel) it changes nothing
    #[cfg(target_os = "linux")]
    let _ = m.advise(memmap2::Advice::HugePage);
    f.read_exact(&mut m[..len]).map_err(|e| {
        if e.kind() == ErrorKind::UnexpectedEof {
            io(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("the file shrank while being read (it had {len} bytes)"),
            ))
        } else {
            io(e)
        }
    })?;
    let m = m.make_read_only().map_err(io)?;
    Ok((m, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_byte() {
        let dir = std::env::temp_dir().join(format!("gguf-anon-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for len in [0usize, 1, 4095, 4096, 3 << 20] {
            let p = dir.join(format!("f{len}"));
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            std::fs::write(&p, &bytes).unwrap();
            let (m, n) = read_anon(&p).unwrap();
            assert_eq!(n, len);
            assert_eq!(&m[..n], &bytes[..]);
        }
        let missing = read_anon(&dir.join("no-such-file"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("no-such-file"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
