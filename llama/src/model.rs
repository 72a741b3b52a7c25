//! Model loading: hyper-parameters, every tensor checked for presence, type
//! and shape before use, and weights placed on their backends (host weights
//! are used in place from the mapped file; device weights are copied once).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use ggml_core::cpu::MappedBuffer;
use ggml_core::gguf::{GgufBytes, GgufFile, LoadMode};
use ggml_core::{Backend, BufferUsage, GgmlType, TensorData};

use crate::arch::{Arch, LayerStyle, QkNorm};
use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::placement::{Placement, Target};
use crate::tokenizer::Tokenizer;

/// Index of a weight in [`Model::weights`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WeightId(pub usize);

/// One weight tensor, placed.
#[derive(Clone, Debug)]
pub struct Weight {
    /// GGUF name.
    pub name: String,
    /// Element type.
    pub ty: GgmlType,
    /// Shape.
    pub ne: [i64; 4],
    /// Memory (mapped file for host weights; a device buffer otherwise).
    pub data: TensorData,
    /// Where it was placed.
    pub target: Target,
}

/// Standard multi-head attention weights (GQA; optional biases, Q/K norms
/// and gpt-oss's sinks).
#[derive(Clone, Debug)]
pub struct MhaWeights {
    /// `attn_q`: `[n_embd, n_head * head_dim]`.
    pub wq: WeightId,
    /// `attn_k`: `[n_embd, n_head_kv * head_dim]`.
    pub wk: WeightId,
    /// `attn_v`: `[n_embd, n_head_kv * head_dim_v]`.
    pub wv: WeightId,
    /// `attn_output`: `[n_head * head_dim_v, n_embd]`.
    pub wo: WeightId,
    /// `attn_q.bias`.
    pub bq: Option<WeightId>,
    /// `attn_k.bias`.
    pub bk: Option<WeightId>,
    /// `attn_v.bias`.
    pub bv: Option<WeightId>,
    /// `attn_output.bias` (gpt-oss).
    pub bo: Option<WeightId>,
    /// `attn_q_norm` (per head or over the projection, by the style).
    pub q_norm: Option<WeightId>,
    /// `attn_k_norm`.
    pub k_norm: Option<WeightId>,
    /// `attn_sinks.weight`: one logit per head joining the softmax
    /// denominator (gpt-oss).
    pub sinks: Option<WeightId>,
}

/// Multi-head latent attention weights (deepseek2, DeepSeek-V3 layout:
/// `attn_kv_b` already split into `attn_k_b` / `attn_v_b`).
#[derive(Clone, Debug)]
pub struct MlaWeights {
    /// `attn_q_a` (`[n_embd, q_lora_rank]`), or `attn_q` when the file has no q LoRA.
    pub wq_a: WeightId,
    /// `attn_q_a_norm` (absent without q LoRA).
    pub q_a_norm: Option<WeightId>,
    /// `attn_q_b` (`[q_lora_rank, n_head * key_length_mla]`; absent without q LoRA).
    pub wq_b: Option<WeightId>,
    /// `attn_kv_a_mqa`: `[n_embd, kv_lora_rank + qk_rope]`.
    pub wkv_a_mqa: WeightId,
    /// `attn_kv_a_norm`: `[kv_lora_rank]`.
    pub kv_a_norm: WeightId,
    /// `attn_k_b`: `[qk_nope, kv_lora_rank, n_head]`, absorbed into the query.
    pub wk_b: WeightId,
    /// `attn_v_b`: `[kv_lora_rank, value_length_mla, n_head]`.
    pub wv_b: WeightId,
    /// `attn_output`: `[n_head * value_length_mla, n_embd]`.
    pub wo: WeightId,
}

/// A layer's attention.
#[derive(Clone, Debug)]
pub enum AttnWeights {
    /// Q, K, V projections.
    Mha(MhaWeights),
    /// Latent attention with a compressed cache.
    Mla(MlaWeights),
}

/// A dense SwiGLU FFN (deepseek2's leading layers).
#[derive(Clone, Debug)]
pub struct DenseFfn {
    /// `ffn_up`: `[n_embd, n_ff]`.
    pub up: WeightId,
    /// `ffn_gate`: `[n_embd, n_ff]`.
    pub gate: WeightId,
    /// `ffn_down`: `[n_ff, n_embd]`.
    pub down: WeightId,
}

