//! Routing traces: the expert ids a model's routers picked, ubatch by
//! ubatch, in a small versioned binary file, with a writer and a reader.
//! A trace replays through the cache's own code ([`crate::moe_cache::cache::replay`]) to
//! tell what a cache of any size and policy would have done.
//!
//! # Format (version 1, little-endian)
//!
//! ```text
//! header
//!   magic          8 bytes  "MOETRACE"
//!   version        u32      1
//!   name_len       u32      then name_len bytes of UTF-8: the model's name
//!   n_layer        u32      decoder layers of the model
//!   n_expert       u32      experts per MoE layer
//!   n_expert_used  u32      experts the router picks per token
//!   n_moe          u32      MoE layers recorded, then per MoE layer:
//!     layer        u32        its index in the model (ascending, < n_layer)
//!     3 roles      (gate, up, down) each:
//!       type       u32          GGUF type id of the expert tensor
//!       ne0, ne1   i64, i64     its first two dimensions
//!       bytes      u64          bytes of one expert (nb[2])
//! records, until the end of the file, one per ubatch:
//!   n_tokens       u32      tokens of the ubatch (> 0)
//!   per MoE layer in header order:
//!     n_rows       u32      tokens the layer routed (<= n_tokens: the last
//!                           layer computes only the tokens whose logits
//!                           are wanted)
//!     ids          n_rows * n_expert_used expert ids in the router's
//!                  order, each of `w` bytes: w = 1 when n_expert <= 256,
//!                  2 when <= 65536, else 4
//! ```
//!
//! A record's size follows from the header, so a file cut anywhere but at
//! a record's end is detected. Every error names the byte offset where
//! reading failed.

pub mod forced;
pub mod synthetic;

use std::io::Write;

use ggml_core::GgmlType;
use thiserror::Error;

use crate::model::Model;
use crate::moe_cache::cache::layout::{group_shapes, GroupShape, RoleShape};
use crate::moe_cache::cache::replay::TraceUbatch;

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"MOETRACE";
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;

/// A trace that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("expert trace: {what} at byte offset {offset}")]
pub struct TraceError {
    /// Byte offset in the file where reading failed.
    pub offset: u64,
    /// What was wrong.
    pub what: String,
}

/// A MoE layer of a trace: its index and expert tensor shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceLayer {
    /// Layer index in the model.
    pub layer: u32,
    /// Gate, up and down expert tensors.
    pub roles: [RoleShape; 3],
}

impl TraceLayer {
    /// Bytes of one expert of this layer over the three roles.
    pub fn expert_bytes(&self) -> u64 {
        self.roles.iter().map(|r| r.expert_bytes as u64).sum()
    }
}

/// What a trace says about the model it was recorded on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceHeader {
    /// The model's name (`general.name`, or its file's).
    pub model: String,
    /// Decoder layers.
    pub n_layer: u32,
    /// Experts per MoE layer.
    pub n_expert: u32,
    /// Experts picked per token.
    pub n_expert_used: u32,
    /// The MoE layers, ascending.
    pub layers: Vec<TraceLayer>,
}

impl TraceHeader {
    /// The header for `model`: every MoE layer, wherever its experts live.
    pub fn from_model(model: &Model) -> TraceHeader {
        let hp = &model.hparams;
        let layers = (0..model.layers.len())
            .filter_map(|il| {
                let m = model.layers[il].moe()?;
                let roles = [m.gate_exps, m.up_exps, m.down_exps].map(|w| {
                    let w = model.weight(w);
                    let t = ggml_core::Tensor::new(w.ty, w.ne);
                    RoleShape {
                        ty: w.ty,
                        ne01: [w.ne[0], w.ne[1]],
                        expert_bytes: t.nb[2],
                    }
                });
                Some(TraceLayer {
                    layer: il as u32,
                    roles,
                })
            })
            .collect();
        TraceHeader {
            model: model
                .file
                .get_str("general.name")
                .ok()
                .flatten()
                .unwrap_or(hp.arch.name())
                .to_string(),
            n_layer: hp.n_layer as u32,
            n_expert: hp.n_expert as u32,
            n_expert_used: hp.n_expert_used as u32,
            layers,
        }
    }

    /// The cache's groups for these layers, as the live cache forms them
    /// when every expert is in host memory (`--cpu-moe`).
    pub fn groups(&self) -> Vec<GroupShape> {
        group_shapes(
            self.layers
                .iter()
                .map(|l| (l.layer, l.roles, self.n_expert)),
            self.n_expert_used,
        )
    }

