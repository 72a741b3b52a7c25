//! The emulated CUDA device: the [`crate::driver`] interface implemented on
//! the CPU, so the real backend and the real `kernels.cu` run without a GPU
//! (Triton's interpreter mode, for this crate).
//!
//! - **Selection.** `GGML_CUDA_EMULATOR=1` (or [`enable`], for tests) makes
//!   every CUDA device emulated: `CUDA0`, plus `CUDA1`, ... with
//!   `GGML_CUDA_EMULATOR_DEVICES=N`. The device name says it is emulated.
//! - **Memory.** Device memory is host allocations (a device pointer is the
//!   host address), counted against a capacity
//!   (`GGML_CUDA_EMULATOR_MEM_MIB`, default 24576) shared by every context
//!   of the device, so budget and out-of-memory paths run. Fresh device
//!   memory is filled with `0xA5` bytes, so a read of memory nobody wrote
//!   shows. Page-locked allocations and host registrations are recorded; a
//!   host-to-device copy from any other host memory counts as pageable in
//!   [`stats`] and, as in CUDA (which stages it through a pinned buffer),
//!   blocks the calling host thread until the stream has reached it and
//!   taken its bytes ([`Stats::host_blocked_ns`]); from page-locked memory
//!   it returns at once.
//! - **Streams and events** (`stream.rs`): a worker thread per stream, CUDA's
//!   event semantics (re-recording included: a wait keeps the record it
//!   saw), seeded delays (`GGML_CUDA_EMULATOR_SEED=N`), an optional link
//!   rate for host-to-device copies (`GGML_CUDA_EMULATOR_H2D_MBPS`).
//! - **Graphs** (`stream.rs`): a capture records a stream's launches instead
//!   of running them (anything else queued while capturing is an error, as
//!   CUDA's capture isolation makes it); a replay queues them again, each
//!   checked by the hazard detector.
//! - **Kernels** run on the stream's worker through
//!   [`crate::emu_kernels::launch`] (`kernels.cu` compiled for the CPU).
//!   The module they come "from" is loaded as a driver would
//!   (`module.rs`): the device pretends a compute capability
//!   (`GGML_CUDA_EMULATOR_CC`, default 9.0) and a driver version
//!   (`GGML_CUDA_EMULATOR_DRIVER`, default 12.9), refuses a cubin of another
//!   architecture and PTX of a newer ISA than that driver's, and records
//!   every image it accepted ([`loaded_images`]).
//! - **Hazards** ([`hazard`]): every queued operation's device ranges are
//!   checked against unordered conflicting accesses; a hazard fails the call
//!   that queued the operation and is kept for [`take_hazards`]. The cache
//!   slots a `mul_mat_id` launch reads (chosen by device-side ids) are
//!   checked when the kernel runs; a hazard found then is the stream's
//!   sticky error, reported by the next wait or synchronize.
//!   `GGML_CUDA_EMULATOR_HAZARDS=0` turns the detector off.
//! - **Peer copies**: two emulated devices can address each other's memory
//!   (`GGML_CUDA_EMULATOR_PEER=0`: they cannot, and the backend copies
//!   through host memory); a peer copy before the destination enabled peer
//!   access is an error (stricter than CUDA, which would stage it through
//!   the host). The copy reads the source device's range and writes the
//!   destination's, both checked by the hazard detector, whose
//!   happens-before order spans every device's streams.
//! - **Planted bugs**:
//!   `GGML_CUDA_EMULATOR_DROP_WAIT=upload|readback|slot|staging|peer|peer-source`
//!   makes [`crate::driver::Device::planted_drop_wait`] say yes for that
//!   kind, on emulated devices only (tests prove the emulator catches each;
//!   `peer`: a peer copy does not wait for the source device's compute;
//!   `peer-source`: the source device's compute and upload streams do not
//!   wait for the peer copies that read its memory). The CUDA backend asks
//!   it where it waits: for its own waits (`upload`: compute waiting for
//!   this device's uploads; `peer`: a peer copy waiting for its source),
//!   and for the waits its callers name the kind of
//!   ([`ggml_core::WaitKind`] through `BackendStream::wait_event_for`:
//!   `readback`, `slot`, `staging`, `peer-source`). Nothing outside the
//!   driver knows of planted bugs.
//! - **Configuration** comes from the environment, [`set_config`] (the
//!   process) or [`set_thread_config`] (one host thread, so that tests with
//!   different seeds and planted bugs run in parallel).