/// A shared expert: a dense SwiGLU FFN every token goes through, behind a
/// sigmoid gate (qwen2moe) or not (deepseek2).
#[derive(Clone, Debug)]
pub struct SharedExpert {
    /// `ffn_gate_inp_shexp` (qwen2moe).
    pub gate_inp: Option<WeightId>,
    /// `ffn_up_shexp`: `[n_embd, n_ff_shexp]`.
    pub up: WeightId,
    /// `ffn_gate_shexp`: `[n_embd, n_ff_shexp]`.
    pub gate: WeightId,
    /// `ffn_down_shexp`: `[n_ff_shexp, n_embd]`.
    pub down: WeightId,
}

/// A layer's experts and router.
#[derive(Clone, Debug)]
pub struct MoeWeights {
    /// Router `ffn_gate_inp`: `[n_embd, n_expert]`.
    pub gate_inp: WeightId,
    /// Router bias (gpt-oss).
    pub gate_inp_b: Option<WeightId>,
    /// `exp_probs_b`: selection-only bias of the router probabilities (DeepSeek-V3).
    pub exp_probs_b: Option<WeightId>,
    /// `[n_embd, n_ff_exp, n_expert]`.
    pub up_exps: WeightId,
    /// `[n_embd, n_ff_exp, n_expert]`.
    pub gate_exps: WeightId,
    /// `[n_ff_exp, n_embd, n_expert]`.
    pub down_exps: WeightId,
    /// Per-expert biases `[n_ff_exp, n_expert]` (gpt-oss, through `add_id`).
    pub up_exps_b: Option<WeightId>,
    /// `[n_ff_exp, n_expert]`.
    pub gate_exps_b: Option<WeightId>,
    /// `[n_embd, n_expert]`.
    pub down_exps_b: Option<WeightId>,
    /// Shared expert(s), summed into the output.
    pub shexp: Option<SharedExpert>,
}

/// A layer's FFN.
#[derive(Clone, Debug)]
pub enum FfnWeights {
    /// Dense.
    Dense(DenseFfn),
    /// Experts.
    Moe(MoeWeights),
}

/// A decoder layer's weights.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// `attn_norm`: `[n_embd]`.
    pub attn_norm: WeightId,
    /// The attention's weights.
    pub attn: AttnWeights,
    /// The norm before the FFN (`ffn_norm`; `post_attention_norm` in gpt-oss).
    pub ffn_norm: WeightId,
    /// The FFN's weights.
    pub ffn: FfnWeights,
    /// Whether this layer's KV cache and activations belong on a device.
    pub on_device: bool,
    /// Which device (an index into [`Model::devices`]) holds the layer, its
    /// KV cache and its dense weights; `None`: host memory.
    pub device: Option<usize>,
}

impl LayerWeights {
    /// The experts, unless the layer is dense.
    pub fn moe(&self) -> Option<&MoeWeights> {
        match &self.ffn {
            FfnWeights::Moe(m) => Some(m),
            FfnWeights::Dense(_) => None,
        }
    }
}

/// What to load and where.
#[derive(Default)]
pub struct ModelParams {
    /// The one device backend for offloaded tensors (`--device X`); `None`
    /// = CPU only, or the devices are in `devices`.
    pub device: Option<Arc<dyn Backend>>,
    /// Several device backends (`--device A,B`), in the order of
    /// [`Placement::devices`] (which, when empty, takes their names); give
    /// either this or `device`.
    pub devices: Vec<Arc<dyn Backend>>,
    /// Placement rules.
    pub placement: Placement,
    /// Called with the fraction loaded, from 0 to 1.
    pub progress: Option<Box<dyn FnMut(f32)>>,
    /// How the file is read (`--load-mode`; [`Model::load`] only).
    pub load_mode: LoadMode,
    /// `--no-host` (llama.cpp's: bypass the devices' host buffer): the
    /// weights that stay in host memory are not page-locked for the
    /// devices, so their uploads copy from pageable memory. Without it a
    /// device that page-locks host memory (CUDA) registers the host
    /// weights' span whatever the load mode (`--load-mode pin` says so
    /// explicitly), where the span takes at most half of the memory
    /// available.
    pub no_host: bool,
    /// Map the file without reading it up front (pages are read as first
    /// touched): the host expert cache reads the experts itself.
    pub lazy_map: bool,
}

