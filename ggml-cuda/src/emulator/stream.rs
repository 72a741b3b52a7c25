//! Emulated streams and events. Each stream is a FIFO of jobs run by its own
//! worker thread, concurrently with the other streams and the host; the host
//! queues and returns. A job's delay before it runs comes from the stream's
//! seeded generator (`GGML_CUDA_EMULATOR_SEED`), so work that nothing orders
//! runs in varying orders.
//!
//! Events follow CUDA: recording queues a marker (it completes, stamping the
//! time, when the stream's earlier work is done); a wait queues a job that
//! blocks the stream's worker until the marker completed; synchronize blocks
//! the host. A failed job (a kernel whose launch the emulator refused)
//! leaves a sticky error that every later synchronize on the stream reports,
//! as a CUDA context error does.
//!
//! Every queued job also goes through the hazard detector ([`super::hazard`])
//! with the device ranges it touches, before it is queued.

use std::any::Any;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ggml_core::BackendError;

use super::hazard::Clock;
use super::{world, DeviceState};
use crate::driver::{
    Access, DevPtr, Device, Event, Function, GraphExec, KernelArg, LaunchDims, Stream,
};

/// A job run on a stream's worker; an error becomes the stream's sticky error.
type Job = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// How far a stream's worker has got.
#[derive(Default)]
struct Progress {
    submitted: u64,
    completed: u64,
    error: Option<String>,
}

/// What the host and the workers share about one stream.
pub(crate) struct StreamCore {
    /// Global id (the hazard detector's clock component).
    id: usize,
    /// `CUDA0 compute`, for messages.
    label: String,
    /// Whether the hazard detector checks this stream's work.
    hazards: bool,
    progress: Mutex<Progress>,
    done: Condvar,
}

impl StreamCore {
    /// Block until job `seq` (1-based) has completed; the sticky error, if any.
    fn wait_for(&self, seq: u64) -> Result<(), String> {
        let mut p = self.progress.lock().map_err(|_| "stream lock poisoned")?;
        while p.completed < seq {
            p = self.done.wait(p).map_err(|_| "stream lock poisoned")?;
        }
        match &p.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn completed(&self) -> u64 {
        self.progress.lock().map(|p| p.completed).unwrap_or(0)
    }
}

/// A host pointer moved to a worker.
struct HostPtr(*mut u8);
// SAFETY: the pointer is only dereferenced by the job, within the lifetime
// the queuing call's caller guarantees (see the `Stream` contract).
unsafe impl Send for HostPtr {}

/// The splitmix64 generator of one stream's delays.
struct Delays {
    state: u64,
}

impl Delays {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Half the jobs run at once, the rest after up to 400 microseconds.
    fn delay(&mut self) -> Duration {
        let r = self.next();
        if r & 1 == 0 {
            Duration::ZERO
        } else {
            Duration::from_micros((r >> 1) % 400)
        }
    }
}

/// An emulated stream.
pub(crate) struct EmuStream {
    core: Arc<StreamCore>,
    tx: Mutex<mpsc::Sender<Job>>,
    dev: Arc<DeviceState>,
    /// The launches captured since [`Stream::begin_capture`], while
    /// capturing.
    capture: Mutex<Option<Vec<CapturedLaunch>>>,
    /// Emulated host-to-device link rate, bytes per second (config).
    h2d_bytes_per_s: Option<u64>,
}

/// One launch recorded by a capture, replayed as it was queued.
#[derive(Clone)]
struct CapturedLaunch {
    name: &'static str,
    dims: LaunchDims,
    args: Vec<KernelArg>,
    access: Vec<Access>,
}

/// An emulated graph: the launches of one capture.
pub(crate) struct EmuGraph {
    launches: Vec<CapturedLaunch>,
    /// The stream that captured it (a graph replays on its own stream).
    stream: usize,
}

impl GraphExec for EmuGraph {
    fn n_launches(&self) -> usize {
        self.launches.len()
    }

