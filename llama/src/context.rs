//! The inference context: KV cache (one or several sequences), scheduler
//! and logits.
//! A tool, a test or a server drives it: tokenize, decode a batch (split
//! into ubatches), read the logits of any output row (and, with
//! [`Context::set_embeddings`], its last hidden state), sample.
//!
//! The context keeps the graph of its last ubatch: a ubatch of the same
//! shape (token count, padded KV length, output rows; one token after
//! another, while the padded KV length holds) writes its inputs (the
//! cache cells its tokens are stored at among them) and computes it again
//! ([`ggml_sched::Scheduler::compute_again`]): nothing is built, planned
//! or allocated. [`Context::host_time`] says where the host's time went.
//!
//! The MoE state is the context's [`MoeRuntime`] ([`Context::moe`]): built
//! from [`ContextParams::moe`] with the scheduler, it installs the copy hook,
//! is told of each ubatch around its graph and compute, and holds the MoE
//! counters ([`Context::moe_stats`]; [`Context::reset_stats`] resets them
//! with the context's own).

use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, CpuBackend, GgmlType, Graph, TensorData, TensorId};
use ggml_sched::Scheduler;

use crate::batch::Batch;
use crate::diagnostics;
use crate::error::{LlamaError, Result};
use crate::expert_copy::{ExpertCopyStats, IdFilter};
use crate::graph::decoder::DecoderGraph;
use crate::graph::moe::MoeGraphInputs;
use crate::graph::GraphBuilder;
use crate::kv_cache::{KvCache, SeqId, KV_PAD, MAX_SEQ};
use crate::model::Model;
use crate::moe_cache::predict::PredictStats;
use crate::moe_cache::prefetch::PrefetchStats;
use crate::moe_cache::CacheStats;
use crate::moe_runtime::{MoeParams, MoeRuntime, MoeStats};
use crate::transfer_stats::TransferStats;

/// Context settings, with llama.cpp's defaults where they apply.
#[derive(Clone, Debug)]
pub struct ContextParams {
    /// Context length in tokens (`-c`); 0 = the model's training context.
    pub n_ctx: usize,
    /// Largest batch accepted by one `decode` (`-b`).
    pub n_batch: usize,
    /// Largest batch computed in one graph (`-ub`).
    pub n_ubatch: usize,
    /// CPU threads (`-t`): the threads of a ubatch of one token (decode).
    pub n_threads: usize,
    /// CPU threads of a ubatch of more than one token (prompt batches:
    /// llama.cpp's `-tb`, `n_threads_batch`); `None` = `n_threads`.
    pub n_threads_batch: Option<usize>,
    /// KV cache element type (F16 default, F32 option): of K, and of V
    /// unless `kv_type_v` says otherwise.
    pub kv_type: GgmlType,
    /// V cache element type when it differs from K's (llama.cpp's `-ctv`).
    pub kv_type_v: Option<GgmlType>,
    /// Attention with the fused `flash_attn_ext` op (`-fa`); off by default,
    /// the `mul_mat`/`soft_max` path llama.cpp's reference logits use.
    pub flash_attn: bool,
    /// The MoE features: the selective expert copy (on), the expert cache,
    /// hybrid experts, the prefetch, decode prediction, forced routing and
    /// the recording of expert ids (all off by default in the library; the
    /// tools turn the cache and hybrid experts on).
    pub moe: MoeParams,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch: 512,
            n_threads: 2,
            n_threads_batch: None,
            kv_type: GgmlType::F16,
            kv_type_v: None,
            flash_attn: false,
            moe: MoeParams::default(),
        }
    }
}

/// Where the host's time went in the decodes since the context was made
/// (or since [`Context::reset_stats`]): wall clock, nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTime {
    /// Wall time of every decode call.
    pub decode_ns: u64,
    /// The part of it spent inside backend work: kernels, queued copies,
    /// waits on the devices (reads back, synchronizations).
    pub device_ns: u64,
    /// Building graphs and binding their inputs (a kept graph: rebinding).
    pub graph_ns: u64,
    /// Ubatches decoded.
    pub ubatches: u64,
    /// Ubatches that reused the kept graph (nothing built or planned).
    pub graphs_reused: u64,
}

impl HostTime {
    /// The host's own time: decode wall time outside backend work (graph
    /// building, planning, inputs, the scheduler's loop, the copy hook).
    pub fn host_ns(&self) -> u64 {
        self.decode_ns.saturating_sub(self.device_ns)
    }

    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &HostTime) -> HostTime {
        HostTime {
            decode_ns: self.decode_ns.saturating_sub(earlier.decode_ns),
            device_ns: self.device_ns.saturating_sub(earlier.device_ns),
            graph_ns: self.graph_ns.saturating_sub(earlier.graph_ns),
            ubatches: self.ubatches.saturating_sub(earlier.ubatches),
            graphs_reused: self.graphs_reused.saturating_sub(earlier.graphs_reused),
        }
    }
}

