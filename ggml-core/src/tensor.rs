//! Tensor descriptors with ggml's `ne`/`nb` semantics, and the typed id that
//! names a tensor inside a [`crate::graph::Graph`].

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::buffer::Buffer;
use crate::op::Op;
use crate::types::GgmlType;

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;

/// Index of a tensor in its graph's arena (rustc-style typed index).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// Where a tensor's bytes live: a buffer and a byte offset in it.
#[derive(Clone)]
pub struct TensorData {
    /// The owning buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset of element `[0,0,0,0]` in the buffer.
    pub offset: usize,
}

impl fmt::Debug for TensorData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.buffer.name(), self.offset)
    }
}

/// Role flags, as ggml's `GGML_TENSOR_FLAG_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorFlags {
    /// Set by the caller before compute (token ids, positions, masks).
    pub input: bool,
    /// Read by the caller after compute (logits); its memory is not reused.
    pub output: bool,
    /// A model weight: lives in a weights buffer, never written by compute.
    pub weight: bool,
    /// Computed on the host (CPU) backend whatever the weights it reads
    /// (ggml's `ggml_backend_sched_set_tensor_backend(cpu)`): no device
    /// claims it through `offload_op` (hybrid expert placement).
    pub host: bool,
}

/// One tensor: shape, strides, type, the op that produces it and its sources.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Name (model tensors keep their GGUF names).
    pub name: String,
    /// Element type.
    pub ty: GgmlType,
    /// Number of elements per dimension, innermost first.
    pub ne: [i64; MAX_DIMS],
    /// Stride in bytes per dimension (`nb[0]` is the type size, or the block
    /// size in bytes for quantized types).
    pub nb: [usize; MAX_DIMS],
    /// The op that computes this tensor (`Op::None` for leafs).
    pub op: Op,
    /// Source tensors of the op, in ggml's order.
    pub src: SmallVec<[TensorId; 4]>,
    /// For views: the tensor whose memory this one aliases.
    pub view_src: Option<TensorId>,
    /// For views: byte offset into `view_src`.
    pub view_offs: usize,
    /// Role flags.
    pub flags: TensorFlags,
    /// Memory, once allocated (views resolve through `view_src`).
    pub data: Option<TensorData>,
}

impl Tensor {
    /// A contiguous tensor descriptor with no op and no data.
    pub fn new(ty: GgmlType, ne: [i64; MAX_DIMS]) -> Tensor {
        Tensor {
            name: String::new(),
            ty,
            ne,
            nb: contiguous_strides(ty, ne),
            op: Op::None,
            src: SmallVec::new(),
            view_src: None,
            view_offs: 0,
            flags: TensorFlags::default(),
            data: None,
        }
    }

    /// Total number of elements (`ggml_nelements`).
    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }

    /// Number of rows (`ggml_nrows`): everything but dimension 0.
    pub fn nrows(&self) -> i64 {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes spanned by the tensor (`ggml_nbytes`).
    pub fn nbytes(&self) -> usize {
        if self.ne.iter().any(|&n| n <= 0) {
            return 0;
        }
        let blck = self.ty.blck_size();
        let mut bytes = if blck == 1 {
            self.ty.type_size()
        } else {
            (self.ne[0] as usize / blck) * self.nb[0]
        };
        let first = if blck == 1 { 0 } else { 1 };
        for i in first..MAX_DIMS {
            bytes += (self.ne[i] as usize - 1) * self.nb[i];
        }
        bytes
    }

    /// Bytes of one row of `ne[0]` elements (`ggml_row_size`).
    pub fn row_size(&self) -> usize {
        self.ty.row_size(self.ne[0] as u64).unwrap_or(0)
    }

    /// Whether the elements are laid out densely in ggml order
    /// (`ggml_is_contiguous`).
    pub fn is_contiguous(&self) -> bool {
        self.nb == contiguous_strides(self.ty, self.ne)
            || (self.nelements() <= 1 && self.nb[0] == self.ty.type_size())
            || self.is_contiguous_ignoring_unit_dims()
    }

    fn is_contiguous_ignoring_unit_dims(&self) -> bool {
        let mut next = self.ty.type_size();
        if self.nb[0] != next {
            return false;
        }
        next = self.row_size();
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next *= self.ne[i] as usize;
            }
        }
        true
    }

    /// Whether rows are contiguous (`nb[0]` is the element size), the only
    /// requirement of most row-wise kernels.
    pub fn rows_contiguous(&self) -> bool {
        self.nb[0] == self.ty.type_size()
    }

    /// Whether this is a view of another tensor.
    pub fn is_view(&self) -> bool {
        self.view_src.is_some()
    }

    /// Whether the two tensors have the same `ne`.
    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.ne == other.ne
    }
}

/// Row-major-from-the-inside strides for a dense tensor of `ty` and `ne`.
pub fn contiguous_strides(ty: GgmlType, ne: [i64; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut nb = [0usize; MAX_DIMS];
    nb[0] = ty.type_size();
    nb[1] = ty.row_size(ne[0].max(0) as u64).unwrap_or(0);
    for i in 2..MAX_DIMS {
        nb[i] = nb[i - 1] * ne[i - 1].max(0) as usize;
    }
    nb
}
