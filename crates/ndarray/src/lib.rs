//! switchyard-ndarray: the backend on burn-ndarray.
//!
//! burn-ndarray is deprecated upstream in favour of burn-flex; this crate is kept for users who
//! depend on it. It is a thin crate over [`switchyard_burn`], like flex.

// burn-ndarray marks itself deprecated; using it is this crate's whole purpose.
#![allow(deprecated)]

use burn_ndarray::{NdArray, NdArrayDevice};
use switchyard_burn::{Burn, Generic};
use switchyard_core::{Caps, DeviceKind};

/// The ndarray backend.
pub type NdArrayBackend = Burn<NdArray, Generic>;

/// The ndarray backend on the host CPU.
pub fn ndarray() -> NdArrayBackend {
    Burn::new(NdArrayDevice::Cpu, Generic, caps())
}

/// How many ndarray devices this machine has: one, the host CPU.
pub fn devices() -> usize {
    1
}

/// The ndarray backend, as the table of backends opens it (it cannot fail).
pub fn open() -> switchyard_core::Result<NdArrayBackend> {
    Ok(ndarray())
}

/// What the ndarray backend can do on this machine.
pub fn caps() -> Caps {
    Caps::new("ndarray", "host CPU", DeviceKind::Cpu)
        .with_threads(std::thread::available_parallelism().map_or(1, usize::from))
        .with_dtypes(switchyard_burn::float_dtypes::<NdArray>(&NdArrayDevice::Cpu))
}
