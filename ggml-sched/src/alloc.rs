//! Compute memory planning by liveness (ggml-alloc in spirit): tensors whose
//! lifetimes do not overlap share bytes; graph inputs and outputs are kept
//! for the whole graph; views take no memory of their own.

use std::collections::BTreeMap;

use ggml_core::{Graph, TensorId};

use crate::plan::{foreign, holder, relevant, CopyPlan, Env, SplitPlan};

/// Alignment of every allocation in a compute buffer.
pub(crate) const ALIGN: usize = 256;

/// Something the scheduler allocates: a graph tensor, or a copy slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Ent {
    T(TensorId),
    C(usize),
}

/// First-fit-by-size allocator over one growing buffer.
#[derive(Default)]
struct Arena {
    free: Vec<(usize, usize)>,
    top: usize,
}

impl Arena {
    fn alloc(&mut self, size: usize) -> usize {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, &(_, s))| s >= size)
            .min_by_key(|(_, &(_, s))| s)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let (off, s) = self.free[i];
            if s == size {
                self.free.remove(i);
            } else {
                self.free[i] = (off + size, s - size);
            }
            return off;
        }
        // grow the block that ends at the top, if any
        if let Some(i) = self.free.iter().position(|&(o, s)| o + s == self.top) {
            let (off, _) = self.free.remove(i);
            self.top = off + size;
            return off;
        }
        let off = self.top;
        self.top += size;
        off
    }

    fn release(&mut self, off: usize, size: usize) {
        self.free.push((off, size));
        self.free.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.free.len());
        for &(o, s) in &self.free {
            match merged.last_mut() {
                Some(last) if last.0 + last.1 == o => last.1 += s,
                _ => merged.push((o, s)),
            }
        }
        self.free = merged;
    }
}

/// Offsets for every tensor and copy the scheduler allocates, and the
/// compute buffer size each backend needs.
pub(crate) fn plan_memory(
    g: &Graph,
    env: &Env<'_>,
    own_backend: &[Option<usize>],
    splits: &[SplitPlan],
    copies: &[CopyPlan],
    overhang: &[usize],
) -> (Vec<(Ent, usize, usize)>, Vec<usize>) {
    let nb = env.backends.len();
    let cpu = nb - 1;
    let ours = env.ours;
    // (first step, last step, kept)
    let mut life: BTreeMap<Ent, (usize, usize, bool)> = BTreeMap::new();
    let rel = relevant(g);
    for id in g.ids().filter(|id| rel[id.index()]) {
        let h = holder(g, id, ours);
        if foreign(g, h, ours).is_some() {
            continue;
        }
        let t = g.tensor(id);
        let e = life.entry(Ent::T(h)).or_insert((usize::MAX, 0, false));
        if t.flags.input || t.flags.output {
            e.2 = true;
        }
        if t.flags.input {
            e.0 = 0;
        }
    }
    let touch = |life: &mut BTreeMap<Ent, (usize, usize, bool)>, e: Ent, step: usize| {
        let l = life.entry(e).or_insert((usize::MAX, 0, false));
        l.0 = l.0.min(step);
        l.1 = l.1.max(step);
    };
    let own = |id: TensorId| {
        let h = holder(g, id, ours);
        foreign(g, h, ours).is_none().then_some(Ent::T(h))
    };
    let mut step = 0;
    let mut prev_start: Option<usize> = None;
    for sp in splits {
        let rewired: std::collections::HashMap<(TensorId, usize), usize> =
            sp.rewires.iter().map(|&(n, j, c)| ((n, j), c)).collect();
        step += 1;
        for inp in sp.inputs.iter().filter(|i| i.copied) {
            touch(&mut life, Ent::C(inp.slot), step);
            // a device's copies for this split are issued while the previous
            // split computes: keep their memory apart from everything live
            // in that split
            if let Some(p) = prev_start.filter(|_| !env.backends[sp.backend].is_host()) {
                touch(&mut life, Ent::C(inp.slot), p);
            }
            if let Some(e) = own(inp.src) {
                touch(&mut life, e, step);
            }
        }
        prev_start = Some(step);
        for &n in &sp.nodes {
            step += 1;
            if let Some(e) = own(n) {
                touch(&mut life, e, step);
            }
            let t = g.tensor(n);
            for (j, &s) in t.src.iter().enumerate() {
                match rewired.get(&(n, j)) {
                    Some(&c) => touch(&mut life, Ent::C(c), step),
                    None => {
                        if let Some(e) = own(s) {
                            touch(&mut life, e, step);
                        }
                    }
                }
            }
        }
    }

    let size_of = |e: Ent| -> (usize, usize) {
        let (b, bytes) = match e {
            Ent::T(id) => (
                own_backend[id.index()].unwrap_or(cpu),
                g.tensor(id).nbytes(),
            ),
            Ent::C(slot) => (copies[slot].backend, g.tensor(copies[slot].src).nbytes()),
        };
        (b, (bytes + overhang[b]).max(1).next_multiple_of(ALIGN))
    };

    let mut order: Vec<(usize, Ent)> = life
        .iter_mut()
        .map(|(&e, l)| {
            if l.0 == usize::MAX {
                l.0 = 0;
            }
            l.1 = l.1.max(l.0);
            (l.0, e)
        })
        .collect();
    order.sort_unstable();
    let mut frees: BTreeMap<usize, Vec<Ent>> = BTreeMap::new();
    for (&e, &(_, last, keep)) in &life {
        if !keep {
            frees.entry(last).or_default().push(e);
        }
    }

    let mut arenas: Vec<Arena> = (0..nb).map(|_| Arena::default()).collect();
    let mut placed: BTreeMap<Ent, (usize, usize, usize)> = BTreeMap::new();
    let mut allocs = Vec::with_capacity(order.len());
    let mut i = 0;
    let last_step = step;
    for s in 0..=last_step {
        while i < order.len() && order[i].0 == s {
            let e = order[i].1;
            let (b, size) = size_of(e);
            let off = arenas[b].alloc(size);
            placed.insert(e, (b, off, size));
            allocs.push((e, b, off));
            i += 1;
        }
        if let Some(list) = frees.get(&s) {
            for e in list {
                if let Some(&(b, off, size)) = placed.get(e) {
                    arenas[b].release(off, size);
                }
            }
        }
    }
    let sizes = arenas.iter().map(|a| a.top).collect();
    (allocs, sizes)
}

#[cfg(test)]
mod tests {
    use super::Arena;

    #[test]
    fn arena_reuses_freed_blocks() {
        let mut a = Arena::default();
        let x = a.alloc(256);
        let y = a.alloc(512);
        a.release(x, 256);
        assert_eq!(a.alloc(256), x);
        a.release(y, 512);
        a.release(x, 256);
        assert_eq!(a.free, vec![(0, 768)]);
        assert_eq!(a.alloc(1024), 0);
        assert_eq!(a.top, 1024);
    }
}
