//! What a CubeCL device can do, as its runtime reports it.

use cubecl::ir::{ElemType, FloatKind};
use switchyard_core::{Caps, DType, DeviceKind};

/// The caps of `device` of `kind`, named `label` (`wgpu:0`, `cuda:1`): one stream of kernels on
/// one host thread, the parallelism being the device's own. `auto` is f16 where the device
/// multiplies f16 matrices on tensor cores (as text-embeddings-inference defaults to f16 on
/// GPUs: f16 keeps 3 more mantissa bits than bf16, and encoders' activations fit its range),
/// f32 elsewhere.
pub(crate) fn caps(label: &str, device: &cubecl::Device, kind: DeviceKind) -> Caps {
    let client = device.client();
    let props = client.properties();
    let auto = if half_tensor_cores(&props.features.matmul) { DType::F16 } else { DType::F32 };
    Caps::new("cube", format!("{label} {}", props.identity.name), kind)
        .with_dtypes(switchyard_burn::float_dtypes::<burn_cubecl::Cube>(device))
        .with_auto(auto)
}

/// Whether the device has cooperative matrix products of f16 operands (tensor cores, or
/// Vulkan's cooperative matrices).
fn half_tensor_cores(matmul: &cubecl::features::MatmulFeatures) -> bool {
    let f16 = ElemType::Float(FloatKind::F16);
    matmul.cmma.iter().any(|c| c.a_type == f16 && c.b_type == f16)
}

#[cfg(test)]
mod tests {
    use cubecl::features::{MatmulFeatures, MmaConfig};

    use super::*;

    #[test]
    fn half_tensor_cores_are_f16_matrix_products_and_nothing_else() {
        let mma = |a, cd| MmaConfig { a_type: a, b_type: a, cd_type: cd, m: 16, n: 16, k: 16 };
        let (f16, f32) = (ElemType::Float(FloatKind::F16), ElemType::Float(FloatKind::F32));
        let tf32 = ElemType::Float(FloatKind::TF32);
        let mut m = MatmulFeatures::default();
        assert!(!half_tensor_cores(&m), "no matrix products");
        m.cmma.insert(mma(tf32, f32));
        assert!(!half_tensor_cores(&m), "TF32 only");
        m.cmma.insert(mma(f16, f32));
        assert!(half_tensor_cores(&m));
    }
}