/// What a decode graph's structure depends on: while it holds, the kept
/// graph is computed again with new inputs (its plan, splits and compute
/// memory as they were).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GraphShape {
    n_tokens: usize,
    n_kv: usize,
    n_outputs: usize,
    /// The MoE states the graph reads ([`MoeRuntime::graph_key`]).
    moe: (usize, usize),
    /// The last hidden states are kept ([`Context::set_embeddings`]).
    embd: bool,
}

/// The last decode graph, kept for the next ubatch of the same shape.
struct KeptGraph {
    shape: GraphShape,
    g: Graph,
    dg: DecoderGraph,
    /// What the MoE layers read and what the build recorded.
    moe: MoeGraphInputs,
}

/// Lists a decode fills, kept so that a steady decode allocates nothing.
#[derive(Default)]
struct DecodeScratch {
    batch: Batch,
    out_rows: Vec<i32>,
    /// The cells a batch's tokens took, in batch order.
    stored: Vec<i64>,
    mask: Vec<f32>,
    mask_swa: Vec<f32>,
}

/// A decoding context over a model.
pub struct Context {
    model: Arc<Model>,
    params: ContextParams,
    cpu: Arc<dyn Backend>,
    /// The same CPU backend, typed: its thread count is set per ubatch.
    cpu_be: Arc<CpuBackend>,
    kv: KvCache,
    sched: Scheduler,
    /// The MoE states, their hook and their counters.
    moe: MoeRuntime,
    input_buf: Option<Arc<dyn ggml_core::Buffer>>,
    /// Forced routing's ids inputs, on the model's device when it has one
    /// (so no split copies them: the scheduler's look-ahead stops before a
    /// split with copied non-weight inputs, and decode prediction needs it).
    forced_buf: Option<Arc<dyn ggml_core::Buffer>>,
    logits: Vec<f32>,
    /// Keep the output rows' last hidden states ([`Context::set_embeddings`]).
    embeddings: bool,
    /// Those hidden states, `n_embd` per output row, in output order.
    embd: Vec<f32>,
    n_outputs: usize,
    output_of: Vec<i32>,
    /// The scheduler's copies (the expert fields come from `moe`).
    stats: TransferStats,
    kept: Option<KeptGraph>,
    scratch: DecodeScratch,
    host: HostTime,
    host_base: HostTime,
    /// The simulated clock the host's own time enters, on a sim device.
    clock: Option<Arc<dyn ggml_core::DeviceClock>>,
    /// Named F32 nodes of the last ubatch ([`Context::set_node_dump`]).
    node_dump: Option<Vec<(String, Vec<f32>)>>,
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
        // the CPU joins a sim device's clock: one simulated timeline
        let n_threads = params.n_threads.max(1);
        let n_threads_batch = params.n_threads_batch.unwrap_or(n_threads).max(1);
        let mut cpu_be = CpuBackend::new(n_threads.max(n_threads_batch));
        let clock = model
            .devices
            .iter()
            .find_map(|d| d.diagnostics().and_then(|x| x.device_clock()));
        if let Some(c) = &clock {
            cpu_be = cpu_be.with_clock(Arc::clone(c));
        }
        let cpu_be = Arc::new(cpu_be);
        let cpu: Arc<dyn Backend> = Arc::clone(&cpu_be) as Arc<dyn Backend>;
        let kv = KvCache::with_types(
            &model,
            params.n_ctx,
            params.kv_type,
            params.kv_type_v.unwrap_or(params.kv_type),
            params.flash_attn,
            &cpu,
        )?;
        let mut backends: Vec<Arc<dyn Backend>> = Vec::new();
        for d in &model.devices {
            backends.push(Arc::clone(d));
        }
        backends.push(Arc::clone(&cpu));
        let mut sched = Scheduler::new(backends).map_err(|e| LlamaError::Sched(e.to_string()))?;
        sched.set_observer(Box::new(diagnostics::CopyLabels));
        let moe = MoeRuntime::new(&model, &params.moe, params.n_ubatch, &cpu, &kv, &mut sched)?;
        // the compute alias may have shrunk the prompt's ubatch to what the
        // cache can lend
        if let Some(a) = moe.alias().filter(|a| a.on) {
            params.n_ubatch = params.n_ubatch.min(a.ubatch.max(1));
        }
        // a host cache serves every ubatch: none needs more experts at
        // once than a layer's slots hold
        if let Some(m) = moe.max_ubatch() {
            params.n_ubatch = params.n_ubatch.min(m.max(1));
        }
        Ok(Context {
            model,
            params,
            cpu,
            cpu_be,
            kv,
            sched,
            moe,
            input_buf: None,
            forced_buf: None,
            logits: Vec::new(),
            embeddings: false,
            embd: Vec::new(),
            n_outputs: 0,
            output_of: Vec::new(),
            stats: TransferStats::default(),
            kept: None,
            scratch: DecodeScratch::default(),
            host: HostTime::default(),
            host_base: HostTime::default(),
            clock,
            node_dump: None,
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

    /// Graphs the scheduler planned so far (a graph of the structure of the
    /// previous one reuses its plan: a decode re-plans only when the padded
    /// KV length grows).
    pub fn sched_plans(&self) -> usize {
        self.sched.n_plans()
    }

    /// Compute memory the scheduler holds per backend, `(name, bytes)`
    /// (what `--fit`'s compute estimate bounds).
    pub fn compute_buffer_sizes(&self) -> Vec<(String, usize)> {
        self.sched.compute_buffer_sizes()
    }

    /// The context's CPU backend (its thread count is that of the last
    /// ubatch: [`ContextParams::n_threads`] for one token,
    /// [`ContextParams::n_threads_batch`] for more).
    pub fn cpu_backend(&self) -> &CpuBackend {
        &self.cpu_be
    }

    /// Context length.
    pub fn n_ctx(&self) -> usize {
        self.kv.size
    }

    /// The KV cache (its memory, for size checks).
    pub fn kv_cache(&self) -> &KvCache {
        &self.kv
    }

    /// Tokens in the cache.
    pub fn n_past(&self) -> usize {
        self.kv.n_past
    }

    /// Forget every sequence.
    pub fn clear(&mut self) {
        self.kv.clear();
        self.logits.clear();
        self.n_outputs = 0;
        self.output_of.clear();
    }

    /// Remove positions `p0..p1` (`p1 < 0`: to the end) of sequence `s`
    /// (`s < 0`: of all) from the cache ([`KvCache::seq_rm`]).
    pub fn seq_rm(&mut self, s: SeqId, p0: i32, p1: i32) {
        self.kv.seq_rm(s, p0, p1);
    }

    /// Let `dst` share the cells of `src` at positions `p0..p1`
    /// ([`KvCache::seq_cp`]): a common prompt prefix decoded once.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: i32, p1: i32) {
        self.kv.seq_cp(src, dst, p0, p1);
    }

    /// The largest position sequence `s` holds in the cache.
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.kv.seq_pos_max(s)
    }