/// A loaded model.
pub struct Model {
    /// Hyper-parameters.
    pub hparams: HParams,
    /// The architecture's layer switches.
    pub style: LayerStyle,
    /// Every weight, placed.
    pub weights: Vec<Weight>,
    /// Per-layer weights.
    pub layers: Vec<LayerWeights>,
    /// `token_embd.weight`.
    pub tok_embd: WeightId,
    /// `output_norm.weight`.
    pub output_norm: WeightId,
    /// `output.weight` (or the embedding, when tied).
    pub output: WeightId,
    /// Whether the output head runs on a device.
    pub output_on_device: bool,
    /// The device of the output head (an index into [`Model::devices`]).
    pub output_device: Option<usize>,
    /// The tokenizer from the file's vocabulary.
    pub tokenizer: Tokenizer,
    /// The main device (`-mg`; with one `--device`, that device), if any.
    pub device: Option<Arc<dyn Backend>>,
    /// Every device backend, in `--device` order (empty: the CPU only).
    pub devices: Vec<Arc<dyn Backend>>,
    /// The placement as applied: its device list names `devices`, and a
    /// split by free memory is filled in.
    pub placement: Placement,
    /// The mapped file.
    pub file: Arc<GgufFile>,
    /// The file's path, when loaded from one ([`Model::load`]): the host
    /// expert cache reads experts from it.
    pub path: Option<std::path::PathBuf>,
    /// What loading did other than asked (`--load-mode` fallbacks, `pin`
    /// without a device that pins), one line each, for the tools to print
    /// once.
    pub load_notes: Vec<String>,
    /// Whether the host weights are page-locked for the devices (by
    /// default where a device page-locks, unless `--no-host`, or
    /// `--load-mode pin`, that took effect: pinned through the main device,
    /// else the first listed device that can; CUDA's registration is
    /// portable, so every CUDA device of the run copies from it as pinned).
    pub host_pinned: bool,
    by_name: HashMap<String, WeightId>,
    /// The device's page-lock of the host weights; dropped before `file`'s
    /// mapping is released (it holds the bytes itself).
    _pin: Option<Box<dyn std::any::Any + Send + Sync>>,
}

struct Shared(GgufBytes);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// A range of the file's bytes (the host weights, for `pin`).
struct SharedRange(GgufBytes, std::ops::Range<usize>);

impl AsRef<[u8]> for SharedRange {
    fn as_ref(&self) -> &[u8] {
        &self.0.as_slice()[self.1.clone()]
    }
}

/// Page size the pinned range is widened to.
const PIN_PAGE: usize = 4096;

/// A device's page-lock of the host weights.
type HostPin = Box<dyn std::any::Any + Send + Sync>;

/// Page-lock `range` (the host weights) for the devices: every device
/// copies from them, so the main device pins them, else the next device
/// that gains from it (CUDA registers the range as portable, so one
/// registration serves every CUDA device; a sim device gains nothing and
/// passes). The pin, and for each device that did not pin its name and
/// error (`None`: it copies from pageable memory as fast).
fn pin_host_span(
    main: &Arc<dyn Backend>,
    devices: &[Arc<dyn Backend>],
    range: Arc<SharedRange>,
) -> (Option<HostPin>, Vec<(String, Option<String>)>) {
    let others = devices.iter().filter(|d| !Arc::ptr_eq(d, main));
    let mut notes = Vec::new();
    for d in std::iter::once(main).chain(others) {
        let r: Arc<dyn AsRef<[u8]> + Send + Sync> = range.clone();
        match d.pin_host(r) {
            Ok(Some(p)) => return (Some(p), notes),
            Ok(None) => notes.push((d.name().to_string(), None)),
            Err(e) => notes.push((d.name().to_string(), Some(e.to_string()))),
        }
    }
    (None, notes)
}

fn dims(ne: &[i64]) -> String {
    format!("shape {ne:?}")
}

struct Loader<'a> {
    file: &'a GgufFile,
    hp: &'a HParams,
    /// (name, ty, ne, file offset, size)
    wanted: Vec<(String, GgmlType, [i64; 4], usize, usize)>,
    by_name: HashMap<String, WeightId>,
}