    /// Bytes of one stored id.
    pub fn id_width(&self) -> usize {
        match self.n_expert {
            0..=256 => 1,
            257..=65536 => 2,
            _ => 4,
        }
    }

    /// `n_layer` / `n_expert` / `n_expert_used` in words, for messages.
    pub fn shape(&self) -> String {
        format!(
            "{} layers, {} experts ({} used)",
            self.n_layer, self.n_expert, self.n_expert_used
        )
    }
}

/// A whole trace: the header and one record per ubatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The model's shape.
    pub header: TraceHeader,
    /// Ubatches in order; `layers` hold every MoE layer of the header.
    pub ubatches: Vec<TraceUbatch>,
}

impl Trace {
    /// An empty trace for `header`.
    pub fn new(header: TraceHeader) -> Trace {
        Trace {
            header,
            ubatches: Vec::new(),
        }
    }

    /// Append a ubatch of `n_tokens` tokens from the per-layer ids
    /// [`crate::Context::last_expert_ids`] returns (one entry per model
    /// layer, empty for dense ones).
    pub fn push_ubatch(&mut self, n_tokens: usize, ids: &[Vec<i32>]) -> Result<(), String> {
        let h = &self.header;
        let want = n_tokens * h.n_expert_used as usize;
        let mut layers = Vec::with_capacity(h.layers.len());
        for l in &h.layers {
            let v = ids.get(l.layer as usize).ok_or_else(|| {
                format!("expert trace: no ids for layer {} in the ubatch", l.layer)
            })?;
            if v.len() > want || v.len() % (h.n_expert_used.max(1) as usize) != 0 {
                return Err(format!(
                    "expert trace: layer {} has {} ids, expected a multiple of {2} up to {want} ({n_tokens} tokens x {2} used)",
                    l.layer,
                    v.len(),
                    h.n_expert_used
                ));
            }
            let mut out = Vec::with_capacity(want);
            for &e in v {
                if e < 0 || e as u32 >= h.n_expert {
                    return Err(format!(
                        "expert trace: layer {} picked expert {e}, outside 0..{}",
                        l.layer, h.n_expert
                    ));
                }
                out.push(e as u32);
            }
            layers.push((l.layer, out));
        }
        self.ubatches.push(TraceUbatch {
            n_tokens: n_tokens as u32,
            layers,
        });
        Ok(())
    }

