//! The cache in the graph: for a cached layer, `slots = get_rows(slot_map,
//! ids)` on the device, then the experts' `mul_mat_id` reads the banks with
//! the slots. The lookup's result lives in device memory the cache owns,
//! which puts the lookup on the device; its slot map is a host weight, so
//! the scheduler offers it to the copy hook, which fills the banks first.

use ggml_core::{GgmlType, Tensor, TensorId};

use crate::graph::GraphBuilder;

/// The tensors a cached layer's experts read.
#[derive(Clone, Copy, Debug)]
pub struct CachedExperts {
    /// Banks in place of the gate, up and down expert tensors.
    pub banks: [TensorId; 3],
    /// The slot of each selected expert, I32 `[n_used, n_tokens]`.
    pub slots: TensorId,
}

impl GraphBuilder<'_> {
    /// When the expert cache serves layer `il` for this ubatch: the slot
    /// lookup of the router's `selected` ids (`[n_used, n_tokens]`) and
    /// the banks to use instead of the host expert tensors.
    pub fn moe_cache_lookup(&mut self, il: usize, selected: TensorId) -> Option<CachedExperts> {
        let [n_used, nt, ..] = self.g.tensor(selected).ne;
        let layout = self.moe.cache.as_ref()?;
        let cached = layout.layers.get(il)?.is_some();
        let lc = match self.moe.cache_lent {
            true => None,
            false => layout.layer_for(il, nt.max(0) as usize).cloned(),
        };
        let Some(lc) = lc else {
            if cached {
                self.moe.bypassed.push(il as u32);
            }
            return None;
        };
        let mut map = Tensor::new(GgmlType::I32, [1, lc.n_expert as i64, 1, 1]);
        map.name = format!("moe_cache_map-{il}");
        map.flags.weight = true;
        map.data = Some(lc.map.clone());
        let map = self.g.push(map);
        let flat = self.g.reshape(selected, &[n_used * nt, 1]);
        let slots = self.g.get_rows(map, flat);
        self.g.tensor_mut(slots).data = Some(lc.slots.clone());
        self.name(slots, "ffn_moe_slots", Some(il));
        let slots = self.g.reshape(slots, &[n_used, nt]);
        let banks = [0, 1, 2].map(|r| {
            let (data, ty, ne) = &lc.banks[r];
            let mut t = Tensor::new(*ty, *ne);
            t.name = format!(
                "moe_cache_bank_{}-{il}",
                crate::moe_cache::cache::layout::ROLES[r]
            );
            t.flags.weight = true;
            t.data = Some(data.clone());
            self.g.push(t)
        });
        Some(CachedExperts { banks, slots })
    }
}