impl Loader<'_> {
    /// Check that `name` exists with shape `ne` and an element type the
    /// kernels can use, and register it.
    fn get(&mut self, name: &str, ne: &[i64]) -> Result<WeightId> {
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| LlamaError::MissingTensor(name.to_string()))?;
        let mut want = [1i64; 4];
        want[..ne.len()].copy_from_slice(ne);
        if t.ne != want {
            return Err(LlamaError::BadTensor {
                name: name.into(),
                found: dims(t.shape()),
                expected: dims(ne),
            });
        }
        if !weight_type_ok(t.ty) {
            return Err(LlamaError::BadTensor {
                name: name.into(),
                found: format!("type {}", t.ty),
                expected: "a float or block-quantized weight type".into(),
            });
        }
        let id = WeightId(self.wanted.len());
        let off = self.file.data_offset() + t.offset as usize;
        self.wanted
            .push((name.to_string(), t.ty, want, off, t.size));
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    fn opt(&mut self, name: &str, ne: &[i64]) -> Result<Option<WeightId>> {
        if self.file.tensor(name).is_none() {
            return Ok(None);
        }
        self.get(name, ne).map(Some)
    }

    /// 1-d norm weights must be F32 (as llama.cpp's kernels require for `mul`).
    fn norm(&mut self, name: &str, n: usize) -> Result<WeightId> {
        let id = self.get(name, &[n as i64])?;
        let ty = self.wanted[id.0].1;
        if ty != GgmlType::F32 {
            return Err(LlamaError::BadTensor {
                name: name.into(),
                found: format!("type {ty}"),
                expected: "f32".into(),
            });
        }
        Ok(id)
    }

    fn layer(&mut self, il: usize, style: &LayerStyle) -> Result<LayerWeights> {
        let hp = self.hp;
        let n = |s: &str| format!("blk.{il}.{s}");
        let ne = hp.n_embd;
        let attn_norm = self.norm(&n("attn_norm.weight"), ne)?;
        let attn = if hp.is_mla() {
            AttnWeights::Mla(self.mla(il)?)
        } else {
            AttnWeights::Mha(self.mha(il, style)?)
        };
        let ffn_norm = if hp.arch == Arch::GptOss {
            self.norm(&n("post_attention_norm.weight"), ne)?
        } else {
            self.norm(&n("ffn_norm.weight"), ne)?
        };
        let e = hp.n_embd as i64;
        let ffn = if hp.is_dense_layer(il) {
            let ff = hp.n_ff as i64;
            FfnWeights::Dense(DenseFfn {
                gate: self.get(&n("ffn_gate.weight"), &[e, ff])?,
                up: self.get(&n("ffn_up.weight"), &[e, ff])?,
                down: self.get(&n("ffn_down.weight"), &[ff, e])?,
            })
        } else {
            FfnWeights::Moe(self.moe(il, style)?)
        };
        Ok(LayerWeights {
            attn_norm,
            attn,
            ffn_norm,
            ffn,
            on_device: false,
            device: None,
        })
    }

    fn mha(&mut self, il: usize, style: &LayerStyle) -> Result<MhaWeights> {
        let hp = self.hp;
        let (e, hk, hv) = (
            hp.n_embd as i64,
            hp.n_embd_head_k as i64,
            hp.n_embd_head_v as i64,
        );
        let (nh, nkv) = (hp.n_head as i64, hp.n_head_kv as i64);
        let n = |s: &str| format!("blk.{il}.{s}");
        let (q_dim, k_dim, v_dim) = (hk * nh, hk * nkv, hv * nkv);
        let wq = self.get(&n("attn_q.weight"), &[e, q_dim])?;
        let wk = self.get(&n("attn_k.weight"), &[e, k_dim])?;
        let wv = self.get(&n("attn_v.weight"), &[e, v_dim])?;
        let wo = self.get(&n("attn_output.weight"), &[hv * nh, e])?;
        let (bq, bk, bv) = if style.qkv_bias {
            (
                Some(self.get(&n("attn_q.bias"), &[q_dim])?),
                Some(self.get(&n("attn_k.bias"), &[k_dim])?),
                Some(self.get(&n("attn_v.bias"), &[v_dim])?),
            )
        } else {
            (
                self.opt(&n("attn_q.bias"), &[q_dim])?,
                self.opt(&n("attn_k.bias"), &[k_dim])?,
                self.opt(&n("attn_v.bias"), &[v_dim])?,
            )
        };
        let (bo, sinks) = if hp.arch == Arch::GptOss {
            (
                Some(self.get(&n("attn_output.bias"), &[e])?),
                Some(self.norm(&n("attn_sinks.weight"), hp.n_head)?),
            )
        } else {
            (self.opt(&n("attn_output.bias"), &[e])?, None)
        };
        let (q_norm, k_norm) = match style.qk_norm {
            QkNorm::None => (None, None),
            QkNorm::PerHead => (
                Some(self.norm(&n("attn_q_norm.weight"), hk as usize)?),
                Some(self.norm(&n("attn_k_norm.weight"), hk as usize)?),
            ),
            QkNorm::Full => (
                Some(self.norm(&n("attn_q_norm.weight"), q_dim as usize)?),
                Some(self.norm(&n("attn_k_norm.weight"), k_dim as usize)?),
            ),
        };
        Ok(MhaWeights {
            wq,
            wk,
            wv,
            wo,
            bq,
            bk,
            bv,
            bo,
            q_norm,
            k_norm,
            sinks,
        })
    }

    fn mla(&mut self, il: usize) -> Result<MlaWeights> {
        let hp = self.hp;
        let n = |s: &str| format!("blk.{il}.{s}");
        let e = hp.n_embd as i64;
        let nh = hp.n_head as i64;
        let (kv_lora, rope) = (hp.n_lora_kv as i64, hp.n_rot as i64);
        let hk_mla = hp.n_embd_head_k_mla as i64;
        let nope = hk_mla - rope;
        let hv_mla = hp.n_embd_head_v_mla as i64;
        let (wq_a, q_a_norm, wq_b) = if hp.n_lora_q > 0 {
            let ql = hp.n_lora_q as i64;
            (
                self.get(&n("attn_q_a.weight"), &[e, ql])?,
                Some(self.norm(&n("attn_q_a_norm.weight"), hp.n_lora_q)?),
                Some(self.get(&n("attn_q_b.weight"), &[ql, nh * hk_mla])?),
            )
        } else {
            (
                self.get(&n("attn_q.weight"), &[e, nh * hk_mla])?,
                None,
                None,
            )
        };
        if self.file.tensor(&n("attn_kv_b.weight")).is_some()
            && self.file.tensor(&n("attn_k_b.weight")).is_none()
        {
            return Err(LlamaError::BadTensor {
                name: n("attn_kv_b.weight"),
                found: "the unsplit MLA projection".into(),
                expected: "attn_k_b / attn_v_b, as current llama.cpp converters write them".into(),
            });
        }
        Ok(MlaWeights {
            wq_a,
            q_a_norm,
            wq_b,
            wkv_a_mqa: self.get(&n("attn_kv_a_mqa.weight"), &[e, kv_lora + rope])?,
            kv_a_norm: self.norm(&n("attn_kv_a_norm.weight"), hp.n_lora_kv)?,
            wk_b: self.get(&n("attn_k_b.weight"), &[nope, kv_lora, nh])?,
            wv_b: self.get(&n("attn_v_b.weight"), &[kv_lora, hv_mla, nh])?,
            wo: self.get(&n("attn_output.weight"), &[nh * hv_mla, e])?,
        })
    }

    fn moe(&mut self, il: usize, style: &LayerStyle) -> Result<MoeWeights> {
        let hp = self.hp;
        let n = |s: &str| format!("blk.{il}.{s}");
        let (e, x, ff) = (hp.n_embd as i64, hp.n_expert as i64, hp.n_ff_exp as i64);
        let gate_inp = self.get(&n("ffn_gate_inp.weight"), &[e, x])?;
        let up_exps = self.get(&n("ffn_up_exps.weight"), &[e, ff, x])?;
        let gate_exps = self.get(&n("ffn_gate_exps.weight"), &[e, ff, x])?;
        let down_exps = self.get(&n("ffn_down_exps.weight"), &[ff, e, x])?;
        let gpt_oss = hp.arch == Arch::GptOss;
        let bias = |l: &mut Self, s: &str, ne: &[i64]| -> Result<Option<WeightId>> {
            if gpt_oss {
                l.f32_bias(&n(s), ne).map(Some)
            } else {
                Ok(None)
            }
        };
        let gate_inp_b = bias(self, "ffn_gate_inp.bias", &[x])?;
        let up_exps_b = bias(self, "ffn_up_exps.bias", &[ff, x])?;
        let gate_exps_b = bias(self, "ffn_gate_exps.bias", &[ff, x])?;
        let down_exps_b = bias(self, "ffn_down_exps.bias", &[e, x])?;
        let exp_probs_b = if hp.arch == Arch::Deepseek2 {
            self.f32_bias_opt(&n("exp_probs_b.bias"), &[x])?
        } else {
            None
        };
        let shexp = if style.shared_expert {
            let fs = if hp.n_ff_shexp > 0 {
                hp.n_ff_shexp as i64
            } else {
                hp.n_ff as i64
            };
            Some(SharedExpert {
                gate_inp: Some(self.get(&n("ffn_gate_inp_shexp.weight"), &[e])?),
                up: self.get(&n("ffn_up_shexp.weight"), &[e, fs])?,
                gate: self.get(&n("ffn_gate_shexp.weight"), &[e, fs])?,
                down: self.get(&n("ffn_down_shexp.weight"), &[fs, e])?,
            })
        } else if hp.arch == Arch::Deepseek2 && hp.n_expert_shared > 0 {
            let fs = (hp.n_ff_exp * hp.n_expert_shared) as i64;
            Some(SharedExpert {
                gate_inp: None,
                up: self.get(&n("ffn_up_shexp.weight"), &[e, fs])?,
                gate: self.get(&n("ffn_gate_shexp.weight"), &[e, fs])?,
                down: self.get(&n("ffn_down_shexp.weight"), &[fs, e])?,
            })
        } else {
            None
        };
        Ok(MoeWeights {
            gate_inp,
            gate_inp_b,
            exp_probs_b,
            up_exps,
            gate_exps,
            down_exps,
            up_exps_b,
            gate_exps_b,
            down_exps_b,
            shexp,
        })
    }

    /// A bias added by `add`/`add_id`: F32 (the kernels add F32 rows).
    fn f32_bias(&mut self, name: &str, ne: &[i64]) -> Result<WeightId> {
        let id = self.get(name, ne)?;
        let ty = self.wanted[id.0].1;
        if ty != GgmlType::F32 {
            return Err(LlamaError::BadTensor {
                name: name.into(),
                found: format!("type {ty}"),
                expected: "f32".into(),
            });
        }
        Ok(id)
    }

    fn f32_bias_opt(&mut self, name: &str, ne: &[i64]) -> Result<Option<WeightId>> {
        if self.file.tensor(name).is_none() {
            return Ok(None);
        }
        self.f32_bias(name, ne).map(Some)
    }
}

