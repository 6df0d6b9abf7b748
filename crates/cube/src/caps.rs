//! What a CubeCL device can do, as its runtime reports it.

use switchyard_core::{Caps, DeviceKind};

/// The caps of `device` of `kind`, named `label` (`wgpu:0`, `cuda:1`): one stream of kernels on
/// one host thread, the parallelism being the device's own.
pub(crate) fn caps(label: &str, device: &cubecl::Device, kind: DeviceKind) -> Caps {
    let client = device.client();
    let props = client.properties();
    Caps::new("cube", format!("{label} {}", props.identity.name), kind)
        .with_dtypes(switchyard_burn::float_dtypes::<burn_cubecl::Cube>(device))
}
