//! Expected next use (`nextuse`): evict the resident expert
//! whose next use is expected farthest away, Belady's rule with the future
//! replaced by an estimate learned online from the access sequence itself.
//!
//! # The estimate
//!
//! For every `(layer, expert)` of the group (resident or not) the policy
//! keeps a few features of its past: used at the layer's last visit, at the
//! visit before, the uses among the last four visits, a short and a long
//! moving average of its use (about 5 and 100 visits), and the decayed
//! count of `hlfu` (half-life 256 visits) as a share of the layer's visits.
//! At each visit of a layer, an online logistic regression over these
//! features is trained on what the layer just did (every expert of the
//! layer is one sample: used or not) and then estimates, for each expert,
//! `p` = the chance that the layer's next visit uses it. The model's
//! weights are the only adapted parameters; they weigh recency against
//! frequency by what predicted this very trace best so far, so the policy
//! needs no per-model constant (its time scales bracket the reuse distances
//! of trained routers, a few tokens, and the drift of popularity, hundreds).
//!
//! # The ranking
//!
//! With `d` the steps until the expert's layer is visited again
//! ([`super::phase::LayerRing`]) and `L` the layers of the walk, the
//! expected time to the next use is `d / L + (1 - p) / p` walks (the next
//! visit, then a geometric wait). The victim is the resident expert with the
//! largest one. This resists the layer loop: an expert just used is far
//! (`d = L`) but likely, one of the next layer near but perhaps unlikely,
//! and neither recency nor position alone decides.
//!
//! # Prediction that keeps
//!
//! In a decoded token, the experts a layer just used also say which experts
//! the next layer will use (the transitions of `--moe-predict history`,
//! learned here from the same accesses). When a layer is served, a second
//! regression with that transition score as a feature re-estimates `p` for
//! the next layer's experts, so the experts the prediction guesses are kept
//! over the others until that layer is served. [`NextUse::without_prediction`]
//! turns this off (to measure what it adds).
//!
//! Costs: per visit, one pass over the layer's experts (and the next
//! layer's, to predict); per eviction, one candidate per layer.

use super::phase::LayerRing;
use super::{Key, Policy};

/// Moving average of an expert's use, short memory (per visit).
const SHORT: f64 = 0.8;
/// Moving average of an expert's use, long memory (per visit).
const LONG: f64 = 0.99;
/// Half-life of the decayed use count, in visits (`hlfu`'s, in tokens).
const COUNT_HALF_LIFE: f64 = 256.0;
/// Step of the online regression (per visit, over the layer's experts).
const STEP: f64 = 0.08;
/// A source's transition counts are halved when their total reaches this.
const TRANSITION_CAP: u32 = 4096;
/// Features of the recency-frequency model.
const NF: usize = 7;
/// Features of the model that also sees the transition score.
const NP: usize = NF + 1;

/// An online logistic regression over `N` features.
#[derive(Clone, Debug)]
struct Logistic<const N: usize> {
    w: [f64; N],
    grad: [f64; N],
    started: bool,
}

impl<const N: usize> Logistic<N> {
    fn new() -> Self {
        Logistic {
            w: [0.0; N],
            grad: [0.0; N],
            started: false,
        }
    }

    /// Start at the base rate `base` (the intercept), other weights 0.
    fn start(&mut self, base: f64) {
        if !self.started {
            let b = base.clamp(1e-6, 1.0 - 1e-6);
            self.w[0] = (b / (1.0 - b)).ln();
            self.started = true;
        }
    }

    fn p(&self, x: &[f64; N]) -> f64 {
        let z: f64 = self.w.iter().zip(x).map(|(w, x)| w * x).sum();
        1.0 / (1.0 + (-z.clamp(-30.0, 30.0)).exp())
    }

    fn sample(&mut self, x: &[f64; N], y: f64) {
        let e = y - self.p(x);
        for (g, x) in self.grad.iter_mut().zip(x) {
            *g += e * x;
        }
    }

