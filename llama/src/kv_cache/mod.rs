//! The KV cache: per layer, K as rows of `n_embd_k_gqa` per cell and V
//! as rows like K (flash attention, and the `mul_mat` path on the CPU and
//! the sim device, which multiply a transposed view of them) or
//! transposed (one row of `kv_size` cells per channel: llama.cpp's layout
//! for the `mul_mat` path, kept on CUDA), F16 by default, on the backend
//! of the layer.
//!
//! As llama.cpp's `-ctk/-ctv`, K and V may be F16, F32, BF16, Q8_0 or
//! Q4_0 ([`KV_CACHE_TYPES`]): the ubatch's F32 rows are quantized as they
//! are stored (`cpy`), the KQ `mul_mat` and `flash_attn_ext` read the
//! quantized rows, and a quantized V needs flash attention (the transposed
//! layout would split blocks). Rows are only ever written and read whole,
//! so a head (and, for MLA, the latent part of a row) must be a whole
//! number of blocks.
//!
//! MLA layers (deepseek2) cache one row of `kv_lora_rank + qk_rope` per
//! cell, the compressed latent and the roped key part, and no V: the value
//! is the latent, read as a view of the K rows.
//!
//! The cache is llama.cpp's unified cache: every cell records the position
//! it holds and the set of sequences it belongs to ([`KvCell`]), so several
//! sequences share one memory. Each token of a ubatch is stored in a cell
//! of its own ([`KvCache::place`]: the first free cell after the last one
//! its sequence holds, so that cells freed by removed sequences are used
//! again and the attended range, [`KvCache::used_max_p1`], stays near the
//! cells in use; the graph writes the rows with `set_rows` at those cells).
//! Attention sums a row's cells in cell order, so a sequence whose cells
//! keep its position order gets the same bits whatever else the cache
//! holds, and wherever its cells sit. The attention mask is built per token
//! from the cells (same sequence, position not after the token's), and a
//! sequence is removed, copied or kept by position range
//! ([`KvCache::seq_rm`], [`KvCache::seq_cp`], [`KvCache::seq_keep`]).

pub mod rotation;

use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, GgmlType, Graph, TensorData};

use crate::error::{LlamaError, Result};
use crate::model::Model;

/// One layer's cache memory.
#[derive(Clone, Debug)]
pub struct LayerKv {
    /// K: `[n_embd_k_gqa, size]`.
    pub k: TensorData,
    /// V: `[size, n_embd_v_gqa]` when `v_trans`, else `[n_embd_v_gqa, size]`;
    /// `None` for MLA, whose value is the first `n_embd_v_gqa` values of each K row.
    pub v: Option<TensorData>,
    /// Whether attention is one fused `flash_attn_ext` (V stored as rows).
    pub flash_attn: bool,
    /// Whether V is stored transposed, one row per channel (llama.cpp's
    /// layout for the `mul_mat` path). Without flash attention, a layer
    /// whose backend multiplies a transposed view directly (the CPU and
    /// the sim device) keeps V as rows instead: its kernel sums each output
    /// over the cells in order, so a sequence's attention does not depend
    /// on where its cells sit among other sequences' (see `ggml-core`'s
    /// `matmul/transposed.rs`); other backends (CUDA) keep the transposed
    /// layout. MLA caches (no V) use the flag the same way for the latent
    /// rows they read as V.
    pub v_trans: bool,
    /// Element type of K.
    pub ty: GgmlType,
    /// Element type of V (llama.cpp's `type_v`; usually `ty`).
    pub ty_v: GgmlType,
    /// Cells.
    pub size: usize,
    n_embd_k_gqa: usize,
    n_embd_v_gqa: usize,
}

