//! The inference context: KV cache, scheduler and logits of one sequence.
//! A tool, a test or a server drives it: tokenize, decode a batch (split
//! into ubatches), read the logits of any output row, sample.

use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, CpuBackend, GgmlType, Graph, TensorData, TensorId};

use crate::error::{LlamaError, Result};
use crate::graph::decoder::DecoderGraph;
use crate::graph::GraphBuilder;
use crate::kv_cache::KvCache;
use crate::model::Model;

/// Context settings, with llama.cpp's defaults where they apply.
#[derive(Clone, Debug)]
pub struct ContextParams {
    /// Context length in tokens (`-c`); 0 = the model's training context.
    pub n_ctx: usize,
    /// Largest batch accepted by one `decode` (`-b`).
    pub n_batch: usize,
    /// Largest batch computed in one graph (`-ub`).
    pub n_ubatch: usize,
    /// CPU threads (`-t`).
    pub n_threads: usize,
    /// KV cache element type (F16 default, F32 option).
    pub kv_type: GgmlType,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch: 512,
            n_threads: 2,
            kv_type: GgmlType::F16,
        }
    }
}

/// Bytes moved host -> device, cumulative since the context was made (or
/// since [`Context::reset_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Bytes of expert weights copied by the expert copy policy.
    pub h2d_bytes_experts: u64,
    /// Bytes copied by plain (whole-tensor) input copies.
    pub h2d_bytes_other: u64,
    /// What the policy's inputs would have cost copied whole.
    pub h2d_bytes_full_copy: u64,
    /// Experts copied by the policy.
    pub experts_copied: u64,
    /// Experts a full copy of the same inputs would have moved.
    pub experts_full_copy: u64,
    /// Graphs computed.
    pub graphs: u64,
}

/// A decoding context over a model.
pub struct Context {
    model: Arc<Model>,
    params: ContextParams,
    cpu: Arc<dyn Backend>,
    kv: KvCache,
    input_buf: Option<Arc<dyn ggml_core::Buffer>>,
    logits: Vec<f32>,
    n_outputs: usize,
    last_expert_ids: Vec<Vec<i32>>,
    stats: TransferStats,
}

impl Context {
    /// A context for `model`.
    pub fn new(model: Arc<Model>, mut params: ContextParams) -> Result<Context> {
        if params.n_ctx == 0 {
            params.n_ctx = model.hparams.n_ctx_train;
        }
        if params.n_ubatch == 0 || params.n_batch == 0 {
            return Err(LlamaError::Invalid(
                "batch and ubatch sizes must be at least 1".into(),
            ));
        }
        params.n_ubatch = params.n_ubatch.min(params.n_batch);
        let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(params.n_threads.max(1)));
        let kv = KvCache::new(&model, params.n_ctx, params.kv_type, &cpu)?;
        Ok(Context {
            model,
            params,
            cpu,
            kv,
            input_buf: None,
            logits: Vec::new(),
            n_outputs: 0,
            last_expert_ids: Vec::new(),
            stats: TransferStats::default(),
        })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The settings.
    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// Context length.
    pub fn n_ctx(&self) -> usize {
        self.kv.size
    }

    /// Tokens in the cache.
    pub fn n_past(&self) -> usize {
        self.kv.n_past
    }

    /// Forget the sequence.
    pub fn clear(&mut self) {
        self.kv.clear();
        self.logits.clear();
        self.n_outputs = 0;
    }

