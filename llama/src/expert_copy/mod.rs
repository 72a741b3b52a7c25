//! The selective expert copy policy: the scheduler's copy hook, in user
//! code (as upstream llama.cpp moved it out of `ggml-backend` into
//! `llama_context`).
//!
//! When a split on a device reads an expert tensor (`[k, m, n_expert]`)
//! that lives in host memory, and every consumer of it in the split is a
//! `mul_mat_id`, only the experts named by the consumers' ids are needed.
//! The policy reads those ids (once per ids tensor per graph: gate, up and
//! down share them), validates every id, and copies each run of consecutive
//! used experts with one ranged write, padded by the backend's read
//! overhang. Expert bias tensors (`[n, n_expert]`, gpt-oss) whose every
//! consumer is an `add_id` are handled the same way, by rows: only the
//! biases of the experts named by the `add_id`'s ids are copied, and they
//! are counted with the experts. Anything else is declined and copied
//! whole by the scheduler.

pub mod ids;
pub mod runs;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::{GgmlType, Op, TensorId};
use ggml_sched::{CopyHook, HookCtx, HookError};

use crate::diagnostics;
use runs::copy_ranges;

/// Counters of the policy, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpertCopyStats {
    /// Bytes the policy copied.
    pub bytes: u64,
    /// Bytes the expert inputs offered would have cost copied whole
    /// (also counted when the policy is disabled).
    pub full_bytes: u64,
    /// Experts copied.
    pub experts_copied: u64,
    /// Experts a full copy would have moved.
    pub experts_full: u64,
    /// Host-weight inputs offered to the policy.
    pub inputs: u64,
    /// Inputs declined (copied whole by the scheduler).
    pub declined: u64,
}

impl ExpertCopyStats {
    /// `self - base`, field by field.
    pub fn since(&self, base: &ExpertCopyStats) -> ExpertCopyStats {
        ExpertCopyStats {
            bytes: self.bytes - base.bytes,
            full_bytes: self.full_bytes - base.full_bytes,
            experts_copied: self.experts_copied - base.experts_copied,
            experts_full: self.experts_full - base.experts_full,
            inputs: self.inputs - base.inputs,
            declined: self.declined - base.declined,
        }
    }
}

/// A function applied to every ids tensor the policy reads, before
/// validation: lets tests poison ids to prove they are checked.
pub type IdFilter = Box<dyn FnMut(&mut [i32]) + Send>;

/// State shared between the policy (owned by the scheduler) and its context.
#[derive(Default)]
pub struct PolicyShared {
    /// Counters.
    pub stats: ExpertCopyStats,
    /// Test hook on the ids read.
    pub id_filter: Option<IdFilter>,
    /// When false the policy declines everything (full copies).
    pub disabled: bool,
    /// Expert bytes uploaded to each device backend (by name), by every
    /// path of the hook: selective copies, cache uploads, prefetch and
    /// prediction (per-device `h2d_bytes_experts`).
    pub bytes_by_backend: std::collections::BTreeMap<String, u64>,
}

impl PolicyShared {
    /// A copy of the counters now.
    pub fn counters(&self) -> ExpertCopyStats {
        self.stats
    }

    /// Count `bytes` of experts uploaded to `backend`.
    pub fn add_backend_bytes(&mut self, backend: &str, bytes: u64) {
        if bytes > 0 {
            *self
                .bytes_by_backend
                .entry(backend.to_string())
                .or_default() += bytes;
        }
    }
}

/// The expert copy policy.
pub struct ExpertCopyPolicy {
    shared: Arc<Mutex<PolicyShared>>,
    /// used-expert masks per ids tensor, for the current graph
    used: HashMap<TensorId, Vec<bool>>,
}

impl ExpertCopyPolicy {
    /// A policy reporting into `shared`.
    pub fn new(shared: Arc<Mutex<PolicyShared>>) -> ExpertCopyPolicy {
        ExpertCopyPolicy {
            shared,
            used: HashMap::new(),
        }
    }