pub mod hazard;
mod module;
mod stream;

use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ggml_core::BackendError;

use crate::driver::{DevPtr, Device, Function, Stream};
use hazard::Tracker;
use stream::EmuStream;

/// The planted-bug kinds `GGML_CUDA_EMULATOR_DROP_WAIT` accepts.
pub const DROP_WAIT_KINDS: [&str; 6] = [
    "upload",
    "readback",
    "slot",
    "staging",
    "peer",
    "peer-source",
];

/// Device memory alignment (cuMemAlloc's is at least 256 bytes).
const DEV_ALIGN: usize = 256;
/// Page-locked host memory alignment.
const HOST_ALIGN: usize = 4096;

static FORCED: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many waits the planted bug has dropped so far (tests check the
/// dropped wait was on the path they ran): on this thread when it has its
/// own configuration ([`set_thread_config`]), else in the process.
pub fn dropped_waits() -> u64 {
    SCOPE
        .with(|s| s.borrow().as_ref().map(|t| t.dropped))
        .unwrap_or_else(|| DROPPED.load(Ordering::Relaxed))
}

/// Make every CUDA device emulated in this process, as
/// `GGML_CUDA_EMULATOR=1` does (tests call this when there is no GPU).
/// Backends opened before the call keep their device.
pub fn enable() {
    FORCED.store(true, Ordering::Release);
}

/// The variable that makes a test fail instead of falling back to the
/// emulator: `scripts/gpu-check-run` sets it on the GPU machine, so no
/// check passes without the GPU.
pub const REQUIRE_DEVICE: &str = "GGML_CUDA_REQUIRE_DEVICE";

/// A test's fallback when no CUDA device is usable (`why`): the emulator
/// ([`enable`]), unless `GGML_CUDA_REQUIRE_DEVICE=1`, which makes it a
/// panic naming why the device did not open. Tests that run on the
/// emulator by design call [`enable`] instead.
pub fn fallback(why: &str) {
    if env_flag(REQUIRE_DEVICE) && !enabled() {
        panic!(
            "{REQUIRE_DEVICE}=1: no fallback to the emulator: the CUDA device did not open: {why}"
        );
    }
    enable();
}

/// Whether CUDA devices are emulated ([`enable`] or `GGML_CUDA_EMULATOR=1`).
pub fn enabled() -> bool {
    FORCED.load(Ordering::Acquire) || env_flag("GGML_CUDA_EMULATOR")
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "off" | "no"))
}

/// The emulator's settings, read from the environment once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Emulated devices (`GGML_CUDA_EMULATOR_DEVICES`, default 1).
    pub devices: usize,
    /// Device memory per device in bytes (`GGML_CUDA_EMULATOR_MEM_MIB`).
    pub mem_bytes: usize,
    /// Seed of the per-operation delays (`GGML_CUDA_EMULATOR_SEED`); none:
    /// no delays.
    pub seed: Option<u64>,
    /// Whether the hazard detector runs (`GGML_CUDA_EMULATOR_HAZARDS`,
    /// default on).
    pub hazards: bool,
    /// The planted bug (`GGML_CUDA_EMULATOR_DROP_WAIT`), if any.
    pub drop_wait: Option<String>,
    /// Emulated host-to-device link, bytes per second
    /// (`GGML_CUDA_EMULATOR_H2D_MBPS`, in MB/s; none: copies take what the
    /// memcpy takes): each host-to-device copy then lasts at least
    /// bytes / rate, so an upload spans time beside the kernels as it does
    /// on a GPU (timelines; the durations stay emulated, not a GPU's).
    pub h2d_bytes_per_s: Option<u64>,
    /// Whether two emulated devices can access each other's memory
    /// (`GGML_CUDA_EMULATOR_PEER`, default on): peer copies, else the
    /// backend copies between them through host memory.
    pub peer: bool,
    /// The compute capability the devices pretend (`GGML_CUDA_EMULATOR_CC`,
    /// e.g. `8.9`; default 9.0).
    pub cc: (u32, u32),
    /// The driver version the devices pretend, as `cuDriverGetVersion`
    /// writes it (`GGML_CUDA_EMULATOR_DRIVER`, e.g. `12.4` or `12040`;
    /// default 12.9).
    pub driver_version: i32,
    /// The newest PTX ISA the pretended driver JIT-compiles
    /// (`GGML_CUDA_EMULATOR_PTX_ISA`, e.g. `8.4`); `None`: the table's for
    /// [`Config::driver_version`] ([`crate::ptx_isa::max_isa_for_driver`]).
    /// Set apart from the version, it plays a driver whose JIT is older
    /// than the table says, so the loader's fallback on a load error runs.
    pub ptx_isa_max: Option<crate::ptx_isa::Isa>,
}