impl LayerKv {
    /// Shape of the K tensor.
    pub fn k_ne(&self) -> [i64; 4] {
        [self.n_embd_k_gqa as i64, self.size as i64, 1, 1]
    }
    /// Bytes of this layer's K and V memory.
    pub fn nbytes(&self) -> usize {
        let k = self.ty.row_size(self.n_embd_k_gqa as u64).unwrap_or(0) * self.size;
        let v = if self.v.is_some() {
            self.ty_v.row_size(self.n_embd_v_gqa as u64).unwrap_or(0) * self.size
        } else {
            0
        };
        k + v
    }

    /// Shape of the V tensor.
    pub fn v_ne(&self) -> [i64; 4] {
        if self.v_trans {
            [self.size as i64, self.n_embd_v_gqa as i64, 1, 1]
        } else {
            [self.n_embd_v_gqa as i64, self.size as i64, 1, 1]
        }
    }
}

/// The element types a KV cache holds (llama.cpp's `-ctk/-ctv` types that
/// exist here), F16 the default.
pub const KV_CACHE_TYPES: [GgmlType; 5] = [
    GgmlType::F16,
    GgmlType::F32,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
];

/// Check K and V cache types against the model and the attention path, as
/// llama.cpp does: known types, a quantized V only with flash attention,
/// heads a whole number of blocks (MLA: its latent and whole rows, and a
/// quantized K only with flash attention, because its V is read from the
/// K rows).
pub fn check_types(
    hp: &crate::hparams::HParams,
    ty: GgmlType,
    ty_v: GgmlType,
    flash_attn: bool,
) -> Result<()> {
    let names = || {
        KV_CACHE_TYPES
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (what, t) in [("K", ty), ("V", ty_v)] {
        if !KV_CACHE_TYPES.contains(&t) {
            return Err(LlamaError::Invalid(format!(
                "{what} cache type {t} is not supported (one of {})",
                names()
            )));
        }
    }
    let invalid = |m: String| Err(LlamaError::Invalid(m));
    let divides = |t: GgmlType, n: usize| n.is_multiple_of(t.blck_size());
    if hp.is_mla() {
        let dk = hp.n_embd_k_gqa();
        if ty.is_quantized() && !flash_attn {
            return invalid(format!(
                "K cache type {ty} on an MLA model ({}) requires flash attention (-fa on): its V is read from the K rows",
                hp.arch.name()
            ));
        }
        for (what, n) in [("the K row", dk), ("kv_lora_rank", hp.n_lora_kv)] {
            if !divides(ty, n) {
                return invalid(format!(
                    "K cache type {ty} with block size {} does not divide {what} = {n}",
                    ty.blck_size()
                ));
            }
        }
        return Ok(());
    }
    if ty_v.is_quantized() && !flash_attn {
        return invalid(format!(
            "V cache quantization requires flash attention (-fa on): V cache type {ty_v}"
        ));
    }
    if !divides(ty, hp.n_embd_head_k) {
        return invalid(format!(
            "K cache type {ty} with block size {} does not divide n_embd_head_k = {}",
            ty.blck_size(),
            hp.n_embd_head_k
        ));
    }
    if !divides(ty_v, hp.n_embd_head_v) {
        return invalid(format!(
            "V cache type {ty_v} with block size {} does not divide n_embd_head_v = {}",
            ty_v.blck_size(),
            hp.n_embd_head_v
        ));
    }
    Ok(())
}

/// Whether backend `be` can store F32 rows of `n` elements into a cache of
/// `ty` (asks its `supports_op` about that very `set_rows`).
fn can_store(be: &dyn Backend, ty: GgmlType, n: usize) -> bool {
    let mut g = Graph::new();
    let src = g.new_tensor(GgmlType::F32, &[n as i64, 1]);
    let dst = g.new_tensor(ty, &[n as i64, 2]);
    let idx = g.new_tensor(GgmlType::I64, &[1]);
    let c = g.set_rows(dst, src, idx);
    be.supports_op(&g, c)
}

/// Whether `be` multiplies a transposed view of V rows of type `ty` (the
/// `mul_mat` attention path over a V cache stored like K).
fn multiplies_v_rows(be: &dyn Backend, ty: GgmlType) -> bool {
    let mut g = Graph::new();
    let rows = g.new_tensor(ty, &[64, 32]); // [channels, cells]
    let v = g.transpose(rows); // [cells, channels]
    let kq = g.new_tensor(GgmlType::F32, &[32, 2]);
    let out = g.mul_mat(v, kq);
    be.supports_op(&g, out)
}

/// A sequence id (llama.cpp's `llama_seq_id`): `0..MAX_SEQ`.
pub type SeqId = i32;

/// Cells by which the attended KV span grows (llama.cpp pads `n_kv` too).
pub const KV_PAD: usize = 32;

/// Sequences one cache can hold (a cell's sequence set is a 64-bit mask).
pub const MAX_SEQ: usize = 64;

/// What one cache cell holds: a position and the sequences that see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvCell {
    /// Position of the token stored here; meaningless when `seq == 0`.
    pub pos: i32,
    /// Bit `s` set: sequence `s` holds this cell. 0 = free.
    pub seq: u64,
}

