//! Host memory buffers: zeroed, aligned, writable memory for the CPU backend,
//! and read-only buffers over shared bytes (a mapped GGUF file).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::backend::{check_range, BackendError, Buffer, BufferUsage};

/// Alignment of host buffers: enough for any SIMD load.
pub const HOST_ALIGN: usize = 64;

/// Zeroed, 64-byte aligned host memory.
pub struct HostMemory {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: HostMemory is a plain heap allocation; concurrent access is
// coordinated by its users (kernels write disjoint rows; the scheduler never
// computes into memory that is being read by a copy).
unsafe impl Send for HostMemory {}
// SAFETY: see above.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Allocate `size` zeroed bytes.
    pub fn new(size: usize) -> Result<HostMemory, BackendError> {
        let layout = Layout::from_size_align(size.max(1), HOST_ALIGN)
            .map_err(|e| BackendError::OutOfMemory(format!("{size} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p)
            .ok_or_else(|| BackendError::OutOfMemory(format!("{size} bytes of host memory")))?;
        Ok(HostMemory { ptr, size })
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Base address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copy in, bounds-checked.
    pub fn write(&self, name: &str, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        check_range(name, self.size, offset, data.len())?;
        // SAFETY: range checked above; source and destination cannot overlap
        // unless the caller passes a slice of this very buffer, which copy
        // handles (copy is memmove-safe only for `copy`, so we use it).
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr().add(offset), data.len()) };
        Ok(())
    }

    /// Copy out, bounds-checked.
    pub fn read(&self, name: &str, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        check_range(name, self.size, offset, out.len())?;
        // SAFETY: range checked above.
        unsafe { std::ptr::copy(self.ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if let Ok(layout) = Layout::from_size_align(self.size.max(1), HOST_ALIGN) {
            // SAFETY: allocated in `new` with this very layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// A CPU backend buffer.
pub struct HostBuffer {
    mem: HostMemory,
    usage: BufferUsage,
}

impl HostBuffer {
    /// Allocate a zeroed host buffer.
    pub fn new(size: usize, usage: BufferUsage) -> Result<HostBuffer, BackendError> {
        Ok(HostBuffer {
            mem: HostMemory::new(size)?,
            usage,
        })
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({} bytes, {:?})", self.mem.size, self.usage)
    }
}

impl Buffer for HostBuffer {
    fn name(&self) -> &str {
        "CPU"
    }
    fn size(&self) -> usize {
        self.mem.size
    }
    fn is_host(&self) -> bool {
        true
    }
    fn usage(&self) -> BufferUsage {
        self.usage
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        self.mem.write("CPU", offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        self.mem.read("CPU", offset, out)
    }
    fn base_ptr(&self) -> Option<*mut u8> {
        Some(self.mem.ptr())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Read-only host weights over shared bytes (typically a mapped GGUF file),
/// so weights are used where they lie, without a copy.
pub struct MappedBuffer {
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
}

impl MappedBuffer {
    /// Wrap shared bytes.
    pub fn new(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> MappedBuffer {
        MappedBuffer { bytes }
    }

    fn slice(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }
}

impl fmt::Debug for MappedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappedBuffer({} bytes)", self.slice().len())
    }
}

impl Buffer for MappedBuffer {
    fn name(&self) -> &str {
        "CPU_Mapped"
    }
    fn size(&self) -> usize {
        self.slice().len()
    }
    fn is_host(&self) -> bool {
        true
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::Weights
    }
    fn write(&self, _offset: usize, _data: &[u8]) -> Result<(), BackendError> {
        Err(BackendError::ReadOnly("CPU_Mapped".into()))
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        let s = self.slice();
        check_range("CPU_Mapped", s.len(), offset, out.len())?;
        out.copy_from_slice(&s[offset..offset + out.len()]);
        Ok(())
    }
    fn base_ptr(&self) -> Option<*mut u8> {
        // Kernels only read through this pointer: `is_writable` is false, and
        // the CPU backend refuses to compute into such a buffer.
        Some(self.slice().as_ptr() as *mut u8)
    }
    fn is_writable(&self) -> bool {
        false
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
