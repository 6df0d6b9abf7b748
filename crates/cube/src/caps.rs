//! What a CubeCL device can do, as its runtime reports it.

use switchyard_core::{Caps, DType, DeviceKind};

/// The caps of `device`, named `label` (`wgpu:0`, `cuda:1`), sharing host memory or not.
pub(crate) fn caps(label: &str, device: &cubecl::Device, unified_memory: bool) -> Caps {
    let client = device.client();
    let props = client.properties();
    Caps {
        backend: "cube".into(),
        device: format!("{label} {}", props.identity.name),
        kind: if device.runtime() == cubecl::RuntimeId::Cpu {
            DeviceKind::Cpu
        } else {
            DeviceKind::Gpu
        },
        // One stream of kernels; the parallelism is the device's own.
        threads: 1,
        // f32 until `Burn::with_dtype` picks another of `float_dtypes`.
        dtypes: vec![DType::F32],
        float_dtypes: switchyard_burn::float_dtypes::<burn_cubecl::Cube>(device),
        fixed_shapes: false,
        padded_attention: false,
        unified_memory,
        memory_bytes: props.memory.max_memory(),
    }
}