/// The default pretended compute capability (an H100 / H200).
pub const DEFAULT_CC: (u32, u32) = (9, 0);
/// The default pretended driver version (CUDA 12.9).
pub const DEFAULT_DRIVER: i32 = 12090;

/// `8.9` as (8, 9).
fn parse_cc(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// `12.4` or `12040` as 12040.
fn parse_driver(v: &str) -> Option<i32> {
    let v = v.trim();
    match v.split_once('.') {
        Some((a, b)) => Some(a.parse::<i32>().ok()? * 1000 + b.parse::<i32>().ok()? * 10),
        None => v.parse().ok(),
    }
}

/// An environment setting parsed by `parse`, with a warning when it does
/// not parse.
fn env_with<T>(name: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    let v = std::env::var(name).ok()?;
    let r = parse(&v);
    if r.is_none() {
        eprintln!("warning: ignoring {name}={v:?}");
    }
    r
}

fn parse_env<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(x) => Some(x),
        Err(_) => {
            eprintln!("warning: ignoring {name}={v:?} (not a number)");
            None
        }
    }
}

fn config_cell() -> &'static Mutex<Option<Config>> {
    static C: Mutex<Option<Config>> = Mutex::new(None);
    &C
}

/// What [`set_thread_config`] scoped to one host thread: its configuration,
/// the hazards its queuing calls found and the waits it dropped.
struct ThreadScope {
    config: Config,
    hazards: Vec<String>,
    dropped: u64,
}

thread_local! {
    static SCOPE: std::cell::RefCell<Option<ThreadScope>> = const { std::cell::RefCell::new(None) };
}

/// The configuration: this thread's ([`set_thread_config`]), else the
/// process's: from the environment (read on first use), or what
/// [`set_config`] set.
pub fn config() -> Config {
    if let Some(c) = SCOPE.with(|s| s.borrow().as_ref().map(|t| t.config.clone())) {
        return c;
    }
    let mut c = config_cell()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    c.get_or_insert_with(env_config).clone()
}

/// Give the calling host thread its own configuration (`Some`), or back
/// the process's (`None`). What it decides is read on the thread that
/// opens devices and queues work: the streams opened on this thread take
/// its seed and hazard setting, its planted bug applies to the waits this
/// thread's calls would queue, and the hazards found by this thread's
/// queuing calls and its dropped waits are kept apart ([`take_hazards`] and
/// [`dropped_waits`] on this thread). Tests with different planted bugs and
/// seeds can then run in parallel in one process; the hazard detector's
/// happens-before order stays shared (independent tests touch disjoint
/// allocations and streams, so they cannot conflict).
pub fn set_thread_config(c: Option<Config>) {
    SCOPE.with(|s| {
        *s.borrow_mut() = c.map(|config| ThreadScope {
            config,
            hazards: Vec::new(),
            dropped: 0,
        })
    });
}

/// Keep a hazard found by a queuing call on this thread: in the thread's
/// scope, else in the process's list.
pub(crate) fn keep_hazard(w: &mut World, msg: String) {
    let scoped = SCOPE.with(|s| match s.borrow_mut().as_mut() {
        Some(t) => {
            t.hazards.push(msg.clone());
            true
        }
        None => false,
    });
    if !scoped {
        w.hazards.push(msg);
    }
}

/// Replace the configuration for devices and streams opened from now on
/// (tests: seeds and planted bugs without environment variables). Device
/// count and memory size apply to devices not opened yet.
pub fn set_config(c: Config) {
    *config_cell()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(c);
}

