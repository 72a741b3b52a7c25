//! Reads of expert slices from the model file, bypassing the page cache.
//!
//! The file is opened with `O_DIRECT`; where the filesystem refuses it
//! (tmpfs, some network filesystems) the reader opens it the ordinary way
//! and says so in one line ([`DiskReader::note`]).
//!
//! A request ([`ReadReq`]) names a range of the file and where its bytes
//! go: one or more destinations (the slots of a run of adjacent experts),
//! in file order. The reader cuts each request into pieces of at most
//! [`PIECE_BYTES`] and runs up to [`DiskReader::reads_in_flight`] of them
//! at once on a pool of threads issuing `pread`s. A piece whose file
//! offset, destination address and length are multiples of [`DIO_ALIGN`]
//! is read straight into its destination; the rest (the unaligned head and
//! tail of a destination, or a whole destination whose address does not
//! line up with its file offset, as in a GGUF whose tensors are aligned to
//! 32 bytes) is read as its aligned cover into one of a few reused aligned
//! bounce buffers and copied out. A tensor whose offset in the file is not
//! aligned is therefore read correctly rather than refused, and no read
//! allocates memory.
//!
//! Faults are errors that name the file and the range: a read past the end
//! (the file is shorter than its header says, or was truncated while
//! running), and any I/O error (`EIO`). The source is a trait
//! ([`ReadAt`]) so that tests inject faults.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use ggml_core::gguf::{open_direct, DIO_ALIGN};

/// Most bytes one read transfers: longer requests are cut into pieces of
/// this size, read several at once.
pub const PIECE_BYTES: usize = 2 << 20;

/// Reads in flight by default (a pool of `pread`s).
pub const READS_IN_FLIGHT: usize = 4;

/// Most reads in flight [`DiskReader::set_reads_in_flight`] accepts.
pub const MAX_READS_IN_FLIGHT: usize = 64;

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

/// One wanted range of the file and where its bytes go: the range starts
/// at `off` and is as long as the destinations together; its bytes fill
/// `dst[0]`, then `dst[1]`, and so on.
#[derive(Debug)]
pub struct ReadReq<'a> {
    /// File offset.
    pub off: u64,
    /// Destinations, in file order.
    pub dst: Vec<&'a mut [u8]>,
}

impl ReadReq<'_> {
    /// Bytes wanted.
    pub fn len(&self) -> usize {
        self.dst.iter().map(|d| d.len()).sum()
    }

    /// Whether no byte is wanted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one read (one piece of a request) did: bytes read from the disk
/// (the aligned cover) and its latency.
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

/// One read: bytes at `off` either straight into one aligned destination
/// or, through a bounce buffer, into several spans in order.
#[derive(Debug)]
enum Piece<'a> {
    /// `off`, the address and the length are multiples of the alignment.
    Direct { off: u64, dst: &'a mut [u8] },
    /// The aligned cover of `off..off + sum of the spans' lengths` goes
    /// into a bounce buffer; the wanted bytes are copied to the spans.
    Bounce { off: u64, spans: Vec<&'a mut [u8]> },
}

impl Piece<'_> {
    fn range(&self) -> (u64, u64) {
        match self {
            Piece::Direct { off, dst } => (*off, *off + dst.len() as u64),
            Piece::Bounce { off, spans } => (
                *off,
                *off + spans.iter().map(|s| s.len() as u64).sum::<u64>(),
            ),
        }
    }
}

