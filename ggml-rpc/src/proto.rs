//! The protocol this crate speaks: llama.cpp's RPC protocol 7.0.0 (its
//! `ggml-rpc.h` / `ggml-rpc.cpp`), as constants: the version, the commands
//! and which of them the server answers, and the sizes of the fixed parts.
//!
//! Framing (every integer little-endian, every struct packed):
//! - a request is `cmd: u8 | len: u64 | payload[len]`;
//! - a reply, for the commands that have one, is `len: u64 | payload[len]`.
//!
//! The server answers a malformed or failed request by closing the
//! connection (and aborts on a failed graph compute), so a client learns of
//! an error only as a closed socket.

use std::fmt;

/// The protocol version this build speaks, and the only one it accepts.
pub const VERSION: Version = Version {
    major: 7,
    minor: 0,
    patch: 0,
};

/// `RPC_CONN_CAPS_SIZE`: transport capabilities in HELLO (all zero: plain
/// TCP, no RDMA upgrade).
pub const CONN_CAPS_SIZE: usize = 24;

/// `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// `GGML_MAX_SRC`.
pub const MAX_SRC: usize = 10;
/// `GGML_MAX_OP_PARAMS / sizeof(int32_t)`.
pub const N_OP_PARAMS: usize = 16;
/// `GGML_MAX_NAME`.
pub const MAX_NAME: usize = 64;

/// Bytes of a packed `rpc_tensor`.
pub const RPC_TENSOR_SIZE: usize = 296;

/// Weights larger than this go first as `SET_TENSOR_HASH` (the server may
/// have them in its `-c` cache), as llama.cpp's `HASH_THRESHOLD`.
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;

/// A protocol version as HELLO reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// Incompatible changes.
    pub major: u8,
    /// Additions (a client accepts a server whose minor is not newer).
    pub minor: u8,
    /// Bumped when ggml's op enum changes (ops inserted mid-enum shift the
    /// ordinals on the wire), though llama.cpp's client does not compare it.
    pub patch: u8,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why a worker's version is refused: this build sends ggml ordinals of
/// exactly [`VERSION`], so anything else could compute other ops than the
/// ones asked for. `None`: accepted.
pub fn version_mismatch(server: Version) -> Option<String> {
    if server == VERSION {
        return None;
    }
    let why = if server.major != VERSION.major {
        "another major version: an incompatible protocol"
    } else if server.minor != VERSION.minor {
        if server.minor > VERSION.minor {
            "a newer minor version: commands this build does not know"
        } else {
            "an older minor version: commands it does not know"
        }
    } else {
        "another patch version: ggml's op numbering may differ"
    };
    Some(format!(
        "the worker speaks RPC protocol {server}, this build exactly {VERSION} ({why}); run a ggml-rpc-server of protocol {VERSION}"
    ))
}

/// `enum rpc_cmd` (`RPC_CMD_*`), with the protocol's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cmd {
    /// Allocate a buffer on a device: `{device u32, size u64}` ->
    /// `{remote_ptr u64, remote_size u64}`.
    AllocBuffer = 0,
    /// A device's buffer alignment: `{device u32}` -> `{alignment u64}`.
    GetAlignment = 1,
    /// A device's largest buffer: `{device u32}` -> `{max_size u64}`.
    GetMaxSize = 2,
    /// A buffer's base address: `{remote_ptr u64}` -> `{base u64}`.
    BufferGetBase = 3,
    /// Free a buffer: `{remote_ptr u64}`, no reply.
    FreeBuffer = 4,
    /// Fill a buffer with a byte: `{remote_ptr u64, value u8}`, no reply.
    BufferClear = 5,
    /// Write bytes: `rpc_tensor | cache_flag u8 | offset u64 | data`, no reply.
    SetTensor = 6,
    /// Write from the server's cache: `{rpc_tensor, offset u64, hash u64}`
    /// -> `{found u8}`.
    SetTensorHash = 7,
    /// Read bytes: `{rpc_tensor, offset u64, size u64}` -> `data[size]`.
    GetTensor = 8,
    /// Copy between two tensors of the server: `{src, dst}` -> `{ok u8}`.
    CopyTensor = 9,
    /// Compute a graph: `device u32 | n_nodes u32 | node ids u64[n] |
    /// n_tensors u32 | rpc_tensor[n_tensors]`, no reply.
    GraphCompute = 10,
    /// A device's memory: `{device u32}` -> `{free u64, total u64}`.
    GetDeviceMemory = 11,
    /// Let the device prepare a tensor (padding): `{rpc_tensor}`, no reply.
    InitTensor = 12,
    /// A tensor's allocation size on the device:
    /// `{device u32, tensor, srcs[10]}` -> `{size u64}`.
    GetAllocSize = 13,
    /// The first command: `{conn_caps[24]}` -> `{major, minor, patch, pad,
    /// conn_caps[24]}`.
    Hello = 14,
    /// How many devices the server has: `{}` -> `{count u32}`.
    DeviceCount = 15,
    /// Compute the device's last graph again: `{device u32}`, no reply.
    GraphRecompute = 16,
    /// Fill part of a tensor: `{rpc_tensor, offset u64, size u64, value
    /// u8}`, no reply.
    MemsetTensor = 17,
}

