//! Raw views of tensor memory for the CPU kernels: a base pointer plus
//! ggml's `ne`/`nb`, resolved and bounds-checked once per node.

use crate::types::GgmlType;

/// A tensor's memory as the kernels see it.
#[derive(Clone, Copy, Debug)]
pub struct TView {
    /// Address of element `[0,0,0,0]`.
    pub ptr: *mut u8,
    /// Element type.
    pub ty: GgmlType,
    /// Elements per dimension.
    pub ne: [usize; 4],
    /// Byte strides.
    pub nb: [usize; 4],
}

// SAFETY: a TView is a checked window into a live buffer; kernels split work
// so that threads write disjoint elements.
unsafe impl Send for TView {}
// SAFETY: see above.
unsafe impl Sync for TView {}

impl TView {
    /// Number of rows (dims 1..3).
    pub fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Split a flat row index into `(i1, i2, i3)`.
    pub fn row_coords(&self, r: usize) -> (usize, usize, usize) {
        let i1 = r % self.ne[1];
        let i2 = (r / self.ne[1]) % self.ne[2];
        let i3 = r / (self.ne[1] * self.ne[2]);
        (i1, i2, i3)
    }

    /// Address of the start of row `(i1, i2, i3)`.
    pub fn row_ptr(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY (for callers): indices within `ne` stay inside the range that
        // was checked against the buffer when the view was made.
        self.ptr
            .wrapping_add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
    }

    /// Address of element `(i0, i1, i2, i3)` of a non-quantized tensor.
    pub fn elem_ptr(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        self.ptr
            .wrapping_add(i0 * self.nb[0] + i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
    }

    /// Read element as f32 (F32, F16, BF16, I32).
    ///
    /// # Safety
    /// The indices must be within `ne`.
    pub unsafe fn get_f32(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> f32 {
        let p = self.elem_ptr(i0, i1, i2, i3);
        match self.ty {
            GgmlType::F32 => (p as *const f32).read_unaligned(),
            GgmlType::F16 => half::f16::from_bits((p as *const u16).read_unaligned()).to_f32(),
            GgmlType::BF16 => half::bf16::from_bits((p as *const u16).read_unaligned()).to_f32(),
            GgmlType::I32 => (p as *const i32).read_unaligned() as f32,
            _ => f32::NAN,
        }
    }

    /// Write element from f32 (F32, F16, BF16, I32).
    ///
    /// # Safety
    /// The indices must be within `ne` and the memory writable.
    pub unsafe fn set_f32(&self, i0: usize, i1: usize, i2: usize, i3: usize, v: f32) {
        let p = self.elem_ptr(i0, i1, i2, i3);
        match self.ty {
            GgmlType::F32 => (p as *mut f32).write_unaligned(v),
            GgmlType::F16 => (p as *mut u16).write_unaligned(half::f16::from_f32(v).to_bits()),
            GgmlType::BF16 => (p as *mut u16).write_unaligned(half::bf16::from_f32(v).to_bits()),
            GgmlType::I32 => (p as *mut i32).write_unaligned(v as i32),
            _ => {}
        }
    }

    /// Read an I32 element.
    ///
    /// # Safety
    /// The indices must be within `ne` and the type I32.
    pub unsafe fn get_i32(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> i32 {
        (self.elem_ptr(i0, i1, i2, i3) as *const i32).read_unaligned()
    }

    /// Whether rows are dense (`nb[0]` is the element size).
    pub fn rows_contiguous(&self) -> bool {
        self.nb[0] == self.ty.type_size()
    }

    /// Whether the whole tensor is dense.
    pub fn is_contiguous(&self) -> bool {
        let row = self.ty.row_size(self.ne[0] as u64).unwrap_or(0);
        self.rows_contiguous()
            && (self.ne[1] <= 1 || self.nb[1] == row)
            && (self.ne[2] <= 1 || self.nb[2] == row * self.ne[1])
            && (self.ne[3] <= 1 || self.nb[3] == row * self.ne[1] * self.ne[2])
    }
}