/// Cut `reqs` into pieces of at most `piece` bytes: straight into the
/// destination where the file offset and the destination's address agree
/// modulo `align` (the aligned middle of each such destination), through a
/// bounce buffer elsewhere (consecutive bytes of one request share one).
fn plan_pieces<'a>(reqs: Vec<ReadReq<'a>>, align: usize, piece: usize) -> Vec<Piece<'a>> {
    struct Pending<'a> {
        off: u64,
        len: usize,
        spans: Vec<&'a mut [u8]>,
    }
    fn flush<'a>(p: &mut Pending<'a>, out: &mut Vec<Piece<'a>>) {
        if !p.spans.is_empty() {
            out.push(Piece::Bounce {
                off: p.off,
                spans: std::mem::take(&mut p.spans),
            });
        }
        p.off += p.len as u64;
        p.len = 0;
    }
    /// Add `d` (at file offset `p.off + p.len`) to the bounce pieces.
    fn bounce<'a>(
        p: &mut Pending<'a>,
        mut d: &'a mut [u8],
        piece: usize,
        out: &mut Vec<Piece<'a>>,
    ) {
        while !d.is_empty() {
            let take = d.len().min(piece - p.len);
            let (a, b) = d.split_at_mut(take);
            p.spans.push(a);
            p.len += take;
            d = b;
            if p.len == piece {
                flush(p, out);
            }
        }
    }
    let a = align.max(1) as u64;
    let mut out = Vec::new();
    for r in reqs {
        let mut p = Pending {
            off: r.off,
            len: 0,
            spans: Vec::new(),
        };
        for d in r.dst {
            let at = p.off + p.len as u64;
            let lead = ((a - at % a) % a) as usize;
            let congruent = (d.as_ptr() as usize as u64) % a == at % a;
            if !congruent || d.len() < lead + a as usize {
                bounce(&mut p, d, piece, &mut out);
                continue;
            }
            let body = (d.len() - lead) / a as usize * a as usize;
            let (head, rest) = d.split_at_mut(lead);
            let (mut mid, tail) = rest.split_at_mut(body);
            bounce(&mut p, head, piece, &mut out);
            flush(&mut p, &mut out);
            while !mid.is_empty() {
                let take = mid.len().min(piece / a as usize * a as usize);
                let (x, y) = mid.split_at_mut(take);
                out.push(Piece::Direct { off: p.off, dst: x });
                p.off += take as u64;
                mid = y;
            }
            bounce(&mut p, tail, piece, &mut out);
        }
        flush(&mut p, &mut out);
    }
    out
}