    unsafe fn set_launch(
        &mut self,
        i: usize,
        f: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
        access: &[Access],
    ) -> Result<(), BackendError> {
        let n = self.launches.len();
        let l = self.launches.get_mut(i).ok_or_else(|| {
            BackendError::Device(format!(
                "emulator: a graph of {n} launches has no launch {i} to update"
            ))
        })?;
        if l.name != f.name {
            return Err(BackendError::Device(format!(
                "emulator: graph launch {i} is {}, not {} (a node's kernel cannot change)",
                l.name, f.name
            )));
        }
        *l = CapturedLaunch {
            name: f.name,
            dims,
            args: args.to_vec(),
            access: access.to_vec(),
        };
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl EmuStream {
    /// A new stream of `dev` with its worker thread.
    pub fn new(dev: &Arc<DeviceState>, label: &str) -> Result<EmuStream, BackendError> {
        let id = world().lock().map_err(|_| poisoned())?.tracker.add_stream();
        let cfg = super::config();
        let core = Arc::new(StreamCore {
            id,
            hazards: cfg.hazards,
            label: format!("{} {label}", dev.name),
            progress: Mutex::new(Progress::default()),
            done: Condvar::new(),
        });
        let (tx, rx) = mpsc::channel::<Job>();
        let mut delays = cfg.seed.map(|s| Delays {
            state: s ^ (id as u64).wrapping_mul(0xd134_2543_de82_ef95),
        });
        let worker_core = Arc::clone(&core);
        std::thread::Builder::new()
            .name(format!("emu-{}", core.label.replace(' ', "-")))
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    if let Some(d) = delays.as_mut().map(Delays::delay) {
                        if !d.is_zero() {
                            std::thread::sleep(d);
                        }
                    }
                    let r = job();
                    if let Ok(mut p) = worker_core.progress.lock() {
                        if let (Err(e), None) = (r, &p.error) {
                            p.error = Some(e);
                        }
                        p.completed += 1;
                    }
                    worker_core.done.notify_all();
                }
            })
            .map_err(|e| {
                BackendError::Device(format!("emulator: starting a stream worker: {e}"))
            })?;
        Ok(EmuStream {
            core,
            tx: Mutex::new(tx),
            dev: Arc::clone(dev),
            capture: Mutex::new(None),
            h2d_bytes_per_s: cfg.h2d_bytes_per_s,
        })
    }

