//! The table: every flag of every tool, once per meaning (a spelling two
//! tools give different help or values, as `-n` in llama-run and
//! llama-server, is one entry per meaning, as llama.cpp's `arg.cpp` has
//! `-np` twice), grouped by who takes them ([`model`]: llama-run and
//! llama-server; [`run`]; [`speculative`]: llama-run's speculative
//! decoding; [`server`]; [`bench`](mod@bench); [`tools`]: the smaller
//! tools; [`sets`] names the sets of tools the entries give), and the
//! llama.cpp flags the tools refuse by name ([`REFUSED`]).
//! [`find`], [`lookup`] and [`for_tool`] read it.

pub mod bench;
pub mod model;
pub mod run;
pub mod server;
pub mod sets;
pub mod speculative;
pub mod tools;

use super::spec::{Flag, Refused, Tool};
use sets::RUN;

/// The groups of the table.
pub static GROUPS: &[&[Flag]] = &[
    model::FLAGS,
    run::FLAGS,
    speculative::FLAGS,
    server::FLAGS,
    bench::FLAGS,
    tools::FLAGS,
];

/// Every entry.
pub fn all() -> impl Iterator<Item = &'static Flag> {
    GROUPS.iter().flat_map(|g| g.iter())
}

/// The entries `tool` takes, in table order.
pub fn for_tool(tool: Tool) -> impl Iterator<Item = &'static Flag> {
    all().filter(move |f| f.is_for(tool))
}

/// `tool`'s entry with this id.
pub fn find(tool: Tool, id: &str) -> Option<&'static Flag> {
    for_tool(tool).find(|f| f.id == id)
}

/// `tool`'s entry spelled `spelling` (`-ngl`, `--n-gpu-layers`, `-t`).
pub fn lookup(tool: Tool, spelling: &str) -> Option<&'static Flag> {
    for_tool(tool).find(|f| f.spelled(spelling))
}

/// The long form (`--n-gpu-layers`) of one of `tool`'s multi-letter
/// shorts (`-ngl`).
pub fn long_of_multi_letter(tool: Tool, spelling: &str) -> Option<String> {
    let f = lookup(tool, spelling)?;
    if !f.multi_letter().any(|m| m == spelling) {
        return None;
    }
    f.long().map(|l| format!("--{l}"))
}

/// Why `tool` refuses the llama.cpp flag `spelling`, if it does.
pub fn refused(tool: Tool, spelling: &str) -> Option<&'static Refused> {
    REFUSED
        .iter()
        .find(|r| r.tools.contains(&tool) && r.names.contains(&spelling))
}

const fn refuse(
    names: &'static [&'static str],
    tools: &'static [Tool],
    why: &'static str,
) -> Refused {
    Refused { names, tools, why }
}

const LOCAL: &str = "this tool runs local GGUF files";
const GRAMMAR: &str = "grammar-constrained sampling is not implemented";
const INTERACTIVE: &str = "use -cnv for an interactive chat";

/// llama.cpp flags that this project does not have, refused by name with
/// the reason (instead of misparsed: `-hf` is not `-h -f`).
pub static REFUSED: &[Refused] = &[
    refuse(&["-hf", "-hfr", "--hf-repo"], RUN, LOCAL),
    refuse(&["-hff", "--hf-file"], RUN, LOCAL),
    refuse(&["-hft", "--hf-token"], RUN, LOCAL),
    refuse(&["-hfd", "-hfrd", "--hf-repo-draft"], RUN, LOCAL),
    refuse(&["-hfv", "--hf-repo-v"], RUN, LOCAL),
    refuse(&["-mu", "--model-url"], RUN, LOCAL),
    refuse(&["-dr", "--docker-repo"], RUN, LOCAL),
    refuse(
        &["--lora", "--lora-scaled"],
        RUN,
        "LoRA adapters are not implemented",
    ),
    refuse(
        &["--control-vector", "--control-vector-scaled"],
        RUN,
        "control vectors are not implemented",
    ),
    refuse(
        &["-mm", "--mmproj", "-mmu", "--mmproj-url"],
        RUN,
        "multimodal projectors are not implemented",
    ),
    refuse(
        &["--grammar", "--grammar-file", "-j", "--json-schema"],
        RUN,
        GRAMMAR,
    ),
    refuse(
        &["-i", "--interactive", "-if", "--interactive-first"],
        RUN,
        INTERACTIVE,
    ),
    refuse(&["--mlock"], RUN, "use --load-mode mlock"),
];