impl KvCell {
    /// Whether no sequence holds the cell.
    pub fn is_empty(&self) -> bool {
        self.seq == 0
    }
    /// Whether sequence `s` holds the cell.
    pub fn has_seq(&self, s: SeqId) -> bool {
        (0..MAX_SEQ as i32).contains(&s) && self.seq & (1u64 << s) != 0
    }
}

/// The cache of a context: `size` cells shared by up to [`MAX_SEQ`] sequences.
pub struct KvCache {
    /// Per-layer memory.
    pub layers: Vec<LayerKv>,
    /// Cells.
    pub size: usize,
    /// The next position of sequence 0 (the single-sequence API's count of
    /// tokens decoded).
    pub n_past: usize,
    /// llama.cpp's Hadamard rotation of a quantized cache, decided once
    /// when the cache is made ([`rotation`]).
    pub rotation: rotation::Rotation,
    cells: Vec<KvCell>,
}

impl KvCache {
    /// Allocate a cache of `size` cells of `ty` (one of [`KV_CACHE_TYPES`]), each layer on
    /// `device` when the model put that layer there, else on `host`; V laid
    /// out for flash attention when `flash_attn`.
    pub fn new(
        model: &Model,
        size: usize,
        ty: GgmlType,
        flash_attn: bool,
        host: &Arc<dyn Backend>,
    ) -> Result<KvCache> {
        Self::with_types(model, size, ty, ty, flash_attn, host)
    }

