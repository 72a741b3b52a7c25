//! What a result says about the machine and the build: the git commit and
//! commit count the tools were built from (`build.rs`), the CPU's model
//! name, the devices, and the test time in ISO 8601.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Short commit hash of the checkout the tools were built from, `unknown`
/// outside a git checkout.
pub const BUILD_COMMIT: &str = env!("GGML_RS_BUILD_COMMIT");

/// Commits up to [`BUILD_COMMIT`] (llama.cpp's build number), 0 unknown.
pub fn build_number() -> u64 {
    env!("GGML_RS_BUILD_NUMBER").parse().unwrap_or(0)
}

/// The CPU's model name (`/proc/cpuinfo`), as llama.cpp's CPU device
/// describes itself; `CPU` where it cannot be read.
pub fn cpu_info() -> String {
    static INFO: OnceLock<String> = OnceLock::new();
    INFO.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model_name(&s))
            .unwrap_or_else(|| "CPU".into())
    })
    .clone()
}

/// The first `model name` line's value.
pub fn cpu_model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name")
            .then(|| v.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

/// The backend kind of a device name, as llama.cpp's `backends` field
/// names registries: `SIM0` -> `SIM`, `CUDA1` -> `CUDA`; a device set of
/// one test names each kind once (`SIM0/SIM1` -> `SIM`, `SIM0/CUDA0` ->
/// `SIM,CUDA`).
pub fn backend_kind(device: &str) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for d in device.split('/') {
        let k = d.trim().trim_end_matches(|c: char| c.is_ascii_digit());
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    kinds.join(",")
}

/// The `gpu_info` of a test's device set: each device's description,
/// `, `-separated (llama.cpp's `get_gpu_info`).
pub fn devices_description(devices: &str) -> String {
    devices
        .split('/')
        .map(|d| device_description(d.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A device's description for `gpu_info` and `--list-devices`.
pub fn device_description(device: &str) -> String {
    if let Some(n) = device.strip_prefix("CUDA") {
        static NAMES: OnceLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
            OnceLock::new();
        let names = NAMES.get_or_init(Default::default);
        let mut names = names.lock().unwrap_or_else(|e| e.into_inner());
        return names
            .entry(device.to_string())
            .or_insert_with(|| {
                n.parse::<usize>()
                    .ok()
                    .and_then(|i| ggml_cuda::CudaBackend::new(i).ok())
                    .and_then(|b| b.device_name().ok())
                    .unwrap_or_else(|| device.to_string())
            })
            .clone();
    }
    if device.starts_with("SIM") {
        return format!("{device} (simulated device: CPU kernels, device memory, counted copies)");
    }
    device.to_string()
}

/// The `--list-devices` text, the devices of the `-rpc` servers included.
pub fn list_devices(rpc: Option<&str>) -> anyhow::Result<String> {
    let mut s = String::from("Available devices:\n");
    match ggml_cuda::cuda_device_count() {
        Ok(n) => {
            for i in 0..n {
                let d = format!("CUDA{i}");
                s.push_str(&format!("  {d}: {}\n", device_description(&d)));
            }
        }
        Err(e) => s.push_str(&format!("  (CUDA: {e})\n")),
    }
    s.push_str("  SIM0, SIM1, ...: simulated devices (CPU kernels, device memory semantics, counted copies)\n");
    let placement = common::cli::PlacementArgs {
        rpc: rpc.map(str::to_string),
        ..Default::default()
    };
    for d in llama::device::list_rpc_devices(&placement.rpc_devices(1)?) {
        s.push_str(&format!("  {}: {}", d.name, d.description));
        if let Some((total, free)) = d.memory {
            s.push_str(&format!(" ({} MiB, {} MiB free)", total >> 20, free >> 20));
        }
        s.push('\n');
    }
    Ok(s)
}

/// Now as llama.cpp's `test_time`: `2026-12-01T08:17:21Z`.
pub fn iso_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    iso_time(secs)
}

/// Seconds since 1970 (UTC) as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn iso_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_time(951_782_400), "2000-02-29T00:00:00Z");
        // the fixture's test_time
        assert_eq!(iso_time(1_796_113_041), "2026-12-01T08:17:21Z");
    }

    #[test]
    fn cpu_names() {
        let s = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model_name(s).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model_name("processor : 0\n"), None);
        assert!(!cpu_info().is_empty());
        assert_eq!(backend_kind("SIM0"), "SIM");
        assert_eq!(backend_kind("CUDA12"), "CUDA");
        assert_eq!(backend_kind("SIM0/SIM1"), "SIM");
        assert_eq!(backend_kind("CUDA0/SIM0/CUDA1"), "CUDA,SIM");
        assert_eq!(
            devices_description("SIM0/SIM1")
                .matches("simulated device")
                .count(),
            2
        );
        assert_eq!(backend_kind("SIM0/CUDA1"), "SIM,CUDA");
    }
}
