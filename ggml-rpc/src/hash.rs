//! The hash `SET_TENSOR_HASH` names data by: 64-bit FNV-1a over the bytes,
//! as llama.cpp's client and `ggml-rpc-server -c` compute it (the server
//! keeps each cached tensor in a file named by the hash in hex).

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of `data`.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter()
        .fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // the published FNV-1a 64 test vectors
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
