//! Forced routing (`--expert-trace-in FILE`): every MoE layer uses a
//! routing trace's expert ids instead of its router's, to measure the
//! offload path (cache, prefetch, hybrid) on real or synthetic routing with
//! any model. The text the model produces is then not the model's.
//!
//! - **Tokens**: the token at position `p` of its sequence takes the ids of
//!   trace token `p mod T` (`T` tokens in the trace), so the routing wraps
//!   around. The trace's tokens are its ubatches' rows in order; where a
//!   layer recorded fewer rows than its ubatch's tokens (the last layer of
//!   a prompt ubatch routes only its output rows, the last ones), the
//!   missing tokens take the previous MoE layer's ids of the same token.
//! - **Layers**: the model's `j`-th MoE layer uses the trace's `j`-th MoE
//!   layer, wrapping when the trace has fewer. The trace must pick as many
//!   experts per token as the model, and its ids must be experts of the
//!   model (`n_expert` of the trace at most the model's).
//! - **Weights** stay the router's: its softmax (or sigmoid) probabilities
//!   at the forced ids, normalised as the model normalises its own.
//! - **Graph** ([`crate::graph::GraphBuilder::moe_select`]): with forced routing, each
//!   MoE layer's selection (`ffn_moe_topk-{il}`) is an I32 input
//!   `[n_used, n_rows]` in place of the router's `top_k`; the context
//!   fills it per ubatch from the rows' positions ([`ForcedRouting::ids`]).
//!   It lives in the device's memory when the model has a device, as a
//!   router's ids would, so no split copies it (the scheduler's look-ahead
//!   stops before a split with copied inputs other than weights; decode
//!   prediction needs it to reach the next slot map). The CPU path of
//!   hybrid experts reads a twin in host memory with the same ids
//!   ([`crate::graph::GraphBuilder::moe_select_host`]), as it read the one input before.

use std::fmt;

use super::Trace;
use crate::model::Model;

/// A trace's routing, per token and MoE layer, ready to force.
pub struct ForcedRouting {
    /// `tokens[t][j]`: trace token `t`'s ids at the trace's `j`-th MoE layer.
    tokens: Vec<Vec<Vec<u32>>>,
    /// Model layer index -> the trace MoE layer it uses.
    layer_map: Vec<Option<usize>>,
    n_used: usize,
    /// The trace's model name and shape, for messages.
    pub source: String,
}

impl fmt::Debug for ForcedRouting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ForcedRouting({} tokens from {})",
            self.tokens.len(),
            self.source
        )
    }
}

impl ForcedRouting {
    /// The routing of `trace` for `model`; an error says why the trace
    /// cannot drive this model.
    pub fn new(trace: &Trace, model: &Model) -> Result<ForcedRouting, String> {
        let h = &trace.header;
        let hp = &model.hparams;
        let n_used = h.n_expert_used as usize;
        if n_used != hp.n_expert_used {
            return Err(format!(
                "the trace picks {n_used} experts per token, the model {}",
                hp.n_expert_used
            ));
        }
        if h.n_expert as usize > hp.n_expert {
            return Err(format!(
                "the trace has {} experts per layer, more than the model's {}",
                h.n_expert, hp.n_expert
            ));
        }
        let n_moe = h.layers.len();
        let tokens = token_rows(trace)?;
        if tokens.is_empty() || n_moe == 0 {
            return Err("the trace holds no token".into());
        }
        let mut j = 0;
        let layer_map = model
            .layers
            .iter()
            .map(|l| {
                l.moe().map(|_| {
                    let m = j % n_moe;
                    j += 1;
                    m
                })
            })
            .collect();
        Ok(ForcedRouting {
            source: format!("{} ({})", h.model, h.shape()),
            tokens,
            layer_map,
            n_used,
        })
    }

    /// Tokens of the trace (positions wrap around at this count).
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// The forced ids of model layer `il` for rows at `positions`, as the
    /// I32 bytes of its input `[n_used, rows]`.
    pub fn ids(&self, il: usize, positions: impl Iterator<Item = i32>) -> Result<Vec<u8>, String> {
        let j = self
            .layer_map
            .get(il)
            .copied()
            .flatten()
            .ok_or_else(|| format!("forced routing: layer {il} is not a MoE layer"))?;
        let mut out = Vec::new();
        for p in positions {
            let t = (p.max(0) as usize) % self.tokens.len();
            for &e in &self.tokens[t][j] {
                out.extend_from_slice(&(e as i32).to_le_bytes());
            }
        }
        Ok(out)
    }

