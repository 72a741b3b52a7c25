//! Reads of expert slices from the model file, bypassing the page cache.
//!
//! The file is opened with `O_DIRECT`; where the filesystem refuses it
//! (tmpfs, some network filesystems) the reader opens it the ordinary way
//! and says so in one line ([`DiskReader::note`]). Every read covers the
//! wanted range widened to [`DIO_ALIGN`] on both ends, into an aligned
//! bounce buffer, and the wanted bytes are copied out: a tensor whose
//! offset in the file is not aligned (GGUF aligns to 32 bytes) is read
//! correctly rather than refused. A batch of reads ([`DiskReader::read_batch`])
//! runs on a small pool of threads issuing `pread`s, several in flight.
//!
//! Faults are errors that name the file and the range: a read past the end
//! (the file is shorter than its header says, or was truncated while
//! running), and any I/O error (`EIO`). The source is a trait
//! ([`ReadAt`]) so that tests inject faults.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ggml_core::gguf::{open_direct, DIO_ALIGN};

/// Threads issuing reads at once (a pool of `pread`s).
pub const READ_THREADS: usize = 4;

/// A positioned-read source: the model file, or a test's faulty one.
pub trait ReadAt: Send + Sync {
    /// Read up to `buf.len()` bytes at `off` (as `pread`).
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, off)
    }
}

/// One wanted range of the file: `len` bytes at `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadReq {
    /// File offset.
    pub off: u64,
    /// Bytes.
    pub len: usize,
}

/// What one read did: bytes read from the disk (the aligned cover) and
/// its latency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadDone {
    /// Bytes the disk transferred (the wanted range widened to the
    /// alignment).
    pub disk_bytes: u64,
    /// Seconds the read took.
    pub secs: f64,
}

/// A read that failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The file ended before the range did.
    #[error("'{path}': the file ends before bytes {off}..{end} (it is shorter than its header says, or was truncated while running)")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Start of the wanted range.
        off: u64,
        /// Its end.
        end: u64,
    },
    /// An I/O error.
    #[error("'{path}': reading bytes {off}..{end}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Start of the wanted range.
        off: u64,
        /// Its end.
        end: u64,
        /// The error (`EIO`, ...).
        source: std::io::Error,
    },
}

/// The model file, open for direct reads of expert slices.
pub struct DiskReader {
    path: PathBuf,
    src: Box<dyn ReadAt>,
    direct: bool,
    note: Option<String>,
}