    /// Apply the gradient gathered over `n` samples.
    fn step(&mut self, n: usize) {
        let s = STEP / n.max(1) as f64;
        for (w, g) in self.w.iter_mut().zip(self.grad.iter_mut()) {
            *w += s * *g;
            *g = 0.0;
        }
    }
}

/// One layer's per-expert state.
#[derive(Clone, Debug, Default)]
struct LayerState {
    /// Use at the last 8 visits, bit 0 the last.
    hist: Vec<u8>,
    short: Vec<f64>,
    long: Vec<f64>,
    count: Vec<f64>,
    /// The decayed count of visits (the count's denominator).
    visits: f64,
    /// Chance of use at the next visit.
    p: Vec<f64>,
    resident: Vec<bool>,
    n_resident: usize,
    /// The resident expert of lowest `p` (ignoring pins), when known.
    lowest: Option<Option<u32>>,
    /// `count[s * n + e]`: decoded tokens that used `s` at the layer before
    /// and then `e` here; `total[s]` their sum over `e`.
    trans: Vec<u32>,
    trans_total: Vec<u32>,
    /// Transition scores predicted for this layer's visit in the current
    /// ubatch (set when the layer before was served).
    pending: Option<Vec<f64>>,
}

impl LayerState {
    fn grow(&mut self, n: usize) {
        if self.hist.len() >= n {
            return;
        }
        self.hist.resize(n, 0);
        self.short.resize(n, 0.0);
        self.long.resize(n, 0.0);
        self.count.resize(n, 0.0);
        self.p.resize(n, 0.0);
        self.resident.resize(n, false);
        self.lowest = None;
        // transition tables are sized once, to the group's expert count
        self.trans.clear();
        self.trans_total.clear();
        self.pending = None;
    }

    fn features(&self, e: usize, scale: f64) -> [f64; NF] {
        let h = self.hist[e];
        let share = if self.visits > 0.0 {
            self.count[e] / self.visits
        } else {
            0.0
        };
        [
            1.0,
            (h & 1) as f64,
            ((h >> 1) & 1) as f64,
            (h & 15).count_ones() as f64 / 4.0,
            self.short[e] * scale - 1.0,
            self.long[e] * scale - 1.0,
            share * scale - 1.0,
        ]
    }

    fn lowest(&mut self) -> Option<u32> {
        if let Some(c) = self.lowest {
            return c;
        }
        let c = self.lowest_where(&|_| false);
        self.lowest = Some(c);
        c
    }

    /// The resident expert of lowest `p` not pinned (the smallest index
    /// among equals).
    fn lowest_where(&self, pinned: &dyn Fn(u32) -> bool) -> Option<u32> {
        let mut best: Option<(u32, f64)> = None;
        for (e, &r) in self.resident.iter().enumerate() {
            let e = e as u32;
            if !r || pinned(e) {
                continue;
            }
            let p = self.p[e as usize];
            if best.is_none_or(|(_, b)| p < b) {
                best = Some((e, p));
            }
        }
        best.map(|(e, _)| e)
    }
}

/// The expected-next-use policy over one group's slots.
#[derive(Clone, Debug)]
pub struct NextUse {
    ring: LayerRing,
    /// Per ring position.
    layers: Vec<LayerState>,
    /// Experts per layer, when the group declared it.
    n_expert: usize,
    /// Mean share of a layer's experts one visit uses.
    base: f64,
    visits: u64,
    /// Whether the current ubatch is one decoded token.
    decode: bool,
    /// Position and experts of the layer served last in this ubatch.
    last: Option<(usize, Vec<u32>)>,
    model: Logistic<NF>,
    predicted: Logistic<NP>,
    predict: bool,
    resident: usize,
}

impl Default for NextUse {
    fn default() -> Self {
        NextUse::new()
    }
}

impl NextUse {
    /// The policy, with the prediction that keeps.
    pub fn new() -> NextUse {
        NextUse {
            ring: LayerRing::new(),
            layers: Vec::new(),
            n_expert: 0,
            base: 0.0,
            visits: 0,
            decode: false,
            last: None,
            model: Logistic::new(),
            predicted: Logistic::new(),
            predict: true,
            resident: 0,
        }
    }