/// The device backends `params` gives (its `device` or its `devices`),
/// with `params.placement`'s device list checked against them (or filled
/// with their names), its flags checked, and an unset split filled from the
/// devices' free memory.
fn device_list(params: &mut ModelParams) -> Result<Vec<Arc<dyn Backend>>> {
    let mut devices = std::mem::take(&mut params.devices);
    if let Some(d) = params.device.take() {
        if !devices.is_empty() {
            return Err(LlamaError::Invalid(
                "model parameters give both a device and a device list: give one".into(),
            ));
        }
        devices.push(d);
    }
    let names: Vec<String> = devices.iter().map(|d| d.name().to_string()).collect();
    let p = &mut params.placement;
    if p.devices.is_empty() {
        p.devices = names;
    } else if p.devices.len() != names.len()
        || p.devices
            .iter()
            .zip(&names)
            .any(|(a, b)| !a.eq_ignore_ascii_case(b))
    {
        return Err(LlamaError::Placement(format!(
            "the placement names devices {} but the open devices are {}",
            p.devices.join(","),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(",")
            }
        )));
    } else {
        p.devices = names;
    }
    p.check()?;
    let free: Vec<Option<usize>> = devices
        .iter()
        .map(|d| d.memory().map(|(free, _)| free))
        .collect();
    p.split_by_free_memory(&free);
    Ok(devices)
}