    /// [`KvCache::new`] with K of `ty` and V of `ty_v`, checked by
    /// [`check_types`]; a layer's backend that cannot store rows of a type
    /// (a quantized cache on a CUDA device) is refused by name.
    pub fn with_types(
        model: &Model,
        size: usize,
        ty: GgmlType,
        ty_v: GgmlType,
        flash_attn: bool,
        host: &Arc<dyn Backend>,
    ) -> Result<KvCache> {
        let hp = &model.hparams;
        check_types(hp, ty, ty_v, flash_attn)?;
        let (ek, ev) = (hp.n_embd_k_gqa(), hp.n_embd_v_gqa());
        let k_bytes = ty.row_size(ek as u64).unwrap_or(0) * size;
        let v_bytes = if hp.is_mla() {
            0
        } else {
            ty_v.row_size(ev as u64).unwrap_or(0) * size
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for lw in &model.layers {
            let be: &Arc<dyn Backend> = match lw.device.and_then(|d| model.devices.get(d)) {
                Some(d) => d,
                None => host,
            };
            let stores = [(ty, ek, "K"), (ty_v, if v_bytes > 0 { ev } else { 0 }, "V")];
            for (t, n, what) in stores {
                if n > 0 && !can_store(be.as_ref(), t, n) {
                    return Err(LlamaError::Invalid(format!(
                        "{what} cache type {t} is not supported on {}: it cannot store rows of that type (use f16 there, or keep the layers on the CPU)",
                        be.name()
                    )));
                }
            }
            // the type attention reads as V: an MLA cache's latent K rows
            let v_ty = if v_bytes > 0 { ty_v } else { ty };
            let v_trans = !flash_attn && !multiplies_v_rows(be.as_ref(), v_ty);
            let buf = be.alloc_buffer(k_bytes + v_bytes, BufferUsage::Compute)?;
            layers.push(LayerKv {
                k: TensorData {
                    buffer: Arc::clone(&buf),
                    offset: 0,
                },
                v: (v_bytes > 0).then(|| TensorData {
                    buffer: Arc::clone(&buf),
                    offset: k_bytes,
                }),
                flash_attn,
                v_trans,
                ty,
                ty_v,
                size,
                n_embd_k_gqa: ek,
                n_embd_v_gqa: ev,
            });
        }
        // MHA caches only (an MLA cache holds no V and is not rotated)
        let rotation = if hp.is_mla() {
            rotation::Rotation::default()
        } else {
            rotation::Rotation::new(ty, ty_v, hp.n_embd_head_k, hp.n_embd_head_v)
        };
        Ok(KvCache {
            layers,
            size,
            n_past: 0,
            rotation,
            cells: vec![KvCell::default(); size],
        })
    }

    /// Bytes of cache memory over all layers.
    pub fn nbytes(&self) -> usize {
        self.layers.iter().map(LayerKv::nbytes).sum()
    }

    /// Forget every cell.
    pub fn clear(&mut self) {
        self.n_past = 0;
        self.cells.fill(KvCell::default());
    }

    /// The cells' metadata.
    pub fn cells(&self) -> &[KvCell] {
        &self.cells
    }

    /// Cells held by at least one sequence.
    pub fn used_cells(&self) -> usize {
        self.cells.iter().filter(|c| !c.is_empty()).count()
    }

    /// Store a ubatch's tokens: token `i` (position `pos[i]` of sequence
    /// `seq[i]`) takes the first free cell after the last cell its sequence
    /// holds (the first free cell of the cache for a sequence that holds
    /// none), so that cells freed by removed sequences are used again and
    /// the attended range stays near the cells in use (llama.cpp's
    /// `find_slot` reuses free cells from its head the same way). Each
    /// sequence's cells then stay in the order of its positions (its tokens
    /// come in position order), so its attention sums its cells in the
    /// order it does alone in the cache, and gives the same bits. A lone
    /// sequence fills cells `0, 1, 2, ...`, as a single-sequence cache.
    /// Only when no cell is free after a sequence's last one does its token
    /// take the first free cell anywhere (out of position order: right,
    /// but not bit for bit the logits it gets alone).
    ///
    /// The chosen cells, one per token, are appended to `cells`. `None`
    /// (and nothing stored) when fewer cells are free than tokens given, or
    /// when `pos` and `seq` differ in length or a sequence id is out of range.
    pub fn place(&mut self, pos: &[i32], seq: &[SeqId], cells: &mut Vec<i64>) -> Option<()> {
        if pos.len() != seq.len() || seq.iter().any(|&s| seq_bit(s) == 0) {
            return None;
        }
        // the last cell each sequence holds
        let mut next = [0usize; MAX_SEQ];
        for (i, c) in self.cells.iter().enumerate() {
            let mut m = c.seq;
            while m != 0 {
                next[m.trailing_zeros() as usize] = i + 1;
                m &= m - 1;
            }
        }
        let n0 = cells.len();
        for (&p, &s) in pos.iter().zip(seq) {
            let from = next[s as usize];
            let free =
                |r: std::ops::Range<usize>| r.into_iter().find(|&i| self.cells[i].is_empty());
            let Some(i) = free(from..self.size).or_else(|| free(0..from.min(self.size))) else {
                // undo this call's cells
                for &c in &cells[n0..] {
                    self.cells[c as usize] = KvCell::default();
                }
                cells.truncate(n0);
                return None;
            };
            self.cells[i] = KvCell {
                pos: p,
                seq: 1u64 << s,
            };
            next[s as usize] = next[s as usize].max(i + 1);
            cells.push(i as i64);
        }
        self.n_past = self.seq_pos_max(0).map_or(0, |p| p as usize + 1);
        Some(())
    }

    /// Free `cells` again (undo [`KvCache::place`] after a failed decode);
    /// an index out of range is ignored.
    pub fn release(&mut self, cells: &[i64]) {
        for &c in cells {
            if let Some(c) = usize::try_from(c).ok().and_then(|c| self.cells.get_mut(c)) {
                *c = KvCell::default();
            }
        }
        self.n_past = self.seq_pos_max(0).map_or(0, |p| p as usize + 1);
    }

    /// One past the last cell in use (llama.cpp's `used_max_p1`): the
    /// cells attention must span.
    pub fn used_max_p1(&self) -> usize {
        self.cells
            .iter()
            .rposition(|c| !c.is_empty())
            .map_or(0, |i| i + 1)
    }

    /// Cells that attention must span: one past the last used cell, padded
    /// up to a multiple of `pad` (at most `size`), at least `min`.
    pub fn n_kv(&self, pad: usize, min: usize) -> usize {
        self.used_max_p1()
            .max(min)
            .next_multiple_of(pad.max(1))
            .min(self.size)
    }

    /// The largest position sequence `s` holds, `None` when it holds none.
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.cells
            .iter()
            .filter(|c| c.has_seq(s))
            .map(|c| c.pos)
            .max()
    }

