//! `llama-bench`'s flags, in the order of its `--help`: its options, then
//! the test parameters (`-p`, `-n`, `-pg`, then one entry per test
//! parameter of its table, `tools::bench::params::PARAMS`, by the
//! parameter's field name). llama-bench parses them itself (lists,
//! ranges, `--flag=value`), as llama.cpp's does, so each value here is
//! [`Parse::Str`] and its name is written as the help shows it (`<n>`).
//! llama.cpp's llama-bench reads no environment variables, nor does ours.

use super::sets::BENCH;
use crate::flags::spec::{Flag, Parse};

/// `llama-bench`'s flags.
pub static FLAGS: &[Flag] = &[
    // options
    Flag::new(
        "help",
        &["-h", "--help"],
        BENCH,
        "",
    ),
    Flag::new(
        "version",
        &["--version"],
        BENCH,
        "",
    ),
    Flag::new(
        "repetitions",
        &["-r", "--repetitions"],
        BENCH,
        "repetitions of each test (default: 5)",
    )
    .takes("<n>", Parse::Str),
    Flag::new(
        "delay",
        &["--delay"],
        BENCH,
        "seconds of pause before each test (default: 0)",
    )
    .takes("<0...N>", Parse::Str),
    Flag::new(
        "timeline_out",
        &["--timeline-out"],
        BENCH,
        "simulated timeline of the last repetition on a sim device (Chrome trace)",
    )
    .takes("FILE.json", Parse::Str),
    Flag::new(
        "expert_trace_out",
        &["--expert-trace-out"],
        BENCH,
        "routing trace of the last repetition (for llama-moe-cache)",
    )
    .takes("FILE", Parse::Str),
    Flag::new(
        "expert_trace_in",
        &["--expert-trace-in"],
        BENCH,
        "forced routing: every MoE layer uses this trace's expert ids\n(token i takes trace token i, wrapping); weights stay the router's",
    )
    .takes("FILE", Parse::Str),
    Flag::new(
        "output",
        &["-o", "--output"],
        BENCH,
        "format on stdout (default: md)",
    )
    .takes("<csv|json|jsonl|md|sql>", Parse::Str),
    Flag::new(
        "output_err",
        &["-oe", "--output-err"],
        BENCH,
        "format on stderr (default: none)",
    )
    .takes("<csv|json|jsonl|md|sql>", Parse::Str),
    Flag::new(
        "list_devices",
        &["--list-devices"],
        BENCH,
        "list the devices and exit",
    ),
    Flag::new(
        "rpc",
        &["-rpc", "--rpc"],
        BENCH,
        "register RPC devices (comma separated host:port: RPC0, RPC1, ...)",
    )
    .takes("<rpc_servers>", Parse::Str),
    Flag::new(
        "verbose",
        &["-v", "--verbose"],
        BENCH,
        "print where every tensor went",
    ),
    Flag::new(
        "progress",
        &["--progress"],
        BENCH,
        "print test progress on stderr",
    ),
    Flag::new(
        "no_warmup",
        &["--no-warmup"],
        BENCH,
        "skip the warm-up run of each test",
    ),
    Flag::new(
        "no_expert_copy",
        &["--no-expert-copy"],
        BENCH,
        "copy whole expert tensors to the device (for comparison)",
    ),
    Flag::new(
        "prio",
        &["--prio"],
        BENCH,
        "process priority (only 0)",
    )
    .takes("<0>", Parse::Str),
    Flag::new(
        "numa",
        &["--numa"],
        BENCH,
        "NUMA placement (not supported)",
    )
    .takes("<mode>", Parse::Str)
    .hidden(),
    // test parameters
    Flag::new(
        "n_prompt",
        &["-p", "--n-prompt"],
        BENCH,
        "prompt lengths (default: 512)",
    )
    .takes("<n>", Parse::Str),
    Flag::new(
        "n_gen",
        &["-n", "--n-gen"],
        BENCH,
        "generation lengths (default: 128)",
    )
    .takes("<n>", Parse::Str),
    Flag::new(
        "n_pg",
        &["-pg"],
        BENCH,
        "prompt then generation (may be repeated)",
    )
    .takes("<pp,tg>", Parse::Str),
    Flag::new(
        "model_filename",
        &["-m", "--model"],
        BENCH,
        "model files (none: the embedded synthetic model)",
    )
    .takes("<FNAME>", Parse::Str),
    Flag::new(
        "fit_target",
        &["-fitt", "--fit-target"],
        BENCH,
        "fit the model to device memory with this margin (only 0: off)",
    )
    .takes("<MiB>", Parse::Str),
    Flag::new(
        "fit_min_ctx",
        &["-fitc", "--fit-ctx"],
        BENCH,
        "minimum context for --fit-target (only 0)",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "n_gpu_layers",
        &["-ngl", "--n-gpu-layers"],
        BENCH,
        "layers on the device (-1 = all; more than the layers = the output head too)",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "n_cpu_moe",
        &["-ncmoe", "--n-cpu-moe"],
        BENCH,
        "keep the expert weights of the first N layers in host memory",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "cpu_moe",
        &["-cmoe", "--cpu-moe"],
        BENCH,
        "keep every expert weight in host memory (alone: 1)",
    )
    .takes("<0|1>", Parse::Str),
    Flag::new(
        "split_mode",
        &["-sm", "--split-mode"],
        BENCH,
        "how to split the offloaded layers across the -dev set (none, layer)",
    )
    .takes("<none|layer|row|tensor>", Parse::Str),
    Flag::new(
        "load_mode",
        &["-lm", "--load-mode"],
        BENCH,
        "how the file is read (auto: none where the file takes at most half of the available memory, else mmap; none: into memory with huge pages; pin: host weights page-locked for a CUDA device, elsewhere as mmap; dio: O_DIRECT reads)",
    )
    .takes("<auto|mmap|none|mlock|pin|dio>", Parse::Str),
    Flag::new(
        "main_gpu",
        &["-mg", "--main-gpu"],
        BENCH,
        "main device index (an index into the test's -dev set; -sm none puts every offloaded layer there)",
    )
    .takes("<I>", Parse::Str),
    Flag::new(
        "devices",
        &["-dev", "--device"],
        BENCH,
        "devices for offloaded weights, a '/'-separated set per test (auto and none: host only)",
    )
    .takes("<auto|none|SIM0|SIM0/SIM1|CUDA0>", Parse::Str),
    Flag::new(
        "tensor_split",
        &["-ts", "--tensor-split"],
        BENCH,
        "split proportions across the test's -dev set, one per device (0: by free memory, else even; extra values ignored, missing ones 0)",
    )
    .takes("<TS0/TS1/..>", Parse::Str),
    Flag::new(
        "tensor_buft_overrides",
        &["-ot", "--override-tensor"],
        BENCH,
        "tensor placement rules: ';' between rules, ',' between tests",
    )
    .takes("<PATTERN=BACKEND;...>", Parse::Str),
    Flag::new(
        "no_host",
        &["--no-host"],
        BENCH,
        "bypass host buffers (only 0)",
    )
    .takes("<0|1>", Parse::Str),
    Flag::new(
        "embeddings",
        &["-embd", "--embeddings"],
        BENCH,
        "embeddings output (only 0)",
    )
    .takes("<0|1>", Parse::Str),
    Flag::new(
        "no_op_offload",
        &["-nopo", "--no-op-offload"],
        BENCH,
        "never run ops whose weights are in host memory on the device",
    )
    .takes("<0|1>", Parse::Str),
    Flag::new(
        "offload_min_batch",
        &["-nomb", "--offload-min-batch"],
        BENCH,
        "smallest batch for which the device runs an op whose weights are in host memory",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "sim_profile",
        &["--sim-profile"],
        BENCH,
        "timing profile of a sim device's simulated clock (pcie4-x16, pcie5-x16, h200-pcie5, or a JSON file)",
    )
    .takes("<NAME|FILE>", Parse::Str),
    Flag::new(
        "sim_mem_mib",
        &["--sim-mem-mib"],
        BENCH,
        "memory capacity of a sim device in MiB (none = unlimited)",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "moe_cache_mib",
        &["--moe-cache-mib"],
        BENCH,
        "device cache of host experts, MiB per device (0 = off, auto = the device's free memory)",
    )
    .takes("<N|auto>", Parse::Str),
    Flag::new(
        "prefetch_experts_slots",
        &["--prefetch-experts-slots"],
        BENCH,
        "staging slots for the prefill prefetch of host expert tensors (-1 = auto, 0 = off)",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "prefetch_selective",
        &["--prefetch-selective"],
        BENCH,
        "with --prefetch-experts-slots -1 (auto): whether auto may prefetch the experts predicted through the next router on prompt ubatches (1, the default), chooses only between whole tensors and none (0), or always takes the selective prefetch where a layer has a guess (2, for measurements)",
    )
    .takes("<0|1|2>", Parse::Str),
    Flag::new(
        "moe_predict",
        &["--moe-predict"],
        BENCH,
        "decode prediction of the next cached layer's experts (1 = through the next router, 2 = from the routing history; needs the expert cache)",
    )
    .takes("<0|1|2>", Parse::Str),
    Flag::new(
        "moe_cache_policy",
        &["--moe-cache-policy"],
        BENCH,
        "eviction policy of the expert cache: lru, slru, lrfu, hlfu (the default), nextuse, nextuse-nopredict, tlfu-lru, tlfu-slru, tlfu-lrfu, adapt",
    )
    .takes("<NAME>", Parse::Str),
    Flag::new(
        "moe_host_cache_mib",
        &["--moe-host-cache-mib"],
        BENCH,
        "host expert cache for models larger than RAM (CPU only), MiB: N, auto (what the available memory leaves) or 0 (off); default: on, as auto, only where the file does not fit in memory",
    )
    .takes("<N|auto>", Parse::Str),
    Flag::new(
        "moe_host_cache_policy",
        &["--moe-host-cache-policy"],
        BENCH,
        "eviction policy of the host expert cache: lru, slru, lrfu, hlfu (the default), nextuse, nextuse-nopredict, tlfu-lru, tlfu-slru, tlfu-lrfu, adapt",
    )
    .takes("<NAME>", Parse::Str),
    Flag::new(
        "moe_cache_max_batch",
        &["--moe-cache-max-batch"],
        BENCH,
        "largest ubatch that uses the expert cache",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "moe_cache_cpu_share",
        &["--moe-cache-cpu-share"],
        BENCH,
        "share of the cache's misses computed on the CPU: auto (cost model) or 0..1",
    )
    .takes("<auto|F>", Parse::Str),
    Flag::new(
        "moe_hybrid",
        &["--moe-hybrid"],
        BENCH,
        "hybrid experts (misses on the CPU or uploaded) on or off",
    )
    .takes("<on|off>", Parse::Str),
    Flag::new(
        "n_batch",
        &["-b", "--batch-size"],
        BENCH,
        "logical batch size",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "n_ubatch",
        &["-ub", "--ubatch-size"],
        BENCH,
        "physical batch size",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "type_k",
        &["-ctk", "--cache-type-k"],
        BENCH,
        "K cache type (f16, f32, bf16, q8_0, q4_0)",
    )
    .takes("<T>", Parse::Str),
    Flag::new(
        "type_v",
        &["-ctv", "--cache-type-v"],
        BENCH,
        "V cache type (f16, f32, bf16, q8_0, q4_0; a quantized V needs -fa 1 or auto)",
    )
    .takes("<T>", Parse::Str),
    Flag::new(
        "no_kv_offload",
        &["-nkvo", "--no-kv-offload"],
        BENCH,
        "keep the KV cache in host memory (only 0: each layer's cache is where the layer is)",
    )
    .takes("<0|1>", Parse::Str),
    Flag::new(
        "flash_attn",
        &["-fa", "--flash-attn"],
        BENCH,
        "flash attention (auto: the mul_mat/soft_max path)",
    )
    .takes("<on|off|auto>", Parse::Str),
    Flag::new(
        "n_threads",
        &["-t", "--threads"],
        BENCH,
        "CPU threads (default: the cores)",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "cpu_mask",
        &["-C", "--cpu-mask"],
        BENCH,
        "CPU affinity mask (only 0x0: no pinning)",
    )
    .takes("<HEX>", Parse::Str),
    Flag::new(
        "cpu_strict",
        &["--cpu-strict"],
        BENCH,
        "strict CPU placement (only 0)",
    )
    .takes("<0|1>", Parse::Str),
    Flag::new(
        "n_depth",
        &["-d", "--n-depth"],
        BENCH,
        "tokens already in the KV cache before each test",
    )
    .takes("<N>", Parse::Str),
    Flag::new(
        "poll",
        &["--poll"],
        BENCH,
        "thread polling level (only 50)",
    )
    .takes("<0...100>", Parse::Str),
];