fn weight_type_ok(ty: GgmlType) -> bool {
    !matches!(
        ty,
        GgmlType::I8
            | GgmlType::I16
            | GgmlType::I32
            | GgmlType::I64
            | GgmlType::F64
            | GgmlType::Q8K
            | GgmlType::Q8_1
    )
}

impl Model {
    /// Load a model from a GGUF file.
    pub fn load(path: impl AsRef<Path>, params: ModelParams) -> Result<Model> {
        let (file, notes) =
            GgufFile::open_with_lazy(path.as_ref(), params.load_mode, params.lazy_map)?;
        let mut m = Model::from_gguf(file, params)?;
        m.load_notes.splice(0..0, notes);
        m.path = Some(path.as_ref().to_path_buf());
        Ok(m)
    }

    /// Load a model from a parsed GGUF file.
    pub fn from_gguf(file: GgufFile, mut params: ModelParams) -> Result<Model> {
        let hp = HParams::from_gguf(&file)?;
        let style = hp.arch.style();
        let tokenizer =
            Tokenizer::from_gguf(&file).map_err(|e| LlamaError::Tokenizer(e.to_string()))?;
        if tokenizer.n_vocab() != hp.n_vocab {
            return Err(LlamaError::HParam {
                key: format!("{}.vocab_size", hp.arch.name()),
                why: format!(
                    "{} does not match the tokenizer's {} tokens",
                    hp.n_vocab,
                    tokenizer.n_vocab()
                ),
            });
        }
        let mut l = Loader {
            file: &file,
            hp: &hp,
            wanted: Vec::new(),
            by_name: HashMap::new(),
        };
        let (e, v) = (hp.n_embd as i64, hp.n_vocab as i64);
        let tok_embd = l.get("token_embd.weight", &[e, v])?;
        let output_norm = l.norm("output_norm.weight", hp.n_embd)?;
        let output = match l.opt("output.weight", &[e, v])? {
            Some(o) => o,
            None => tok_embd,
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            layers.push(l.layer(il, &style)?);
        }
        let Loader {
            wanted, by_name, ..
        } = l;

        // placement
        let devices = device_list(&mut params)?;
        let placement = &params.placement;
        let rules = placement.effective_overrides();
        let mut targets = Vec::with_capacity(wanted.len());
        for (name, ..) in &wanted {
            targets.push(placement.target(&rules, name, hp.n_layer)?);
        }
        for (il, lw) in layers.iter_mut().enumerate() {
            lw.device = placement.layer_device(il, hp.n_layer);
            lw.on_device = lw.device.is_some();
        }
        let output_device = placement.layer_device(hp.n_layer, hp.n_layer);
        let output_on_device = output_device.is_some();
        let main_device = devices
            .get(placement.main_gpu.min(devices.len().saturating_sub(1)))
            .cloned();
        let dev_index = |t: &Target| match t {
            Target::Device(n) => devices.iter().position(|d| d.name() == n),
            Target::Host => None,
        };

        // host weights: in place from the mapping
        let host: Arc<dyn ggml_core::Buffer> =
            Arc::new(MappedBuffer::new(Arc::new(Shared(file.bytes().clone()))));
        let align = 64usize;
        let mut dev_bufs = Vec::with_capacity(devices.len());
        for (di, d) in devices.iter().enumerate() {
            let total: usize = wanted
                .iter()
                .zip(&targets)
                .filter(|(_, t)| dev_index(t) == Some(di))
                .map(|(w, _)| w.4.next_multiple_of(align))
                .sum();
            dev_bufs.push(if total > 0 {
                Some(d.alloc_buffer(total, BufferUsage::Weights)?)
            } else {
                None
            });
        }
        // `pin`: page-lock the span of the weights that stay in host memory
        let host_span = wanted
            .iter()
            .zip(&targets)
            .filter(|(_, t)| !matches!(t, Target::Device(_)))
            .fold(None, |acc: Option<(usize, usize)>, (w, _)| {
                let (lo, hi) = (w.3, w.3 + w.4);
                Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
            });
        let mut load_notes = Vec::new();
        let mut pin = None;
        let explicit = params.load_mode == LoadMode::Pin;
        let by_default = !params.no_host
            && !explicit
            && host_span.is_some_and(|(lo, hi)| {
                ggml_core::gguf::mem_available().is_some_and(|a| (hi - lo) as u64 <= a / 2)
            });
        let len = file.bytes().len();
        // the host weights' span, widened to pages
        let span = host_span.map(|(lo, hi)| {
            let lo = lo - lo % PIN_PAGE;
            (lo, hi.next_multiple_of(PIN_PAGE).min(len))
        });
        match (&main_device, span) {
            (Some(main), Some((lo, hi))) if by_default || explicit => {
                let range = Arc::new(SharedRange(file.bytes().clone(), lo..hi));
                let (p, notes) = pin_host_span(main, &devices, range);
                pin = p;
                if pin.is_none() {
                    for (dev, e) in notes {
                        load_notes.push(match (explicit, e) {
                            (true, None) => format!(
                                "--load-mode pin: {dev} copies from pageable memory as fast: behaves as mmap"
                            ),
                            (true, Some(e)) => format!(
                                "--load-mode pin: cannot page-lock the {} bytes of host weights for {dev}: {e}; copying from pageable memory (as mmap)",
                                hi - lo
                            ),
                            // by default a device that does not pin is no news
                            (false, None) => continue,
                            (false, Some(e)) => format!(
                                "cannot page-lock the {} bytes of host weights for {dev}: {e}; their uploads copy from pageable memory (--no-host says so on purpose)",
                                hi - lo
                            ),
                        });
                    }
                }
            }
            (None, _) if explicit => load_notes.push(
                "--load-mode pin: no device backend copies from host memory: behaves as mmap"
                    .to_string(),
            ),
            (Some(d), None) if explicit => load_notes.push(format!(
                "--load-mode pin: every weight is on {}: nothing stays in host memory to pin",
                d.name()
            )),
            _ => {}
        }
        let total = wanted.len().max(1);
        let mut weights = Vec::with_capacity(wanted.len());
        let mut dev_off = vec![0usize; devices.len()];
        let bytes = file.bytes().as_slice();
        for (i, ((name, ty, ne, off, size), target)) in wanted.into_iter().zip(targets).enumerate()
        {
            let di = dev_index(&target);
            let buf = di.and_then(|d| dev_bufs[d].as_ref());
            match (di, buf) {
                (Some(_), None) | (None, Some(_)) => {
                    return Err(LlamaError::Placement(format!(
                        "'{name}' is placed on {target:?}, which is not an open device"
                    )))
                }
                _ => {}
            }
            let data = match (di, buf) {
                (Some(di), Some(buf)) => {
                    let src = bytes
                        .get(off..off + size)
                        .ok_or_else(|| LlamaError::BadTensor {
                            name: name.clone(),
                            found: "data past the end of the file".into(),
                            expected: "data inside the file".into(),
                        })?;
                    buf.write(dev_off[di], src)?;
                    let d = TensorData {
                        buffer: Arc::clone(buf),
                        offset: dev_off[di],
                    };
                    dev_off[di] += size.next_multiple_of(align);
                    d
                }
                _ => TensorData {
                    buffer: Arc::clone(&host),
                    offset: off,
                },
            };
            weights.push(Weight {
                name,
                ty,
                ne,
                data,
                target,
            });
            if let Some(p) = params.progress.as_mut() {
                p((i + 1) as f32 / total as f32);
            }
        }
        Ok(Model {
            hparams: hp,
            style,
            weights,
            layers,
            tok_embd,
            output_norm,
            output,
            output_on_device,
            output_device,
            tokenizer,
            device: main_device,
            devices,
            placement: params.placement,
            file: Arc::new(file),
            path: None,
            load_notes,
            host_pinned: pin.is_some(),
            by_name,
            _pin: pin,
        })
    }

    /// The weight with this id.
    pub fn weight(&self, id: WeightId) -> &Weight {
        &self.weights[id.0]
    }

    /// Look a weight up by its GGUF name.
    pub fn weight_by_name(&self, name: &str) -> Option<WeightId> {
        self.by_name.get(name).copied()
    }

    /// Bytes of all weights.
    pub fn size_bytes(&self) -> usize {
        self.weights
            .iter()
            .map(|w| ggml_core::Tensor::new(w.ty, w.ne).nbytes())
            .sum()
    }

    /// Number of parameters.
    pub fn n_params(&self) -> u64 {
        self.weights
            .iter()
            .map(|w| w.ne.iter().product::<i64>() as u64)
            .sum()
    }
}