    /// An error when the stream is capturing: only launches may be captured
    /// (CUDA refuses the rest with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    fn not_capturing(&self, what: &str) -> Result<(), BackendError> {
        if self.capture.lock().map_err(|_| poisoned())?.is_some() {
            return Err(BackendError::Device(format!(
                "emulator: {what} on {} while it is capturing a graph (only launches are captured)",
                self.core.label
            )));
        }
        Ok(())
    }

    /// Check a launch's accesses and queue it (a launch, or one of a
    /// replayed graph).
    ///
    /// # Safety
    /// As [`Stream::launch`].
    unsafe fn queue_launch(
        &self,
        name: &'static str,
        dims: LaunchDims,
        args: Vec<KernelArg>,
        access: &[Access],
    ) -> Result<(), BackendError> {
        self.dev.stats.count_launch();
        let selected: Vec<Access> = access
            .iter()
            .filter(|a| a.select.is_some())
            .copied()
            .collect();
        let (core, label) = (Arc::clone(&self.core), self.core.label.clone());
        self.submit_with(name, access, move |clk| {
            Box::new(move || {
                if core.hazards && !selected.is_empty() {
                    // SAFETY: the ids are live device memory that the
                    // launch reads (the caller's contract), written by work
                    // this stream has waited for.
                    let ranges = unsafe { selected_ranges(&selected) };
                    let op = format!("{name} on {label}");
                    let mut w = world()
                        .lock()
                        .map_err(|_| "emulator: a lock was poisoned")?;
                    for (p, n) in ranges {
                        w.tracker
                            .access_late(core.id, &clk, &op, p, n)
                            .map_err(|e| format!("emulator: {e}"))?;
                    }
                }
                let params: Vec<*const std::ffi::c_void> =
                    args.iter().map(KernelArg::as_param).collect();
                // SAFETY: the queuing call's caller guarantees the arguments
                // match the kernel's parameters and its pointers cover what
                // it touches; `params` points into `args`, alive here.
                unsafe {
                    crate::emu_kernels::launch(
                        name,
                        dims.grid,
                        dims.block,
                        dims.shared_bytes,
                        &params,
                    )
                }
                .map_err(|e| format!("launching {name}: {e}"))
            })
        })?;
        Ok(())
    }

    /// Queue the marker job of an event record; the record it makes.
    fn mark(&self) -> Result<Recorded, BackendError> {
        self.not_capturing("an event record")?;
        let stamp = Arc::new(Mutex::new(None));
        let st = Arc::clone(&stamp);
        // the marker's clock covers every job queued before it
        let (seq, clock) = self.submit(
            "event record",
            &[],
            Box::new(move || {
                if let Ok(mut s) = st.lock() {
                    *s = Some(Instant::now());
                }
                Ok(())
            }),
        )?;
        Ok(Recorded {
            core: Arc::clone(&self.core),
            seq,
            clock,
            stamp,
        })
    }

    /// Check `accesses` of operation `what` with the hazard detector, then
    /// queue `job`. Returns the job's sequence number and clock.
    fn submit(
        &self,
        what: &str,
        accesses: &[Access],
        job: Job,
    ) -> Result<(u64, Clock), BackendError> {
        self.submit_with(what, accesses, |_| job)
    }

    /// [`Self::submit`] with the job made from the operation's clock.
    /// Accesses with a [`crate::driver::Selected`] part are left to the
    /// job (checked when it runs).
    fn submit_with(
        &self,
        what: &str,
        accesses: &[Access],
        job: impl FnOnce(Clock) -> Job,
    ) -> Result<(u64, Clock), BackendError> {
        let mut w = world().lock().map_err(|_| poisoned())?;
        let clk = w.tracker.tick(self.core.id);
        if self.core.hazards {
            let op = format!("{what} on {}", self.core.label);
            for a in accesses.iter().filter(|a| a.select.is_none()) {
                if let Err(e) =
                    w.tracker
                        .access(self.core.id, &clk, &op, a.ptr, a.len as u64, a.write)
                {
                    let msg = format!("emulator: {e}");
                    super::keep_hazard(&mut w, msg.clone());
                    return Err(BackendError::Device(msg));
                }
            }
        }
        let seq = {
            let mut p = self.core.progress.lock().map_err(|_| poisoned())?;
            p.submitted += 1;
            p.submitted
        };
        self.tx
            .lock()
            .map_err(|_| poisoned())?
            .send(job(clk.clone()))
            .map_err(|_| BackendError::Device(format!("{}: worker gone", self.core.label)))?;
        Ok((seq, clk))
    }

    /// Queue a copy of `n` bytes from `src` to `dst` (host addresses: device
    /// memory is host memory here), read and written when the job runs.
    ///
    /// # Safety
    /// Both ranges stay valid until the copy completes, and the host does not
    /// use the destination before then (the [`Stream`] copy contracts).
    ///
    /// `lasts`: the least time the copy takes (an emulated link rate), the
    /// job sleeping out what the memcpy did not use.
    unsafe fn queue_copy(
        &self,
        what: &str,
        accesses: &[Access],
        dst: *mut u8,
        src: *const u8,
        n: usize,
        lasts: Option<Duration>,
    ) -> Result<u64, BackendError> {
        self.not_capturing(what)?;
        let (d, s) = (HostPtr(dst), HostPtr(src as *mut u8));
        let (seq, _) = self.submit(
            what,
            accesses,
            Box::new(move || {
                let (d, s) = (d, s);
                let t0 = Instant::now();
                // SAFETY: the caller's contract above; `copy` tolerates
                // overlap (device-to-device copies within one buffer).
                unsafe { std::ptr::copy(s.0, d.0, n) };
                if let Some(rest) = lasts.and_then(|l| l.checked_sub(t0.elapsed())) {
                    std::thread::sleep(rest);
                }
                Ok(())
            }),
        )?;
        Ok(seq)
    }
}

