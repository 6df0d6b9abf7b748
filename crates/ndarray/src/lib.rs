//! switchyard-ndarray: the backend on burn-ndarray.
//!
//! burn-ndarray is deprecated upstream in favour of burn-flex; this crate is kept for users who
//! depend on it. It is a thin crate over [`switchyard_burn`], like flex.

// burn-ndarray marks itself deprecated; using it is this crate's whole purpose.
#![allow(deprecated)]

use burn_ndarray::{NdArray, NdArrayDevice};
use switchyard_burn::{Burn, Generic};
use switchyard_core::{Caps, DType, DeviceKind};

/// The ndarray backend.
pub type NdArrayBackend = Burn<NdArray, Generic>;

/// The ndarray backend on the host CPU.
pub fn ndarray() -> NdArrayBackend {
    Burn::new(NdArrayDevice::Cpu, Generic, caps())
}

/// What the ndarray backend can do on this machine.
pub fn caps() -> Caps {
    Caps {
        backend: "ndarray".into(),
        device: "cpu".into(),
        kind: DeviceKind::Cpu,
        threads: std::thread::available_parallelism().map_or(1, usize::from),
        dtypes: vec![DType::F32],
        float_dtypes: switchyard_burn::float_dtypes::<NdArray>(&NdArrayDevice::Cpu),
        fixed_shapes: false,
        padded_attention: false,
        unified_memory: true,
        memory_bytes: None,
    }
}
