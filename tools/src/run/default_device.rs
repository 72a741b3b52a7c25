//! The default run's device: with no `-m` and no `--device`, `llama-run`
//! shows what the project is for, a MoE model whose experts stay in host
//! memory while a device computes the rest through the expert cache. It
//! takes the first CUDA device when there is one, else SIM0 (the simulated
//! device: CPU kernels, device memory semantics, a simulated clock), and
//! keeps the experts in host memory (`--cpu-moe`) unless placement flags
//! were given; the cache, prefetch and hybrid flags keep the defaults they
//! have with any device. `--device CPU` is the plain CPU run.

use common::cli::PlacementArgs;

use super::flags::Args;

/// The placement a run uses, and whether it is the default run's.
pub(crate) struct RunPlacement {
    /// The placement flags, the device filled in for the default run.
    pub(crate) placement: PlacementArgs,
    /// Whether the device was chosen here (the default run).
    pub(crate) default_run: bool,
}

/// The placement for `a`: its own flags, or the default run's device when
/// neither `-m` nor `--device` (nor `--rpc`) is given.
pub(crate) fn run_placement(a: &Args) -> RunPlacement {
    if a.model.is_some() || a.placement.device.is_some() || a.placement.rpc.is_some() {
        return RunPlacement {
            placement: a.placement.clone(),
            default_run: false,
        };
    }
    let device = llama::device::first_cuda_device().unwrap_or_else(|| "SIM0".to_string());
    RunPlacement {
        placement: default_placement(&a.placement, &device),
        default_run: true,
    }
}

/// `given` on `device`, with the experts in host memory unless the
/// placement flags (`-ngl`, `-ot`, `-cmoe`, `-ncmoe`) already say where
/// weights go.
fn default_placement(given: &PlacementArgs, device: &str) -> PlacementArgs {
    let placed = given.n_gpu_layers.is_some()
        || !given.override_tensor.is_empty()
        || given.cpu_moe
        || given.n_cpu_moe.is_some();
    PlacementArgs {
        device: Some(device.to_string()),
        cpu_moe: given.cpu_moe || !placed,
        ..given.clone()
    }
}

/// The line that says what the default run does (stderr).
pub(crate) fn announce(tool: &str, device: &str) -> String {
    let what = if device.starts_with("SIM") {
        format!("{device}, a simulated device (CPU kernels, device memory, a simulated clock)")
    } else {
        device.to_string()
    };
    format!(
        "{tool}: no -m and no --device: the default model runs on {what} with its experts in host memory (--cpu-moe), copied to the device as the router picks them; --device CPU runs it on the CPU alone"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experts_stay_in_host_memory_unless_placement_was_given() {
        let p = default_placement(&PlacementArgs::default(), "SIM0");
        assert_eq!(p.device.as_deref(), Some("SIM0"));
        assert!(p.cpu_moe);
        let given = PlacementArgs {
            n_cpu_moe: Some(1),
            ..PlacementArgs::default()
        };
        let p = default_placement(&given, "SIM0");
        assert!(!p.cpu_moe);
        assert_eq!(p.n_cpu_moe, Some(1));
    }

    #[test]
    fn announce_names_the_device() {
        assert!(announce("llama-run", "SIM0").contains("SIM0, a simulated device"));
        assert!(announce("llama-run", "CUDA0").contains("runs on CUDA0 with its experts"));
    }
}
