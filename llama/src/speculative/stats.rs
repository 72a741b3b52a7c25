//! The counters of speculative decoding: what was drafted, what the
//! target accepted, and what the verify batches cost in expert copies.

/// Counters of one [`super::SpecDecoder`].
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SpecStats {
    /// The draft source (`draft-simple`, `ngram-simple`).
    pub spec_type: String,
    /// Tokens proposed and sent to the target in verify batches.
    pub n_drafted: u64,
    /// Proposed tokens the target's sampler agreed with.
    pub n_accepted: u64,
    /// Target decodes that carried at least one proposed token.
    pub n_verify_batches: u64,
    /// Tokens in those batches (the sampled token and its guesses).
    pub verify_tokens: u64,
    /// Expert bytes the selective copy moved for the verify batches.
    pub verify_expert_bytes: u64,
    /// Target decodes without a proposal (a token alone).
    pub n_plain_decodes: u64,
}

impl SpecStats {
    /// Accepted over drafted (0 when nothing was drafted).
    pub fn acceptance_rate(&self) -> f64 {
        if self.n_drafted == 0 {
            0.0
        } else {
            self.n_accepted as f64 / self.n_drafted as f64
        }
    }

    /// Verify batches' expert bytes per accepted token (`None` when no
    /// token was accepted).
    pub fn expert_bytes_per_accepted(&self) -> Option<f64> {
        (self.n_accepted > 0).then(|| self.verify_expert_bytes as f64 / self.n_accepted as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let mut s = SpecStats::default();
        assert_eq!(s.acceptance_rate(), 0.0);
        assert_eq!(s.expert_bytes_per_accepted(), None);
        s.n_drafted = 8;
        s.n_accepted = 6;
        s.verify_expert_bytes = 600;
        assert_eq!(s.acceptance_rate(), 0.75);
        assert_eq!(s.expert_bytes_per_accepted(), Some(100.0));
    }
}
