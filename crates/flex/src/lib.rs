//! switchyard-flex: the default backend, on burn-flex (pure Rust, SIMD and rayon, on the CPU).
//!
//! A thin crate over [`switchyard_burn`]: it picks the Burn backend, its device and its
//! [`Caps`]. Ops run through the generic Burn lowering; faster kernels of flex's own plug in
//! through [`switchyard_burn::Kernels`] as they are measured to win.

use burn_flex::{Flex, FlexDevice};
use switchyard_burn::{Burn, Generic};
use switchyard_core::{Caps, DeviceKind};

/// The flex backend.
pub type FlexBackend = Burn<Flex, Generic>;

/// The flex backend on the host CPU, with rayon's global thread pool.
pub fn flex() -> FlexBackend {
    Burn::new(FlexDevice, Generic, caps())
}

/// How many flex devices this machine has: one, the host CPU.
pub fn devices() -> usize {
    1
}

/// The flex backend, as the table of backends opens it (it cannot fail).
pub fn open() -> switchyard_core::Result<FlexBackend> {
    Ok(flex())
}

/// What the flex backend can do on this machine.
pub fn caps() -> Caps {
    Caps::new("flex", "host CPU", DeviceKind::Cpu)
        .with_threads(rayon::current_num_threads())
        .with_float_dtypes(switchyard_burn::float_dtypes::<Flex>(&FlexDevice))
}