    fn shared(&self) -> parking_lot::MutexGuard<'_, PolicyShared> {
        self.shared.lock()
    }

    /// Which experts the ids tensor `ids` names, validated against `n_expert`.
    fn used_experts(
        &mut self,
        cx: &HookCtx<'_>,
        ids: TensorId,
        n_expert: usize,
    ) -> Result<Vec<bool>, HookError> {
        if let Some(u) = self.used.get(&ids) {
            if u.len() == n_expert {
                return Ok(u.clone());
            }
        }
        let g = cx.graph();
        let t = g.tensor(ids);
        if t.ty != GgmlType::I32 {
            return Err(HookError::msg(format!(
                "expert ids '{}' are {}, not i32",
                t.name, t.ty
            )));
        }
        let raw = cx.read_ids(ids)?;
        diagnostics::count_id_read(cx.backend());
        let mut vals = Vec::with_capacity(t.nelements().max(0) as usize);
        for i1 in 0..t.ne[1].max(0) as usize {
            for i0 in 0..t.ne[0].max(0) as usize {
                let o = i0 * t.nb[0] + i1 * t.nb[1];
                let b = raw.get(o..o + 4).ok_or_else(|| {
                    HookError::msg(format!("expert ids '{}' shorter than their shape", t.name))
                })?;
                vals.push(i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
        }
        if let Some(f) = self.shared().id_filter.as_mut() {
            f(&mut vals);
        }
        let mut used = vec![false; n_expert];
        for (i, &id) in vals.iter().enumerate() {
            used[ids::expert_index(id, i, n_expert, &t.name).map_err(HookError::msg)?] = true;
        }
        self.used.insert(ids, used.clone());
        Ok(used)
    }
}

impl ExpertCopyPolicy {
    /// The experts the consumers of `cx`'s input need (each ids tensor read
    /// once per graph, shared with [`CopyHook::copy_input`]), or `None` when
    /// the input is not an expert tensor read only by `mul_mat_id`.
    pub fn used_for_input(&mut self, cx: &HookCtx<'_>) -> Result<Option<Vec<bool>>, HookError> {
        let g = cx.graph();
        let src = g.tensor(cx.src());
        let n_expert = src.ne[2].max(0) as usize;
        let consumers = cx.consumers();
        let expert_matmul = n_expert > 1
            && src.ne[3] == 1
            && !consumers.is_empty()
            && consumers.iter().all(|&c| {
                let t = g.tensor(c);
                t.op == Op::MulMatId && t.src[0] == cx.dst()
            });
        if !expert_matmul {
            return Ok(None);
        }
        let mut used = vec![false; n_expert];
        for &c in &consumers {
            let ids = g.tensor(c).src[2];
            for (u, x) in used.iter_mut().zip(self.used_experts(cx, ids, n_expert)?) {
                *u |= x;
            }
        }
        Ok(Some(used))
    }
}

impl CopyHook for ExpertCopyPolicy {
    fn begin_graph(&mut self) {
        self.used.clear();
    }

    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        let g = cx.graph();
        let src = g.tensor(cx.src());
        let full = cx.nbytes() as u64;
        let consumers = cx.consumers();
        let all_consumers = |op: Op, slot: usize| {
            !consumers.is_empty()
                && consumers.iter().all(|&c| {
                    let t = g.tensor(c);
                    t.op == op && t.src[slot] == cx.dst()
                })
        };
        // (experts, bytes between experts) of an expert matmul weight
        // `[k, m, n_expert]` or an expert bias `[n, n_expert]` read by add_id
        // (bias rows are counted in bytes, not as experts)
        let (n_expert, expert_bytes, expert_matmul, bias) = if src.ne[3] == 1
            && src.ne[2] > 1
            && all_consumers(Op::MulMatId, 0)
        {
            (src.ne[2] as usize, src.nb[2], true, false)
        } else if src.ne[3] == 1 && src.ne[2] == 1 && src.ne[1] > 1 && all_consumers(Op::AddId, 1) {
            (src.ne[1] as usize, src.nb[1], true, true)
        } else {
            (0, 0, false, false)
        };
        let disabled = {
            let mut s = self.shared();
            s.stats.inputs += 1;
            if expert_matmul {
                s.stats.full_bytes += full;
                if !bias {
                    s.stats.experts_full += n_expert as u64;
                }
            }
            if s.disabled || !expert_matmul {
                s.stats.declined += 1;
            }
            s.disabled
        };
        if disabled || !expert_matmul {
            return Ok(false);
        }
        let mut used = vec![false; n_expert];
        for &c in &consumers {
            let ids = g.tensor(c).src[2];
            for (u, x) in used.iter_mut().zip(self.used_experts(cx, ids, n_expert)?) {
                *u |= x;
            }
        }
        let ranges = copy_ranges(&used, expert_bytes, cx.nbytes(), cx.read_overhang());
        for r in &ranges {
            cx.copy_range(r.start, r.len())?;
        }
        let copied = cx.bytes_written();
        let mut s = self.shared();
        s.stats.bytes += copied;
        s.add_backend_bytes(cx.backend().name(), copied);
        if !bias {
            s.stats.experts_copied += used.iter().filter(|&&u| u).count() as u64;
        }
        Ok(true)
    }
}