    /// Cells sequence `s` holds.
    pub fn seq_n_cells(&self, s: SeqId) -> usize {
        self.cells.iter().filter(|c| c.has_seq(s)).count()
    }

    /// Remove positions `p0..p1` of sequence `s` (`p1 < 0`: to the end;
    /// `s < 0`: of every sequence); a cell no sequence holds any more is
    /// free. llama.cpp's `llama_memory_seq_rm`.
    pub fn seq_rm(&mut self, s: SeqId, p0: i32, p1: i32) {
        let p1 = if p1 < 0 { i32::MAX } else { p1 };
        let mask = if s < 0 { u64::MAX } else { seq_bit(s) };
        for c in &mut self.cells {
            if c.seq & mask != 0 && c.pos >= p0 && c.pos < p1 {
                c.seq &= !mask;
            }
        }
        self.n_past = self.seq_pos_max(0).map_or(0, |p| p as usize + 1);
    }

    /// Let sequence `dst` also hold the cells of `src` at positions
    /// `p0..p1` (`p1 < 0`: to the end): a shared prefix costs no memory.
    /// llama.cpp's `llama_memory_seq_cp`.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: i32, p1: i32) {
        let p1 = if p1 < 0 { i32::MAX } else { p1 };
        let (sb, db) = (seq_bit(src), seq_bit(dst));
        for c in &mut self.cells {
            if c.seq & sb != 0 && c.pos >= p0 && c.pos < p1 {
                c.seq |= db;
            }
        }
        self.n_past = self.seq_pos_max(0).map_or(0, |p| p as usize + 1);
    }

    /// Drop every sequence but `s` (llama.cpp's `llama_memory_seq_keep`).
    pub fn seq_keep(&mut self, s: SeqId) {
        let b = seq_bit(s);
        for c in &mut self.cells {
            c.seq &= b;
        }
        self.n_past = self.seq_pos_max(0).map_or(0, |p| p as usize + 1);
    }
}

/// The mask bit of sequence `s` (0 for an id out of range, which then
/// matches no cell).
fn seq_bit(s: SeqId) -> u64 {
    if (0..MAX_SEQ as i32).contains(&s) {
        1u64 << s
    } else {
        0
    }
}
