//! Token sampling: greedy, or llama.cpp's default chain — repetition
//! penalty, top-k, top-p, min-p, temperature, then a seeded draw.

use std::collections::VecDeque;

/// Sampler settings, with llama.cpp's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// Temperature; `<= 0` means greedy.
    pub temp: f32,
    /// Keep the `top_k` most likely tokens (`<= 0`: all).
    pub top_k: i32,
    /// Keep the smallest set whose probability reaches `top_p` (`1`: all).
    pub top_p: f32,
    /// Drop tokens below `min_p` times the top probability (`0`: none).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recent tokens (`1`: off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// Seed of the draw.
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0x5eed,
        }
    }
}

/// A stateful sampler: remembers recent tokens and its random state.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplerParams,
    rng: u64,
    recent: VecDeque<i32>,
    presence_penalty: f32,
    frequency_penalty: f32,
}

/// Index of the largest logit; ties go to the lowest id.
pub fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as i32
}

impl Sampler {
    /// A sampler with `params`.
    pub fn new(params: SamplerParams) -> Sampler {
        let rng = params.seed ^ 0x9e37_79b9_7f4a_7c15;
        Sampler {
            params,
            rng,
            recent: VecDeque::new(),
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }

    /// llama.cpp's presence and frequency penalties over the same recent
    /// tokens as the repeat penalty: a logit loses `frequency * count +
    /// presence` for a token seen `count > 0` times (0, 0: off).
    pub fn with_penalties(mut self, presence: f32, frequency: f32) -> Sampler {
        self.presence_penalty = presence;
        self.frequency_penalty = frequency;
        self
    }

    /// A greedy sampler.
    pub fn greedy() -> Sampler {
        Sampler::new(SamplerParams {
            temp: 0.0,
            ..Default::default()
        })
    }

    /// Record a token as generated or fed (for the repetition penalty).
    pub fn accept(&mut self, token: i32) {
        if self.params.repeat_last_n == 0 {
            return;
        }
        self.recent.push_back(token);
        while self.recent.len() > self.params.repeat_last_n {
            self.recent.pop_front();
        }
    }

    fn next_f64(&mut self) -> f64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Pick the next token from a row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> i32 {
        self.sample_inner(logits, false).0
    }

    /// Pick the next token as [`Sampler::sample`] does (the same token,
    /// the same random state after), and return the distribution the draw
    /// was made from: the candidates left after the penalties, top-k,
    /// top-p, min-p and temperature, with their probabilities, most likely
    /// first (ties to the lower id). A greedy sampler's distribution is the
    /// chosen token with probability 1. (llama.cpp's server reports these
    /// with `post_sampling_probs`.)
    pub fn sample_with_probs(&mut self, logits: &[f32]) -> (i32, Vec<(i32, f32)>) {
        let (t, probs) = self.sample_inner(logits, true);
        (t, probs.unwrap_or_else(|| vec![(t, 1.0)]))
    }

    fn sample_inner(&mut self, logits: &[f32], want_probs: bool) -> (i32, Option<Vec<(i32, f32)>>) {
        let p = self.params.clone();
        let mut cand: Vec<(i32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as i32, l))
            .collect();
        if p.repeat_penalty != 1.0 && p.repeat_penalty > 0.0 {
            for c in cand.iter_mut() {
                if self.recent.contains(&c.0) {
                    c.1 = if c.1 > 0.0 {
                        c.1 / p.repeat_penalty
                    } else {
                        c.1 * p.repeat_penalty
                    };
                }
            }
        }
        if (self.presence_penalty != 0.0 || self.frequency_penalty != 0.0)
            && !self.recent.is_empty()
        {
            let mut counts: std::collections::HashMap<i32, usize> =
                std::collections::HashMap::new();
            for &t in &self.recent {
                *counts.entry(t).or_default() += 1;
            }
            for c in cand.iter_mut() {
                if let Some(&n) = counts.get(&c.0) {
                    c.1 -= n as f32 * self.frequency_penalty + self.presence_penalty;
                }
            }
        }
        if p.temp <= 0.0 {
            let l: Vec<f32> = cand.iter().map(|c| c.1).collect();
            return (argmax(&l), None);
        }
        // sort descending, stable so ties keep the lower id first
        cand.sort_by(|a, b| b.1.total_cmp(&a.1));
        if p.top_k > 0 && (p.top_k as usize) < cand.len() {
            cand.truncate(p.top_k as usize);
        }
        let max = cand[0].1;
        let mut probs: Vec<f64> = cand.iter().map(|c| ((c.1 - max) as f64).exp()).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= sum);
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, q) in probs.iter().enumerate() {
                acc += q;
                if acc >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if p.min_p > 0.0 {
            let thresh = probs[0] * p.min_p as f64;
            let keep = probs
                .iter()
                .take(cand.len())
                .take_while(|&&q| q >= thresh)
                .count();
            cand.truncate(keep.max(1));
        }
        // temperature, then draw
        let max = cand[0].1;
        let w: Vec<f64> = cand
            .iter()
            .map(|c| (((c.1 - max) / p.temp) as f64).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let probs = want_probs.then(|| {
            let mut d: Vec<(i32, f32)> = cand
                .iter()
                .zip(&w)
                .map(|(c, wi)| (c.0, (wi / total) as f32))
                .collect();
            d.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            d
        });
        let mut r = self.next_f64() * total;
        for (c, wi) in cand.iter().zip(&w) {
            if r < *wi {
                return (c.0, probs);
            }
            r -= wi;
        }
        (cand[cand.len() - 1].0, probs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_and_frequency_penalties() {
        // token 0 seen twice, token 1 once: 0 loses 2*1.0 + 0.5, 1 loses 1.5
        let mut s = Sampler::greedy().with_penalties(0.5, 1.0);
        for t in [0, 0, 1] {
            s.accept(t);
        }
        // logits 5, 4.9, 3.1: after the penalties 2.5, 3.4, 3.1
        assert_eq!(s.sample(&[5.0, 4.9, 3.1]), 1);
        let mut plain = Sampler::greedy();
        plain.accept(0);
        assert_eq!(plain.sample(&[5.0, 4.9, 3.1]), 0);
    }

    #[test]
    fn post_sampling_probs_are_the_draws_distribution() {
        let logits = [0.0f32, 2.0, 1.0, 3.0, -1.0];
        let params = SamplerParams {
            temp: 0.5,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..Default::default()
        };
        let (mut a, mut b) = (Sampler::new(params.clone()), Sampler::new(params));
        for _ in 0..20 {
            let (t, d) = b.sample_with_probs(&logits);
            // the same token and random state as sample()
            assert_eq!(a.sample(&logits), t);
            // top-k 3 keeps ids 3, 1, 2; softmax of logits / 0.5
            let ids: Vec<i32> = d.iter().map(|x| x.0).collect();
            assert_eq!(ids, vec![3, 1, 2]);
            let z: f64 = [3.0f64, 2.0, 1.0].iter().map(|l| (l / 0.5).exp()).sum();
            for (&(_, q), l) in d.iter().zip([3.0f64, 2.0, 1.0]) {
                assert!((f64::from(q) - (l / 0.5).exp() / z).abs() < 1e-6);
            }
            assert!(ids.contains(&t));
        }
        let (t, d) = Sampler::greedy().sample_with_probs(&logits);
        assert_eq!((t, d), (3, vec![(3, 1.0)]));
    }

    #[test]
    fn greedy_takes_lowest_id_on_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        let mut s = Sampler::greedy();
        assert_eq!(s.sample(&[0.0, 0.5, 0.2]), 1);
    }

    #[test]
    fn seeded_draws_repeat_and_respect_top_k() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let params = SamplerParams {
            temp: 1.0,
            top_k: 5,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        };
        let mut a = Sampler::new(params.clone());
        let mut b = Sampler::new(params);
        let mut top: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
        top.sort_by(|x, y| y.1.total_cmp(&x.1));
        let allowed: Vec<i32> = top[..5].iter().map(|t| t.0 as i32).collect();
        for _ in 0..200 {
            let x = a.sample(&logits);
            assert_eq!(x, b.sample(&logits));
            assert!(allowed.contains(&x));
        }
    }

    #[test]
    fn repetition_penalty_changes_choice() {
        let mut s = Sampler::new(SamplerParams {
            temp: 0.0,
            repeat_penalty: 2.0,
            ..Default::default()
        });
        s.accept(0);
        assert_eq!(s.sample(&[1.0, 0.8]), 1);
    }
}
