//! The LibTorch backend: devices, caps, and the CUDA check.

use burn_tch::{LibTorch, LibTorchDevice};
use switchyard_burn::Burn;
use switchyard_core::{Caps, DType, DeviceKind, Error, Result};

use crate::kernels::TchKernels;

/// The tch backend.
pub type TchBackend = Burn<LibTorch, TchKernels>;

/// LibTorch on the host CPU.
pub fn tch_cpu() -> TchBackend {
    Burn::new(LibTorchDevice::Cpu, TchKernels, caps(None))
}

/// LibTorch on CUDA device `index`; an error if this LibTorch has no CUDA or no such device
/// (burn-tch would panic on it).
pub fn tch_cuda(index: usize) -> Result<TchBackend> {
    let count = cuda_devices();
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
    Ok(Burn::new(LibTorchDevice::Cuda(index), TchKernels, caps(Some(index))))
}

/// How many CUDA devices this LibTorch can use (0 for a CPU-only build).
pub fn cuda_devices() -> usize {
    if tch::Cuda::is_available() {
        usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
    } else {
        0
    }
}

/// What the tch backend can do on the CPU (`None`) or on CUDA device `cuda`.
pub fn caps(cuda: Option<usize>) -> Caps {
    Caps {
        backend: "tch".into(),
        device: cuda.map_or_else(|| "cpu".into(), |i| format!("cuda:{i}")),
        kind: if cuda.is_some() { DeviceKind::Gpu } else { DeviceKind::Cpu },
        threads: usize::try_from(tch::get_num_threads()).unwrap_or(1),
        dtypes: vec![DType::F32],
        float_dtypes: switchyard_burn::float_dtypes::<LibTorch>(
            &cuda.map_or(LibTorchDevice::Cpu, LibTorchDevice::Cuda),
        ),
        fixed_shapes: false,
        padded_attention: false,
        unified_memory: cuda.is_none(),
        memory_bytes: None,
    }
}
