//! The KV cache: per layer, K as rows of `n_embd_k_gqa` per cell and V
//! either transposed (one row of `kv_size` cells per channel, so `kq · V`
//! reads rows: the `mul_mat` attention path) or as rows like K (flash
//! attention), F16 by default, on the backend of the layer.
//!
//! MLA layers (deepseek2) cache one row of `kv_lora_rank + qk_rope` per
//! cell, the compressed latent and the roped key part, and no V: the value
//! is the latent, read as a view of the K rows.

use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, GgmlType, TensorData};

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
    /// Whether V is stored transposed (the `mul_mat` attention path; false
    /// for flash attention).
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
            self.ty_v.type_size() * self.size * self.n_embd_v_gqa
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

/// The cache of a context: a single sequence of `size` cells.
pub struct KvCache {
    /// Per-layer memory.
    pub layers: Vec<LayerKv>,
    /// Cells.
    pub size: usize,
    /// Cells filled (the next position).
    pub n_past: usize,
}

impl KvCache {
    /// Allocate a cache of `size` cells of `ty` (F16 or F32), each layer on
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

    /// [`KvCache::new`] with K of `ty` and V of `ty_v` (each F16 or F32).
    pub fn with_types(
        model: &Model,
        size: usize,
        ty: GgmlType,
        ty_v: GgmlType,
        flash_attn: bool,
        host: &Arc<dyn Backend>,
    ) -> Result<KvCache> {
        for t in [ty, ty_v] {
            if !matches!(t, GgmlType::F16 | GgmlType::F32) {
                return Err(LlamaError::Invalid(format!(
                    "KV cache type {t} is not supported (f16, f32)"
                )));
            }
        }
        let hp = &model.hparams;
        let (ek, ev) = (hp.n_embd_k_gqa(), hp.n_embd_v_gqa());
        let k_bytes = ty.row_size(ek as u64).unwrap_or(0) * size;
        let v_bytes = if hp.is_mla() {
            0
        } else {
            ty_v.type_size() * size * ev
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for lw in &model.layers {
            let be: &Arc<dyn Backend> = match (&model.device, lw.on_device) {
                (Some(d), true) => d,
                _ => host,
            };
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
                v_trans: !flash_attn,
                ty,
                ty_v,
                size,
                n_embd_k_gqa: ek,
                n_embd_v_gqa: ev,
            });
        }
        Ok(KvCache {
            layers,
            size,
            n_past: 0,
        })
    }

    /// Bytes of cache memory over all layers.
    pub fn nbytes(&self) -> usize {
        self.layers.iter().map(LayerKv::nbytes).sum()
    }

    /// Forget every cell.
    pub fn clear(&mut self) {
        self.n_past = 0;
    }
}