/// The device ranges `selected` accesses read: for each, the experts its
/// ids select (each once; ids outside `0..n_expert` select nothing), as
/// `(start, length)`.
///
/// # Safety
/// Every access's ids (`ids`, `ids_t`) are live emulated device memory.
unsafe fn selected_ranges(selected: &[Access]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for a in selected {
        let Some(sel) = a.select else {
            continue;
        };
        let mut experts: Vec<usize> = Vec::new();
        let t = sel.ids_t;
        for r in 0..t.ne[1].max(0) {
            for c in 0..t.ne[0].max(0) {
                let off = r * t.nb[1] + c * t.nb[0];
                // SAFETY: inside the ids tensor (the caller's contract);
                // device memory is host memory in the emulator.
                let id = unsafe {
                    std::ptr::read_unaligned((sel.ids as usize + off as usize) as *const i32)
                };
                if id >= 0 && (id as usize) < sel.n_expert {
                    experts.push(id as usize);
                }
            }
        }
        experts.sort_unstable();
        experts.dedup();
        out.extend(experts.into_iter().map(|e| {
            (
                a.ptr + (e * sel.stride) as u64,
                sel.expert_bytes.min(a.len.saturating_sub(e * sel.stride)) as u64,
            )
        }));
    }
    out
}

fn poisoned() -> BackendError {
    BackendError::Device("emulator: a lock was poisoned".into())
}

fn sticky(e: String) -> BackendError {
    BackendError::Device(e)
}

impl Stream for EmuStream {
    unsafe fn memset_d8(&self, dst: DevPtr, value: u8, n: usize) -> Result<(), BackendError> {
        self.not_capturing("memset")?;
        let p = HostPtr(dst as *mut u8);
        let acc = [Access::range(dst, n, true)];
        self.submit(
            "memset",
            &acc,
            Box::new(move || {
                let p = p;
                // SAFETY: the caller guarantees `dst..dst+n` is live device
                // memory (a host allocation of the emulator).
                unsafe { std::ptr::write_bytes(p.0, value, n) };
                Ok(())
            }),
        )?;
        Ok(())
    }