fn env_config() -> Config {
    {
        let drop_wait = std::env::var("GGML_CUDA_EMULATOR_DROP_WAIT")
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        if let Some(d) = &drop_wait {
            if !DROP_WAIT_KINDS.contains(&d.as_str()) {
                eprintln!(
                    "warning: GGML_CUDA_EMULATOR_DROP_WAIT={d:?} is none of {}",
                    DROP_WAIT_KINDS.join("|")
                );
            }
        }
        Config {
            devices: parse_env::<usize>("GGML_CUDA_EMULATOR_DEVICES")
                .unwrap_or(1)
                .max(1),
            mem_bytes: parse_env::<usize>("GGML_CUDA_EMULATOR_MEM_MIB")
                .unwrap_or(24576)
                .saturating_mul(1 << 20),
            seed: parse_env::<u64>("GGML_CUDA_EMULATOR_SEED"),
            hazards: std::env::var("GGML_CUDA_EMULATOR_HAZARDS")
                .map_or(true, |v| !matches!(v.trim(), "0" | "false" | "off" | "no")),
            drop_wait,
            h2d_bytes_per_s: parse_env::<f64>("GGML_CUDA_EMULATOR_H2D_MBPS")
                .map(|r| (r * 1e6) as u64) // saturating; NaN gives 0
                .filter(|&r| r > 0),
            peer: std::env::var("GGML_CUDA_EMULATOR_PEER")
                .map_or(true, |v| !matches!(v.trim(), "0" | "false" | "off" | "no")),
            cc: env_with("GGML_CUDA_EMULATOR_CC", parse_cc).unwrap_or(DEFAULT_CC),
            driver_version: env_with("GGML_CUDA_EMULATOR_DRIVER", parse_driver)
                .unwrap_or(DEFAULT_DRIVER),
            ptx_isa_max: env_with("GGML_CUDA_EMULATOR_PTX_ISA", crate::ptx_isa::parse_isa),
        }
    }
}

/// Number of emulated devices.
pub fn device_count() -> usize {
    config().devices
}

/// Copy and launch counts of one emulated device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Host-to-device bytes copied from page-locked or registered memory.
    pub h2d_pinned_bytes: u64,
    /// Host-to-device bytes copied from pageable memory.
    pub h2d_pageable_bytes: u64,
    /// Host-to-device copies from pageable memory (each blocked the
    /// calling host thread until the stream took its bytes, as CUDA does).
    pub h2d_pageable_copies: u64,
    /// Nanoseconds host threads spent blocked in those copies.
    pub host_blocked_ns: u64,
    /// Device-to-host bytes.
    pub d2h_bytes: u64,
    /// Bytes copied into this device from another device's memory by peer
    /// copies (never through host memory).
    pub peer_in_bytes: u64,
    /// Kernel launches queued (each kernel of a replayed graph included).
    pub launches: u64,
    /// Graphs replayed (`cuGraphLaunch`).
    pub graph_replays: u64,
    /// Events created (new events and one-shot records; the backend's pool
    /// re-records its events instead).
    pub events_created: u64,
    /// Device bytes allocated now.
    pub used_bytes: u64,
    /// Most device bytes allocated at once.
    pub peak_bytes: u64,
}

#[derive(Default)]
struct AtomicStats {
    h2d_pinned: AtomicU64,
    h2d_pageable: AtomicU64,
    h2d_pageable_copies: AtomicU64,
    host_blocked_ns: AtomicU64,
    d2h: AtomicU64,
    peer_in: AtomicU64,
    launches: AtomicU64,
    graph_replays: AtomicU64,
    events: AtomicU64,
}

