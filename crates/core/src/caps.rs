//! Capabilities: what a backend and its device can do, for routing and for the user.

use crate::DType;

/// The kind of device a backend runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// A GPU or other accelerator.
    Gpu,
    /// A device on another machine.
    Remote,
    /// Nothing real: a backend that records or interprets.
    Virtual,
}

/// What a backend can do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The backend's name (`reference`, `flex`, ...).
    pub backend: String,
    /// The device it runs on, as a device name (`cpu`, `cuda:0`, ...).
    pub device: String,
    /// The kind of that device.
    pub kind: DeviceKind,
    /// Threads a run may use.
    pub threads: usize,
    /// Weight dtypes the backend keeps as they are; others are converted on upload.
    pub dtypes: Vec<DType>,
    /// Float dtypes the device can store and compute in: f32, and f16 and bf16 where the device
    /// supports them. A backend that can change its compute dtype accepts these.
    pub float_dtypes: Vec<DType>,
    /// Whether plans are captured with fixed shapes (device graphs), so padding costs work.
    pub fixed_shapes: bool,
    /// Whether attention packs sequences into a padded block with a mask rather than running
    /// each sequence at its own length.
    pub padded_attention: bool,
    /// Whether the device shares memory with the host.
    pub unified_memory: bool,
    /// Device memory in bytes, where known.
    pub memory_bytes: Option<u64>,
}
