//! Bytes on the wire: the packed `rpc_tensor` (296 bytes), little-endian
//! writers, and a bounds-checked reader that turns a short or malformed
//! message into an error instead of a panic.

use crate::proto::{MAX_DIMS, MAX_NAME, MAX_SRC, N_OP_PARAMS, RPC_TENSOR_SIZE};

/// `struct rpc_tensor`, field for field (packed, little-endian):
/// `id u64 | type u32 | buffer u64 | ne u32[4] | nb u32[4] | op u32 |
/// op_params i32[16] | flags i32 | src u64[10] | view_src u64 | view_offs
/// u64 | data u64 | name [u8; 64] | use_count i32`.
///
/// Ids name tensors within one message (0 = none); `buffer` is the remote
/// buffer handle ALLOC_BUFFER returned and `data` the tensor's remote
/// address (`base + offset`), both 0 for a tensor in no buffer of that
/// server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcTensor {
    /// The tensor's id in this message (0 = no tensor).
    pub id: u64,
    /// ggml type number.
    pub ty: u32,
    /// Remote buffer handle (0 = none).
    pub buffer: u64,
    /// Elements per dimension.
    pub ne: [u32; MAX_DIMS],
    /// Byte strides.
    pub nb: [u32; MAX_DIMS],
    /// ggml op ordinal.
    pub op: u32,
    /// ggml's raw `op_params`.
    pub op_params: [i32; N_OP_PARAMS],
    /// `GGML_TENSOR_FLAG_*`.
    pub flags: i32,
    /// Source ids (0 = none).
    pub src: [u64; MAX_SRC],
    /// The id of the tensor this one views (0 = none).
    pub view_src: u64,
    /// Byte offset into `view_src`.
    pub view_offs: u64,
    /// Remote address of element 0 (0 = none).
    pub data: u64,
    /// Name, NUL-padded (at most 63 bytes kept).
    pub name: [u8; MAX_NAME],
    /// How many nodes of the graph read it (ggml's fusion checks it).
    pub use_count: i32,
}

impl Default for RpcTensor {
    fn default() -> Self {
        RpcTensor {
            id: 0,
            ty: 0,
            buffer: 0,
            ne: [0; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; N_OP_PARAMS],
            flags: 0,
            src: [0; MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: [0; MAX_NAME],
            use_count: 0,
        }
    }
}

impl RpcTensor {
    /// Set the name (cut to 63 bytes at a character boundary, NUL-padded).
    pub fn set_name(&mut self, name: &str) {
        self.name = [0; MAX_NAME];
        let mut end = name.len().min(MAX_NAME - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        self.name[..end].copy_from_slice(&name.as_bytes()[..end]);
    }

    /// The name up to its first NUL (lossy UTF-8).
    pub fn name_str(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// Append the packed 296 bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        put_u64(out, self.id);
        put_u32(out, self.ty);
        put_u64(out, self.buffer);
        for v in self.ne {
            put_u32(out, v);
        }
        for v in self.nb {
            put_u32(out, v);
        }
        put_u32(out, self.op);
        for v in self.op_params {
            put_i32(out, v);
        }
        put_i32(out, self.flags);
        for v in self.src {
            put_u64(out, v);
        }
        put_u64(out, self.view_src);
        put_u64(out, self.view_offs);
        put_u64(out, self.data);
        out.extend_from_slice(&self.name);
        put_i32(out, self.use_count);
        debug_assert_eq!(out.len() - start, RPC_TENSOR_SIZE);
    }

    /// Read one packed tensor.
    pub fn decode(r: &mut Reader<'_>) -> Result<RpcTensor, WireError> {
        let mut t = RpcTensor {
            id: r.u64()?,
            ty: r.u32()?,
            buffer: r.u64()?,
            ..RpcTensor::default()
        };
        for v in &mut t.ne {
            *v = r.u32()?;
        }
        for v in &mut t.nb {
            *v = r.u32()?;
        }
        t.op = r.u32()?;
        for v in &mut t.op_params {
            *v = r.i32()?;
        }
        t.flags = r.i32()?;
        for v in &mut t.src {
            *v = r.u64()?;
        }
        t.view_src = r.u64()?;
        t.view_offs = r.u64()?;
        t.data = r.u64()?;
        t.name.copy_from_slice(r.bytes(MAX_NAME)?);
        t.use_count = r.i32()?;
        Ok(t)
    }
}

/// A message shorter than its layout, or with a field out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Append a little-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Append a little-endian `i32`.
pub fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Append a little-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads little-endian fields off a message, never past its end.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError(format!(
                "message of {} bytes ends at byte {} where {n} more were expected",
                self.buf.len(),
                self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The rest of the message.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `i32`.
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_tensor_is_296_packed_bytes_and_round_trips() {
        let mut t = RpcTensor {
            id: 0x0102_0304_0506_0708,
            ty: 12,
            buffer: 0xdead_beef,
            ne: [256, 4, 1, 1],
            nb: [144, 144, 576, 576],
            op: 29,
            flags: 16,
            view_src: 7,
            view_offs: 64,
            data: 0x1000,
            use_count: 3,
            ..RpcTensor::default()
        };
        t.op_params[0] = -5;
        t.op_params[15] = 9;
        t.src[0] = 11;
        t.src[9] = 12;
        t.set_name("blk.0.ffn_up_exps.weight");
        let mut out = Vec::new();
        t.encode(&mut out);
        assert_eq!(out.len(), RPC_TENSOR_SIZE);
        assert_eq!(&out[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        // op at 8 + 4 + 8 + 16 + 16 = 52
        assert_eq!(&out[52..56], &29u32.to_le_bytes());
        // name at 296 - 4 - 64 = 228
        assert_eq!(&out[228..252], b"blk.0.ffn_up_exps.weight");
        let back = RpcTensor::decode(&mut Reader::new(&out)).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.name_str(), "blk.0.ffn_up_exps.weight");
        let e = RpcTensor::decode(&mut Reader::new(&out[..200])).unwrap_err();
        assert!(e.0.contains("ends at byte"), "{e}");
    }

    #[test]
    fn long_names_are_cut_at_63_bytes_on_a_char_boundary() {
        let mut t = RpcTensor::default();
        let long = "é".repeat(40); // 80 bytes
        t.set_name(&long);
        assert_eq!(t.name[63], 0);
        assert_eq!(t.name_str(), "é".repeat(31));
    }
}
