//! Choosing the dtype a backend computes in.

#[cfg(any(feature = "capture", feature = "remote"))]
use switchyard_core::Error;
use switchyard_core::{Backend, DType, Result};

/// A backend whose compute dtype can be chosen.
pub(crate) trait Precision: Backend + Sized {
    /// This backend computing in `dtype`, or [`Error::Unsupported`].
    fn with_dtype(self, dtype: DType) -> Result<Self>;
}

impl<B: burn_backend::Backend, K: switchyard_burn::Kernels<B>> Precision
    for switchyard_burn::Burn<B, K>
{
    fn with_dtype(self, dtype: DType) -> Result<Self> {
        switchyard_burn::Burn::with_dtype(self, dtype)
    }
}

/// f32 only: any other dtype is refused, naming the backend.
#[cfg(any(feature = "capture", feature = "remote"))]
fn f32_only<B: Backend>(backend: B, dtype: DType, why: &str) -> Result<B> {
    if dtype == DType::F32 {
        Ok(backend)
    } else {
        Err(Error::Unsupported(format!(
            "the {} backend computes in f32 only ({why}); {dtype} was asked for",
            backend.caps().backend
        )))
    }
}

#[cfg(feature = "capture")]
impl Precision for switchyard_capture::Capture {
    fn with_dtype(self, dtype: DType) -> Result<Self> {
        f32_only(self, dtype, "it records what would run")
    }
}

#[cfg(feature = "remote")]
impl Precision for switchyard_remote::Remote {
    fn with_dtype(self, dtype: DType) -> Result<Self> {
        f32_only(self, dtype, "a remote device's dtypes are not known to the client")
    }
}
