//! Capture and replay of each split's kernel sequence (CUDA graphs).
//!
//! `compute` plans a split's launches first ([`Planned`]: kernel, geometry,
//! parameters, and the device ranges they touch) and asks [`GraphCache`]
//! what to do with them, keyed by the split's node list:
//! - a plan seen for the first time (or different in more than pointers
//!   from the last one of the same key) runs launch by launch
//!   ([`Decision::Direct`]) and is kept;
//! - the same plan a second time (pointers aside) is captured as a graph
//!   through the driver interface and the graph launched
//!   ([`Decision::Capture`]);
//! - the same plan again replays that graph, one launch
//!   ([`Decision::Replay`]);
//! - a plan that differs from the graph's only in a few pointers (the KV
//!   store's destination moves one cell per token) updates those launches'
//!   parameters in the graph (`cuGraphExecKernelNodeSetParams`) and replays
//!   it ([`Decision::Update`]), as llama.cpp updates its graphs.
//!
//! Comparing whole plans is what makes a replay correct: the graph runs the
//! exact launches the split would have issued, pointers included. One-off
//! plans (prompt ubatches of varying sizes) are never captured, since only
//! a repeated one is. Plans of one launch run directly (nothing to gain).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use ggml_core::TensorId;

use crate::driver::{Access, GraphExec, KernelArg, LaunchDims};
use crate::kernels::Kernel;

/// Keys kept at most; the cache starts over beyond that.
const MAX_ENTRIES: usize = 512;

/// One planned launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Planned {
    pub kernel: Kernel,
    pub dims: LaunchDims,
    pub args: Vec<KernelArg>,
    /// The device ranges the launch reads and writes (hazard detector).
    pub access: Vec<Access>,
}

/// What to do with a split's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Launch each kernel.
    Direct,
    /// Capture the launches as a graph, store it with
    /// [`GraphCache::set_exec`], and launch it.
    Capture,
    /// Launch the stored graph ([`GraphCache::exec`]).
    Replay,
    /// Update these launches of the stored graph (only their pointers
    /// moved: a KV store at the next cell, say), then launch it; the plan
    /// is stored with [`GraphCache::set_plan`] once updated.
    Update(Vec<usize>),
}

/// Whether two launches differ only in pointer values (same kernel,
/// geometry and every other parameter).
fn only_pointers_differ(a: &Planned, b: &Planned) -> bool {
    a.kernel == b.kernel
        && a.dims == b.dims
        && a.args.len() == b.args.len()
        && a.args.iter().zip(&b.args).all(|(x, y)| match (x, y) {
            (KernelArg::Ptr(_), KernelArg::Ptr(_)) => true,
            _ => x == y,
        })
}

struct Entry {
    plan: Vec<Planned>,
    exec: Option<Box<dyn GraphExec>>,
}

/// The captured graphs of one backend, by split.
pub(crate) struct GraphCache {
    enabled: bool,
    entries: HashMap<u64, Entry>,
}

impl GraphCache {
    /// An empty cache; disabled by `GGML_CUDA_DISABLE_GRAPHS=1` (as in
    /// llama.cpp).
    pub fn new() -> GraphCache {
        let disabled = std::env::var("GGML_CUDA_DISABLE_GRAPHS").is_ok_and(|v| v == "1");
        GraphCache {
            enabled: !disabled,
            entries: HashMap::new(),
        }
    }