    unsafe fn memcpy_htod(
        &self,
        dst: DevPtr,
        src: *const u8,
        n: usize,
    ) -> Result<(), BackendError> {
        let pinned = super::is_page_locked(src, n);
        self.dev.stats.count_h2d(n, pinned);
        let acc = [Access::range(dst, n, true)];
        let lasts = self
            .h2d_bytes_per_s
            .and_then(|r| Duration::try_from_secs_f64(n as f64 / r as f64).ok());
        let what = "host-to-device copy";
        let t0 = Instant::now();
        // SAFETY: the caller keeps the host range valid and unchanged until
        // the copy completes (the bytes are read when the copy runs, as a
        // DMA engine would); `dst` is device memory.
        let seq = unsafe { self.queue_copy(what, &acc, dst as *mut u8, src, n, lasts) }?;
        if !pinned {
            // CUDA stages pageable memory through a pinned buffer: the
            // calling thread waits for the stream to reach the copy and for
            // the bytes to be taken. The device write may still be in
            // flight then, so the hazard detector's order is not advanced.
            self.core.wait_for(seq).map_err(sticky)?;
            self.dev.stats.count_host_blocked(t0.elapsed());
        }
        Ok(())
    }

    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: DevPtr, n: usize) -> Result<(), BackendError> {
        self.dev.stats.count_d2h(n);
        let acc = [Access::range(src, n, false)];
        // SAFETY: the caller keeps `dst..dst+n` valid and unused until the
        // copy completes; `src` is device memory.
        unsafe { self.queue_copy("device-to-host copy", &acc, dst, src as *const u8, n, None) }
            .map(|_| ())
    }

    unsafe fn memcpy_dtod(&self, dst: DevPtr, src: DevPtr, n: usize) -> Result<(), BackendError> {
        let acc = [Access::range(src, n, false), Access::range(dst, n, true)];
        // SAFETY: both ranges are device memory (the caller's contract).
        unsafe {
            self.queue_copy(
                "device-to-device copy",
                &acc,
                dst as *mut u8,
                src as *const u8,
                n,
                None,
            )
        }
        .map(|_| ())
    }

    unsafe fn memcpy_peer(
        &self,
        dst: DevPtr,
        src: DevPtr,
        src_dev: &dyn Device,
        n: usize,
    ) -> Result<(), BackendError> {
        let Some(p) = src_dev.as_any().downcast_ref::<super::EmuDevice>() else {
            return Err(BackendError::Device(
                "emulator: a peer copy from a device of another driver".into(),
            ));
        };
        let enabled = self
            .dev
            .peers
            .lock()
            .map_err(|_| poisoned())?
            .contains(&p.st.ordinal);
        if !enabled {
            return Err(BackendError::Device(format!(
                "cuMemcpyPeerAsync from {} to {} (emulated): peer access not enabled (cuCtxEnablePeerAccess)",
                p.st.name, self.dev.name
            )));
        }
        self.dev.stats.count_peer_in(n);
        let acc = [Access::range(src, n, false), Access::range(dst, n, true)];
        // SAFETY: both ranges are device memory of their (emulated)
        // devices, host allocations of this process (the caller's contract).
        unsafe { self.queue_copy("peer copy", &acc, dst as *mut u8, src as *const u8, n, None) }
            .map(|_| ())
    }

    fn record_event(&self, _timing: bool) -> Result<Arc<dyn Event>, BackendError> {
        self.dev.stats.count_event();
        let r = self.mark()?;
        Ok(Arc::new(EmuEvent {
            rec: Mutex::new(Some(r)),
        }))
    }

    fn record(&self, ev: &dyn Event) -> Result<(), BackendError> {
        let Some(e) = ev.as_any().downcast_ref::<EmuEvent>() else {
            return Err(BackendError::Device(
                "emulator: recording an event of another driver".into(),
            ));
        };
        let r = self.mark()?;
        *e.rec.lock().map_err(|_| poisoned())? = Some(r);
        Ok(())
    }

    fn wait_event(&self, ev: &dyn Event) -> Result<(), BackendError> {
        let Some(e) = ev.as_any().downcast_ref::<EmuEvent>() else {
            return Err(BackendError::Device(
                "emulator: waiting on an event of another driver".into(),
            ));
        };
        self.not_capturing("an event wait")?;
        // the record as it is now (a later re-record does not change what
        // this wait waits for)
        let Some(e) = e.recorded()? else {
            return Ok(()); // nothing recorded: complete
        };
        {
            let mut w = world().lock().map_err(|_| poisoned())?;
            w.tracker.stream_waits(self.core.id, &e.clock);
        }
        if Arc::ptr_eq(&e.core, &self.core) {
            return Ok(()); // the stream's own earlier work: already ordered
        }
        let (core, seq) = (Arc::clone(&e.core), e.seq);
        self.submit(
            "event wait",
            &[],
            Box::new(move || {
                // the waited stream's sticky error stays with that stream
                let _ = core.wait_for(seq);
                Ok(())
            }),
        )?;
        Ok(())
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.not_capturing("a synchronize")?;
        let seq = self.core.progress.lock().map_err(|_| poisoned())?.submitted;
        self.core.wait_for(seq).map_err(sticky)?;
        world()
            .lock()
            .map_err(|_| poisoned())?
            .tracker
            .host_waits_stream(self.core.id);
        Ok(())
    }

    unsafe fn launch(
        &self,
        f: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
        access: Option<&[Access]>,
    ) -> Result<(), BackendError> {
        if let Some(c) = self.capture.lock().map_err(|_| poisoned())?.as_mut() {
            c.push(CapturedLaunch {
                name: f.name,
                dims,
                args: args.to_vec(),
                access: access.unwrap_or(&[]).to_vec(),
            });
            return Ok(());
        }
        // SAFETY: the caller's contract (`Stream::launch`).
        unsafe { self.queue_launch(f.name, dims, args.to_vec(), access.unwrap_or(&[])) }
    }

    fn begin_capture(&self) -> Result<(), BackendError> {
        let mut c = self.capture.lock().map_err(|_| poisoned())?;
        if c.is_some() {
            return Err(BackendError::Device(format!(
                "emulator: {} is already capturing a graph",
                self.core.label
            )));
        }
        *c = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self) -> Result<Box<dyn GraphExec>, BackendError> {
        let launches = self
            .capture
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .ok_or_else(|| {
                BackendError::Device(format!(
                    "emulator: {} ends a capture it did not begin",
                    self.core.label
                ))
            })?;
        if launches.is_empty() {
            return Err(BackendError::Device(format!(
                "emulator: {}: an empty graph",
                self.core.label
            )));
        }
        Ok(Box::new(EmuGraph {
            launches,
            stream: self.core.id,
        }))
    }

    unsafe fn launch_graph(&self, g: &dyn GraphExec) -> Result<(), BackendError> {
        let Some(g) = g.as_any().downcast_ref::<EmuGraph>() else {
            return Err(BackendError::Device(
                "emulator: launching a graph of another driver".into(),
            ));
        };
        if g.stream != self.core.id {
            return Err(BackendError::Device(format!(
                "emulator: a graph captured on another stream launched on {}",
                self.core.label
            )));
        }
        self.not_capturing("a graph launch")?;
        self.dev.stats.count_graph_replay();
        for l in &g.launches {
            // SAFETY: the caller guarantees the captured launches' pointers
            // are live and hold what the kernels expect (`launch_graph`).
            unsafe { self.queue_launch(l.name, l.dims, l.args.clone(), &l.access) }?;
        }
        Ok(())
    }
}