impl Cmd {
    /// Every command, in protocol order.
    pub const ALL: [Cmd; 18] = [
        Cmd::AllocBuffer,
        Cmd::GetAlignment,
        Cmd::GetMaxSize,
        Cmd::BufferGetBase,
        Cmd::FreeBuffer,
        Cmd::BufferClear,
        Cmd::SetTensor,
        Cmd::SetTensorHash,
        Cmd::GetTensor,
        Cmd::CopyTensor,
        Cmd::GraphCompute,
        Cmd::GetDeviceMemory,
        Cmd::InitTensor,
        Cmd::GetAllocSize,
        Cmd::Hello,
        Cmd::DeviceCount,
        Cmd::GraphRecompute,
        Cmd::MemsetTensor,
    ];

    /// The command with this number.
    pub fn from_u8(b: u8) -> Option<Cmd> {
        Cmd::ALL.get(b as usize).copied()
    }

    /// The protocol's name (`GRAPH_COMPUTE`), as errors print it.
    pub fn name(self) -> &'static str {
        match self {
            Cmd::AllocBuffer => "ALLOC_BUFFER",
            Cmd::GetAlignment => "GET_ALIGNMENT",
            Cmd::GetMaxSize => "GET_MAX_SIZE",
            Cmd::BufferGetBase => "BUFFER_GET_BASE",
            Cmd::FreeBuffer => "FREE_BUFFER",
            Cmd::BufferClear => "BUFFER_CLEAR",
            Cmd::SetTensor => "SET_TENSOR",
            Cmd::SetTensorHash => "SET_TENSOR_HASH",
            Cmd::GetTensor => "GET_TENSOR",
            Cmd::CopyTensor => "COPY_TENSOR",
            Cmd::GraphCompute => "GRAPH_COMPUTE",
            Cmd::GetDeviceMemory => "GET_DEVICE_MEMORY",
            Cmd::InitTensor => "INIT_TENSOR",
            Cmd::GetAllocSize => "GET_ALLOC_SIZE",
            Cmd::Hello => "HELLO",
            Cmd::DeviceCount => "DEVICE_COUNT",
            Cmd::GraphRecompute => "GRAPH_RECOMPUTE",
            Cmd::MemsetTensor => "MEMSET_TENSOR",
        }
    }

    /// Whether the server answers it (the others are sent and forgotten;
    /// the socket's order is what orders them).
    pub fn has_reply(self) -> bool {
        !matches!(
            self,
            Cmd::FreeBuffer
                | Cmd::BufferClear
                | Cmd::SetTensor
                | Cmd::GraphCompute
                | Cmd::InitTensor
                | Cmd::GraphRecompute
                | Cmd::MemsetTensor
        )
    }

    /// The exact reply size of a command whose reply has a fixed size
    /// (`None` for GET_TENSOR, whose reply is the bytes asked for, and for
    /// the commands without a reply).
    pub fn fixed_reply_len(self) -> Option<usize> {
        match self {
            Cmd::AllocBuffer | Cmd::GetDeviceMemory => Some(16),
            Cmd::GetAlignment | Cmd::GetMaxSize | Cmd::BufferGetBase | Cmd::GetAllocSize => Some(8),
            Cmd::SetTensorHash | Cmd::CopyTensor => Some(1),
            Cmd::Hello => Some(4 + CONN_CAPS_SIZE),
            Cmd::DeviceCount => Some(4),
            _ => None,
        }
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_keep_their_protocol_numbers() {
        for (i, c) in Cmd::ALL.iter().enumerate() {
            assert_eq!(*c as u8 as usize, i);
            assert_eq!(Cmd::from_u8(i as u8), Some(*c));
        }
        assert_eq!(Cmd::Hello as u8, 14, "HELLO is always 14");
        assert_eq!(Cmd::MemsetTensor as u8, 17);
        assert_eq!(Cmd::from_u8(18), None);
    }

    #[test]
    fn only_the_exact_version_is_accepted() {
        assert_eq!(version_mismatch(VERSION), None);
        for (v, word) in [
            ((6, 0, 0), "major"),
            ((8, 0, 0), "major"),
            ((7, 1, 0), "newer minor"),
            ((7, 0, 1), "patch"),
        ] {
            let e = version_mismatch(Version {
                major: v.0,
                minor: v.1,
                patch: v.2,
            })
            .unwrap();
            assert!(
                e.contains(&format!("{}.{}.{}", v.0, v.1, v.2)) && e.contains("7.0.0"),
                "{e}"
            );
            assert!(e.contains(word), "{e}");
        }
    }
}