    /// Tokenize text with the model's vocabulary.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        self.model
            .tokenizer
            .tokenize(text, add_special, parse_special)
            .map_err(|e| LlamaError::Tokenizer(e.to_string()))
    }

    /// Decode `tokens` at the next positions. With `all_logits`, logits are
    /// kept for every token; otherwise for the last one only.
    pub fn decode(&mut self, tokens: &[i32], all_logits: bool) -> Result<()> {
        if tokens.is_empty() {
            return Err(LlamaError::Batch("empty batch".into()));
        }
        if tokens.len() > self.params.n_batch {
            return Err(LlamaError::Batch(format!(
                "{} tokens exceed the batch size {} (-b)",
                tokens.len(),
                self.params.n_batch
            )));
        }
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(LlamaError::Batch(format!(
                "token id {bad} is out of range (vocabulary of {n_vocab})"
            )));
        }
        if self.kv.n_past + tokens.len() > self.kv.size {
            return Err(LlamaError::ContextFull(format!(
                "{} tokens after {} in a context of {} (-c)",
                tokens.len(),
                self.kv.n_past,
                self.kv.size
            )));
        }
        let n_total_out = if all_logits { tokens.len() } else { 1 };
        let mut logits = Vec::with_capacity(n_total_out * n_vocab);
        let start = self.kv.n_past;
        self.last_expert_ids.clear();
        for chunk_start in (0..tokens.len()).step_by(self.params.n_ubatch) {
            let end = (chunk_start + self.params.n_ubatch).min(tokens.len());
            let ub = &tokens[chunk_start..end];
            let n_out = if all_logits {
                ub.len()
            } else if end == tokens.len() {
                1
            } else {
                0
            };
            let out = self.decode_ubatch(ub, start + chunk_start, n_out)?;
            logits.extend_from_slice(&out);
        }
        self.kv.n_past = start + tokens.len();
        self.logits = logits;
        self.n_outputs = n_total_out;
        Ok(())
    }

    fn decode_ubatch(&mut self, ub: &[i32], pos0: usize, n_out: usize) -> Result<Vec<f32>> {
        let model = Arc::clone(&self.model);
        let n_tokens = ub.len();
        let n_out_graph = n_out.max(1);
        let mut b = GraphBuilder::new(&model);
        let dg = b.build_decoder(&self.kv, n_tokens, pos0, n_out_graph);
        let mut g = b.g;
        self.bind_inputs(&mut g, &dg, ub, pos0, n_out_graph)?;
        self.run(&mut g)?;
        self.last_expert_ids.clear();
        for &ids in &dg.expert_ids {
            let v = g.read_bytes(ids)?;
            self.last_expert_ids.push(bytemuck::pod_collect_to_vec(&v));
        }
        if n_out == 0 {
            return Ok(Vec::new());
        }
        Ok(g.read_f32(dg.logits)?)
    }

    /// Put the ubatch's inputs in a host buffer and bind the input tensors to it.
    fn bind_inputs(
        &mut self,
        g: &mut Graph,
        dg: &DecoderGraph,
        ub: &[i32],
        pos0: usize,
        n_out: usize,
    ) -> Result<()> {
        let n = ub.len();
        let n_kv = pos0 + n;
        let mut mask = vec![f32::NEG_INFINITY; n_kv * n];
        for i in 0..n {
            for j in 0..=pos0 + i {
                mask[i * n_kv + j] = 0.0;
            }
        }
        let pos: Vec<i32> = (0..n).map(|i| (pos0 + i) as i32).collect();
        let out_ids: Vec<i32> = ((n - n_out)..n).map(|i| i as i32).collect();
        let mut parts: Vec<(TensorId, Vec<u8>)> = vec![
            (dg.tokens, bytemuck::cast_slice(ub).to_vec()),
            (dg.pos, bytemuck::cast_slice(&pos).to_vec()),
            (dg.mask, bytemuck::cast_slice(&mask).to_vec()),
        ];
        if let Some(o) = dg.out_ids {
            parts.push((o, bytemuck::cast_slice(&out_ids).to_vec()));
        }
        let total: usize = parts.iter().map(|p| p.1.len().next_multiple_of(64)).sum();
        let buf = match &self.input_buf {
            Some(b) if b.size() >= total => Arc::clone(b),
            _ => {
                let b = self.cpu.alloc_buffer(total, BufferUsage::Compute)?;
                self.input_buf = Some(Arc::clone(&b));
                b
            }
        };
        let mut off = 0;
        for (t, bytes) in parts {
            buf.write(off, &bytes)?;
            g.tensor_mut(t).data = Some(TensorData {
                buffer: Arc::clone(&buf),
                offset: off,
            });
            off += bytes.len().next_multiple_of(64);
        }
        Ok(())
    }

    /// Compute a graph. (Interim: everything on the CPU in one buffer.)
    fn run(&mut self, g: &mut Graph) -> Result<()> {
        let ids: Vec<TensorId> = g
            .ids()
            .filter(|&t| g.tensor(t).data.is_none() && g.tensor(t).view_src.is_none())
            .collect();
        let total: usize = ids
            .iter()
            .map(|&t| g.tensor(t).nbytes().next_multiple_of(64))
            .sum();
        let buf = self.cpu.alloc_buffer(total.max(64), BufferUsage::Compute)?;
        let mut off = 0;
        for t in ids {
            let n = g.tensor(t).nbytes().next_multiple_of(64);
            g.tensor_mut(t).data = Some(TensorData {
                buffer: Arc::clone(&buf),
                offset: off,
            });
            off += n;
        }
        let nodes = g.nodes().to_vec();
        self.cpu.compute(g, &nodes)?;
        Ok(())
    }

    /// Logits of output row `i` of the last `decode` (every token's row with
    /// `all_logits`, else only the last token's, row 0).
    pub fn logits(&self, i: usize) -> Option<&[f32]> {
        let n = self.model.hparams.n_vocab;
        (i < self.n_outputs).then(|| &self.logits[i * n..(i + 1) * n])
    }

    /// Transfer counters since creation or the last reset.
    pub fn stats(&self) -> TransferStats {
        self.stats
    }

    /// Zero the transfer counters.
    pub fn reset_stats(&mut self) {
        self.stats = TransferStats::default();
    }

    /// Number of logit rows kept by the last `decode`.
    pub fn n_outputs(&self) -> usize {
        self.n_outputs
    }

    /// The experts each layer selected in the last ubatch (`[layer][n_used * n_tokens]`).
    pub fn last_expert_ids(&self) -> &[Vec<i32>] {
        &self.last_expert_ids
    }
}