impl AtomicStats {
    fn count_h2d(&self, n: usize, pinned: bool) {
        let c = if pinned {
            &self.h2d_pinned
        } else {
            &self.h2d_pageable
        };
        c.fetch_add(n as u64, Ordering::Relaxed);
        if !pinned {
            self.h2d_pageable_copies.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn count_host_blocked(&self, d: std::time::Duration) {
        self.host_blocked_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
    fn count_d2h(&self, n: usize) {
        self.d2h.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn count_peer_in(&self, n: usize) {
        self.peer_in.fetch_add(n as u64, Ordering::Relaxed);
    }
    fn count_launch(&self) {
        self.launches.fetch_add(1, Ordering::Relaxed);
    }
    fn count_graph_replay(&self) {
        self.graph_replays.fetch_add(1, Ordering::Relaxed);
    }
    fn count_event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

/// One emulated device, shared by every context opened on it.
pub(crate) struct DeviceState {
    ordinal: usize,
    name: String,
    capacity: usize,
    /// Live allocations: address -> layout.
    allocs: Mutex<(HashMap<u64, Layout>, usize, usize)>,
    /// Ordinals of the devices whose memory this one may access
    /// (`cuCtxEnablePeerAccess` from any of its contexts).
    peers: Mutex<Vec<usize>>,
    stats: AtomicStats,
    /// The module images loaded on this device, in order (described).
    loaded: Mutex<Vec<String>>,
}

/// State shared by all emulated devices: the hazard detector (streams of
/// every device share one happens-before order) and the hazards found.
pub(crate) struct World {
    pub tracker: Tracker,
    pub hazards: Vec<String>,
}

pub(crate) fn world() -> &'static Mutex<World> {
    static W: OnceLock<Mutex<World>> = OnceLock::new();
    W.get_or_init(|| {
        Mutex::new(World {
            tracker: Tracker::default(),
            hazards: Vec::new(),
        })
    })
}

/// Page-locked host ranges (allocated or registered): start -> length.
fn host_ranges() -> &'static Mutex<BTreeMap<usize, usize>> {
    static R: OnceLock<Mutex<BTreeMap<usize, usize>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Whether `[p, p+n)` lies in one page-locked range.
fn is_page_locked(p: *const u8, n: usize) -> bool {
    let p = p as usize;
    let Ok(r) = host_ranges().lock() else {
        return false;
    };
    r.range(..=p)
        .next_back()
        .is_some_and(|(&s, &len)| p + n <= s + len)
}

fn devices() -> &'static Mutex<Vec<Arc<DeviceState>>> {
    static D: OnceLock<Mutex<Vec<Arc<DeviceState>>>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(Vec::new()))
}

fn device_state(ordinal: usize) -> Result<Arc<DeviceState>, BackendError> {
    let n = device_count();
    if ordinal >= n {
        return Err(BackendError::NoDevice(format!(
            "no CUDA device {ordinal}: {n} emulated device(s) present"
        )));
    }
    let mut d = devices()
        .lock()
        .map_err(|_| BackendError::Device("emulator: device list poisoned".into()))?;
    while d.len() <= ordinal {
        let i = d.len();
        d.push(Arc::new(DeviceState {
            ordinal: i,
            name: format!("CUDA{i}"),
            capacity: config().mem_bytes,
            allocs: Mutex::new((HashMap::new(), 0, 0)),
            peers: Mutex::new(Vec::new()),
            stats: AtomicStats::default(),
            loaded: Mutex::new(Vec::new()),
        }));
    }
    Ok(Arc::clone(&d[ordinal]))
}

/// The counts of emulated device `ordinal` so far (zeros for a device never
/// opened).
pub fn stats(ordinal: usize) -> Stats {
    let Ok(d) = devices().lock() else {
        return Stats::default();
    };
    let Some(s) = d.get(ordinal) else {
        return Stats::default();
    };
    let (used, peak) = s.allocs.lock().map(|a| (a.1, a.2)).unwrap_or((0, 0));
    Stats {
        h2d_pinned_bytes: s.stats.h2d_pinned.load(Ordering::Relaxed),
        h2d_pageable_bytes: s.stats.h2d_pageable.load(Ordering::Relaxed),
        h2d_pageable_copies: s.stats.h2d_pageable_copies.load(Ordering::Relaxed),
        host_blocked_ns: s.stats.host_blocked_ns.load(Ordering::Relaxed),
        d2h_bytes: s.stats.d2h.load(Ordering::Relaxed),
        peer_in_bytes: s.stats.peer_in.load(Ordering::Relaxed),
        launches: s.stats.launches.load(Ordering::Relaxed),
        graph_replays: s.stats.graph_replays.load(Ordering::Relaxed),
        events_created: s.stats.events.load(Ordering::Relaxed),
        used_bytes: used as u64,
        peak_bytes: peak as u64,
    }
}

/// The module images emulated device `ordinal` accepted so far, described
/// (`cubin sm_90 (shipped sm_90.cubin.xz)`), oldest first.
pub fn loaded_images(ordinal: usize) -> Vec<String> {
    let Ok(d) = devices().lock() else {
        return Vec::new();
    };
    d.get(ordinal)
        .and_then(|s| s.loaded.lock().ok().map(|l| l.clone()))
        .unwrap_or_default()
}

/// The hazards found so far (each also failed the call that queued it),
/// emptying the list: this thread's when it has its own configuration
/// ([`set_thread_config`]), else the process's.
pub fn take_hazards() -> Vec<String> {
    if let Some(h) = SCOPE.with(|s| {
        s.borrow_mut()
            .as_mut()
            .map(|t| std::mem::take(&mut t.hazards))
    }) {
        return h;
    }
    world()
        .lock()
        .map(|mut w| std::mem::take(&mut w.hazards))
        .unwrap_or_default()
}

/// Open emulated device `ordinal` (a new context on the shared device).
pub fn open(ordinal: usize) -> Result<Arc<dyn Device>, BackendError> {
    Ok(Arc::new(EmuDevice {
        st: device_state(ordinal)?,
    }))
}

/// A context on an emulated device.
pub(crate) struct EmuDevice {
    pub(crate) st: Arc<DeviceState>,
}

/// The multiprocessors the emulated device reports: an H100 SXM's.
pub const EMULATED_SMS: u32 = 132;

fn oom(what: String) -> BackendError {
    BackendError::OutOfMemory(what)
}

impl Device for EmuDevice {
    fn is_emulated(&self) -> bool {
        true
    }

    fn bind(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn name(&self) -> Result<String, BackendError> {
        Ok(format!(
            "emulated CUDA device {} (CPU, {} MiB)",
            self.st.ordinal,
            self.st.capacity >> 20
        ))
    }

    fn mem_info(&self) -> Result<(usize, usize), BackendError> {
        let used = self.st.allocs.lock().map(|a| a.1).unwrap_or(0);
        Ok((self.st.capacity.saturating_sub(used), self.st.capacity))
    }

    fn total_mem(&self) -> Result<usize, BackendError> {
        Ok(self.st.capacity)
    }

    fn new_stream(&self, label: &str) -> Result<Arc<dyn Stream>, BackendError> {
        Ok(Arc::new(EmuStream::new(&self.st, label)?))
    }

    fn new_event(&self) -> Result<Arc<dyn crate::driver::Event>, BackendError> {
        self.st.stats.count_event();
        Ok(Arc::new(stream::EmuEvent::new()))
    }

    fn malloc(&self, size: usize) -> Result<DevPtr, BackendError> {
        let what = || {
            format!(
                "cuMemAlloc of {size} bytes on {} (emulated): CUDA_ERROR_OUT_OF_MEMORY",
                self.st.name
            )
        };
        let layout = Layout::from_size_align(size.max(1), DEV_ALIGN).map_err(|_| oom(what()))?;
        let mut a = self
            .st
            .allocs
            .lock()
            .map_err(|_| BackendError::Device("emulator: allocation table poisoned".into()))?;
        if a.1.saturating_add(layout.size()) > self.st.capacity {
            return Err(oom(what()));
        }
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(oom(what()));
        }
        // SAFETY: `p` points to `layout.size()` writable bytes.
        unsafe { std::ptr::write_bytes(p, 0xA5, layout.size()) };
        a.0.insert(p as u64, layout);
        a.1 += layout.size();
        a.2 = a.2.max(a.1);
        drop(a);
        if let Ok(mut w) = world().lock() {
            w.tracker.add_alloc(p as u64, layout.size() as u64);
        }
        Ok(p as u64)
    }

    unsafe fn free(&self, ptr: DevPtr) {
        let Ok(mut a) = self.st.allocs.lock() else {
            return;
        };
        if let Some(layout) = a.0.remove(&ptr) {
            a.1 -= layout.size();
            if let Ok(mut w) = world().lock() {
                w.tracker.remove_alloc(ptr);
            }
            // SAFETY: `ptr` was allocated with `layout` in `malloc` and is
            // removed from the table, so it is freed once.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }

    fn host_alloc(&self, size: usize) -> Result<*mut u8, BackendError> {
        let layout = Layout::from_size_align(size.max(1), HOST_ALIGN)
            .map_err(|_| oom(format!("{size} bytes of pinned memory")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(oom(format!("{size} bytes of pinned memory")));
        }
        if let Ok(mut r) = host_ranges().lock() {
            r.insert(p as usize, layout.size());
        }
        Ok(p)
    }

    unsafe fn host_free(&self, ptr: *mut u8) {
        let len = host_ranges()
            .lock()
            .ok()
            .and_then(|mut r| r.remove(&(ptr as usize)));
        if let Some(len) = len {
            if let Ok(layout) = Layout::from_size_align(len, HOST_ALIGN) {
                // SAFETY: allocated in `host_alloc` with this layout (the
                // recorded length is the layout's size); removed above, so
                // freed once.
                unsafe { std::alloc::dealloc(ptr, layout) };
            }
        }
    }

    fn host_register_supported(&self) -> bool {
        true
    }

    unsafe fn host_register(
        &self,
        ptr: *const u8,
        len: usize,
        _read_only: bool,
    ) -> Result<(), BackendError> {
        let mut r = host_ranges()
            .lock()
            .map_err(|_| BackendError::Device("emulator: host range table poisoned".into()))?;
        let p = ptr as usize;
        let overlaps = r
            .range(..p.saturating_add(len))
            .next_back()
            .is_some_and(|(&s, &l)| s + l > p);
        if overlaps {
            return Err(BackendError::Device(format!(
                "cuMemHostRegister of {len} bytes (emulated): CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
            )));
        }
        r.insert(p, len);
        Ok(())
    }

    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        is_page_locked(ptr, len)
    }

    unsafe fn host_unregister(&self, ptr: *const u8) {
        if let Ok(mut r) = host_ranges().lock() {
            r.remove(&(ptr as usize));
        }
    }

    fn compute_capability(&self) -> Result<(u32, u32), BackendError> {
        Ok(config().cc)
    }

    fn driver_version(&self) -> Result<i32, BackendError> {
        Ok(config().driver_version)
    }

    fn multiprocessor_count(&self) -> Result<u32, BackendError> {
        Ok(EMULATED_SMS)
    }

    fn set_max_dynamic_shared(&self, f: &Function, bytes: u32) -> Result<(), BackendError> {
        crate::emu_kernels::set_max_dynamic_shared_bytes(f.name, bytes)
            .map_err(|e| BackendError::Device(format!("emulator: {e}")))
    }

    fn load_module(
        &self,
        image: &crate::driver::ModuleImage,
        names: &[&'static str],
    ) -> Result<Vec<Function>, BackendError> {
        let c = config();
        let jit = c
            .ptx_isa_max
            .or_else(|| crate::ptx_isa::max_isa_for_driver(c.driver_version));
        module::check(image, names, c.cc, c.driver_version, jit)?;
        if let Ok(mut l) = self.st.loaded.lock() {
            l.push(image.to_string());
        }
        Ok(names
            .iter()
            .map(|&name| Function {
                name,
                handle: Box::new(()),
            })
            .collect())
    }

    fn can_access_peer(&self, peer: &dyn Device) -> Result<bool, BackendError> {
        Ok(config().peer
            && peer
                .as_any()
                .downcast_ref::<EmuDevice>()
                .is_some_and(|p| p.st.ordinal != self.st.ordinal))
    }

    fn enable_peer_access(&self, peer: &dyn Device) -> Result<(), BackendError> {
        if !self.can_access_peer(peer)? {
            return Err(BackendError::Device(format!(
                "cuCtxEnablePeerAccess on {} (emulated): CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
                self.st.name
            )));
        }
        let Some(p) = peer.as_any().downcast_ref::<EmuDevice>() else {
            return Ok(()); // unreachable: can_access_peer checked the kind
        };
        let mut peers = self
            .st
            .peers
            .lock()
            .map_err(|_| BackendError::Device("emulator: peer table poisoned".into()))?;
        if !peers.contains(&p.st.ordinal) {
            peers.push(p.st.ordinal);
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn planted_drop_wait(&self, kind: &str) -> bool {
        let drop = config().drop_wait.as_deref() == Some(kind);
        if drop {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            SCOPE.with(|s| {
                if let Some(t) = s.borrow_mut().as_mut() {
                    t.dropped += 1;
                }
            });
        }
        drop
    }
}