    /// Experts picked per token.
    pub fn n_used(&self) -> usize {
        self.n_used
    }
}

/// The trace's tokens: `out[t][j]`, token `t`'s ids at the trace's `j`-th
/// MoE layer (see the module's documentation for short layers).
fn token_rows(trace: &Trace) -> Result<Vec<Vec<Vec<u32>>>, String> {
    let n_used = trace.header.n_expert_used.max(1) as usize;
    let n_moe = trace.header.layers.len();
    let mut tokens: Vec<Vec<Vec<u32>>> = Vec::new();
    for (u, ub) in trace.ubatches.iter().enumerate() {
        let nt = ub.n_tokens as usize;
        let mut rows: Vec<Vec<Vec<u32>>> = vec![Vec::with_capacity(n_moe); nt];
        for (j, (layer, ids)) in ub.layers.iter().enumerate() {
            let n_rows = ids.len() / n_used;
            // the recorded rows are the ubatch's last ones
            let skip = nt - n_rows.min(nt);
            for (t, row) in rows.iter_mut().enumerate() {
                let v = if t >= skip {
                    ids[(t - skip) * n_used..(t - skip + 1) * n_used].to_vec()
                } else if j > 0 {
                    row[j - 1].clone()
                } else {
                    return Err(format!(
                        "ubatch {u} of the trace: MoE layer {layer} routed {n_rows} of its {nt} tokens (the first MoE layer must route every token)"
                    ));
                };
                row.push(v);
            }
        }
        tokens.extend(rows);
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::cache::layout::RoleShape;
    use crate::moe_cache::cache::replay::TraceUbatch;
    use crate::moe_cache::trace::{TraceHeader, TraceLayer};
    use ggml_core::GgmlType;

    fn trace(n_expert: u32) -> Trace {
        let role = RoleShape {
            ty: GgmlType::F16,
            ne01: [8, 4],
            expert_bytes: 64,
        };
        let header = TraceHeader {
            model: "t".into(),
            n_layer: 2,
            n_expert,
            n_expert_used: 2,
            layers: vec![
                TraceLayer {
                    layer: 0,
                    roles: [role; 3],
                },
                TraceLayer {
                    layer: 1,
                    roles: [role; 3],
                },
            ],
        };
        Trace {
            header,
            ubatches: vec![
                // a prompt ubatch of 3 tokens: the last layer routed 1 row
                TraceUbatch {
                    n_tokens: 3,
                    layers: vec![(0, vec![0, 1, 2, 3, 4, 5]), (1, vec![6, 7])],
                },
                TraceUbatch {
                    n_tokens: 1,
                    layers: vec![(0, vec![1, 0]), (1, vec![3, 2])],
                },
            ],
        }
    }

    fn forced(t: &Trace, layer_map: Vec<Option<usize>>) -> ForcedRouting {
        ForcedRouting {
            tokens: token_rows(t).unwrap(),
            layer_map,
            n_used: 2,
            source: String::new(),
        }
    }

    fn i32s(b: &[u8]) -> Vec<i32> {
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn positions_wrap_and_short_layers_take_the_layer_below() {
        let f = forced(&trace(8), vec![Some(0), Some(1)]);
        assert_eq!(f.n_tokens(), 4);
        assert_eq!(
            i32s(&f.ids(0, 0..5).unwrap()),
            vec![0, 1, 2, 3, 4, 5, 1, 0, 0, 1]
        );
        // tokens 0 and 1 of the prompt ubatch: layer 1 copies layer 0
        assert_eq!(
            i32s(&f.ids(1, [0, 1, 2, 3].into_iter()).unwrap()),
            vec![0, 1, 2, 3, 6, 7, 3, 2]
        );
        let e = f.ids(2, 0..1).unwrap_err();
        assert!(e.contains("layer 2"), "{e}");
        // a trace's layers map onto more model layers by wrapping
        let f = forced(&trace(8), vec![None, Some(0), Some(1), Some(0)]);
        assert_eq!(f.ids(3, 0..2).unwrap(), f.ids(1, 0..2).unwrap());
    }

    #[test]
    fn a_first_layer_missing_rows_is_refused() {
        let mut t = trace(8);
        t.ubatches[0].layers[0].1.truncate(2);
        let e = token_rows(&t).unwrap_err();
        assert!(
            e.contains("ubatch 0") && e.contains("routed 1 of its 3"),
            "{e}"
        );
    }
}