    /// A trace of one-token ubatches: `tokens[t][l]` holds token `t`'s ids
    /// at the header's `l`-th MoE layer (as
    /// [`synthetic::generate`] returns them). Ids are not checked.
    pub fn from_tokens(header: TraceHeader, tokens: &[Vec<Vec<u32>>]) -> Trace {
        let ubatches = tokens
            .iter()
            .map(|tok| TraceUbatch {
                n_tokens: 1,
                layers: header
                    .layers
                    .iter()
                    .zip(tok)
                    .map(|(l, ids)| (l.layer, ids.clone()))
                    .collect(),
            })
            .collect();
        Trace { header, ubatches }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let h = &self.header;
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        for v in [VERSION, h.model.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(h.model.as_bytes());
        for v in [
            h.n_layer,
            h.n_expert,
            h.n_expert_used,
            h.layers.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for l in &h.layers {
            b.extend_from_slice(&l.layer.to_le_bytes());
            for r in &l.roles {
                b.extend_from_slice(&r.ty.id().to_le_bytes());
                b.extend_from_slice(&r.ne01[0].to_le_bytes());
                b.extend_from_slice(&r.ne01[1].to_le_bytes());
                b.extend_from_slice(&(r.expert_bytes as u64).to_le_bytes());
            }
        }
        let w = h.id_width();
        for ub in &self.ubatches {
            b.extend_from_slice(&ub.n_tokens.to_le_bytes());
            for (_, ids) in &ub.layers {
                let rows = ids.len() / h.n_expert_used.max(1) as usize;
                b.extend_from_slice(&(rows as u32).to_le_bytes());
                for &e in ids {
                    b.extend_from_slice(&e.to_le_bytes()[..w]);
                }
            }
        }
        b
    }

    /// Write the file to `w`.
    pub fn write_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        w.write_all(&self.to_bytes())
    }

    /// Read a trace from a file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Trace, TraceError> {
        let mut r = Reader { b: bytes, pos: 0 };
        let magic = r.take(8, "the magic")?;
        if magic != MAGIC {
            return Err(r.err_at(0, "not an expert trace (no MOETRACE magic)".into()));
        }
        let version = r.u32("the version")?;
        if version != VERSION {
            return Err(r.err_at(
                8,
                format!("version {version} is not supported (this build reads {VERSION})"),
            ));
        }
        let name_len = r.u32("the model name's length")? as usize;
        let at = r.pos;
        let name = r.take(name_len, "the model name")?;
        let model = String::from_utf8(name.to_vec())
            .map_err(|_| r.err_at(at, "the model name is not UTF-8".into()))?;
        let n_layer = r.u32("n_layer")?;
        let n_expert = r.u32("n_expert")?;
        let at = r.pos;
        let n_expert_used = r.u32("n_expert_used")?;
        if n_expert_used == 0 || n_expert_used > n_expert {
            return Err(r.err_at(
                at,
                format!("n_expert_used {n_expert_used} is not in 1..={n_expert} (n_expert)"),
            ));
        }
        let at = r.pos;
        let n_moe = r.u32("the number of MoE layers")?;
        if n_moe == 0 || n_moe > n_layer {
            return Err(r.err_at(
                at,
                format!("{n_moe} MoE layers is not in 1..={n_layer} (n_layer)"),
            ));
        }
        let mut layers = Vec::with_capacity(n_moe as usize);
        for _ in 0..n_moe {
            let at = r.pos;
            let layer = r.u32("a MoE layer's index")?;
            if layer >= n_layer || layers.last().is_some_and(|l: &TraceLayer| l.layer >= layer) {
                return Err(r.err_at(
                    at,
                    format!("MoE layer {layer} is out of order or not below n_layer {n_layer}"),
                ));
            }
            let mut roles = Vec::with_capacity(3);
            for _ in 0..3 {
                let at = r.pos;
                let id = r.u32("an expert tensor's type")?;
                let ty = GgmlType::from_id(id)
                    .ok_or_else(|| r.err_at(at, format!("unknown tensor type id {id}")))?;
                let ne0 = r.i64("an expert tensor's ne0")?;
                let ne1 = r.i64("an expert tensor's ne1")?;
                let at = r.pos;
                let eb = r.u64("an expert's bytes")?;
                if eb == 0 || ne0 <= 0 || ne1 <= 0 {
                    return Err(r.err_at(at, "an expert tensor with no bytes".into()));
                }
                roles.push(RoleShape {
                    ty,
                    ne01: [ne0, ne1],
                    expert_bytes: eb as usize,
                });
            }
            layers.push(TraceLayer {
                layer,
                roles: [roles[0], roles[1], roles[2]],
            });
        }
        let header = TraceHeader {
            model,
            n_layer,
            n_expert,
            n_expert_used,
            layers,
        };
        let w = header.id_width();
        let mut ubatches = Vec::new();
        while r.pos < bytes.len() {
            let at = r.pos;
            let n_tokens = r.u32("a ubatch's token count")?;
            if n_tokens == 0 {
                return Err(r.err_at(at, "a ubatch of 0 tokens".into()));
            }
            let mut ls = Vec::with_capacity(header.layers.len());
            for l in &header.layers {
                let at = r.pos;
                let n_rows = r.u32("a layer's token count")?;
                if n_rows > n_tokens {
                    return Err(r.err_at(
                        at,
                        format!(
                            "layer {} routed {n_rows} tokens of a ubatch of {n_tokens}",
                            l.layer
                        ),
                    ));
                }
                let n_ids = n_rows as usize * n_expert_used as usize;
                let raw = r.take(n_ids * w, "a layer's expert ids")?;
                let mut ids = Vec::with_capacity(n_ids);
                for (i, c) in raw.chunks_exact(w).enumerate() {
                    let mut b4 = [0u8; 4];
                    b4[..w].copy_from_slice(c);
                    let e = u32::from_le_bytes(b4);
                    if e >= n_expert {
                        return Err(r.err_at(
                            r.pos - raw.len() + i * w,
                            format!(
                                "expert id {e} of layer {} is not below n_expert {n_expert}",
                                l.layer
                            ),
                        ));
                    }
                    ids.push(e);
                }
                ls.push((l.layer, ids));
            }
            ubatches.push(TraceUbatch {
                n_tokens,
                layers: ls,
            });
        }
        Ok(Trace { header, ubatches })
    }

