//! [`LaunchError`]: why an emulated launch did not run or did not finish.
//! Every variant names the kernel; the text is what the backend reports.

use std::fmt;

/// Why [`launch`](super::launch) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchError {
    /// The emulator was built without a C++ compiler
    /// (`"emulator unavailable: <reason>"`).
    Unavailable(String),
    /// No kernel of that name in `kernels.cu` or the test kernels.
    UnknownKernel(String),
    /// A launch limit of a real GPU is exceeded: nothing ran.
    Limit {
        /// The kernel.
        kernel: String,
        /// The limit and the requested value.
        limit: String,
    },
    /// The parameter list does not fit the kernel's signature.
    Params {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        problem: String,
    },
    /// A barrier or warp collective that not every thread it waits for
    /// reaches: on a GPU the launch hangs. The blocks before it ran.
    Deadlock {
        /// The kernel.
        kernel: String,
        /// Which block, who waits where.
        detail: String,
    },
    /// A CUDA primitive used in a way that is undefined on a GPU (a lane
    /// that calls a shuffle with a mask that does not name it, a bad width).
    Misuse {
        /// The kernel.
        kernel: String,
        /// What was done.
        detail: String,
    },
    /// The host could not provide fiber stacks or dynamic shared memory.
    Resources {
        /// The kernel.
        kernel: String,
        /// What could not be allocated.
        detail: String,
    },
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::Unavailable(reason) => write!(f, "{reason}"),
            LaunchError::UnknownKernel(k) => write!(f, "unknown kernel {k}"),
            LaunchError::Limit { kernel, limit } => {
                write!(f, "kernel {kernel}: launch exceeds a GPU limit: {limit}")
            }
            LaunchError::Params { kernel, problem } => {
                write!(f, "kernel {kernel}: bad parameters: {problem}")
            }
            LaunchError::Deadlock { kernel, detail } => write!(f, "kernel {kernel}: {detail}"),
            LaunchError::Misuse { kernel, detail } => {
                write!(f, "kernel {kernel}: undefined behaviour: {detail}")
            }
            LaunchError::Resources { kernel, detail } => write!(f, "kernel {kernel}: {detail}"),
        }
    }
}

impl std::error::Error for LaunchError {}
