//! The CUDA runtime: NVIDIA GPUs by index.

use switchyard_burn::Burn;
use switchyard_core::{Error, Result};

use crate::Cube;

/// How many CUDA devices this machine has (0 without NVIDIA's driver).
pub fn cuda_devices() -> usize {
    cubecl::Device::enumerate_all().iter().filter(|d| matches!(d, cubecl::Device::Cuda(_))).count()
}

/// The backend on CUDA device `index`: an error saying how many there are if there is no such
/// device (none without NVIDIA's driver, `libcuda.so`, which is loaded at run time).
pub fn cuda(index: usize) -> Result<Cube> {
    let device = cubecl::Device::cuda(index).map_err(|e| {
        Error::Device(format!(
            "cuda:{index}: {e} (CUDA devices need NVIDIA's driver, libcuda.so, at run time)"
        ))
    })?;
    let caps = crate::caps::caps(&format!("cuda:{index}"), &device, false);
    Ok(Burn::new(device, crate::CubeKernels::default(), caps))
}
