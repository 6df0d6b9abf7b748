//! switchyard-flex: the default backend, on burn-flex (pure Rust, SIMD and rayon, on the CPU).
//!
//! A thin crate over [`switchyard_burn`]: it picks the Burn backend, its device and its
//! [`Caps`]. Ops run through the generic Burn lowering; faster kernels of flex's own plug in
//! through [`switchyard_burn::Kernels`] as they are measured to win.

use burn_flex::{Flex, FlexDevice};
use switchyard_burn::{Burn, Generic};
use switchyard_core::{Caps, DType, DeviceKind};

/// The flex backend.
pub type FlexBackend = Burn<Flex, Generic>;

/// The flex backend on the host CPU, with rayon's global thread pool.
pub fn flex() -> FlexBackend {
    Burn::new(FlexDevice, Generic, caps())
}

/// What the flex backend can do on this machine.
pub fn caps() -> Caps {
    Caps {
        backend: "flex".into(),
        device: "cpu".into(),
        kind: DeviceKind::Cpu,
        threads: rayon::current_num_threads(),
        dtypes: vec![DType::F32],
        float_dtypes: switchyard_burn::float_dtypes::<Flex>(&FlexDevice),
        fixed_shapes: false,
        padded_attention: false,
        unified_memory: true,
        memory_bytes: None,
    }
}
