//! A context's host -> device traffic ([`TransferStats`], the traffic keys
//! of `llama-run --stats-out`): the scheduler's input copies, the peer
//! copies between devices, and the experts every MoE path moved.

/// Bytes moved host -> device, cumulative since the context was made (or
/// since [`crate::Context::reset_stats`]). With the `serde` feature it serializes
/// as its field names (the keys of `llama-run --stats-out`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TransferStats {
    /// Bytes of expert weights copied by the expert copy policy.
    pub h2d_bytes_experts: u64,
    /// Bytes copied into a device from host memory by plain (whole-tensor)
    /// input copies (a copy between two devices through host memory
    /// counts here too; a peer copy does not).
    pub h2d_bytes_other: u64,
    /// Bytes copied between two devices directly, device to device (peer
    /// copies: the activations crossing a layer-split boundary).
    pub d2d_bytes: u64,
    /// Bytes copied between two devices through host memory (read back,
    /// then uploaded: where the pair cannot copy peer to peer).
    pub d2d_bytes_via_host: u64,
    /// What the policy's inputs would have cost copied whole.
    pub h2d_bytes_full_copy: u64,
    /// Experts copied by the policy.
    pub experts_copied: u64,
    /// Experts a full copy of the same inputs would have moved.
    pub experts_full_copy: u64,
    /// Graphs computed.
    pub graphs: u64,
}
