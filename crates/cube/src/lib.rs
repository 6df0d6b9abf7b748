//! switchyard-cube: Switchyard on CubeCL runtimes through burn-cubecl: wgpu (Vulkan, Metal,
//! DirectX, OpenGL and WebGPU adapters, including software ones such as Mesa's llvmpipe), CUDA,
//! ROCm (HIP) and CubeCL's CPU runtime.
//!
//! A thin crate over [`switchyard_burn`], like flex: it finds the device, builds its
//! [`Caps`](switchyard_core::Caps), and runs the generic lowering. Every CubeCL runtime shares
//! one Burn backend type, `Cube`; the device says which runtime runs it. Each runtime is
//! behind its cargo feature (`wgpu`, `vulkan`, `metal`, `webgpu`, `cuda`, `cuda-nvrtc`, `rocm`,
//! `cpu`); without one this crate is empty.

#[cfg(feature = "wgpu")]
mod adapters;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod caps;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod env;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod kernels;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod memory;
#[cfg(any(feature = "cuda", feature = "rocm", feature = "cpu"))]
mod native;
#[cfg(all(
    any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"),
    not(feature = "fusion")
))]
mod recorded;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
mod timing;

/// The cube backend, on any CubeCL runtime this build has.
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub type Cube = switchyard_burn::Burn<burn_cubecl::Cube, CubeKernels>;

#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub use env::{ATTENTION_ENV, MATMUL_ENV};
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub use kernels::{
    CubeKernels, KernelSet, Launched, Matmul, ROW_GRANULE, Routine, TunedChoice, tuned_choices,
};
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub use memory::{DeviceMemory, Pools, device_memory, thread_memory};
#[cfg(all(
    any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"),
    not(feature = "fusion")
))]
pub use recorded::{Recorded, record};
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub use timing::{
    KernelSource, KernelTime, kernel_sources, kernel_times, log_kernel_times, settled_log,
};

/// The backend on `device` described by `caps`, with the device's default kernels and the
/// choices of the process's environment ([`MATMUL_ENV`], [`ATTENTION_ENV`]), which `caps`'s
/// device then names: an error where the environment asks for what is not there.
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
fn backend_on(
    device: cubecl::Device,
    caps: switchyard_core::Caps,
) -> switchyard_core::Result<Cube> {
    let kernels = CubeKernels::for_device(&device)?;
    let device_words = match kernels.overrides() {
        Some(what) => format!("{} ({what})", caps.device),
        None => caps.device.clone(),
    };
    let caps = switchyard_core::Caps { device: device_words, ..caps };
    Ok(switchyard_burn::Burn::new(device, kernels, caps))
}

/// `cube` on the same device and in the same dtype, using the kernels of `set` (with fresh
/// launch counts).
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub fn with_kernels(cube: &Cube, set: KernelSet) -> Cube {
    cube.with_kernels(cube.kernels().with_set(set))
}

/// `cube` on the same device and in the same dtype, with the epilogue's products computed by
/// `matmul` (with fresh launch counts).
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub fn with_matmul(cube: &Cube, matmul: Matmul) -> Cube {
    cube.with_kernels(cube.kernels().with_matmul(matmul))
}

/// `cube` on the same device and in the same dtype, with the attention kernel taking `keys` keys
/// per online-softmax step (with fresh launch counts).
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub fn with_key_group(cube: &Cube, keys: usize) -> Cube {
    cube.with_kernels(cube.kernels().with_key_group(keys))
}

/// `cube` on the same device and in the same dtype, with half-precision attention computed in
/// 16 x 16 tiles where the tiled kernel takes it (`on`; tensor cores where the device has them),
/// with fresh launch counts.
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
pub fn with_tiled_attention(cube: &Cube, on: bool) -> Cube {
    cube.with_kernels(cube.kernels().with_tiled_attention(on))
}

