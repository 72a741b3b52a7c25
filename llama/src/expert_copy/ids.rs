//! Expert ids read back from a device (router outputs, guesses): the i32
//! decoding and the range check every reader applies, with one error text.

/// The i32 values of raw little-endian ids (a trailing partial value is
/// ignored).
pub fn decode_i32(raw: &[u8]) -> Vec<i32> {
    raw.chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Expert `id`, at position `pos` of the ids tensor `what`, as an index
/// below `n_expert`; else the error naming the id, its position and the
/// tensor.
pub fn expert_index(id: i32, pos: usize, n_expert: usize, what: &str) -> Result<usize, String> {
    usize::try_from(id)
        .ok()
        .filter(|&e| e < n_expert)
        .ok_or_else(|| {
            format!(
                "expert id {id} at position {pos} of '{what}' is out of range (the layer has {n_expert} experts)"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_decode_and_out_of_range_ids_are_named() {
        let raw: Vec<u8> = [3i32, -1, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(decode_i32(&raw), vec![3, -1, 8]);
        assert_eq!(expert_index(3, 0, 8, "ids"), Ok(3));
        let e = expert_index(-1, 1, 8, "ffn_moe_topk-0").unwrap_err();
        assert!(
            e.contains("expert id -1 at position 1 of 'ffn_moe_topk-0'"),
            "{e}"
        );
        assert!(expert_index(8, 2, 8, "ids")
            .unwrap_err()
            .contains("has 8 experts"));
    }
}
