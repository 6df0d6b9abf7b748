//! switchyard-cube: Switchyard on CubeCL runtimes through burn-cubecl: wgpu (Vulkan, Metal,
//! DirectX, OpenGL and WebGPU adapters, including software ones such as Mesa's llvmpipe), CUDA,
//! ROCm (HIP) and CubeCL's CPU runtime.
//!
//! A thin crate over [`switchyard_burn`], like flex: it finds the device, builds its
//! [`Caps`](switchyard_core::Caps), and runs the generic lowering. Every CubeCL runtime shares
//! one Burn backend type, `Cube`; the device says which runtime runs it. Each runtime is
//! behind its cargo feature (`wgpu`, `vulkan`, `metal`, `webgpu`, `cuda`, `cuda-nvrtc`, `rocm`,
//! `cpu`); without one this crate is empty.

#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod caps;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod kernels;
#[cfg(any(feature = "cuda", feature = "rocm", feature = "cpu"))]
mod native;
#[cfg(feature = "wgpu")]
mod wgpu;

/// The cube backend, on any CubeCL runtime this build has.
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub type Cube = switchyard_burn::Burn<burn_cubecl::Cube, CubeKernels>;

#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub use kernels::{CubeKernels, KernelSet, Launched};

/// `cube` on the same device and in the same dtype, using the kernels of `set` (with fresh
/// launch counts).
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub fn with_kernels(cube: &Cube, set: KernelSet) -> Cube {
    cube.with_kernels(cube.kernels().with_set(set))
}

#[cfg(feature = "cpu")]
pub use native::cpu;
#[cfg(feature = "cuda")]
pub use native::{cuda, cuda_devices};
#[cfg(feature = "rocm")]
pub use native::{rocm, rocm_devices};
#[cfg(feature = "metal")]
pub use wgpu::metal;
#[cfg(feature = "vulkan")]
pub use wgpu::vulkan;
#[cfg(feature = "webgpu")]
pub use wgpu::webgpu;
#[cfg(feature = "wgpu")]
pub use wgpu::{Adapter, adapters, wgpu};