/// `wgpu:N`: the adapters wgpu finds, on any graphics API, with WGSL kernels.
#[cfg(feature = "wgpu")]
pub mod wgpu {
    use switchyard_core::Result;

    pub use crate::adapters::{Adapter, adapters};

    /// How many wgpu adapters this machine has.
    pub fn devices() -> usize {
        adapters().len()
    }

    /// The backend on adapter `index` of [`adapters`]: an error naming the adapters there are
    /// if there is no such adapter or it cannot start.
    pub fn open(index: usize) -> Result<crate::Cube> {
        crate::adapters::wgpu(index)
    }
}

/// `vulkan:N`: the Vulkan adapters, with SPIR-V kernels.
#[cfg(feature = "vulkan")]
pub mod vulkan {
    /// How many Vulkan adapters this machine has.
    pub fn devices() -> usize {
        crate::adapters::adapters().iter().filter(|a| a.api == "Vulkan").count()
    }

    /// The backend on the `index`-th Vulkan adapter (refused on Mesa's llvmpipe, which crashes
    /// on SPIR-V).
    pub fn open(index: usize) -> switchyard_core::Result<crate::Cube> {
        crate::adapters::vulkan(index)
    }
}

/// `metal:N`: Apple GPUs, with MSL kernels.
#[cfg(feature = "metal")]
pub mod metal {
    /// How many Metal adapters this machine has.
    pub fn devices() -> usize {
        crate::adapters::adapters().iter().filter(|a| a.api == "Metal").count()
    }

    /// The backend on the `index`-th Metal adapter.
    pub fn open(index: usize) -> switchyard_core::Result<crate::Cube> {
        crate::adapters::metal(index)
    }
}

/// `webgpu`: the browser's WebGPU adapter, in WebAssembly builds; natively, GPUs are `wgpu:N`.
#[cfg(feature = "webgpu")]
pub mod webgpu {
    /// How many WebGPU adapters this machine has (none outside a browser).
    pub fn devices() -> usize {
        crate::adapters::adapters().iter().filter(|a| a.api == "BrowserWebGpu").count().min(1)
    }

    /// The backend on the browser's WebGPU adapter.
    pub fn open() -> switchyard_core::Result<crate::Cube> {
        crate::adapters::webgpu()
    }
}

/// `cuda:N`: NVIDIA GPUs through CubeCL's CUDA runtime.
#[cfg(feature = "cuda")]
pub mod cuda {
    /// How many CUDA devices this machine has (0 without NVIDIA's driver).
    pub fn devices() -> usize {
        crate::native::cuda_devices()
    }

    /// The backend on CUDA device `index`: an error saying how many there are if there is no
    /// such device (none without NVIDIA's driver, `libcuda.so`, which is loaded at run time).
    pub fn open(index: usize) -> switchyard_core::Result<crate::Cube> {
        crate::native::cuda(index)
    }
}

/// `rocm:N`: AMD GPUs through CubeCL's HIP runtime.
#[cfg(feature = "rocm")]
pub mod rocm {
    /// How many ROCm devices this machine has (0 without AMD's HIP runtime).
    pub fn devices() -> usize {
        crate::native::rocm_devices()
    }

    /// The backend on ROCm device `index`: an error saying how many there are if there is no
    /// such device (none without `libamdhip64.so`, which is loaded at run time).
    pub fn open(index: usize) -> switchyard_core::Result<crate::Cube> {
        crate::native::rocm(index)
    }
}

/// `cubecl-cpu`: CubeCL's CPU runtime, which compiles kernels for this machine's CPU (not to be
/// mistaken for flex, the default CPU backend).
#[cfg(feature = "cpu")]
pub mod cpu {
    /// How many such devices there are: one, the host CPU.
    pub fn devices() -> usize {
        1
    }

    /// The backend on CubeCL's CPU runtime.
    pub fn open() -> switchyard_core::Result<crate::Cube> {
        crate::native::cpu()
    }
}
