//! The compute graph: an arena of tensors addressed by [`TensorId`], op
//! constructors named as ggml's (`mul_mat`, `rope_ext`, ...), and
//! `build_forward_expand`, which lists the nodes in dependency order.
//!
//! Shapes follow ggml's rules exactly. A constructor given shapes that ggml
//! would reject panics with the op's name (as `GGML_ASSERT` aborts): shapes
//! come from validated model hyper-parameters, never from raw input.

use smallvec::smallvec;

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::error::BackendError;
use crate::op::{GluOp, Op, RopeParams, SortOrder, UnaryOp};
use crate::tensor::{contiguous_strides, Tensor, TensorData, TensorId, MAX_DIMS};
use crate::types::GgmlType;

/// A graph under construction and, once built, its node order.
#[derive(Debug)]
pub struct Graph {
    tensors: Vec<Tensor>,
    nodes: Vec<TensorId>,
    visited: Vec<bool>,
    uid: u64,
}

/// The next [`Graph::uid`].
static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_uid() -> u64 {
    NEXT_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for Graph {
    fn default() -> Graph {
        Graph {
            tensors: Vec::new(),
            nodes: Vec::new(),
            visited: Vec::new(),
            uid: next_uid(),
        }
    }
}

impl Clone for Graph {
    /// A copy with a uid of its own: another graph, to whoever keeps
    /// state per graph.
    fn clone(&self) -> Graph {
        Graph {
            tensors: self.tensors.clone(),
            nodes: self.nodes.clone(),
            visited: self.visited.clone(),
            uid: next_uid(),
        }
    }
}

fn ne4(ne: &[i64]) -> [i64; MAX_DIMS] {
    assert!(
        !ne.is_empty() && ne.len() <= MAX_DIMS,
        "tensor needs 1..=4 dims"
    );
    let mut out = [1i64; MAX_DIMS];
    out[..ne.len()].copy_from_slice(ne);
    out
}

/// `ggml_can_repeat(b, a)`: whether `b` broadcasts to `a`.
pub fn can_repeat(b: &Tensor, a: &Tensor) -> bool {
    (0..MAX_DIMS).all(|i| b.ne[i] > 0 && a.ne[i] % b.ne[i] == 0)
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// This graph's identity, unique in the process (a clone gets its own):
    /// lets a scheduler tell the graph it last ran from another one of the
    /// same size.
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// Number of tensors in the arena.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensor with this id.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// Mutable access (to set names, flags or data).
    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        &mut self.tensors[id.index()]
    }

    /// Every tensor id in creation order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> {
        (0..self.tensors.len() as u32).map(TensorId)
    }

    /// Add a tensor to the arena.
    pub fn push(&mut self, t: Tensor) -> TensorId {
        let id = TensorId(self.tensors.len() as u32);
        self.tensors.push(t);
        self.visited.push(false);
        id
    }

    /// The nodes (tensors with an op) reachable from the expanded outputs, in
    /// dependency order.
    pub fn nodes(&self) -> &[TensorId] {
        &self.nodes
    }

    /// Add `out` and everything it depends on to the node list
    /// (`ggml_build_forward_expand`). Leafs (no op) are not nodes.
    pub fn build_forward_expand(&mut self, out: TensorId) {
        // iterative DFS: a 48-layer graph is deep enough to matter
        let mut stack: Vec<(TensorId, usize)> = vec![(out, 0)];
        while let Some((id, next_src)) = stack.pop() {
            if self.visited[id.index()] {
                continue;
            }
            let t = &self.tensors[id.index()];
            // the sources, then the view source unless it is one of them
            let dep = match t.src.get(next_src) {
                Some(&d) => Some(d),
                None if next_src == t.src.len() => t.view_src.filter(|v| !t.src.contains(v)),
                None => None,
            };
            if let Some(d) = dep {
                stack.push((id, next_src + 1));
                if !self.visited[d.index()] {
                    stack.push((d, 0));
                }
                continue;
            }
            self.visited[id.index()] = true;
            if self.tensors[id.index()].op != Op::None {
                self.nodes.push(id);
            }
        }
    }

    /// Where a tensor's bytes are, following views to their root.
    pub fn data_of(&self, id: TensorId) -> Option<TensorData> {
        let t = self.tensor(id);
        if let Some(d) = &t.data {
            return Some(d.clone());
        }
        let v = t.view_src?;
        let base = self.data_of(v)?;
        Some(TensorData {
            buffer: base.buffer,
            offset: base.offset + t.view_offs,
        })
    }

    /// The buffer and byte offset of a tensor's memory, as [`Graph::data_of`],
    /// without cloning the buffer's `Arc` (the CPU kernels resolve every
    /// source of every op this way).
    pub fn data_ref(&self, mut id: TensorId) -> Option<(&Arc<dyn Buffer>, usize)> {
        let mut offset = 0;
        loop {
            let t = self.tensor(id);
            if let Some(d) = &t.data {
                return Some((&d.buffer, d.offset + offset));
            }
            offset += t.view_offs;
            id = t.view_src?;
        }
    }

    /// The tensor at the root of a chain of views (itself if not a view).
    pub fn view_root(&self, mut id: TensorId) -> TensorId {
        while let Some(v) = self.tensor(id).view_src {
            id = v;
        }
        id
    }

    /// Write `bytes` at the start of a tensor's memory (which must be allocated).
    pub fn write_bytes(&self, id: TensorId, bytes: &[u8]) -> Result<(), BackendError> {
        let t = self.tensor(id);
        if bytes.len() > t.nbytes() {
            return Err(BackendError::OutOfBounds(format!(
                "write of {} bytes into tensor '{}' of {} bytes",
                bytes.len(),
                t.name,
                t.nbytes()
            )));
        }
        let d = self
            .data_of(id)
            .ok_or_else(|| BackendError::NotAllocated(t.name.clone()))?;
        d.buffer.write(d.offset, bytes)
    }

    /// Read a tensor's whole span (`nbytes`).
    pub fn read_bytes(&self, id: TensorId) -> Result<Vec<u8>, BackendError> {
        let t = self.tensor(id);
        let d = self
            .data_of(id)
            .ok_or_else(|| BackendError::NotAllocated(t.name.clone()))?;
        let mut out = vec![0u8; t.nbytes()];
        d.buffer.read(d.offset, &mut out)?;
        Ok(out)
    }

    /// Write f32 values into a contiguous F32 tensor.
    pub fn write_f32(&self, id: TensorId, v: &[f32]) -> Result<(), BackendError> {
        self.write_bytes(id, bytemuck::cast_slice(v))
    }

    /// Write i32 values into a contiguous I32 tensor.
    pub fn write_i32(&self, id: TensorId, v: &[i32]) -> Result<(), BackendError> {
        self.write_bytes(id, bytemuck::cast_slice(v))
    }

    /// Read a F32, F16, BF16 or I32 tensor (any strides) as dense f32 values
    /// in ggml element order.
    pub fn read_f32(&self, id: TensorId) -> Result<Vec<f32>, BackendError> {
        let t = self.tensor(id).clone();
        let raw = self.read_bytes(id)?;
        let mut out = Vec::with_capacity(t.nelements().max(0) as usize);
        for i3 in 0..t.ne[3] as usize {
            for i2 in 0..t.ne[2] as usize {
                for i1 in 0..t.ne[1] as usize {
                    for i0 in 0..t.ne[0] as usize {
                        let o = i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
                        let v = match t.ty {
                            GgmlType::F32 => {
                                f32::from_le_bytes(raw[o..o + 4].try_into().unwrap_or([0; 4]))
                            }
                            GgmlType::I32 => {
                                i32::from_le_bytes(raw[o..o + 4].try_into().unwrap_or([0; 4]))
                                    as f32
                            }
                            GgmlType::F16 => {
                                half::f16::from_le_bytes([raw[o], raw[o + 1]]).to_f32()
                            }
                            GgmlType::BF16 => {
                                half::bf16::from_le_bytes([raw[o], raw[o + 1]]).to_f32()
                            }
                            other => {
                                return Err(BackendError::Unsupported(format!(
                                    "read_f32 of a {other} tensor"
                                )))
                            }
                        };
                        out.push(v);
                    }
                }
            }
        }
        Ok(out)
    }

    // ----- leafs ---------------------------------------------------------

    /// A new leaf tensor of 1 to 4 dimensions (`ggml_new_tensor`).
    pub fn new_tensor(&mut self, ty: GgmlType, ne: &[i64]) -> TensorId {
        let ne = ne4(ne);
        assert!(
            ne[0] % ty.blck_size() as i64 == 0,
            "new_tensor: ne0 {} not a multiple of the {} block size",
            ne[0],
            ty
        );
        self.push(Tensor::new(ty, ne))
    }

    /// `ggml_new_tensor_1d`.
    pub fn new_tensor_1d(&mut self, ty: GgmlType, ne0: i64) -> TensorId {
        self.new_tensor(ty, &[ne0])
    }

    /// `ggml_new_tensor_2d`.
    pub fn new_tensor_2d(&mut self, ty: GgmlType, ne0: i64, ne1: i64) -> TensorId {
        self.new_tensor(ty, &[ne0, ne1])
    }

    /// `ggml_new_tensor_3d`.
    pub fn new_tensor_3d(&mut self, ty: GgmlType, ne0: i64, ne1: i64, ne2: i64) -> TensorId {
        self.new_tensor(ty, &[ne0, ne1, ne2])
    }

    /// Name a tensor (builder style).
    pub fn set_name(&mut self, id: TensorId, name: impl Into<String>) -> TensorId {
        self.tensor_mut(id).name = name.into();
        id
    }

    /// Mark a tensor as a graph input.
    pub fn set_input(&mut self, id: TensorId) -> TensorId {
        self.tensor_mut(id).flags.input = true;
        id
    }

    /// Mark a tensor as a graph output (its memory is kept).
    pub fn set_output(&mut self, id: TensorId) -> TensorId {
        self.tensor_mut(id).flags.output = true;
        id
    }

    // ----- internal helpers ---------------------------------------------

    fn node(&mut self, op: Op, ty: GgmlType, ne: [i64; MAX_DIMS], src: &[TensorId]) -> TensorId {
        let mut t = Tensor::new(ty, ne);
        t.op = op;
        t.src = src.iter().copied().collect();
        self.push(t)
    }

    fn view_node(
        &mut self,
        op: Op,
        a: TensorId,
        ne: [i64; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offs: usize,
    ) -> TensorId {
        let src = self.tensor(a);
        let mut t = Tensor::new(src.ty, ne);
        t.nb = nb;
        t.op = op;
        t.src = smallvec![a];
        t.view_src = Some(a);
        t.view_offs = offs;
        // "NAME (view)", in one allocation (a decode makes hundreds)
        let name = if src.name.is_empty() {
            String::new()
        } else {
            let op_name = op.name();
            let mut n = String::with_capacity(src.name.len() + op_name.len() + 3);
            n.push_str(&src.name);
            n.push_str(" (");
            n.extend(op_name.chars().map(|c| c.to_ascii_lowercase()));
            n.push(')');
            n
        };
        t.name = name;
        self.push(t)
    }

    fn ne(&self, id: TensorId) -> [i64; MAX_DIMS] {
        self.tensor(id).ne
    }

    fn ty(&self, id: TensorId) -> GgmlType {
        self.tensor(id).ty
    }

    // ----- views ---------------------------------------------------------

    /// `ggml_reshape_*`: same data, new shape (source must be contiguous).
    pub fn reshape(&mut self, a: TensorId, ne: &[i64]) -> TensorId {
        let ne = ne4(ne);
        let t = self.tensor(a);
        assert!(
            t.is_contiguous(),
            "reshape: source '{}' not contiguous",
            t.name
        );
        assert_eq!(
            ne.iter().product::<i64>(),
            t.nelements(),
            "reshape: element count of '{}'",
            t.name
        );
        let nb = contiguous_strides(t.ty, ne);
        self.view_node(Op::Reshape, a, ne, nb, 0)
    }

    /// `ggml_reshape_2d`.
    pub fn reshape_2d(&mut self, a: TensorId, ne0: i64, ne1: i64) -> TensorId {
        self.reshape(a, &[ne0, ne1])
    }

    /// `ggml_reshape_3d`.
    pub fn reshape_3d(&mut self, a: TensorId, ne0: i64, ne1: i64, ne2: i64) -> TensorId {
        self.reshape(a, &[ne0, ne1, ne2])
    }

    /// `ggml_view_4d` and friends: a window of shape `ne` with strides
    /// `nb1..nb3` starting `offset` bytes into `a`.
    pub fn view(&mut self, a: TensorId, ne: &[i64], nb_upper: &[usize], offset: usize) -> TensorId {
        let ne = ne4(ne);
        let t = self.tensor(a);
        let mut nb = contiguous_strides(t.ty, ne);
        for (i, s) in nb_upper.iter().enumerate() {
            nb[i + 1] = *s;
        }
        // dimensions beyond those given keep contiguous strides over the last given
        for i in nb_upper.len() + 1..MAX_DIMS {
            nb[i] = nb[i - 1] * ne[i - 1] as usize;
        }
        self.view_node(Op::View, a, ne, nb, offset)
    }

    /// `ggml_view_1d`.
    pub fn view_1d(&mut self, a: TensorId, ne0: i64, offset: usize) -> TensorId {
        self.view(a, &[ne0], &[], offset)
    }

    /// `ggml_view_2d`.
    pub fn view_2d(
        &mut self,
        a: TensorId,
        ne0: i64,
        ne1: i64,
        nb1: usize,
        offset: usize,
    ) -> TensorId {
        self.view(a, &[ne0, ne1], &[nb1], offset)
    }

    /// `ggml_view_3d`.
    pub fn view_3d(
        &mut self,
        a: TensorId,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> TensorId {
        self.view(a, &[ne0, ne1, ne2], &[nb1, nb2], offset)
    }

    /// `ggml_permute(a, ax0, ax1, ax2, ax3)`: source axis `i` becomes axis `axes[i]`.
    pub fn permute(&mut self, a: TensorId, axes: [usize; 4]) -> TensorId {
        let mut seen = [false; 4];
        for &x in &axes {
            assert!(
                x < 4 && !seen[x],
                "permute: axes {axes:?} not a permutation"
            );
            seen[x] = true;
        }
        let t = self.tensor(a);
        let mut ne = [0i64; 4];
        let mut nb = [0usize; 4];
        for i in 0..4 {
            ne[axes[i]] = t.ne[i];
            nb[axes[i]] = t.nb[i];
        }
        self.view_node(Op::Permute, a, ne, nb, 0)
    }

    /// `ggml_transpose`: swap axes 0 and 1.
    pub fn transpose(&mut self, a: TensorId) -> TensorId {
        let t = self.tensor(a);
        let mut ne = t.ne;
        let mut nb = t.nb;
        ne.swap(0, 1);
        nb.swap(0, 1);
        self.view_node(Op::Transpose, a, ne, nb, 0)
    }

    // ----- copies --------------------------------------------------------

    /// `ggml_cont`: a contiguous copy.
    pub fn cont(&mut self, a: TensorId) -> TensorId {
        let (ty, ne) = (self.ty(a), self.ne(a));
        self.node(Op::Cont, ty, ne, &[a])
    }

    /// `ggml_cont_2d` etc.: contiguous copy reshaped.
    pub fn cont_reshape(&mut self, a: TensorId, ne: &[i64]) -> TensorId {
        let c = self.cont(a);
        self.reshape(c, ne)
    }

    /// `ggml_dup`.
    pub fn dup(&mut self, a: TensorId) -> TensorId {
        let (ty, ne) = (self.ty(a), self.ne(a));
        self.node(Op::Dup, ty, ne, &[a])
    }

    /// `ggml_cpy(a, b)`: copy `a` into `b` (same element count), converting
    /// to `b`'s type. The result is a view of `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> TensorId {
        assert_eq!(
            self.tensor(a).nelements(),
            self.tensor(b).nelements(),
            "cpy: element counts differ"
        );
        let bt = self.tensor(b);
        let (ne, nb) = (bt.ne, bt.nb);
        let id = self.view_node(Op::Cpy, b, ne, nb, 0);
        self.tensor_mut(id).src = smallvec![a, b];
        id
    }

    /// `ggml_set_rows(a, b, c)`: write the rows of `b` into `a` at row
    /// indices `c` (I32 or I64), converting to `a`'s type. The result is a
    /// view of `a`.
    pub fn set_rows(&mut self, a: TensorId, b: TensorId, c: TensorId) -> TensorId {
        let (at, bt, ct) = (self.tensor(a), self.tensor(b), self.tensor(c));
        assert_eq!(at.ne[0], bt.ne[0], "set_rows: row lengths differ");
        assert!(
            at.ne[2] == bt.ne[2] && at.ne[3] == bt.ne[3],
            "set_rows: planes of source and destination differ"
        );
        assert_eq!(ct.ne[3], 1, "set_rows: 3-d indices");
        assert_eq!(bt.ne[1], ct.ne[0], "set_rows: one index per source row");
        assert!(
            matches!(ct.ty, GgmlType::I32 | GgmlType::I64),
            "set_rows: index type"
        );
        assert_eq!(bt.ty, GgmlType::F32, "set_rows: source must be F32");
        assert!(
            bt.ne[2] % ct.ne[1] == 0 && bt.ne[3] % ct.ne[2] == 0,
            "set_rows: index broadcast"
        );
        let (ne, nb) = (at.ne, at.nb);
        let id = self.view_node(Op::SetRows, a, ne, nb, 0);
        self.tensor_mut(id).src = smallvec![a, b, c];
        id
    }

    // ----- element-wise --------------------------------------------------

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> TensorId {
        assert!(
            can_repeat(self.tensor(b), self.tensor(a)),
            "{}: {:?} does not broadcast to {:?}",
            op.name(),
            self.ne(b),
            self.ne(a)
        );
        let ne = self.ne(a);
        self.node(op, GgmlType::F32, ne, &[a, b])
    }

    /// `ggml_add` (b broadcast to a).
    pub fn add(&mut self, a: TensorId, b: TensorId) -> TensorId {
        self.binary(Op::Add, a, b)
    }
    /// `ggml_sub`.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> TensorId {
        self.binary(Op::Sub, a, b)
    }
    /// `ggml_mul`.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> TensorId {
        self.binary(Op::Mul, a, b)
    }
    /// `ggml_div`.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> TensorId {
        self.binary(Op::Div, a, b)
    }

    fn unary_like(&mut self, op: Op, a: TensorId) -> TensorId {
        let ne = self.ne(a);
        self.node(op, GgmlType::F32, ne, &[a])
    }

    /// `ggml_scale`: `a * s`.
    pub fn scale(&mut self, a: TensorId, s: f32) -> TensorId {
        self.scale_bias(a, s, 0.0)
    }
    /// `ggml_scale_bias`: `a * s + b`.
    pub fn scale_bias(&mut self, a: TensorId, s: f32, b: f32) -> TensorId {
        self.unary_like(
            Op::Scale {
                s: s.into(),
                b: b.into(),
            },
            a,
        )
    }
    /// `ggml_sqr`.
    pub fn sqr(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Sqr, a)
    }
    /// `ggml_sqrt`.
    pub fn sqrt(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Sqrt, a)
    }
    /// `ggml_silu`.
    pub fn silu(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Unary(UnaryOp::Silu), a)
    }
    /// `ggml_gelu` (tanh approximation).
    pub fn gelu(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Unary(UnaryOp::Gelu), a)
    }
    /// `ggml_sigmoid`.
    pub fn sigmoid(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Unary(UnaryOp::Sigmoid), a)
    }
    /// `ggml_neg`.
    pub fn neg(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Unary(UnaryOp::Neg), a)
    }
    /// `ggml_relu`.
    pub fn relu(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Unary(UnaryOp::Relu), a)
    }
    /// `ggml_exp`.
    pub fn exp(&mut self, a: TensorId) -> TensorId {
        self.unary_like(Op::Unary(UnaryOp::Exp), a)
    }

    /// `ggml_rms_norm`.
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> TensorId {
        self.unary_like(Op::RmsNorm { eps: eps.into() }, a)
    }
    /// `ggml_norm`.
    pub fn norm(&mut self, a: TensorId, eps: f32) -> TensorId {
        self.unary_like(Op::Norm { eps: eps.into() }, a)
    }

    /// `ggml_sum_rows`: `[1, ne1, ne2, ne3]`.
    pub fn sum_rows(&mut self, a: TensorId) -> TensorId {
        let mut ne = self.ne(a);
        ne[0] = 1;
        self.node(Op::SumRows, GgmlType::F32, ne, &[a])
    }
    /// `ggml_mean`: `[1, ne1, ne2, ne3]`.
    pub fn mean(&mut self, a: TensorId) -> TensorId {
        let mut ne = self.ne(a);
        ne[0] = 1;
        self.node(Op::Mean, GgmlType::F32, ne, &[a])
    }
    /// `ggml_argmax`: I32 `[ne1]` of a matrix.
    pub fn argmax(&mut self, a: TensorId) -> TensorId {
        let ne = self.ne(a);
        assert!(ne[2] == 1 && ne[3] == 1, "argmax: matrix expected");
        self.node(Op::Argmax, GgmlType::I32, [ne[1], 1, 1, 1], &[a])
    }

    // ----- matrix products -----------------------------------------------

    /// `ggml_mul_mat(a, b)`: `[a.ne1, b.ne1, b.ne2, b.ne3]`, F32; `a` (the
    /// weight) broadcasts over `b`'s dims 2 and 3.
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> TensorId {
        let (an, bn) = (self.ne(a), self.ne(b));
        assert_eq!(an[0], bn[0], "mul_mat: inner dims {} vs {}", an[0], bn[0]);
        assert!(
            bn[2] % an[2] == 0 && bn[3] % an[3] == 0,
            "mul_mat: {an:?} does not broadcast over {bn:?}"
        );
        assert!(
            !self.tensor(b).ty.is_quantized(),
            "mul_mat: b must not be quantized"
        );
        self.node(
            Op::MulMat,
            GgmlType::F32,
            [an[1], bn[1], bn[2], bn[3]],
            &[a, b],
        )
    }

    /// `ggml_mul_mat_id(as, b, ids)`: `as` is `[k, m, n_expert]`, `b` is
    /// `[k, n_used or 1, n_tokens]`, `ids` is I32 `[n_used, n_tokens]`;
    /// result `[m, n_used, n_tokens]`. An id of -1 skips its slot (the
    /// row is an exact zero), so a layer's experts can be split between
    /// two `mul_mat_id`s on two backends whose outputs are added.
    pub fn mul_mat_id(&mut self, as_: TensorId, b: TensorId, ids: TensorId) -> TensorId {
        let (an, bn, idn) = (self.ne(as_), self.ne(b), self.ne(ids));
        assert_eq!(self.ty(ids), GgmlType::I32, "mul_mat_id: ids must be I32");
        assert_eq!(an[0], bn[0], "mul_mat_id: inner dims");
        assert!(
            an[3] == 1 && bn[3] == 1 && idn[2] == 1,
            "mul_mat_id: 3-d tensors"
        );
        assert_eq!(bn[2], idn[1], "mul_mat_id: one ids row per token");
        assert!(
            bn[1] == 1 || bn[1] == idn[0],
            "mul_mat_id: b.ne1 must be 1 or n_used"
        );
        self.node(
            Op::MulMatId,
            GgmlType::F32,
            [an[1], idn[0], bn[2], 1],
            &[as_, b, ids],
        )
    }

    /// `ggml_add_id(a, b, ids)`: `a[:, i1, i2] + b[:, ids[i1, i2]]`.
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> TensorId {
        let (an, bn, idn) = (self.ne(a), self.ne(b), self.ne(ids));
        assert_eq!(an[0], bn[0], "add_id: row lengths");
        assert!(an[1] == idn[0] && an[2] == idn[1], "add_id: ids shape");
        self.node(Op::AddId, GgmlType::F32, an, &[a, b, ids])
    }

    /// `ggml_get_rows(a, b)`: F32 `[a.ne0, b.ne0, b.ne1, b.ne2]`.
    pub fn get_rows(&mut self, a: TensorId, b: TensorId) -> TensorId {
        let (an, bn) = (self.ne(a), self.ne(b));
        assert_eq!(self.ty(b), GgmlType::I32, "get_rows: ids must be I32");
        assert!(
            an[2] == bn[1] && bn[3] == 1,
            "get_rows: shapes {an:?} {bn:?}"
        );
        let ty = if self.ty(a) == GgmlType::I32 {
            GgmlType::I32
        } else {
            GgmlType::F32
        };
        self.node(Op::GetRows, ty, [an[0], bn[0], bn[1], bn[2]], &[a, b])
    }

    // ----- attention -----------------------------------------------------

    /// `ggml_rope_ext(a, pos, freq_factors, ...)`: `a` is
    /// `[head_dim, n_head, n_tokens]`, `pos` I32 `[n_tokens]`.
    pub fn rope_ext(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        p: RopeParams,
    ) -> TensorId {
        assert_eq!(self.ty(pos), GgmlType::I32, "rope: positions must be I32");
        assert_eq!(
            self.ne(pos)[0],
            self.ne(a)[2],
            "rope: one position per token"
        );
        assert!(
            p.n_dims > 0 && p.n_dims as i64 <= self.ne(a)[0] && p.n_dims % 2 == 0,
            "rope: n_dims"
        );
        let mut src = vec![a, pos];
        if let Some(f) = freq_factors {
            assert!(
                self.ne(f)[0] >= p.n_dims as i64 / 2,
                "rope: freq factors length"
            );
            src.push(f);
        }
        let ne = self.ne(a);
        self.node(Op::RopeExt(p), GgmlType::F32, ne, &src)
    }

    /// `ggml_soft_max_ext(a, mask, scale, max_bias)`: softmax of
    /// `a * scale + mask` per row (mask F32 or F16, broadcast over dims 2, 3).
    pub fn soft_max_ext(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> TensorId {
        let mut src = vec![a];
        if let Some(m) = mask {
            let (an, mn) = (self.ne(a), self.ne(m));
            assert!(
                mn[0] == an[0] && mn[1] >= an[1],
                "soft_max: mask shape {mn:?} for {an:?}"
            );
            assert!(
                an[2] % mn[2] == 0 && an[3] % mn[3] == 0,
                "soft_max: mask broadcast"
            );
            src.push(m);
        }
        let ne = self.ne(a);
        self.node(
            Op::SoftMaxExt {
                scale: scale.into(),
                max_bias: max_bias.into(),
            },
            GgmlType::F32,
            ne,
            &src,
        )
    }

    /// `ggml_soft_max_add_sinks`: attach per-head sink logits (F32 `[n_head]`)
    /// to a `soft_max_ext` node.
    pub fn soft_max_add_sinks(&mut self, sm: TensorId, sinks: TensorId) {
        let t = self.tensor_mut(sm);
        assert!(
            matches!(t.op, Op::SoftMaxExt { .. }),
            "sinks need a soft_max node"
        );
        if t.src.len() == 1 {
            panic!("soft_max_add_sinks: a mask is required before sinks");
        }
        t.src.push(sinks);
    }

    /// `ggml_flash_attn_ext(q, k, v, mask, scale, max_bias, softcap)`:
    /// q `[d, n_tokens, n_head]`, k `[d, n_kv, n_head_kv]`, v `[dv, n_kv, n_head_kv]`;
    /// result `[dv, n_head, n_tokens]` (permuted, as ggml).
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        softcap: f32,
    ) -> TensorId {
        let (qn, kn, vn) = (self.ne(q), self.ne(k), self.ne(v));
        assert!(qn[0] == kn[0] && kn[1] == vn[1], "flash_attn_ext: shapes");
        assert!(qn[2] % kn[2] == 0, "flash_attn_ext: head broadcast");
        let mut src = vec![q, k, v];
        if let Some(m) = mask {
            src.push(m);
        }
        self.node(
            Op::FlashAttnExt {
                scale: scale.into(),
                max_bias: max_bias.into(),
                softcap: softcap.into(),
            },
            GgmlType::F32,
            [vn[0], qn[2], qn[1], qn[3]],
            &src,
        )
    }

    /// `ggml_flash_attn_ext_add_sinks`: attach per-head sink logits (F32
    /// `[n_head]`) to a `flash_attn_ext` node; a mask is required first.
    pub fn flash_attn_ext_add_sinks(&mut self, fa: TensorId, sinks: TensorId) {
        let t = self.tensor_mut(fa);
        assert!(
            matches!(t.op, Op::FlashAttnExt { .. }),
            "sinks need a flash_attn_ext node"
        );
        assert_eq!(
            t.src.len(),
            4,
            "flash_attn_ext_add_sinks: a mask is required before sinks"
        );
        t.src.push(sinks);
    }

    /// ggml's shape contract of a `flash_attn_ext` node: q `[d, n_q, h,
    /// s]`, k and v with as many cells and a head count that divides q's
    /// (broadcast), the dst `[d_v, h, n_q, s]`; the mask (src 3) covering
    /// the cells and queries, broadcast over heads and sequences; the sinks
    /// (src 4) one per head. Element types and layouts are each backend's
    /// own `supports_op` check.
    pub fn flash_attn_ext_shapes_ok(&self, node: TensorId) -> bool {
        let t = self.tensor(node);
        let (q, k, v) = (
            self.tensor(t.src[0]),
            self.tensor(t.src[1]),
            self.tensor(t.src[2]),
        );
        let qkv = q.ne[0] == k.ne[0]
            && k.ne[1] == v.ne[1]
            && k.ne[2] == v.ne[2]
            && k.ne[3] == v.ne[3]
            && k.ne[2] > 0
            && k.ne[3] > 0
            && q.ne[2] % k.ne[2] == 0
            && q.ne[3] % k.ne[3] == 0
            && t.ne == [v.ne[0], q.ne[2], q.ne[1], q.ne[3]];
        let mask = t.src.get(3).is_none_or(|&m| {
            let m = self.tensor(m);
            m.ne[0] >= k.ne[1]
                && m.ne[1] >= q.ne[1]
                && m.ne[2] > 0
                && m.ne[3] > 0
                && q.ne[2] % m.ne[2] == 0
                && q.ne[3] % m.ne[3] == 0
        });
        let sinks = t
            .src
            .get(4)
            .is_none_or(|&s| self.tensor(s).ne[0] >= q.ne[2]);
        qkv && mask && sinks
    }

    // ----- activations and routing --------------------------------------

    /// `ggml_swiglu(a)`: halves of `ne0` (`silu(first) * second`, or swapped).
    pub fn glu(&mut self, a: TensorId, op: GluOp, swapped: bool) -> TensorId {
        let mut ne = self.ne(a);
        assert!(ne[0] % 2 == 0, "glu: ne0 must be even");
        ne[0] /= 2;
        self.node(Op::Glu { op, swapped }, GgmlType::F32, ne, &[a])
    }

    /// `ggml_swiglu_split(a, b)` / `ggml_geglu_split`: `act(a) * b`.
    pub fn glu_split(&mut self, a: TensorId, b: TensorId, op: GluOp) -> TensorId {
        assert_eq!(self.ne(a), self.ne(b), "glu_split: shapes differ");
        let ne = self.ne(a);
        self.node(Op::Glu { op, swapped: false }, GgmlType::F32, ne, &[a, b])
    }

    /// `ggml_swiglu_split`.
    pub fn swiglu_split(&mut self, a: TensorId, b: TensorId) -> TensorId {
        self.glu_split(a, b, GluOp::Swiglu)
    }

    /// `ggml_argsort`: I32 indices sorting each row.
    pub fn argsort(&mut self, a: TensorId, order: SortOrder) -> TensorId {
        let ne = self.ne(a);
        self.node(Op::Argsort(order), GgmlType::I32, ne, &[a])
    }

    /// `ggml_top_k`: I32 `[k, ...]`, indices of the `k` largest per row,
    /// largest first (ties: lower index first).
    pub fn top_k(&mut self, a: TensorId, k: i32) -> TensorId {
        let mut ne = self.ne(a);
        assert!(
            k > 0 && k as i64 <= ne[0],
            "top_k: k = {k} for rows of {}",
            ne[0]
        );
        ne[0] = k as i64;
        self.node(Op::TopK { k }, GgmlType::I32, ne, &[a])
    }

    /// `ggml_concat(a, b, dim)`.
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> TensorId {
        let (an, bn) = (self.ne(a), self.ne(b));
        assert!(dim < MAX_DIMS, "concat: dim");
        for i in 0..MAX_DIMS {
            assert!(
                i == dim || an[i] == bn[i],
                "concat: shapes {an:?} {bn:?} along {dim}"
            );
        }
        let mut ne = an;
        ne[dim] += bn[dim];
        let ty = self.ty(a);
        self.node(Op::Concat { dim: dim as i32 }, ty, ne, &[a, b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_order_puts_sources_first_and_skips_leafs() {
        let mut g = Graph::new();
        let a = g.new_tensor_2d(GgmlType::F32, 4, 3);
        let b = g.new_tensor_2d(GgmlType::F32, 4, 3);
        let c = g.add(a, b);
        let d = g.mul(c, a);
        let e = g.sum_rows(d);
        g.build_forward_expand(e);
        assert_eq!(g.nodes(), &[c, d, e]);
    }

    #[test]
    fn views_have_ggml_strides() {
        let mut g = Graph::new();
        let a = g.new_tensor_3d(GgmlType::F32, 4, 3, 2);
        let t = g.transpose(a);
        assert_eq!(g.tensor(t).ne, [3, 4, 2, 1]);
        assert_eq!(g.tensor(t).nb, [16, 4, 48, 96]);
        let p = g.permute(a, [0, 2, 1, 3]);
        assert_eq!(g.tensor(p).ne, [4, 2, 3, 1]);
        assert_eq!(g.tensor(p).nb, [4, 48, 16, 96]);
        assert!(!g.tensor(p).is_contiguous());
        let mm = g.mul_mat(a, a);
        assert_eq!(g.tensor(mm).ne, [3, 3, 2, 1]);
    }
}
