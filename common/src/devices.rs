//! `--list-devices`: the devices `--device` can name, as llama.cpp lists
//! them (name, description, memory), the `--rpc` workers' devices
//! included.

use std::sync::Arc;

use anyhow::Result;
use synth::budget::fmt_bytes;

/// Print the device list on stdout, the `--rpc` workers' devices
/// (`rpc`, connected by `PlacementArgs::rpc_devices`) after the local ones.
pub fn print_devices(rpc: &[Arc<ggml_rpc::RpcBackend>]) -> Result<()> {
    let (mut devs, why_no_cuda) = llama::device::list_devices();
    devs.extend(llama::device::list_rpc_devices(rpc));
    println!("Available devices:");
    for d in &devs {
        match d.memory {
            Some((total, free)) => println!(
                "  {}: {} ({} total, {} free)",
                d.name,
                d.description,
                fmt_bytes(total as f64),
                fmt_bytes(free as f64)
            ),
            None => println!("  {}: {}", d.name, d.description),
        }
    }
    if let Some(w) = why_no_cuda {
        println!("  ({w})");
    }
    Ok(())
}

/// The device llama.cpp would pick with `-ngl` and no `--device`: the
/// first CUDA device, when the driver reports one.
pub fn default_gpu() -> Option<String> {
    llama::device::first_cuda_device()
}
