//! The LibTorch backend: its two families of devices (`tch:cpu`, `tch:cuda:N`) and their caps.

use burn_tch::{LibTorch, LibTorchDevice};
use switchyard_burn::Burn;
use switchyard_core::{Caps, DeviceKind, Error, Result};

use crate::kernels::TchKernels;

/// The tch backend.
pub type TchBackend = Burn<LibTorch, TchKernels>;

/// `tch:cpu`: LibTorch on the host CPU.
pub mod cpu {
    use super::*;

    /// How many such devices there are: one.
    pub fn devices() -> usize {
        1
    }

    /// LibTorch on the host CPU.
    pub fn open() -> Result<TchBackend> {
        Ok(Burn::new(LibTorchDevice::Cpu, TchKernels::cpu(), caps(None)))
    }
}

/// `tch:cuda:N`: LibTorch on NVIDIA GPUs (with a CUDA build of LibTorch).
pub mod cuda {
    use super::*;

    /// How many CUDA devices this LibTorch can use (0 for a CPU-only build).
    pub fn devices() -> usize {
        if tch::Cuda::is_available() {
            usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
        } else {
            0
        }
    }

    /// LibTorch on CUDA device `index`; an error if this LibTorch has no CUDA or no such device
    /// (burn-tch would panic on it).
    pub fn open(index: usize) -> Result<TchBackend> {
        let count = devices();
        if index >= count {
            return Err(Error::Device(if count == 0 {
                format!(
                    "tch:cuda:{index}: this LibTorch sees no CUDA device (a CPU-only build, or no \
                 GPU); tch:cpu is available"
                )
            } else {
                format!("tch:cuda:{index}: LibTorch sees {count} CUDA devices (0 to {})", count - 1)
            }));
        }
        Ok(Burn::new(LibTorchDevice::Cuda(index), TchKernels::cuda(), caps(Some(index))))
    }
}

/// What the tch backend can do on the CPU (`None`) or on CUDA device `cuda`.
pub fn caps(cuda: Option<usize>) -> Caps {
    let (device, kind) = match cuda {
        Some(i) => (format!("LibTorch CUDA device {i}"), DeviceKind::Gpu),
        None => ("host CPU".to_owned(), DeviceKind::Cpu),
    };
    Caps::new("tch", device, kind)
        .with_threads(usize::try_from(tch::get_num_threads()).unwrap_or(1))
        .with_dtypes(switchyard_burn::float_dtypes::<LibTorch>(
            &cuda.map_or(LibTorchDevice::Cpu, LibTorchDevice::Cuda),
        ))
}
