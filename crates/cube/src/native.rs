//! The CubeCL runtimes that drive a device themselves rather than through wgpu: CUDA (NVIDIA
//! GPUs by index), HIP (`rocm`: AMD GPUs by index) and the CPU runtime.

use switchyard_core::{DeviceKind, Error, Result};

use crate::Cube;

/// How many CUDA devices this machine has (0 without NVIDIA's driver).
#[cfg(feature = "cuda")]
pub(crate) fn cuda_devices() -> usize {
    devices_of(cubecl::RuntimeId::Cuda)
}

/// The backend on CUDA device `index`: an error saying how many there are if there is no such
/// device (none without NVIDIA's driver, `libcuda.so`, which is loaded at run time).
#[cfg(feature = "cuda")]
pub(crate) fn cuda(index: usize) -> Result<Cube> {
    let needs = "CUDA devices need NVIDIA's driver, libcuda.so, at run time";
    open(&format!("cuda:{index}"), cubecl::Device::cuda(index), needs, DeviceKind::Gpu)
}

/// How many ROCm devices this machine has (0 without AMD's HIP runtime).
#[cfg(feature = "rocm")]
pub(crate) fn rocm_devices() -> usize {
    devices_of(cubecl::RuntimeId::Hip)
}

/// The backend on ROCm device `index`: an error saying how many there are if there is no such
/// device (none without AMD's HIP runtime, `libamdhip64.so`, which is loaded at run time).
#[cfg(feature = "rocm")]
pub(crate) fn rocm(index: usize) -> Result<Cube> {
    let needs = "ROCm devices need AMD's HIP runtime, libamdhip64.so, at run time";
    open(&format!("rocm:{index}"), cubecl::Device::rocm(index), needs, DeviceKind::Gpu)
}

/// The backend on CubeCL's CPU runtime, which compiles kernels for this machine's CPU.
#[cfg(feature = "cpu")]
pub(crate) fn cpu() -> Result<Cube> {
    let needs = "the CPU runtime is part of this build";
    open("cubecl-cpu", cubecl::Device::cpu(), needs, DeviceKind::Cpu)
}

/// How many devices of `runtime` this machine has.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn devices_of(runtime: cubecl::RuntimeId) -> usize {
    cubecl::Device::enumerate_all().iter().filter(|d| d.runtime() == runtime).count()
}

/// The backend on `device` of `kind`, named `label`, or the runtime's reason there is none, with
/// what the runtime `needs`.
fn open(
    label: &str,
    device: std::result::Result<cubecl::Device, cubecl::device::DeviceUnavailable>,
    needs: &str,
    kind: DeviceKind,
) -> Result<Cube> {
    let device = device.map_err(|e| Error::Device(format!("{label}: {e} ({needs})")))?;
    let caps = crate::caps::caps(label, &device, kind);
    crate::backend_on(device, caps)
}