impl DiskReader {
    /// Open `path` with `O_DIRECT`, or the ordinary way where that is
    /// refused (the note says so).
    pub fn open(path: &Path) -> std::io::Result<DiskReader> {
        match open_direct(path) {
            Ok(f) => {
                // a filesystem may accept the flag at open and refuse the read
                let mut probe = AlignedBuf::new(DIO_ALIGN);
                match ReadAt::read_at(&f, probe.as_mut_slice(), 0) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        Self::buffered(path, format!("the filesystem refuses O_DIRECT reads ({e})"))
                    }
                    _ => Ok(DiskReader {
                        path: path.to_path_buf(),
                        src: Box::new(f),
                        direct: true,
                        note: None,
                    }),
                }
            }
            Err(e)
                if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::PermissionDenied =>
            {
                Err(e)
            }
            Err(e) => Self::buffered(path, format!("the filesystem refuses O_DIRECT ({e})")),
        }
    }

    fn buffered(path: &Path, why: String) -> std::io::Result<DiskReader> {
        let f = File::open(path)?;
        Ok(DiskReader {
            path: path.to_path_buf(),
            src: Box::new(f),
            direct: false,
            note: Some(format!(
                "host expert cache: {why}; reading '{}' through the page cache (buffered pread)",
                path.display()
            )),
        })
    }

    /// A reader over any source (tests inject faults with it), named `path`.
    pub fn with_source(path: &Path, src: Box<dyn ReadAt>, direct: bool) -> DiskReader {
        DiskReader {
            path: path.to_path_buf(),
            src,
            direct,
            note: None,
        }
    }

    /// Read from `src` from now on (the path and the direct flag stay):
    /// tests inject faults into a running cache with it.
    pub fn set_source(&mut self, src: Box<dyn ReadAt>) {
        self.src = src;
    }

    /// Whether reads bypass the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Why reads go through the page cache, when they do.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read each range of `reqs` and hand its bytes to `sink(i, bytes)`,
    /// up to [`READ_THREADS`] reads in flight. The first error stops the
    /// batch (every started read finishes first).
    pub fn read_batch(
        &self,
        reqs: &[ReadReq],
        sink: &(dyn Fn(usize, &[u8]) + Sync),
    ) -> Result<Vec<ReadDone>, DiskError> {
        if reqs.len() <= 1 {
            return reqs
                .iter()
                .enumerate()
                .map(|(i, r)| self.read_one(*r, &mut |b| sink(i, b)))
                .collect();
        }
        let n_threads = READ_THREADS.min(reqs.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<Vec<(usize, Result<ReadDone, DiskError>)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n_threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(r) = reqs.get(i) else { break };
                            let res = self.read_one(*r, &mut |b| sink(i, b));
                            let failed = res.is_err();
                            out.push((i, res));
                            if failed {
                                // no more new reads
                                next.store(reqs.len(), std::sync::atomic::Ordering::Relaxed);
                                break;
                            }
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let mut done: Vec<(usize, Result<ReadDone, DiskError>)> =
            results.into_iter().flatten().collect();
        done.sort_by_key(|(i, _)| *i);
        if done.len() != reqs.len() && !done.iter().any(|(_, r)| r.is_err()) {
            return Err(DiskError::Io {
                path: self.path.clone(),
                off: 0,
                end: 0,
                source: std::io::Error::other("a read thread stopped"),
            });
        }
        done.into_iter().map(|(_, r)| r).collect()
    }

    /// Read one range through an aligned bounce buffer.
    fn read_one(&self, r: ReadReq, sink: &mut dyn FnMut(&[u8])) -> Result<ReadDone, DiskError> {
        let t0 = Instant::now();
        let a = DIO_ALIGN as u64;
        let end = r.off + r.len as u64;
        let lo = r.off - r.off % a;
        let hi = end.next_multiple_of(a);
        let mut buf = AlignedBuf::new((hi - lo) as usize);
        let mem = buf.as_mut_slice();
        let mut got = 0usize;
        let want = (end - lo) as usize;
        while got < want {
            match self.src.read_at(&mut mem[got..], lo + got as u64) {
                Ok(0) => {
                    return Err(DiskError::Truncated {
                        path: self.path.clone(),
                        off: r.off,
                        end,
                    })
                }
                Ok(n) => {
                    got += n;
                    // a short read is the end of the file under O_DIRECT
                    // unless it left the offsets aligned
                    if got < want && !got.is_multiple_of(DIO_ALIGN) {
                        return Err(DiskError::Truncated {
                            path: self.path.clone(),
                            off: r.off,
                            end,
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(DiskError::Io {
                        path: self.path.clone(),
                        off: r.off,
                        end,
                        source,
                    })
                }
            }
        }
        let skip = (r.off - lo) as usize;
        sink(&mem[skip..skip + r.len]);
        Ok(ReadDone {
            disk_bytes: got as u64,
            secs: t0.elapsed().as_secs_f64(),
        })
    }
}

/// Zeroed memory aligned to [`DIO_ALIGN`], as `O_DIRECT` wants.
struct AlignedBuf {
    v: Vec<u8>,
    pad: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let v = vec![0u8; len + DIO_ALIGN];
        let pad = v.as_ptr().align_offset(DIO_ALIGN);
        AlignedBuf { v, pad, len }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.pad..self.pad + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Mem(Vec<u8>, Option<i32>);
    impl ReadAt for Mem {
        fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
            if let Some(e) = self.1 {
                return Err(std::io::Error::from_raw_os_error(e));
            }
            let off = off as usize;
            if off >= self.0.len() {
                return Ok(0);
            }
            let n = buf.len().min(self.0.len() - off);
            buf[..n].copy_from_slice(&self.0[off..off + n]);
            Ok(n)
        }
    }

    fn reader(len: usize, err: Option<i32>) -> (DiskReader, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        let r =
            DiskReader::with_source(Path::new("m.gguf"), Box::new(Mem(data.clone(), err)), true);
        (r, data)
    }

    #[test]
    fn misaligned_ranges_read_exactly_their_bytes() {
        let (r, data) = reader(5 * DIO_ALIGN + 100, None);
        let reqs = [
            ReadReq { off: 33, len: 4000 },
            ReadReq { off: 4095, len: 2 },
            ReadReq {
                off: 8192,
                len: 4096,
            },
            ReadReq {
                off: 5 * DIO_ALIGN as u64,
                len: 100,
            },
        ];
        let got = Mutex::new(vec![Vec::new(); reqs.len()]);
        let done = r
            .read_batch(&reqs, &|i, b| got.lock().unwrap()[i] = b.to_vec())
            .unwrap();
        let got = got.into_inner().unwrap();
        for (i, q) in reqs.iter().enumerate() {
            assert_eq!(
                got[i],
                data[q.off as usize..q.off as usize + q.len],
                "read {i}"
            );
        }
        assert_eq!(done[1].disk_bytes, 2 * DIO_ALIGN as u64);
        assert_eq!(done[2].disk_bytes, DIO_ALIGN as u64);
    }

    #[test]
    fn a_range_past_the_end_is_a_truncation_error() {
        let (r, _) = reader(3 * DIO_ALIGN, None);
        let e = r
            .read_batch(
                &[ReadReq {
                    off: 2 * DIO_ALIGN as u64,
                    len: 2 * DIO_ALIGN,
                }],
                &|_, _| {},
            )
            .unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("m.gguf") && s.contains("truncated while running"),
            "{s}"
        );
    }

    #[test]
    fn an_eio_is_an_error_naming_the_range() {
        let (r, _) = reader(3 * DIO_ALIGN, Some(libc::EIO));
        let reqs = [ReadReq { off: 0, len: 10 }, ReadReq { off: 4096, len: 10 }];
        let e = r.read_batch(&reqs, &|_, _| {}).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("reading bytes") && s.contains("m.gguf"), "{s}");
        assert!(
            matches!(e, DiskError::Io { ref source, .. } if source.raw_os_error() == Some(libc::EIO))
        );
    }

    #[test]
    fn tmpfs_falls_back_to_buffered_reads_saying_so() {
        let p = Path::new("/dev/shm").join(format!("ggml-hostcache-{}.bin", std::process::id()));
        if std::fs::write(&p, vec![1u8; 10000]).is_err() {
            eprintln!("skipped: no /dev/shm");
            return;
        }
        let r = DiskReader::open(&p);
        let _ = std::fs::remove_file(&p);
        let r = r.unwrap();
        // tmpfs refuses O_DIRECT; elsewhere a direct reader is fine too
        if !r.is_direct() {
            let n = r.note().unwrap();
            assert!(
                n.contains("refuses O_DIRECT") && n.contains("buffered pread"),
                "{n}"
            );
        }
    }
}