    /// The policy without the transition prediction (recency and frequency
    /// only).
    pub fn without_prediction() -> NextUse {
        NextUse {
            predict: false,
            ..NextUse::new()
        }
    }

    /// Ring position of `layer`, its state grown to hold expert `max_e`.
    fn slot_of(&mut self, layer: u32, max_e: usize) -> usize {
        let before = self.ring.len();
        let i = self.ring.ensure(layer);
        if self.ring.len() > before {
            self.layers.insert(i, LayerState::default());
        }
        let n = self.n_expert.max(max_e + 1);
        self.layers[i].grow(n);
        i
    }

    fn scale(&self) -> f64 {
        if self.base > 0.0 {
            1.0 / self.base
        } else {
            1.0
        }
    }

    /// Transition scores into position `j` from experts `from` of the layer
    /// before: `max_s count[s][e] / total[s]`, times the experts a visit
    /// uses (so that they estimate a chance of use).
    fn transition_scores(&self, j: usize, from: &[u32]) -> Option<Vec<f64>> {
        let st = &self.layers[j];
        let n = st.hist.len();
        if st.trans.is_empty() {
            return None;
        }
        let used = self.base * n as f64;
        let mut out = vec![0.0f64; n];
        let mut any = false;
        for &s in from {
            let s = s as usize;
            let tot = st.trans_total.get(s).copied().unwrap_or(0);
            if s >= n {
                continue;
            }
            if tot == 0 {
                continue;
            }
            any = true;
            let row = &st.trans[s * n..(s + 1) * n];
            for (o, &c) in out.iter_mut().zip(row) {
                *o = f64::max(*o, used * c as f64 / tot as f64);
            }
        }
        any.then_some(out)
    }

    fn learn_transitions(&mut self, j: usize, from: &[u32], to: &[u32]) {
        let st = &mut self.layers[j];
        let n = st.hist.len();
        if st.trans.is_empty() {
            st.trans = vec![0; n * n];
            st.trans_total = vec![0; n];
        }
        for &s in from {
            let s = s as usize;
            if s >= n {
                continue;
            }
            for &e in to {
                st.trans[s * n + e as usize] += 1;
            }
            st.trans_total[s] += to.len() as u32;
            if st.trans_total[s] >= TRANSITION_CAP {
                let row = &mut st.trans[s * n..(s + 1) * n];
                for c in row.iter_mut() {
                    *c /= 2;
                }
                st.trans_total[s] = row.iter().sum();
            }
        }
    }

    /// Re-estimate `p` for position `j` from the transition scores.
    fn predict_into(&mut self, j: usize, scores: Vec<f64>) {
        let scale = self.scale();
        let st = &self.layers[j];
        let p: Vec<f64> = (0..st.hist.len())
            .map(|e| {
                let x = with_score(st.features(e, scale), scores[e] * scale - 1.0);
                self.predicted.p(&x)
            })
            .collect();
        let st = &mut self.layers[j];
        st.p = p;
        st.pending = Some(scores);
        st.lowest = None;
    }
}

fn with_score(f: [f64; NF], s: f64) -> [f64; NP] {
    let mut x = [0.0; NP];
    x[..NF].copy_from_slice(&f);
    x[NF] = s;
    x
}

