//! What a cubin (a CUDA ELF image of machine code for one architecture)
//! says about itself: its `sm_XY` and the kernels it defines. The loader
//! names the image it loads with these; the emulator's module load checks
//! them, as a driver refuses a cubin for another architecture
//! (`CUDA_ERROR_NO_BINARY_FOR_GPU`) or without a kernel asked for
//! (`CUDA_ERROR_NOT_FOUND`).
//!
//! The ELF header's `e_flags` hold the architecture: its low byte in the
//! ELF ABI of CUDA 12 up to sm_90 (`EI_ABIVERSION` 7), its second byte in
//! the ABI of sm_100 and later (8). Each kernel is a `.text.NAME` section.

/// `EM_CUDA`.
const EM_CUDA: u16 = 190;

/// A parsed cubin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubinInfo {
    /// The architecture as XY (`sm_90`: 90).
    pub sm: u32,
    /// The kernels (`.text.NAME` sections), in section order.
    pub kernels: Vec<String>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)).ok()
}

/// Whether `bytes` starts like an ELF file (a cubin rather than PTX text).
pub fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Parse a cubin: its architecture and kernels, or why it is not one.
pub fn parse(b: &[u8]) -> Result<CubinInfo, String> {
    let bad = |what: &str| format!("not a cubin: {what}");
    if !is_elf(b) {
        return Err(bad("no ELF magic"));
    }
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err(bad("not a 64-bit little-endian ELF"));
    }
    let machine = u16_at(b, 18).ok_or_else(|| bad("truncated header"))?;
    if machine != EM_CUDA {
        return Err(bad(&format!("ELF machine {machine}, not EM_CUDA (190)")));
    }
    let abi = b[8];
    let flags = u32_at(b, 48).ok_or_else(|| bad("truncated header"))?;
    let sm = if abi >= 8 {
        (flags >> 8) & 0xff
    } else {
        flags & 0xff
    };
    let shoff = u64_at(b, 40).ok_or_else(|| bad("truncated header"))?;
    let shentsize = u16_at(b, 58).ok_or_else(|| bad("truncated header"))? as usize;
    let shnum = u16_at(b, 60).ok_or_else(|| bad("truncated header"))? as usize;
    let shstrndx = u16_at(b, 62).ok_or_else(|| bad("truncated header"))? as usize;
    if shentsize < 64 || shstrndx >= shnum {
        return Err(bad("bad section table"));
    }
    let section = |i: usize| -> Option<(u32, usize, usize)> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((u32_at(b, at)?, u64_at(b, at + 24)?, u64_at(b, at + 32)?))
    };
    let (_, str_off, str_len) = section(shstrndx).ok_or_else(|| bad("truncated sections"))?;
    let strtab = str_off
        .checked_add(str_len)
        .and_then(|end| b.get(str_off..end))
        .ok_or_else(|| bad("truncated section names"))?;
    let mut kernels = Vec::new();
    for i in 0..shnum {
        let (name_off, _, _) = section(i).ok_or_else(|| bad("truncated sections"))?;
        let name = strtab
            .get(name_off as usize..)
            .and_then(|s| s.split(|&c| c == 0).next())
            .ok_or_else(|| bad("bad section name"))?;
        if let Some(k) = name.strip_prefix(b".text.") {
            kernels.push(String::from_utf8_lossy(k).into_owned());
        }
    }
    Ok(CubinInfo { sm, kernels })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_a_cubin_is_an_error_not_a_panic() {
        assert!(parse(b"").is_err());
        assert!(parse(b".version 8.8\n").is_err());
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        assert!(parse(&h).unwrap_err().contains("EM_CUDA"));
        h[18] = 190;
        // sections beyond the end
        h[40] = 0xff;
        h[58] = 64;
        h[60] = 2;
        h[62] = 1;
        assert!(parse(&h).is_err());
    }
}
