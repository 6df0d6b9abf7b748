//! switchyard-cube: Switchyard on CubeCL runtimes through burn-cubecl: wgpu (Vulkan, Metal,
//! DirectX, OpenGL and WebGPU adapters, including software ones such as Mesa's llvmpipe) and
//! CUDA.
//!
//! A thin crate over [`switchyard_burn`], like flex: it finds the device, builds its
//! [`Caps`](switchyard_core::Caps), and runs the generic lowering. Every CubeCL runtime shares
//! one Burn backend type, `Cube`; the device says which runtime runs it. Each runtime is
//! behind its cargo feature (`wgpu`, `vulkan`, `cuda`); without one this crate is empty.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod caps;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernels;
#[cfg(feature = "wgpu")]
mod wgpu;

/// The cube backend, on any CubeCL runtime this build has.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub type Cube = switchyard_burn::Burn<burn_cubecl::Cube, CubeKernels>;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use kernels::{CubeKernels, KernelSet, Launched};

/// `cube` on the same device and in the same dtype, using the kernels of `set` (with fresh
/// launch counts).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub fn with_kernels(cube: &Cube, set: KernelSet) -> Cube {
    cube.with_kernels(CubeKernels::new(set))
}

#[cfg(feature = "cuda")]
pub use cuda::{cuda, cuda_devices};
#[cfg(feature = "vulkan")]
pub use wgpu::vulkan;
#[cfg(feature = "wgpu")]
pub use wgpu::{Adapter, adapters, wgpu};