    /// The key of a split: its node list.
    pub fn key(nodes: &[TensorId]) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        nodes.hash(&mut h);
        h.finish()
    }

    /// What to do with `plan`, the launches of the split keyed `key`.
    pub fn decide(&mut self, key: u64, plan: &[Planned]) -> Decision {
        if !self.enabled || plan.len() < 2 {
            return Decision::Direct;
        }
        if let Some(e) = self.entries.get_mut(&key) {
            if e.plan == plan {
                return if e.exec.is_some() {
                    Decision::Replay
                } else {
                    Decision::Capture
                };
            }
            let same_shape = e.plan.len() == plan.len()
                && e.plan
                    .iter()
                    .zip(plan)
                    .all(|(a, b)| only_pointers_differ(a, b));
            if same_shape {
                if e.exec.is_some() {
                    let moved: Vec<usize> =
                        (0..plan.len()).filter(|&i| e.plan[i] != plan[i]).collect();
                    // a few moved pointers: update those nodes
                    if moved.len() * 4 <= plan.len() {
                        return Decision::Update(moved);
                    }
                }
                // the same split with its shapes: (re)capture it
                e.plan = plan.to_vec();
                e.exec = None;
                return Decision::Capture;
            }
            e.plan = plan.to_vec();
            e.exec = None;
            return Decision::Direct;
        }
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(
            key,
            Entry {
                plan: plan.to_vec(),
                exec: None,
            },
        );
        Decision::Direct
    }

    /// Store the graph captured for `key` (after [`Decision::Capture`]).
    pub fn set_exec(&mut self, key: u64, exec: Box<dyn GraphExec>) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.exec = Some(exec);
        }
    }

    /// The graph stored for `key`.
    pub fn exec(&self, key: u64) -> Option<&dyn GraphExec> {
        self.entries.get(&key).and_then(|e| e.exec.as_deref())
    }

    /// The graph stored for `key`, to update.
    pub fn exec_mut(&mut self, key: u64) -> Option<&mut (dyn GraphExec + 'static)> {
        self.entries
            .get_mut(&key)
            .and_then(|e| e.exec.as_deref_mut())
    }

    /// After [`Decision::Update`]: the graph now runs `plan`.
    pub fn set_plan(&mut self, key: u64, plan: &[Planned]) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.plan.clear();
            e.plan.extend_from_slice(plan);
        }
    }

    /// Forget `key` (its graph could not be updated).
    pub fn forget(&mut self, key: u64) {
        self.entries.remove(&key);
    }

    /// Drop every graph (their memory may be about to go).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct G;
    impl GraphExec for G {
        fn n_launches(&self) -> usize {
            2
        }
        unsafe fn set_launch(
            &mut self,
            _i: usize,
            _f: &crate::driver::Function,
            _dims: LaunchDims,
            _args: &[KernelArg],
            _access: &[Access],
        ) -> Result<(), ggml_core::BackendError> {
            Ok(())
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    fn plan(p: u64) -> Vec<Planned> {
        let l = |k| Planned {
            kernel: k,
            dims: LaunchDims {
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_bytes: 0,
            },
            args: vec![KernelArg::Ptr(p), KernelArg::F32(0.5)],
            access: Vec::new(),
        };
        vec![l(Kernel::Binary), l(Kernel::Unary)]
    }

    #[test]
    fn a_repeated_plan_is_captured_then_replayed_and_moved_pointers_update_it() {
        let mut c = GraphCache {
            enabled: true,
            entries: HashMap::new(),
        };
        assert_eq!(c.decide(1, &plan(64)), Decision::Direct);
        assert_eq!(c.decide(1, &plan(64)), Decision::Capture);
        c.set_exec(1, Box::new(G));
        assert_eq!(c.decide(1, &plan(64)), Decision::Replay);
        assert!(c.exec(1).is_some());
        // every pointer moved, shapes kept: captured anew
        assert_eq!(c.decide(1, &plan(128)), Decision::Capture);
        assert!(c.exec(1).is_none());
        c.set_exec(1, Box::new(G));
        assert_eq!(c.decide(1, &plan(128)), Decision::Replay);
        // one launch of the two has a moved pointer: an update of it
        let mut moved = plan(128);
        moved[1].args[0] = KernelArg::Ptr(256);
        // 1 of 2 launches moved is more than a quarter: captured anew
        assert_eq!(c.decide(1, &moved), Decision::Capture);
        let mut long: Vec<Planned> = (0..8).flat_map(|_| plan(64)).collect();
        assert_eq!(c.decide(3, &long), Decision::Direct);
        assert_eq!(c.decide(3, &long), Decision::Capture);
        c.set_exec(3, Box::new(G));
        long[5].args[0] = KernelArg::Ptr(512);
        assert_eq!(c.decide(3, &long), Decision::Update(vec![5]));
        c.set_plan(3, &long);
        assert_eq!(c.decide(3, &long), Decision::Replay);
        // a changed float parameter is not a pointer move
        long[6].args[1] = KernelArg::F32(0.25);
        assert_eq!(c.decide(3, &long), Decision::Direct);
        // one launch: never a graph
        assert_eq!(c.decide(2, &plan(64)[..1]), Decision::Direct);
        assert_eq!(c.decide(2, &plan(64)[..1]), Decision::Direct);
    }
}
