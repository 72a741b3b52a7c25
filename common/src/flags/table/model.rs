//! The flags `llama-run` and `llama-server` share: the model, llama.cpp's
//! placement flags, batch sizes and flash attention, the expert cache,
//! `--fit` and the prefetch.

use llama::moe_cache::predict::MoePredict;

use super::sets::RUN_SERVER;
use crate::flags::spec::{Flag, Parse};

/// The flags `llama-run` and `llama-server` share.
pub static FLAGS: &[Flag] = &[
    Flag::new(
        "model",
        &["-m", "--model"],
        RUN_SERVER,
        "model path (GGUF); default: the embedded synthetic model",
    )
    .takes("FNAME", Parse::Path)
    .env("LLAMA_ARG_MODEL"),
    Flag::new(
        "batch_size",
        &["-b", "--batch-size"],
        RUN_SERVER,
        "logical maximum batch size",
    )
    .takes("N", Parse::Usize)
    .default("2048")
    .env("LLAMA_ARG_BATCH"),
    Flag::new(
        "ubatch_size",
        &["-ub", "--ubatch-size"],
        RUN_SERVER,
        "physical maximum batch size",
    )
    .takes("N", Parse::Usize)
    .default("512")
    .env("LLAMA_ARG_UBATCH"),
    Flag::new(
        "flash_attn",
        &["-fa", "--flash-attn"],
        RUN_SERVER,
        "flash attention: on, off or auto (`-fa` alone = on; auto keeps the mul_mat/soft_max attention path, the one llama.cpp's reference logits are made with, except with a quantized V cache, which needs flash attention)",
    )
    .takes("on|off|auto", Parse::FlashAttn)
    .default("off")
    .alone("on")
    .env("LLAMA_ARG_FLASH_ATTN"),
    Flag::new(
        "device",
        &["-dev", "--device"],
        RUN_SERVER,
        "devices for offloaded weights, comma-separated: CPU (none), SIM0,SIM1,.. (simulated devices: CPU kernels, device memory semantics, counted copies, one simulated clock), CUDA0,CUDA1,.. (when built with CUDA); with several, -sm/-ts/-mg say how layers spread over them",
    )
    .takes("DEV[,DEV..]", Parse::Str)
    .env("LLAMA_ARG_DEVICE"),
    Flag::new(
        "rpc",
        &["--rpc"],
        RUN_SERVER,
        "comma-separated list of RPC servers (host:port): each device of each stock ggml-rpc-server (protocol 7.0.0) becomes a device RPC0, RPC1, ... for --device, -ts and -ot; with no --device, the offloaded layers go to them (GGML_RPC_TIMEOUT: seconds a worker may take to answer, default 120)",
    )
    .takes("SERVERS", Parse::Str)
    .env("LLAMA_ARG_RPC"),
    Flag::new(
        "split_mode",
        &["-sm", "--split-mode"],
        RUN_SERVER,
        "how to split the offloaded layers across the devices: layer (default: consecutive layers per device, in -ts proportions) or none (every offloaded layer on the -mg device); row is not supported",
    )
    .takes("none|layer", Parse::Str)
    .env("LLAMA_ARG_SPLIT_MODE"),
    Flag::new(
        "tensor_split",
        &["-ts", "--tensor-split"],
        RUN_SERVER,
        "each device's share of the offloaded layers, one value per --device, e.g. 3,1 (default: by free memory where every device reports it, else even; as in llama.cpp, extra values are ignored and missing ones are 0, with a warning)",
    )
    .takes("N0,N1,..", Parse::Str)
    .env("LLAMA_ARG_TENSOR_SPLIT"),
    Flag::new(
        "main_gpu",
        &["-mg", "--main-gpu"],
        RUN_SERVER,
        "the device (an index into --device) that holds every offloaded layer with -sm none (default 0)",
    )
    .takes("I", Parse::I64)
    .negative()
    .env("LLAMA_ARG_MAIN_GPU"),
    Flag::new(
        "n_gpu_layers",
        &["-ngl", "--n-gpu-layers", "--gpu-layers"],
        RUN_SERVER,
        "number of layers to store on the device (default with --device: all; -1 = all; more than the layer count also offloads the output head)",
    )
    .takes("N", Parse::I64)
    .negative()
    .env("LLAMA_ARG_N_GPU_LAYERS"),
    Flag::new(
        "override_tensor",
        &["-ot", "--override-tensor"],
        RUN_SERVER,
        "override tensor placement: PATTERN=BACKEND,... (regex search on tensor names, first match wins; BACKEND is CPU or the --device), e.g. -ot \"blk\\.(1[0-9])\\.ffn_.*_exps=CPU\"; may be repeated",
    )
    .takes("PATTERN=BACKEND,...", Parse::Str)
    .env("LLAMA_ARG_OVERRIDE_TENSOR"),
    Flag::new(
        "cpu_moe",
        &["-cmoe", "--cpu-moe"],
        RUN_SERVER,
        "keep all MoE expert weights in host memory",
    )
    .env("LLAMA_ARG_CPU_MOE"),
    Flag::new(
        "n_cpu_moe",
        &["-ncmoe", "--n-cpu-moe"],
        RUN_SERVER,
        "keep the MoE expert weights of the first N layers in host memory",
    )
    .takes("N", Parse::Usize)
    .env("LLAMA_ARG_N_CPU_MOE"),
    Flag::new(
        "no_expert_copy",
        &["--no-expert-copy"],
        RUN_SERVER,
        "copy whole expert tensors to the device instead of only the experts the router picked (for comparison)",
    ),
    Flag::new(
        "offload_min_batch",
        &["-nomb", "--offload-min-batch"],
        RUN_SERVER,
        "smallest batch for which the device runs an op whose weights are in host memory (copying them in); smaller batches run such ops on the CPU (llama.cpp's GGML_OP_OFFLOAD_MIN_BATCH)",
    )
    .takes("N", Parse::Usize)
    .default("32"),
    Flag::new(
        "sim_profile",
        &["--sim-profile"],
        RUN_SERVER,
        "timing profile of the sim device's simulated clock: a preset (pcie4-x16, pcie5-x16, h200-pcie5) or a JSON file (keys in docs/timeline.md); default pcie4-x16",
    )
    .takes("NAME|FILE.json", Parse::Str),
    Flag::new(
        "sim_mem_mib",
        &["--sim-mem-mib"],
        RUN_SERVER,
        "memory capacity of a simulated device (SIM0..) in MiB (default: unlimited): allocations beyond it fail, and `--moe-cache-mib auto` sizes the cache from it",
    )
    .takes("N", Parse::Str)
    .hyphen(),
    Flag::new(
        "load_mode",
        &["--load-mode"],
        RUN_SERVER,
        "how the model file is read: auto (default: none where the file takes at most half of the available memory, else mmap), mmap (mapped), none (read into memory with huge pages), mlock (mapped and locked), pin (host weights page-locked for the device, CUDA; elsewhere as mmap), dio (O_DIRECT reads)",
    )
    .takes("MODE", Parse::LoadMode)
    .default("auto")
    .env("LLAMA_ARG_LOAD_MODE"),
    Flag::new(
        "no_host",
        &["--no-host"],
        RUN_SERVER,
        "bypass the devices' host buffer (llama.cpp's --no-host): the weights that stay in host memory are not page-locked for the device, so their uploads copy from pageable memory (by default a CUDA device registers them, and uploads are asynchronous DMA)",
    )
    .env("LLAMA_ARG_NO_HOST"),
    Flag::new(
        "moe_cache_mib",
        &["--moe-cache-mib"],
        RUN_SERVER,
        "device cache of host experts, MiB per device: N, auto (the device's free memory after the graph's; every expert when its memory is unlimited) or 0 (off); with several --device, one value for all or one per device (A,B); llama-bench takes a comma-separated list of tests",
    )
    .takes("N|auto", Parse::Str)
    .default("auto")
    .list()
    .hyphen(),
    Flag::new(
        "moe_cache_policy",
        &["--moe-cache-policy"],
        RUN_SERVER,
        "eviction policy of the expert cache: lru, slru, lrfu (frequency-class LRU) or hlfu (decayed frequency with history, the default)",
    )
    .takes("NAME", Parse::Str)
    .default("hlfu"),
    Flag::new(
        "moe_host_cache_mib",
        &["--moe-host-cache-mib"],
        RUN_SERVER,
        "host expert cache for models larger than RAM (CPU only): N MiB of host memory holding experts' slices of the _exps tensors, read from the file with O_DIRECT on a miss, auto (what the available memory, or the memory cgroup's limit, leaves after the other weights and a margin) or 0 (off); by default on, sized as auto, only when the file does not fit in the memory available (with a one-line note)",
    )
    .takes("N|auto", Parse::Str)
    .env("LLAMA_ARG_MOE_HOST_CACHE_MIB"),
    Flag::new(
        "moe_host_cache_policy",
        &["--moe-host-cache-policy"],
        RUN_SERVER,
        "eviction policy of the host expert cache, from the expert cache's set: lru, slru, lrfu, hlfu (the default), nextuse, nextuse-nopredict, tlfu-lru, tlfu-slru, tlfu-lrfu, adapt",
    )
    .takes("NAME", Parse::Str)
    .default("hlfu"),
    Flag::new(
        "moe_cache_max_batch",
        &["--moe-cache-max-batch"],
        RUN_SERVER,
        "largest ubatch that uses the expert cache; larger ones take the selective copy",
    )
    .takes("N", Parse::Usize)
    .default("32"),
    Flag::new(
        "moe_cache_cpu_share",
        &["--moe-cache-cpu-share"],
        RUN_SERVER,
        "hybrid experts: the share of the cache's misses computed on the CPU from host memory instead of uploaded: auto (a cost model decides per layer per ubatch) or a number from 0 to 1 (that share of the misses once the cache is full)",
    )
    .takes("auto|F", Parse::Str)
    .default("auto")
    .hyphen(),
    Flag::new(
        "moe_hybrid",
        &["--moe-hybrid"],
        RUN_SERVER,
        "hybrid experts on (default, with a cache) or off (every miss uploaded)",
    )
    .takes("on|off", Parse::Str)
    .default("on"),
    Flag::new(
        "moe_cache_alias",
        &["--moe-cache-alias"],
        RUN_SERVER,
        "compute alias: with the expert cache on a device, prompt ubatches larger than --moe-cache-max-batch compute in the cache's memory instead of a compute reserve of their own, so the cache gets that memory (-ub halves, down to 512, until its worst-case graph fits in what the cache lends; off when not even that fits; the summary says which ubatch ran and why): on (default) or off",
    )
    .takes("on|off", Parse::Str)
    .default("on"),
    Flag::new(
        "fit",
        &["-fit", "--fit"],
        RUN_SERVER,
        "plan the layer split, the experts kept in host memory and each device's expert cache from the devices' free memory before loading (on or off; default off); --cpu-moe, --n-cpu-moe and -ot are kept",
    )
    .takes("on|off", Parse::OnOff)
    .env("LLAMA_ARG_FIT"),
    Flag::new(
        "fit_target",
        &["-fitt", "--fit-target"],
        RUN_SERVER,
        "MiB --fit keeps free on every device (default: 1024, at most 1/16 of the device's free memory)",
    )
    .takes("MiB", Parse::F64)
    .env("LLAMA_ARG_FIT_TARGET"),
    Flag::new(
        "fit_out",
        &["--fit-out"],
        RUN_SERVER,
        "write the --fit plan as JSON (keys in docs/running.md)",
    )
    .takes("FILE.json", Parse::Path),
    Flag::new(
        "prefetch_experts_slots",
        &["--prefetch-experts-slots"],
        RUN_SERVER,
        "staging slots for the prefill prefetch: the next splits' host expert tensors are copied into N rotating device slots (each as large as the largest expert tensor) while the current split computes; -1 = auto (3 slots, fewer when they do not fit; per layer and ubatch a tensor is not prefetched, prefetched whole, or only its experts guessed through the layer's router, as the link and compute costs, the use fraction and the guesses' recall measured on earlier ubatches say), 0 = off; llama-bench takes a comma-separated list",
    )
    .takes("N", Parse::Str)
    .default("0")
    .list()
    .hyphen(),
    Flag::new(
        "prefetch_selective",
        &["--prefetch-selective"],
        RUN_SERVER,
        "with --prefetch-experts-slots -1 (auto): on (the default) lets auto prefetch, per layer and prompt ubatch, only the experts guessed from the previous layer's hidden state through the layer's router (the ones the guess missed are copied when the layer comes); off keeps auto to whole tensors or none",
    )
    .takes("on|off", Parse::Choice(&["on", "off"]))
    .default("on"),
    Flag::new(
        "moe_predict",
        &["--moe-predict"],
        RUN_SERVER,
        "decode prediction: guess the next cached layer's experts and upload the predicted misses into the expert cache while this layer computes (needs the cache, --moe-cache-mib); router (= on): from this layer's hidden state through the next layer's router; history: from the experts recent tokens used at that layer and the transitions from the layer before (also under --expert-trace-in); off",
    )
    .takes("off|on|router|history", Parse::Choice(&MoePredict::NAMES))
    .default("off"),
];
