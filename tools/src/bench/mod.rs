//! # llama-bench
//!
//! llama.cpp's `llama-bench`, parameter for parameter and field for field:
//! every test parameter takes a list (with range syntax, [`range`]), the
//! lists expand into llama.cpp's test matrix ([`matrix`]), each test runs a
//! warm-up and `-r` timed repetitions ([`run`]), and the results print as
//! markdown, JSON, JSONL, CSV or SQL ([`output`]) with llama.cpp's field
//! names, types and value formats ([`fields`]), our own fields (host to
//! device traffic, our parameters) after them, only where they apply.
//!
//! | module | holds |
//! | --- | --- |
//! | [`params`] | the table of test parameters: syntax, default, accepted values, markdown column, scope (their flags: `common::flags::table::bench`) |
//! | [`range`] | `first-last`, `first-last+step`, `first-last*mult` |
//! | [`overrides`] | `-ot`: `;` between rules, `,` between tests |
//! | [`args`] | the command line |
//! | [`matrix`] | the tests, in llama.cpp's order |
//! | [`fields`] | a result's fields, llama.cpp's then ours |
//! | [`model_desc`] | llama.cpp's `model_type` (`qwen3moe 30B.A3B Q4_K - Medium`) |
//! | [`sysinfo`] | build commit, CPU and device descriptions, ISO time |
//! | [`run`] | loading, warm-up, timed repetitions |
//! | [`output`] | one printer per format |
//!
//! ## Adding a list parameter
//!
//! A parameter such as `--moe-cache-mib 0,8,64` or `--sim-profile a,b` is
//! one entry in [`params::PARAMS`], its flag in the flag table, plus the
//! line that uses its value:
//!
//! 1. Add a [`params::ParamSpec`] at the place in the table where its loop
//!    should nest (model-level parameters near the top, so that the model
//!    is loaded again as rarely as possible): `field: "moe_cache_mib"`,
//!    `syntax: Syntax::Ints { min: 0, max: i64::MAX }` (or
//!    `Syntax::Text(check_fn)` for names),
//!    `default: default!(Value::Int(0))`, `accept: any`,
//!    `md: md("cache", 0)`, `scope: Scope::Model` (the model is reloaded
//!    when it changes) or `Scope::Context`, `ours: true`.
//! 2. Add its flag to `common/src/flags/table/bench.rs` with the field as
//!    its id: `Flag::new("moe_cache_mib", &["--moe-cache-mib"], BENCH,
//!    "device cache ...").takes("<N|auto>", Parse::Str)` (spellings, value
//!    name and help as `--help` shows them).
//! 3. Read it where it takes effect: `inst.int("moe_cache_mib")` in
//!    [`run::placement_args`] (model scope) or in `run_test`'s
//!    `ContextParams` (context scope).
//!
//! Parsing, lists, ranges, repetition of the flag, the matrix, `--help`,
//! the markdown column (shown when the list is not the default), and the
//! json/jsonl/csv/sql field (written where a device is in use or the flag
//! was given, as `ours: true` fields are) follow from the table entry.

pub mod args;
pub mod fields;
pub mod matrix;
pub mod model_desc;
pub mod output;
pub mod overrides;
pub mod params;
pub mod range;
pub mod run;
pub mod sysinfo;
