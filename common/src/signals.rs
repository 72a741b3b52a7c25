//! Signals and pipes as llama.cpp's tools behave: the first SIGINT asks
//! generation to stop at the next token (the run then prints its summary,
//! completes its output files and exits 130), a second one exits at once; a
//! closed stdout ends the run quietly with 141 (128 + SIGPIPE); a closed
//! stderr never makes a message panic (stderr is forwarded through a pipe
//! of our own that drops what cannot be delivered).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static EXIT_CODE: AtomicI32 = AtomicI32::new(0);

/// The exit status after SIGINT.
pub const EXIT_INTERRUPTED: u8 = 130;
/// The exit status when stdout was closed (128 + SIGPIPE).
pub const EXIT_STDOUT_CLOSED: u8 = 141;

extern "C" fn on_sigint(_sig: libc::c_int) {
    if INTERRUPTS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // SAFETY: `_exit` is async-signal-safe and ends the process at once.
        unsafe { libc::_exit(i32::from(EXIT_INTERRUPTED)) };
    }
}

/// Install the SIGINT handler (first: stop at the next token; second:
/// exit 130 at once).
pub fn install_sigint() {
    // SAFETY: the handler only touches an atomic and calls `_exit`, both
    // async-signal-safe; `sigaction` is given a zeroed, filled-in struct.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// Whether SIGINT arrived (generation should stop).
pub fn interrupted() -> bool {
    INTERRUPTS.load(Ordering::SeqCst) > 0
}

/// Record that stdout is closed (a write failed with a broken pipe).
pub fn set_stdout_closed() {
    STDOUT_CLOSED.store(true, Ordering::SeqCst);
}

/// Whether stdout was found closed.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::SeqCst)
}

/// Ask `main` to exit with `code` once the run has finished cleanly.
pub fn set_exit_code(code: u8) {
    EXIT_CODE.store(i32::from(code), Ordering::SeqCst);
}

/// The exit status set by [`set_exit_code`], if any.
pub fn exit_code() -> Option<u8> {
    match EXIT_CODE.load(Ordering::SeqCst) {
        0 => None,
        c => u8::try_from(c).ok(),
    }
}

/// Forwards stderr through a pipe of ours while alive; dropping it flushes
/// what is pending.
pub struct StderrGuard {
    thread: Option<std::thread::JoinHandle<()>>,
}

/// When stderr is a pipe (not a terminal or a file), put a pipe of our own
/// in its place and forward from it on a thread that ignores write errors:
/// `eprintln!` then never fails, so a reader that went away (`2>&1 >/dev/null
/// | head -1`) cannot make it panic. Keep the guard until the end of `main`.
pub fn protect_stderr() -> StderrGuard {
    let none = StderrGuard { thread: None };
    // SAFETY: fstat on fd 2 with a zeroed stat buffer we own.
    let is_fifo = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(2, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if !is_fifo {
        return none;
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe/dup/dup2 on descriptors this process owns; on any
    // failure the original stderr stays in place.
    let (orig, read_end) = unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return none;
        }
        let orig = libc::dup(2);
        if orig < 0 || libc::dup2(fds[1], 2) < 0 {
            libc::close(fds[0]);
            libc::close(fds[1]);
            if orig >= 0 {
                libc::close(orig);
            }
            return none;
        }
        libc::close(fds[1]);
        (orig, fds[0])
    };
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut deliver = true;
        loop {
            // SAFETY: reading into our own buffer from our pipe's read end.
            let n = unsafe { libc::read(read_end, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while deliver && off < n as usize {
                // SAFETY: writing bytes we read to the original stderr.
                let w = unsafe { libc::write(orig, buf[off..].as_ptr().cast(), n as usize - off) };
                if w <= 0 {
                    deliver = false; // the reader is gone: drop the rest
                } else {
                    off += w as usize;
                }
            }
        }
        // SAFETY: closing descriptors this thread owns.
        unsafe {
            libc::close(read_end);
            libc::close(orig);
        }
    });
    StderrGuard {
        thread: Some(thread),
    }
}

impl Drop for StderrGuard {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            // Point fd 2 at /dev/null so the pipe's write end closes and the
            // forwarder sees the end of input, then wait for it to drain.
            // SAFETY: open/dup2/close on descriptors this process owns.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if null >= 0 {
                    libc::dup2(null, 2);
                    libc::close(null);
                }
            }
            let _ = t.join();
        }
    }
}