    /// Read the trace file at `path` (an I/O error names the path).
    pub fn read(path: &std::path::Path) -> Result<Trace, String> {
        let b = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Trace::from_bytes(&b).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Tokens over every ubatch, and over decode ubatches (one token).
    pub fn token_counts(&self) -> (u64, u64) {
        let all = self.ubatches.iter().map(|u| u.n_tokens as u64).sum();
        let dec = self.ubatches.iter().filter(|u| u.n_tokens == 1).count() as u64;
        (all, dec)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err_at(&self, offset: usize, what: String) -> TraceError {
        TraceError {
            offset: offset as u64,
            what,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], TraceError> {
        if self.b.len() - self.pos < n {
            return Err(self.err_at(
                self.pos,
                format!(
                    "truncated: {what} needs {n} bytes, {} left",
                    self.b.len() - self.pos
                ),
            ));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, TraceError> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, TraceError> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }

    fn i64(&mut self, what: &str) -> Result<i64, TraceError> {
        Ok(self.u64(what)? as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(b: usize) -> RoleShape {
        RoleShape {
            ty: GgmlType::F16,
            ne01: [8, 4],
            expert_bytes: b,
        }
    }

    fn sample() -> Trace {
        let header = TraceHeader {
            model: "tiny".into(),
            n_layer: 3,
            n_expert: 6,
            n_expert_used: 2,
            layers: vec![
                TraceLayer {
                    layer: 0,
                    roles: [role(64); 3],
                },
                TraceLayer {
                    layer: 2,
                    roles: [role(64); 3],
                },
            ],
        };
        let mut t = Trace::new(header);
        let ids = |n: usize, s: i32| -> Vec<Vec<i32>> {
            let v: Vec<i32> = (0..n as i32 * 2).map(|i| (i + s) % 6).collect();
            vec![v.clone(), Vec::new(), v]
        };
        t.push_ubatch(3, &ids(3, 0)).unwrap();
        t.push_ubatch(1, &ids(1, 4)).unwrap();
        t.push_ubatch(1, &ids(1, 1)).unwrap();
        t
    }

    #[test]
    fn round_trips() {
        let t = sample();
        let b = t.to_bytes();
        assert_eq!(Trace::from_bytes(&b), Ok(t.clone()));
        assert_eq!(t.token_counts(), (5, 2));
        assert_eq!(t.header.groups().len(), 1);
        assert_eq!(t.header.groups()[0].layers, vec![0, 2]);
    }

    #[test]
    fn every_truncation_is_an_error_with_its_offset() {
        let b = sample().to_bytes();
        // the record boundaries are the only valid cut points after the header
        let rec = |n: usize| 4 + 2 * (4 + n * 2);
        let header_len = b.len() - rec(3) - 2 * rec(1);
        let valid = [
            header_len,
            header_len + rec(3),
            header_len + rec(3) + rec(1),
            b.len(),
        ];
        for cut in 0..b.len() {
            let r = Trace::from_bytes(&b[..cut]);
            if valid.contains(&cut) {
                assert!(r.is_ok(), "cut {cut}: {r:?}");
            } else {
                let e = r.expect_err("truncated");
                assert!(e.offset as usize <= cut, "cut {cut}: {e}");
                assert!(e.to_string().contains("byte offset"), "{e}");
            }
        }
    }

    #[test]
    fn corruptions_are_errors_never_panics() {
        let b = sample().to_bytes();
        let mut seed = 0x9e3779b97f4a7c15u64;
        for _ in 0..4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut c = b.clone();
            let i = (seed % c.len() as u64) as usize;
            c[i] ^= (seed >> 32) as u8 | 1;
            // either a clean read or an error with an offset in the file
            if let Err(e) = Trace::from_bytes(&c) {
                assert!(e.offset as usize <= c.len(), "{e}");
            }
        }
        let e = Trace::from_bytes(b"NOTATRACE___").unwrap_err();
        assert_eq!(e.offset, 0);
        let mut v = b.clone();
        v[8] = 9;
        assert!(Trace::from_bytes(&v)
            .unwrap_err()
            .to_string()
            .contains("version 9"));
    }

    #[test]
    fn bad_ids_are_refused_when_recording() {
        let mut t = sample();
        let e = t
            .push_ubatch(1, &[vec![0, 9], vec![], vec![0, 1]])
            .unwrap_err();
        assert!(e.contains("expert 9"), "{e}");
        let e = t
            .push_ubatch(1, &[vec![0], vec![], vec![0, 1]])
            .unwrap_err();
        assert!(e.contains("has 1 ids"), "{e}");
        // the last layer may route fewer tokens (only the output rows)
        t.push_ubatch(2, &[vec![0, 1, 2, 3], vec![], vec![0, 1]])
            .unwrap();
        let b = t.to_bytes();
        assert_eq!(Trace::from_bytes(&b).unwrap(), t);
    }
}