/// One record of an emulated event: a marker job on a stream and the
/// clock it captured.
#[derive(Clone)]
struct Recorded {
    core: Arc<StreamCore>,
    seq: u64,
    clock: Clock,
    stamp: Arc<Mutex<Option<Instant>>>,
}

/// An emulated event: its latest record (none: complete, as a CUDA event
/// never recorded is).
pub(crate) struct EmuEvent {
    rec: Mutex<Option<Recorded>>,
}

impl EmuEvent {
    /// A new event with nothing recorded.
    pub(crate) fn new() -> EmuEvent {
        EmuEvent {
            rec: Mutex::new(None),
        }
    }

    fn recorded(&self) -> Result<Option<Recorded>, BackendError> {
        Ok(self.rec.lock().map_err(|_| poisoned())?.clone())
    }

    fn time(&self) -> Result<Instant, BackendError> {
        self.synchronize()?;
        let r = self
            .recorded()?
            .ok_or_else(|| BackendError::Device("emulator: timing an unrecorded event".into()))?;
        let t = *r.stamp.lock().map_err(|_| poisoned())?;
        t.ok_or_else(|| BackendError::Device("emulator: event completed without a time".into()))
    }
}

impl Event for EmuEvent {
    fn synchronize(&self) -> Result<(), BackendError> {
        let Some(r) = self.recorded()? else {
            return Ok(());
        };
        r.core.wait_for(r.seq).map_err(sticky)?;
        world()
            .lock()
            .map_err(|_| poisoned())?
            .tracker
            .host_waits(&r.clock);
        Ok(())
    }

    fn query(&self) -> Result<bool, BackendError> {
        let Some(r) = self.recorded()? else {
            return Ok(true);
        };
        let done = r.core.completed() >= r.seq;
        if done {
            self.synchronize()?;
        }
        Ok(done)
    }

    fn elapsed_ms(&self, end: &dyn Event) -> Result<f32, BackendError> {
        let Some(end) = end.as_any().downcast_ref::<EmuEvent>() else {
            return Err(BackendError::Device(
                "emulator: timing against an event of another driver".into(),
            ));
        };
        let (a, b) = (self.time()?, end.time()?);
        Ok(if b >= a {
            (b - a).as_secs_f32() * 1e3
        } else {
            -((a - b).as_secs_f32() * 1e3)
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