/// The model file, open for direct reads of expert slices.
pub struct DiskReader {
    path: PathBuf,
    src: Box<dyn ReadAt>,
    direct: bool,
    note: Option<String>,
    in_flight: usize,
    /// Aligned bounce buffers of `PIECE_BYTES + 2 * DIO_ALIGN` bytes, made
    /// as reads first need them and reused.
    bounce: Mutex<Vec<AlignedBuf>>,
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
                    _ => Ok(Self::with_source(path, Box::new(f), true)),
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
        let mut r = Self::with_source(path, Box::new(f), false);
        r.note = Some(format!(
            "host expert cache: {why}; reading '{}' through the page cache (buffered pread)",
            path.display()
        ));
        Ok(r)
    }

    /// A reader over any source (tests inject faults with it), named
    /// `path`; `direct`: the source wants `O_DIRECT`'s alignment.
    pub fn with_source(path: &Path, src: Box<dyn ReadAt>, direct: bool) -> DiskReader {
        DiskReader {
            path: path.to_path_buf(),
            src,
            direct,
            note: None,
            in_flight: READS_IN_FLIGHT,
            bounce: Mutex::new(Vec::new()),
        }
    }

    /// Read from `src` from now on (the path and the direct flag stay):
    /// tests inject faults into a running cache with it.
    pub fn set_source(&mut self, src: Box<dyn ReadAt>) {
        self.src = src;
    }

    /// Run up to `n` reads at once (1..=[`MAX_READS_IN_FLIGHT`]; other
    /// values are an error naming the range).
    pub fn set_reads_in_flight(&mut self, n: usize) -> Result<(), String> {
        if !(1..=MAX_READS_IN_FLIGHT).contains(&n) {
            return Err(format!(
                "{n} reads in flight: expected 1 to {MAX_READS_IN_FLIGHT}"
            ));
        }
        self.in_flight = n;
        Ok(())
    }

    /// Reads run at once.
    pub fn reads_in_flight(&self) -> usize {
        self.in_flight
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

    /// The alignment the source wants of offsets, addresses and lengths.
    fn align(&self) -> usize {
        if self.direct {
            DIO_ALIGN
        } else {
            1
        }
    }

    /// Read every request of `reqs` into its destinations, in pieces of at
    /// most [`PIECE_BYTES`], up to [`DiskReader::reads_in_flight`] at once;
    /// one [`ReadDone`] per piece, in order. The first error stops the
    /// batch (every started read finishes first); the destinations then
    /// hold unspecified bytes.
    pub fn read_batch(&self, reqs: Vec<ReadReq<'_>>) -> Result<Vec<ReadDone>, DiskError> {
        let pieces = plan_pieces(reqs, self.align(), PIECE_BYTES);
        let n_threads = self.in_flight.min(pieces.len());
        if n_threads <= 1 {
            let mut buf = None;
            let done = pieces
                .into_iter()
                .map(|p| self.read_piece(p, &mut buf))
                .collect();
            self.give_back(buf);
            return done;
        }
        let n = pieces.len();
        let queue = Mutex::new(pieces.into_iter().enumerate());
        let stop = AtomicBool::new(false);
        let results: Vec<Vec<(usize, Result<ReadDone, DiskError>)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n_threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        let mut buf = None;
                        while !stop.load(Ordering::Relaxed) {
                            let Some((i, p)) = queue.lock().next() else {
                                break;
                            };
                            let res = self.read_piece(p, &mut buf);
                            if res.is_err() {
                                // no more new reads
                                stop.store(true, Ordering::Relaxed);
                            }
                            out.push((i, res));
                        }
                        self.give_back(buf);
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
        if let Some(pos) = done.iter().position(|(_, r)| r.is_err()) {
            if let (_, Err(e)) = done.swap_remove(pos) {
                return Err(e);
            }
        }
        if done.len() != n {
            return Err(DiskError::Io {
                path: self.path.clone(),
                off: 0,
                end: 0,
                source: std::io::Error::other("a read thread stopped"),
            });
        }
        Ok(done.into_iter().filter_map(|(_, r)| r.ok()).collect())
    }

    fn give_back(&self, buf: Option<AlignedBuf>) {
        if let Some(b) = buf {
            self.bounce.lock().push(b);
        }
    }

    /// Read one piece: straight into its destination, or through the
    /// thread's bounce buffer `buf` (taken from the pool when first needed).
    fn read_piece(
        &self,
        p: Piece<'_>,
        buf: &mut Option<AlignedBuf>,
    ) -> Result<ReadDone, DiskError> {
        let t0 = Instant::now();
        let end = p.range().1;
        let disk_bytes = match p {
            Piece::Direct { off, dst } => {
                let len = dst.len();
                self.fill(dst, off, len, (off, end))?
            }
            Piece::Bounce { off, mut spans } => {
                let a = self.align() as u64;
                let lo = off - off % a;
                let hi = end.next_multiple_of(a);
                let b = buf.get_or_insert_with(|| {
                    self.bounce
                        .lock()
                        .pop()
                        .unwrap_or_else(|| AlignedBuf::new(PIECE_BYTES + 2 * DIO_ALIGN))
                });
                let mem = &mut b.as_mut_slice()[..(hi - lo) as usize];
                let got = self.fill(mem, lo, (end - lo) as usize, (off, end))?;
                let mut at = (off - lo) as usize;
                for s in spans.iter_mut() {
                    s.copy_from_slice(&mem[at..at + s.len()]);
                    at += s.len();
                }
                got
            }
        };
        Ok(ReadDone {
            disk_bytes,
            secs: t0.elapsed().as_secs_f64(),
        })
    }

    /// Read into `mem` from file offset `at` until at least `want` bytes
    /// arrived; `range` is the wanted range, for errors. The bytes read.
    fn fill(
        &self,
        mem: &mut [u8],
        at: u64,
        want: usize,
        (off, end): (u64, u64),
    ) -> Result<u64, DiskError> {
        let truncated = || DiskError::Truncated {
            path: self.path.clone(),
            off,
            end,
        };
        let mut got = 0usize;
        while got < want {
            match self.src.read_at(&mut mem[got..], at + got as u64) {
                Ok(0) => return Err(truncated()),
                Ok(n) => {
                    got += n;
                    // a short read is the end of the file under O_DIRECT
                    // unless it left the offsets aligned
                    if got < want && !got.is_multiple_of(self.align()) {
                        return Err(truncated());
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(DiskError::Io {
                        path: self.path.clone(),
                        off,
                        end,
                        source,
                    })
                }
            }
        }
        Ok(got as u64)
    }
}

/// Memory aligned to [`DIO_ALIGN`], as `O_DIRECT` wants (zeroed once, when
/// made).
#[derive(Debug)]
pub struct AlignedBuf {
    v: Vec<u8>,
    pad: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zeroed bytes starting at a multiple of [`DIO_ALIGN`].
    pub fn new(len: usize) -> AlignedBuf {
        let v = vec![0u8; len + DIO_ALIGN];
        let pad = v.as_ptr().align_offset(DIO_ALIGN);
        AlignedBuf { v, pad, len }
    }

    /// The aligned bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.pad..self.pad + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Bytes in memory; every read fails with `err` when set; counts reads.
    struct Mem(Vec<u8>, Option<i32>, std::sync::Arc<AtomicUsize>);
    impl ReadAt for Mem {
        fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
            self.2.fetch_add(1, Ordering::Relaxed);
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

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 253) as u8).collect()
    }

    fn reader(len: usize, err: Option<i32>) -> (DiskReader, Vec<u8>, std::sync::Arc<AtomicUsize>) {
        let d = data(len);
        let n = std::sync::Arc::new(AtomicUsize::new(0));
        let r = DiskReader::with_source(
            Path::new("m.gguf"),
            Box::new(Mem(d.clone(), err, std::sync::Arc::clone(&n))),
            true,
        );
        (r, d, n)
    }

    /// `len` bytes at an address `rem` past a multiple of the alignment.
    fn at_residue(mem: &mut AlignedBuf, rem: usize, len: usize) -> &mut [u8] {
        &mut mem.as_mut_slice()[rem..rem + len]
    }

    #[test]
    fn misaligned_ranges_read_exactly_their_bytes() {
        let (r, data, _) = reader(5 * DIO_ALIGN + 100, None);
        let ranges = [
            (33u64, 4000usize),
            (4095, 2),
            (8192, 4096),
            (5 * DIO_ALIGN as u64, 100),
        ];
        let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|&(_, l)| vec![0u8; l]).collect();
        let reqs = ranges
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(off, _), b)| ReadReq {
                off,
                dst: vec![b.as_mut_slice()],
            })
            .collect();
        let done = r.read_batch(reqs).unwrap();
        for (i, &(off, len)) in ranges.iter().enumerate() {
            assert_eq!(bufs[i], data[off as usize..off as usize + len], "read {i}");
        }
        // the 2 bytes at 4095 cross a block boundary: two blocks are read
        assert_eq!(done.len(), 4);
        assert_eq!(done[1].disk_bytes, 2 * DIO_ALIGN as u64);
    }

    #[test]
    fn aligned_destinations_are_read_straight_into_and_their_edges_bounce() {
        let len = 3 * PIECE_BYTES + 3 * DIO_ALIGN;
        let (r, data, _) = reader(len, None);
        let mut mem = AlignedBuf::new(len);
        // file offset 4096 + 100 into an address 100 past an aligned one:
        // head (3996 bytes) bounces, the aligned middle (2 pieces) is
        // direct, the tail (400 bytes) bounces
        let off = DIO_ALIGN as u64 + 100;
        let want = 2 * PIECE_BYTES + 4096 + 300;
        let dst = at_residue(&mut mem, 100, want);
        let done = r
            .read_batch(vec![ReadReq {
                off,
                dst: vec![dst],
            }])
            .unwrap();
        assert_eq!(
            &mem.as_mut_slice()[100..100 + want],
            &data[off as usize..off as usize + want]
        );
        // the head's block, two whole pieces, the tail's block
        let sizes: Vec<u64> = done.iter().map(|d| d.disk_bytes).collect();
        assert_eq!(
            sizes,
            vec![
                DIO_ALIGN as u64,
                PIECE_BYTES as u64,
                PIECE_BYTES as u64,
                DIO_ALIGN as u64
            ]
        );
    }

    /// A source that records the address of every buffer it fills.
    struct Recording(Mem, std::sync::Arc<Mutex<Vec<usize>>>);
    impl ReadAt for Recording {
        fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
            self.1.lock().push(buf.as_ptr() as usize);
            self.0.read_at(buf, off)
        }
    }

    #[test]
    fn an_aligned_piece_is_read_into_its_destination_not_a_bounce_buffer() {
        let d = data(2 * PIECE_BYTES);
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let src = Recording(
            Mem(d.clone(), None, std::sync::Arc::new(AtomicUsize::new(0))),
            std::sync::Arc::clone(&seen),
        );
        let r = DiskReader::with_source(Path::new("m.gguf"), Box::new(src), true);
        let mut mem = AlignedBuf::new(PIECE_BYTES);
        let dst = mem.as_mut_slice();
        let at = dst.as_ptr() as usize;
        r.read_batch(vec![ReadReq {
            off: 2 * DIO_ALIGN as u64,
            dst: vec![dst],
        }])
        .unwrap();
        assert_eq!(*seen.lock(), vec![at]);
        assert_eq!(
            mem.as_mut_slice(),
            &d[2 * DIO_ALIGN..2 * DIO_ALIGN + PIECE_BYTES]
        );
        assert!(r.bounce.lock().is_empty(), "a bounce buffer was made");
    }

    #[test]
    fn a_long_unaligned_request_is_cut_into_pieces_spanning_its_destinations() {
        let (mut r, data, _) = reader(4 * PIECE_BYTES, None);
        r.set_reads_in_flight(3).unwrap();
        let eb = 700_000usize;
        let mut slots = vec![0u8; 7 * eb + 1];
        // destinations at an odd address: nothing lines up, all bounce
        let (_, rest) = slots.split_at_mut(1);
        let mut dst: Vec<&mut [u8]> = rest.chunks_mut(eb).collect();
        dst.reverse(); // slots need not be in address order
        let off = 12_345u64;
        let done = r.read_batch(vec![ReadReq { off, dst }]).unwrap();
        let total = 7 * eb;
        assert_eq!(done.len(), total.div_ceil(PIECE_BYTES));
        for k in 0..7 {
            // the k-th expert went to the k-th destination: the chunk
            // 6 - k of the buffer
            let c = 6 - k;
            assert_eq!(
                &slots[1 + c * eb..1 + (c + 1) * eb],
                &data[off as usize + k * eb..off as usize + (k + 1) * eb],
                "expert {k}"
            );
        }
    }

    #[test]
    fn buffered_reads_go_straight_into_any_destination() {
        let d = data(3 * PIECE_BYTES);
        let n = std::sync::Arc::new(AtomicUsize::new(0));
        let r = DiskReader::with_source(
            Path::new("m.gguf"),
            Box::new(Mem(d.clone(), None, std::sync::Arc::clone(&n))),
            false,
        );
        let mut out = vec![0u8; PIECE_BYTES + 5];
        let done = r
            .read_batch(vec![ReadReq {
                off: 3,
                dst: vec![out.as_mut_slice()],
            }])
            .unwrap();
        assert_eq!(out, d[3..3 + PIECE_BYTES + 5]);
        let sizes: Vec<u64> = done.iter().map(|d| d.disk_bytes).collect();
        assert_eq!(sizes, vec![PIECE_BYTES as u64, 5]);
    }

    #[test]
    fn bounce_buffers_are_reused_across_batches() {
        let (r, _, _) = reader(8 * PIECE_BYTES, None);
        for _ in 0..3 {
            let mut out = vec![0u8; 6 * PIECE_BYTES];
            let dst = out[1..].chunks_mut(PIECE_BYTES).collect();
            r.read_batch(vec![ReadReq { off: 1, dst }]).unwrap();
        }
        assert!(r.bounce.lock().len() <= READS_IN_FLIGHT);
    }

    #[test]
    fn reads_in_flight_outside_its_range_is_an_error() {
        let (mut r, _, _) = reader(DIO_ALIGN, None);
        for n in [0, MAX_READS_IN_FLIGHT + 1] {
            let e = r.set_reads_in_flight(n).unwrap_err();
            assert!(
                e.contains("reads in flight") && e.contains("1 to 64"),
                "{e}"
            );
        }
        r.set_reads_in_flight(16).unwrap();
        assert_eq!(r.reads_in_flight(), 16);
    }

    #[test]
    fn a_range_past_the_end_is_a_truncation_error() {
        let (r, _, _) = reader(3 * DIO_ALIGN, None);
        let mut out = vec![0u8; 2 * DIO_ALIGN];
        let e = r
            .read_batch(vec![ReadReq {
                off: 2 * DIO_ALIGN as u64,
                dst: vec![out.as_mut_slice()],
            }])
            .unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("m.gguf") && s.contains("truncated while running"),
            "{s}"
        );
    }

    #[test]
    fn a_direct_piece_past_the_end_is_a_truncation_error() {
        let (r, _, _) = reader(3 * DIO_ALIGN + 10, None);
        let mut mem = AlignedBuf::new(4 * DIO_ALIGN);
        let dst = mem.as_mut_slice();
        let e = r
            .read_batch(vec![ReadReq {
                off: 0,
                dst: vec![dst],
            }])
            .unwrap_err();
        assert!(
            matches!(e, DiskError::Truncated { off: 0, end, .. } if end == 4 * DIO_ALIGN as u64),
            "{e}"
        );
    }

    #[test]
    fn an_eio_is_an_error_naming_the_range_and_stops_the_batch() {
        let (r, _, reads) = reader(64 * PIECE_BYTES, Some(libc::EIO));
        let mut out = vec![0u8; 40 * PIECE_BYTES];
        let dst = out.chunks_mut(PIECE_BYTES).collect();
        let e = r.read_batch(vec![ReadReq { off: 0, dst }]).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("reading bytes") && s.contains("m.gguf"), "{s}");
        assert!(
            matches!(e, DiskError::Io { ref source, .. } if source.raw_os_error() == Some(libc::EIO))
        );
        // each thread stops at its first error
        assert!(
            reads.load(Ordering::Relaxed) <= READS_IN_FLIGHT,
            "{reads:?}"
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

    #[test]
    fn a_real_file_reads_the_same_direct_and_buffered() {
        let dir = std::env::temp_dir().join(format!("ggml-hostcache-real-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.bin");
        let d = data(3 * PIECE_BYTES + 777);
        std::fs::write(&p, &d).unwrap();
        let r = DiskReader::open(&p).unwrap();
        let mut mem = AlignedBuf::new(3 * PIECE_BYTES);
        let mut odd = vec![0u8; 1000];
        let aligned = mem.as_mut_slice();
        let (a, b) = aligned.split_at_mut(PIECE_BYTES + DIO_ALIGN);
        let reqs = vec![
            ReadReq {
                off: 0,
                dst: vec![a],
            },
            ReadReq {
                off: 3 * PIECE_BYTES as u64 - 223,
                dst: vec![odd.as_mut_slice()],
            },
            ReadReq {
                off: PIECE_BYTES as u64 + DIO_ALIGN as u64,
                dst: vec![&mut b[..PIECE_BYTES]],
            },
        ];
        r.read_batch(reqs).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let m = mem.as_mut_slice();
        assert_eq!(
            &m[..2 * PIECE_BYTES + DIO_ALIGN],
            &d[..2 * PIECE_BYTES + DIO_ALIGN]
        );
        assert_eq!(odd, d[3 * PIECE_BYTES - 223..3 * PIECE_BYTES + 777]);
    }
}
