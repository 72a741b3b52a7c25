//! Where each layer of a group stands in the token's walk over the layers.
//!
//! Every ubatch visits a group's layers in graph order (ascending layer
//! index), so an expert of the layer just served is next needed a whole walk
//! later, and one of the layer about to be served within a step. A policy
//! that ranks by recency alone evicts exactly the experts needed next (the
//! loop that leaves LRU at zero hits when the slots hold less than one
//! walk); [`LayerRing::distance`] gives the steps until a layer's next visit
//! so that a policy can count them.

/// The layers of one group in visit order, and the position of the layer
/// being served.
#[derive(Clone, Debug, Default)]
pub struct LayerRing {
    /// Layer indices, ascending (graph order).
    layers: Vec<u32>,
    /// Position (in `layers`) of the layer served last in this ubatch;
    /// `None` before the ubatch's first layer.
    current: Option<usize>,
}

impl LayerRing {
    /// An empty ring (layers are added as they are seen or declared).
    pub fn new() -> LayerRing {
        LayerRing::default()
    }

    /// Declare `layer`; its position among the others (ascending).
    pub fn ensure(&mut self, layer: u32) -> usize {
        match self.layers.binary_search(&layer) {
            Ok(i) => i,
            Err(i) => {
                self.layers.insert(i, layer);
                if let Some(c) = self.current.as_mut() {
                    if *c >= i {
                        *c += 1;
                    }
                }
                i
            }
        }
    }

    /// Position of `layer`, if declared.
    pub fn position(&self, layer: u32) -> Option<usize> {
        self.layers.binary_search(&layer).ok()
    }

    /// Layers in the ring.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether no layer is declared.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layer at position `i`.
    pub fn layer(&self, i: usize) -> u32 {
        self.layers[i]
    }

    /// A new ubatch begins: no layer served yet.
    pub fn begin_ubatch(&mut self) {
        self.current = None;
    }

    /// `layer` is being served (declared if new); its position.
    pub fn visit(&mut self, layer: u32) -> usize {
        let i = self.ensure(layer);
        self.current = Some(i);
        i
    }

    /// The position after `i` (the next layer served; the first after the
    /// last).
    pub fn after(&self, i: usize) -> usize {
        if i + 1 >= self.layers.len() {
            0
        } else {
            i + 1
        }
    }

    /// Steps (layer visits of the walk) until the layer at position `i` is
    /// served next: 1 for the layer after the current one, `len()` for the
    /// current one itself. Before a ubatch's first layer, the first layer is
    /// 1 step away.
    pub fn distance(&self, i: usize) -> usize {
        let n = self.layers.len().max(1);
        match self.current {
            None => i + 1,
            Some(c) if i > c => i - c,
            Some(c) => n - c + i,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_follow_the_walk() {
        let mut r = LayerRing::new();
        for l in [4, 0, 2] {
            r.ensure(l);
        }
        assert_eq!((r.len(), r.layer(0), r.layer(2)), (3, 0, 4));
        r.begin_ubatch();
        assert_eq!(r.distance(0), 1);
        assert_eq!(r.visit(2), 1);
        // layer 4 is next, layer 0 after the wrap, layer 2 a walk away
        assert_eq!((r.distance(2), r.distance(0), r.distance(1)), (1, 2, 3));
        assert_eq!((r.after(1), r.after(2)), (2, 0));
        // a layer seen late keeps the current position right
        r.ensure(3);
        assert_eq!(r.position(3), Some(2));
        assert_eq!(r.distance(2), 1);
        assert_eq!(r.distance(1), 4);
    }
}
