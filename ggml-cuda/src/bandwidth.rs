//! Host-to-device copy bandwidth: the same number of bytes copied to device
//! memory from page-locked (`cuMemHostAlloc`) and from pageable (ordinary
//! heap) host memory, each copy timed with two CUDA events on one stream.
//! `examples/h2d-bandwidth.rs` prints it; `scripts/gpu-check` step 4 puts
//! both figures in its summary.

use ggml_core::{BackendError, BufferUsage};

use crate::buffer::{Dev, DevMem, PinnedBuffer};

/// What one measurement found.
#[derive(Clone, Debug, PartialEq)]
pub struct H2dBandwidth {
    /// The device's name as the driver reports it (an emulated device's
    /// name says so: its figures are host memory copies, not a GPU's).
    pub device_name: String,
    /// Whether the device is the emulator.
    pub emulated: bool,
    /// Bytes of each copy.
    pub bytes: usize,
    /// Timed copies per source (after one untimed warm-up copy).
    pub reps: usize,
    /// Median GB/s (10^9 bytes per second) of the copies from pinned memory.
    pub pinned_gbs: f64,
    /// Median GB/s of the copies from pageable memory.
    pub pageable_gbs: f64,
}

/// GB/s (10^9 bytes per second) of `bytes` moved in `ms` milliseconds.
pub fn gb_per_s(bytes: usize, ms: f64) -> f64 {
    if ms <= 0.0 {
        return 0.0;
    }
    bytes as f64 / 1e9 / (ms / 1e3)
}

/// The median of copy times, in milliseconds (`None` when empty).
pub fn median_ms(times: &[f32]) -> Option<f64> {
    let mut t: Vec<f64> = times.iter().map(|&x| f64::from(x)).collect();
    if t.is_empty() {
        return None;
    }
    t.sort_by(f64::total_cmp);
    let n = t.len();
    Some(if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2.0
    })
}

/// Measure host-to-device bandwidth on device `device`: `reps` timed copies
/// of `bytes` bytes from pinned and from pageable memory into one device
/// allocation (after one warm-up copy each), checked by reading the
/// destination's last bytes back. Needs only the CUDA driver (no NVRTC).
/// Errs with `InvalidInput` on zero `bytes` or `reps`, and with
/// `NoDevice("no CUDA device: ...")` on a machine without one.
pub fn measure_h2d_bandwidth(
    device: usize,
    bytes: usize,
    reps: usize,
) -> Result<H2dBandwidth, BackendError> {
    if bytes == 0 || reps == 0 {
        return Err(BackendError::InvalidInput(format!(
            "h2d bandwidth: bytes ({bytes}) and repetitions ({reps}) must both be at least 1"
        )));
    }
    let dev = Dev::open(device)?;
    let device_name = dev.drv.name()?;
    let dst = DevMem::alloc(&dev, bytes)?;
    let pattern = |i: usize| (i.wrapping_mul(131) >> 3) as u8;
    let mut pinned = PinnedBuffer::new(&dev, bytes, BufferUsage::Compute)?;
    let pinned_bytes = pinned.as_mut_slice();
    for (i, b) in pinned_bytes.iter_mut().enumerate() {
        *b = pattern(i);
    }
    // every page touched, so the pageable copy does not time page faults
    let pageable: Vec<u8> = (0..bytes).map(|i| pattern(i) ^ 0x5a).collect();

    let time_copies = |src: &[u8]| -> Result<Vec<f32>, BackendError> {
        dev.bind()?;
        let mut times = Vec::with_capacity(reps);
        for rep in 0..=reps {
            let start = dev.stream.record_event(true)?;
            // SAFETY: `dst` spans `bytes` bytes and `src` is `bytes` long;
            // the stream is synchronized (through `end`) before `src` can
            // be released.
            unsafe { dev.stream.memcpy_htod(dst.ptr, src.as_ptr(), bytes) }?;
            let end = dev.stream.record_event(true)?;
            end.synchronize()?;
            let ms = start.elapsed_ms(end.as_ref())?;
            if rep > 0 {
                times.push(ms);
            }
        }
        // the copy happened: the destination's last bytes are the source's
        let n = bytes.min(4096);
        let mut back = vec![0u8; n];
        // SAFETY: `dst` spans `bytes >= n` bytes; synchronized below before
        // `back` is read or released.
        unsafe {
            dev.stream
                .memcpy_dtoh(back.as_mut_ptr(), dst.ptr + (bytes - n) as u64, n)
        }?;
        dev.sync()?;
        if back != src[bytes - n..] {
            return Err(BackendError::Device(
                "h2d bandwidth: the device memory does not hold the copied bytes".into(),
            ));
        }
        Ok(times)
    };
    let pinned_ms = time_copies(pinned_bytes)?;
    let pageable_ms = time_copies(&pageable)?;
    let med = |t: &[f32]| median_ms(t).map_or(0.0, |ms| gb_per_s(bytes, ms));
    Ok(H2dBandwidth {
        emulated: dev.drv.is_emulated(),
        device_name,
        bytes,
        reps,
        pinned_gbs: med(&pinned_ms),
        pageable_gbs: med(&pageable_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_medians() {
        // 256 MiB in 5 ms: 53.687 GB/s
        assert!((gb_per_s(256 << 20, 5.0) - 53.687_091_2).abs() < 1e-6);
        assert_eq!(gb_per_s(100, 0.0), 0.0);
        assert_eq!(median_ms(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_ms(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_ms(&[]), None);
    }
}