impl Policy for NextUse {
    fn name(&self) -> &'static str {
        if self.predict {
            "nextuse"
        } else {
            "nextuse-nopredict"
        }
    }

    fn begin_group(&mut self, layers: &[u32], n_expert: u32) {
        self.n_expert = n_expert as usize;
        for &l in layers {
            self.slot_of(l, 0);
        }
    }

    fn begin_ubatch(&mut self, n_tokens: u32) {
        self.ring.begin_ubatch();
        self.decode = n_tokens <= 1;
        self.last = None;
        for st in &mut self.layers {
            if st.pending.take().is_some() {
                st.lowest = None;
            }
        }
    }

    fn begin_layer(&mut self, layer: u32, experts: &[u32]) {
        let max_e = experts.iter().copied().max().unwrap_or(0) as usize;
        let i = self.slot_of(layer, max_e);
        self.ring.visit(layer);
        let n = self.layers[i].hist.len();
        // the base rate: the mean share of the experts a visit uses
        self.visits += 1;
        let share = experts.len() as f64 / n.max(1) as f64;
        self.base += (share - self.base) / self.visits as f64;
        self.model.start(self.base);
        self.predicted.start(self.base);
        let scale = self.scale();
        let used = |e: usize| experts.binary_search(&(e as u32)).is_ok();
        // learn from this visit what the state before it predicted
        {
            let st = &self.layers[i];
            for e in 0..n {
                let y = if used(e) { 1.0 } else { 0.0 };
                let x = st.features(e, scale);
                if let Some(s) = &st.pending {
                    self.predicted.sample(&with_score(x, s[e] * scale - 1.0), y);
                }
                self.model.sample(&x, y);
            }
            if st.pending.is_some() {
                self.predicted.step(n);
            }
            self.model.step(n);
        }
        let prev = match &self.last {
            Some((pi, pe)) if self.decode && self.ring.after(*pi) == i && *pi < i => {
                Some(pe.clone())
            }
            _ => None,
        };
        if let Some(from) = &prev {
            self.learn_transitions(i, from, experts);
        }
        // the visit's features, and the estimate for the next visit
        let dec = (-1.0 / COUNT_HALF_LIFE).exp2();
        let st = &mut self.layers[i];
        st.visits = st.visits * dec + 1.0;
        for e in 0..n {
            let y = used(e);
            let yf = if y { 1.0 } else { 0.0 };
            st.hist[e] = (st.hist[e] << 1) | y as u8;
            st.short[e] = SHORT * st.short[e] + (1.0 - SHORT) * yf;
            st.long[e] = LONG * st.long[e] + (1.0 - LONG) * yf;
            st.count[e] = st.count[e] * dec + yf;
        }
        st.pending = None;
        let p: Vec<f64> = (0..n)
            .map(|e| self.model.p(&self.layers[i].features(e, scale)))
            .collect();
        let st = &mut self.layers[i];
        st.p = p;
        st.lowest = None;
        // predict the next layer of this token from what this one used
        let j = self.ring.after(i);
        if self.predict && self.decode && j > i {
            if let Some(s) = self.transition_scores(j, experts) {
                self.predict_into(j, s);
            }
        }
        self.last = Some((i, experts.to_vec()));
    }

    fn hit(&mut self, _key: Key) {}

    fn insert(&mut self, key: Key) {
        let i = self.slot_of(key.layer, key.expert as usize);
        let st = &mut self.layers[i];
        if !st.resident[key.expert as usize] {
            st.resident[key.expert as usize] = true;
            st.n_resident += 1;
            self.resident += 1;
        }
        st.lowest = None;
    }

    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        let n_layers = self.ring.len().max(1) as f64;
        let mut best: Option<(Key, f64)> = None;
        for i in 0..self.layers.len() {
            if self.layers[i].n_resident == 0 {
                continue;
            }
            let layer = self.ring.layer(i);
            let e = match self.layers[i].lowest() {
                Some(e) if !pinned(Key::new(layer, e)) => Some(e),
                Some(_) => self.layers[i].lowest_where(&|e| pinned(Key::new(layer, e))),
                None => None,
            };
            let Some(e) = e else { continue };
            let p = self.layers[i].p[e as usize].max(1e-6);
            let t = self.ring.distance(i) as f64 / n_layers + (1.0 - p) / p;
            if best.is_none_or(|(_, b)| t > b) {
                best = Some((Key::new(layer, e), t));
            }
        }
        let (k, _) = best?;
        let i = self.ring.position(k.layer)?;
        let st = &mut self.layers[i];
        st.resident[k.expert as usize] = false;
        st.n_resident -= 1;
        st.lowest = None;
        self.resident -= 1;
        Some(k)
    }

    fn len(&self) -> usize {
        self.resident
    }
}