    /// Tokenize text with the model's vocabulary.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        self.model
            .tokenizer
            .tokenize(text, add_special, parse_special)
            .map_err(|e| LlamaError::Tokenizer(e.to_string()))
    }

    /// Decode `tokens` at the next positions of sequence 0. With
    /// `all_logits`, logits are kept for every token; otherwise for the last
    /// one only. (The single-sequence form of [`Context::decode_batch`].)
    pub fn decode(&mut self, tokens: &[i32], all_logits: bool) -> Result<()> {
        if tokens.is_empty() {
            return Err(LlamaError::Batch("empty batch".into()));
        }
        let start = self.kv.seq_pos_max(0).map_or(0, |p| p + 1);
        let free = self.kv.size - self.kv.used_cells();
        if tokens.len() > free {
            return Err(LlamaError::ContextFull(format!(
                "{} tokens after {} in a context of {} (-c)",
                tokens.len(),
                self.kv.used_cells(),
                self.kv.size
            )));
        }
        let mut batch = std::mem::take(&mut self.scratch.batch);
        batch.clear();
        for (i, &t) in tokens.iter().enumerate() {
            let out = all_logits || i + 1 == tokens.len();
            batch.add(t, start + i as i32, 0, out);
        }
        let r = self.decode_batch(&batch);
        self.scratch.batch = batch;
        r
    }

    /// Decode a batch mixing tokens of any sequences (split into ubatches
    /// of at most `-ub` tokens, each token stored in a free cell). Each
    /// token's position must follow its sequence's last one (in the cache
    /// or earlier in the batch). Logits are kept for the tokens flagged in
    /// `batch.logits`, in batch order: [`Context::logits`] reads output row
    /// `i`, [`Context::batch_logits`] the row of batch token `j`.
    pub fn decode_batch(&mut self, batch: &Batch) -> Result<()> {
        let t0 = std::time::Instant::now();
        let r = self.decode_batch_timed(batch);
        self.host.decode_ns += t0.elapsed().as_nanos() as u64;
        r
    }

    fn decode_batch_timed(&mut self, batch: &Batch) -> Result<()> {
        self.check_batch(batch)?;
        let n_vocab = self.model.hparams.n_vocab;
        let n_total_out = batch.n_outputs();
        // the last batch's logits and lists keep their memory
        let mut logits = std::mem::take(&mut self.logits);
        logits.clear();
        logits.reserve(n_total_out * n_vocab);
        self.moe.begin_batch();
        let mut stored = std::mem::take(&mut self.scratch.stored);
        stored.clear();
        self.embd.clear();
        let r = self.decode_ubatches(batch, &mut logits, &mut stored);
        if let Err(e) = r {
            // a failed batch leaves the cache as it was
            self.kv.release(&stored);
            self.scratch.stored = stored;
            logits.clear();
            self.logits = logits;
            self.embd.clear();
            self.n_outputs = 0;
            self.output_of.clear();
            return Err(e);
        }
        self.scratch.stored = stored;
        self.logits = logits;
        self.n_outputs = n_total_out;
        let mut row = 0;
        self.output_of.clear();
        self.output_of.extend(batch.logits.iter().map(|&l| {
            if l {
                row += 1;
                row - 1
            } else {
                -1
            }
        }));
        Ok(())
    }

    /// The ubatches of a checked batch; `stored` collects the cells taken,
    /// so that a failure can free them.
    fn decode_ubatches(
        &mut self,
        batch: &Batch,
        logits: &mut Vec<f32>,
        stored: &mut Vec<i64>,
    ) -> Result<()> {
        let mut i = 0;
        while i < batch.len() {
            // a ubatch of consecutive tokens, each in the first free cell
            // after its sequence's cells ([`KvCache::place`]: each
            // sequence's cells stay in position order, and its attention
            // gives the bits it gives alone)
            let n = self.params.n_ubatch.min(batch.len() - i);
            let r = i..i + n;
            let c0 = stored.len();
            self.kv
                .place(&batch.pos[r.clone()], &batch.seq_id[r.clone()], stored)
                .ok_or_else(|| {
                    LlamaError::ContextFull(format!(
                        "no free cell for the {n} tokens from sequence {} on in a context of {} (-c)",
                        batch.seq_id[i], self.kv.size
                    ))
                })?;
            let mut out_rows = std::mem::take(&mut self.scratch.out_rows);
            out_rows.clear();
            out_rows.extend(
                batch.logits[r.clone()]
                    .iter()
                    .enumerate()
                    .filter(|(_, &l)| l)
                    .map(|(k, _)| k as i32),
            );
            let res = self.decode_ubatch(batch, r, &stored[c0..], &out_rows, logits);
            self.scratch.out_rows = out_rows;
            res?;
            i += n;
        }
        Ok(())
    }

    /// Errs on an empty or oversized batch, ragged arrays, a token id out of
    /// the vocabulary, a sequence id out of range, a position that does not
    /// follow its sequence, or more tokens than free cells.
    fn check_batch(&self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Err(LlamaError::Batch("empty batch".into()));
        }
        let n = batch.len();
        if batch.pos.len() != n || batch.seq_id.len() != n || batch.logits.len() != n {
            return Err(LlamaError::Batch(format!(
                "batch arrays differ in length: {} tokens, {} positions, {} sequence ids, {} logits flags",
                n,
                batch.pos.len(),
                batch.seq_id.len(),
                batch.logits.len()
            )));
        }
        if n > self.params.n_batch {
            return Err(LlamaError::Batch(format!(
                "{} tokens exceed the batch size {} (-b)",
                n, self.params.n_batch
            )));
        }
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&bad) = batch
            .tokens
            .iter()
            .find(|&&t| t < 0 || t as usize >= n_vocab)
        {
            return Err(LlamaError::Batch(format!(
                "token id {bad} is out of range (vocabulary of {n_vocab})"
            )));
        }
        let mut next: [Option<i32>; MAX_SEQ] = [None; MAX_SEQ];
        for (&s, &p) in batch.seq_id.iter().zip(&batch.pos) {
            if !(0..MAX_SEQ as i32).contains(&s) {
                return Err(LlamaError::Batch(format!(
                    "sequence id {s} is out of range (0..{MAX_SEQ})"
                )));
            }
            let want =
                next[s as usize].unwrap_or_else(|| self.kv.seq_pos_max(s).map_or(0, |m| m + 1));
            if p != want {
                return Err(LlamaError::Batch(format!(
                    "position {p} of sequence {s} does not follow its last position (expected {want})"
                )));
            }
            next[s as usize] = Some(p + 1);
        }
        let free = self.kv.size - self.kv.used_cells();
        if n > free {
            return Err(LlamaError::ContextFull(format!(
                "{n} tokens with {free} free cells in a context of {} (-c)",
                self.kv.size
            )));
        }
        Ok(())
    }

    /// Decode one ubatch, appending its output rows' logits to `logits`.
    /// A ubatch of the shape of the last one (one token after another,
    /// while the padded KV length holds) computes the kept graph again:
    /// only its inputs are written (the cells it stores at among them), and the
    /// scheduler runs its plan as it was (nothing built, planned or
    /// allocated).
    fn decode_ubatch(
        &mut self,
        batch: &Batch,
        r: std::ops::Range<usize>,
        cells: &[i64],
        out_rows: &[i32],
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        let t_graph = std::time::Instant::now();
        let n_tokens = r.len();
        let n_out = out_rows.len();
        // with no output row the graph still computes the last one
        let last = [n_tokens as i32 - 1];
        let out_rows = if n_out == 0 { &last[..] } else { out_rows };
        // pad the attended cells so that the graph's shape (and the
        // scheduler's plan) stays the same for runs of tokens (llama.cpp: 32)
        let n_kv = self.kv.n_kv(KV_PAD, 0);
        let shape = GraphShape {
            n_tokens,
            n_kv,
            n_outputs: out_rows.len(),
            moe: self.moe.graph_key(),
            embd: self.embeddings,
        };
        self.moe.begin_ubatch(n_tokens);
        let mut kept = match self.kept.take() {
            Some(k) if k.shape == shape => {
                self.host.graphs_reused += 1;
                k
            }
            _ => {
                let mut k = self.build_graph(shape)?;
                self.layout_inputs(&mut k)?;
                k
            }
        };
        self.moe.graph_chosen(n_tokens, &kept.moe);
        let r = self.write_inputs(&kept, batch, r, cells, n_kv, out_rows);
        let graph_ns = t_graph.elapsed().as_nanos() as u64;
        self.host.graph_ns += graph_ns;
        self.host.ubatches += 1;
        if let Some(c) = &self.clock {
            c.host_work("graph", graph_ns);
        }
        let r = r.and_then(|()| self.compute_ubatch(&mut kept, n_tokens, n_out, logits));
        // a graph that failed to compute is not kept
        if r.is_ok() {
            self.kept = Some(kept);
        }
        r
    }

    /// Build the graph of a ubatch of `shape` (stored at the cells its
    /// `kv_idxs` input names).
    fn build_graph(&mut self, shape: GraphShape) -> Result<KeptGraph> {
        let model = Arc::clone(&self.model);
        let mut b = GraphBuilder::new(&model);
        b.moe = self.moe.graph_inputs(shape.n_tokens);
        b.want_embd = shape.embd;
        let dg = b.build_decoder(&self.kv, shape.n_tokens, shape.n_kv, shape.n_outputs);
        if self.node_dump.is_some() {
            // every named F32 node keeps its memory, to be read after compute
            for &n in b.g.nodes().to_vec().iter() {
                let t = b.g.tensor(n);
                if !t.name.is_empty() && t.ty == ggml_core::GgmlType::F32 && t.view_src.is_none() {
                    b.g.set_output(n);
                }
            }
        }
        Ok(KeptGraph {
            shape,
            g: b.g,
            dg,
            moe: b.moe,
        })
    }

    /// Compute a ubatch's graph (inputs written), then read its logits and
    /// expert ids.
    fn compute_ubatch(
        &mut self,
        kept: &mut KeptGraph,
        n_tokens: usize,
        n_out: usize,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        // llama.cpp: n_threads for a token, n_threads_batch for a batch
        let n_threads = self.params.n_threads.max(1);
        self.cpu_be.set_n_threads(if n_tokens > 1 {
            self.params.n_threads_batch.unwrap_or(n_threads)
        } else {
            n_threads
        });
        let g = &mut kept.g;
        let t_run = std::time::Instant::now();
        let busy0 = self.busy_ns();
        self.run(g)?;
        let wait_ns = self.sched.last_stats().wait_ns;
        let dg = &kept.dg;
        self.moe.after_compute(g, &dg.expert_ids, n_tokens)?;
        if n_out > 0 {
            read_f32_into(g, dg.logits, logits)?;
        }
        if let Some(d) = self.node_dump.as_mut() {
            d.clear();
            for &n in g.nodes() {
                let t = g.tensor(n);
                if t.flags.output
                    && !t.name.is_empty()
                    && t.ty == ggml_core::GgmlType::F32
                    && t.view_src.is_none()
                {
                    d.push((t.name.clone(), g.read_f32(n)?));
                }
            }
        }
        let run_ns = t_run.elapsed().as_nanos() as u64;
        // backend work: what the backends were busy with (kernels, copies
        // in device memory, the copy hook's and the reads' included) and
        // the scheduler's waits
        let device_ns = self.busy_ns().saturating_sub(busy0) + wait_ns;
        self.host.device_ns += device_ns;
        if let Some(c) = &self.clock {
            c.host_work("scheduler", run_ns.saturating_sub(device_ns));
        }
        if let Some(e) = kept.dg.embd {
            self.embd.extend_from_slice(&kept.g.read_f32(e)?);
        }
        Ok(())
    }

    /// The backends' busy wall time so far
    /// ([`ggml_core::BackendDiagnostics::busy_wall_ns`]).
    fn busy_ns(&self) -> u64 {
        diagnostics::busy_wall_ns(self.cpu.as_ref())
            + self
                .model
                .devices
                .iter()
                .map(|d| diagnostics::busy_wall_ns(d.as_ref()))
                .sum::<u64>()
    }

    /// Give a new graph's input tensors memory in the context's input
    /// buffer (grown when too small).
    fn layout_inputs(&mut self, k: &mut KeptGraph) -> Result<()> {
        let dg = &k.dg;
        let ids: Vec<TensorId> = [dg.tokens, dg.pos, dg.kv_idxs, dg.mask]
            .into_iter()
            .chain(dg.out_ids)
            .chain(dg.mask_swa)
            .chain(dg.k_rot)
            .chain(dg.v_rot)
            .chain(k.moe.forced_ids_host.iter().map(|&(_, t)| t))
            .collect();
        let forced: Vec<TensorId> = k.moe.forced_ids.iter().map(|&(_, t)| t).collect();
        match self.model.device.clone() {
            // forced ids on the device, as a router's ids would be
            Some(dev) => {
                let mut buf = self.forced_buf.take();
                Self::place(&mut k.g, &ids, &self.cpu, &mut self.input_buf)?;
                let r = Self::place(&mut k.g, &forced, &dev, &mut buf);
                self.forced_buf = buf;
                r
            }
            None => {
                let all: Vec<TensorId> = ids.into_iter().chain(forced).collect();
                Self::place(&mut k.g, &all, &self.cpu, &mut self.input_buf)
            }
        }
    }

    /// Give `ids` memory in `slot`'s buffer on `be`, one after another (the
    /// buffer grown when too small).
    fn place(
        g: &mut Graph,
        ids: &[TensorId],
        be: &Arc<dyn Backend>,
        slot: &mut Option<Arc<dyn ggml_core::Buffer>>,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let total: usize = ids
            .iter()
            .map(|&t| g.tensor(t).nbytes().next_multiple_of(64))
            .sum();
        let buf = match slot {
            Some(b) if b.size() >= total => Arc::clone(b),
            _ => {
                let b = be.alloc_buffer(total, BufferUsage::Compute)?;
                *slot = Some(Arc::clone(&b));
                b
            }
        };
        let mut off = 0;
        for &t in ids {
            let n = g.tensor(t).nbytes();
            g.tensor_mut(t).data = Some(TensorData {
                buffer: Arc::clone(&buf),
                offset: off,
            });
            off += n.next_multiple_of(64);
        }
        Ok(())
    }

    /// Write a ubatch's inputs into its graph's input tensors. The mask
    /// lets a token see the cells of its own sequence at positions up to
    /// its own (and, through a sliding window, after `pos - n_swa`).
    fn write_inputs(
        &mut self,
        k: &KeptGraph,
        batch: &Batch,
        r: std::ops::Range<usize>,
        kv_idxs: &[i64],
        n_kv: usize,
        out_rows: &[i32],
    ) -> Result<()> {
        let (g, dg) = (&k.g, &k.dg);
        let n = r.len();
        let pos = &batch.pos[r.clone()];
        let seq = &batch.seq_id[r.clone()];
        let cells = &self.kv.cells()[..n_kv];
        let w = self.model.hparams.n_swa as i64;
        let mask = &mut self.scratch.mask;
        mask.clear();
        mask.resize(n_kv * n, f32::NEG_INFINITY);
        let mask_swa = &mut self.scratch.mask_swa;
        mask_swa.clear();
        let swa = dg.mask_swa.is_some();
        if swa {
            mask_swa.resize(n_kv * n, f32::NEG_INFINITY);
        }
        for i in 0..n {
            let p = pos[i];
            for (j, c) in cells.iter().enumerate() {
                if c.has_seq(seq[i]) && c.pos <= p {
                    mask[i * n_kv + j] = 0.0;
                    // sliding window (gpt-oss): p - n_swa < pos_j <= p
                    if swa && i64::from(c.pos) > i64::from(p) - w {
                        mask_swa[i * n_kv + j] = 0.0;
                    }
                }
            }
        }
        g.write_bytes(dg.tokens, bytemuck::cast_slice(&batch.tokens[r]))?;
        g.write_bytes(dg.pos, bytemuck::cast_slice(pos))?;
        g.write_bytes(dg.kv_idxs, bytemuck::cast_slice(kv_idxs))?;
        g.write_bytes(dg.mask, bytemuck::cast_slice(mask))?;
        if let Some(o) = dg.out_ids {
            g.write_bytes(o, bytemuck::cast_slice(out_rows))?;
        }
        if let Some(t) = dg.mask_swa {
            g.write_bytes(t, bytemuck::cast_slice(mask_swa))?;
        }
        // (another graph may have used the input buffer since: the
        // rotations are written every time too)
        for t in [dg.k_rot, dg.v_rot].into_iter().flatten() {
            let n = g.tensor(t).ne[0] as usize;
            let h = self.kv.rotation.matrix(n).ok_or_else(|| {
                LlamaError::Invalid(format!("no {n}x{n} rotation for this KV cache"))
            })?;
            g.write_bytes(t, bytemuck::cast_slice(h))?;
        }
        // forced routing's ids
        k.moe.set_inputs(g, pos, out_rows)
    }

    /// Compute a graph through the scheduler (again, with its plan as it
    /// was, when it is the graph of the last compute) and add up what it
    /// moved.
    fn run(&mut self, g: &mut Graph) -> Result<()> {
        let st = self
            .sched
            .compute_again(g)
            .map_err(|e| LlamaError::Sched(e.to_string()))?;
        let cpu = self.cpu.name();
        for p in &st.pairs {
            let via_host = p.sched_bytes - p.peer_bytes;
            if p.dst != cpu {
                self.stats.h2d_bytes_other += via_host;
                if p.src != cpu {
                    self.stats.d2d_bytes_via_host += via_host;
                }
            }
            self.stats.d2d_bytes += p.peer_bytes;
        }
        self.stats.graphs += 1;
        Ok(())
    }

    /// Where the host's time went in the decodes since creation or the
    /// last [`Context::reset_stats`] (wall clock; see [`HostTime`]).
    pub fn host_time(&self) -> HostTime {
        self.host.since(&self.host_base)
    }

    /// The simulated clock of the run, when the device is a sim device
    /// (shared by the device and the context's CPU backend).
    pub fn sim_clock(&self) -> Option<Arc<ggml_core::SimClock>> {
        self.model
            .device
            .as_ref()
            .and_then(|d| ggml_core::SimClock::of(d.as_ref()))
    }

    /// The device backend's pipeline counters so far (device-wide syncs,
    /// router id reads, launches, graph replays; [`ggml_core::pipeline`]);
    /// zeros without a device or on one that keeps none.
    pub fn pipeline_counts(&self) -> ggml_core::PipelineCounts {
        self.model
            .device
            .as_ref()
            .and_then(|d| d.diagnostics()?.pipeline_counters().map(|c| c.snapshot()))
            .unwrap_or_default()
    }

    /// The network links' counters so far, summed over the model's RPC
    /// workers (devices of one worker share a link and count once;
    /// [`ggml_core::link`]); `None` when no device is on another host.
    pub fn link_counts(&self) -> Option<ggml_core::LinkCounts> {
        let mut seen: Vec<*const ggml_core::LinkCounters> = Vec::new();
        let mut sum: Option<ggml_core::LinkCounts> = None;
        for d in &self.model.devices {
            if let Some(c) = d.diagnostics().and_then(|x| x.link_counters()) {
                let p = c as *const ggml_core::LinkCounters;
                if !seen.contains(&p) {
                    seen.push(p);
                    sum.get_or_insert_with(Default::default).add(&c.snapshot());
                }
            }
        }
        sum
    }

    /// Splits of the last graph the scheduler computed.
    pub fn last_n_splits(&self) -> usize {
        self.sched.last_stats().n_splits
    }

    /// The scheduler's plan of the last graph (which node on which backend,
    /// splits, inputs), for `--verbose`.
    pub fn plan_dump(&self) -> String {
        self.sched.plan_dump()
    }

    /// The MoE states: their counters, the prefetch's slots, the recorded
    /// expert ids ([`MoeRuntime`]).
    pub fn moe(&self) -> &MoeRuntime {
        &self.moe
    }

    /// Every MoE counter since creation or the last reset ([`MoeStats`]).
    pub fn moe_stats(&self) -> MoeStats {
        self.moe.stats()
    }

    /// The expert copy policy's counters since creation or the last reset.
    pub fn expert_copy_stats(&self) -> ExpertCopyStats {
        self.moe.expert_copy_stats()
    }

    /// Install (or remove) a function applied to every expert-ids tensor the
    /// policy reads, before validation. For tests that poison ids.
    pub fn set_expert_id_filter(&mut self, f: Option<IdFilter>) {
        self.moe.set_expert_id_filter(f);
    }

    /// Keep (or not) the last hidden states (the final norm's output) of
    /// the output rows of each decode, for embeddings
    /// ([`Context::batch_embeddings`]).
    pub fn set_embeddings(&mut self, on: bool) {
        self.embeddings = on;
        if !on {
            self.embd.clear();
        }
    }

    /// The last hidden state (`n_embd` values) of batch token `j` of the
    /// last `decode_batch`, when embeddings are on and its logits were
    /// asked for.
    pub fn batch_embeddings(&self, j: usize) -> Option<&[f32]> {
        let n = self.model.hparams.n_embd;
        let row = usize::try_from(*self.output_of.get(j)?).ok()?;
        self.embd.get(row * n..(row + 1) * n)
    }

    /// Keep (`true`) or stop keeping the named F32 nodes of every ubatch's
    /// graph, for [`Context::node_dump`] (a debugging aid, like llama.cpp's
    /// eval callback: every such node keeps its own memory, so graphs use
    /// more of it). The kept graph is rebuilt.
    pub fn set_node_dump(&mut self, on: bool) {
        self.node_dump = on.then(Vec::new);
        self.kept = None;
    }

    /// The named F32 nodes of the last ubatch, in graph order, when
    /// [`Context::set_node_dump`] is on.
    pub fn node_dump(&self) -> &[(String, Vec<f32>)] {
        self.node_dump.as_deref().unwrap_or(&[])
    }

    /// Logits of output row `i` of the last `decode` (every token's row with
    /// `all_logits`, else only the last token's, row 0).
    pub fn logits(&self, i: usize) -> Option<&[f32]> {
        let n = self.model.hparams.n_vocab;
        (i < self.n_outputs).then(|| &self.logits[i * n..(i + 1) * n])
    }

    /// Transfer counters since creation or the last reset. Cache uploads
    /// count as expert bytes; a cached layer's ubatch counts as a full copy
    /// of its experts would (so the ratio to full copies stays meaningful).
    pub fn stats(&self) -> TransferStats {
        let mut t = self.stats;
        self.moe.stats().expert_traffic(&mut t);
        t
    }

    /// Zero the transfer counters (and the cache's).
    pub fn reset_stats(&mut self) {
        self.stats = TransferStats::default();
        self.host_base = self.host;
        self.moe.reset();
    }

    /// The host expert cache's counters since creation or the last reset;
    /// `None` without one ([`crate::moe_cache::host`]).
    pub fn host_cache_stats(&self) -> Option<crate::moe_cache::host::HostCacheStats> {
        self.moe.host_cache_stats()
    }

    /// Make the host expert cache read the model file through `src` from
    /// now on: fault injection for tests (a source failing with `EIO`, or
    /// ending early); false without a host cache.
    pub fn set_host_cache_source(
        &self,
        src: Box<dyn crate::moe_cache::host::disk::ReadAt>,
    ) -> bool {
        self.moe.set_host_cache_source(src)
    }

    /// Why the host cache reads through the page cache, when it does.
    pub fn host_cache_note(&self) -> Option<String> {
        self.moe.host_cache_note()
    }

    /// Check the host cache's invariants (tests; nothing without one).
    pub fn verify_host_cache(&self) -> Result<()> {
        self.moe.verify_host_cache()
    }

    /// The decode prediction's counters since creation or the last reset;
    /// `None` when `--moe-predict` is off or there is no cache.
    pub fn predict_stats(&self) -> Option<PredictStats> {
        self.moe.predict_stats()
    }

    /// Each device's counters since creation or the last reset, in
    /// [`Model::devices`] order (empty without devices).
    pub fn device_stats(&self) -> Vec<crate::DeviceStats> {
        self.moe.device_stats(&self.model)
    }

    /// The prefill prefetch's counters since creation or the last reset;
    /// `None` when `--prefetch-experts-slots` is off or has nothing to do
    /// (no device, or no experts in host memory).
    pub fn prefetch_stats(&self) -> Option<PrefetchStats> {
        self.moe.prefetch_stats()
    }

    /// The prefetch's staging slots: `(slots made, bytes per slot, note)`,
    /// the note saying why fewer slots than asked for were made.
    pub fn prefetch_slots(&self) -> Option<(usize, usize, Option<String>)> {
        self.moe.prefetch_slots()
    }

    /// The expert cache's counters since creation or the last reset; `None`
    /// when there is no cache (off, no device, or no experts in host memory).
    pub fn moe_cache_stats(&self) -> Option<CacheStats> {
        self.moe.cache_stats()
    }

    /// Check the cache's invariants: the slot maps, the slots' owners and
    /// the policy agree, and every resident expert's bytes in the device's
    /// banks equal the host expert's (reads the banks back: for tests).
    pub fn moe_cache_verify(&self) -> Result<()> {
        self.moe.verify_cache()
    }

    /// Logits of batch token `j` of the last [`Context::decode_batch`]
    /// (`None` unless its logits were asked for).
    pub fn batch_logits(&self, j: usize) -> Option<&[f32]> {
        let row = *self.output_of.get(j)?;
        usize::try_from(row).ok().and_then(|r| self.logits(r))
    }

    /// Number of logit rows kept by the last `decode`.
    pub fn n_outputs(&self) -> usize {
        self.n_outputs
    }

    /// The experts each layer selected in the last ubatch
    /// (`[layer][n_used * n_tokens]`, empty for a dense layer); empty unless
    /// [`MoeParams::record_expert_ids`].
    pub fn last_expert_ids(&self) -> &[Vec<i32>] {
        self.moe.last_expert_ids()
    }

    /// Start recording a routing trace ([`crate::moe_cache::trace`]): every
    /// ubatch decoded from now on adds its token count and each MoE
    /// layer's ids (turns [`MoeParams::record_expert_ids`] on).
    pub fn start_expert_trace(&mut self) {
        self.params.moe.record_expert_ids = true;
        self.moe.start_expert_trace(&self.model);
    }

    /// The trace recorded since [`Context::start_expert_trace`] (recording
    /// stops).
    pub fn take_expert_trace(&mut self) -> Option<crate::moe_cache::Trace> {
        self.moe.take_expert_trace()
    }
}

/// Append the values of a F32 tensor to `out` (read in place when the
/// tensor is contiguous F32, else through [`Graph::read_f32`]).
fn read_f32_into(g: &Graph, id: TensorId, out: &mut Vec<f32>) -> Result<()> {
    let t = g.tensor(id);
    if t.ty != GgmlType::F32 || !t.is_contiguous() {
        out.extend_from_slice(&g.read_f32(id)?);
        return Ok(());
    }
    let d = g
        .data_of(id)
        .ok_or_else(|| LlamaError::Invalid(format!("output '{}' has no memory", t.name)))?;
    let start = out.len();
    out.resize(start + t.nelements() as usize, 0.0);
    d.buffer
        .read(d.offset, bytemuck::cast_slice_mut(&mut out[start..]))?;
    Ok(())
}
