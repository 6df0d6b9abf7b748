//! Capabilities: what a backend and its device can do, for routing and for the user.

use crate::{DType, Error, Result};

/// The kind of device a backend runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// A GPU or other accelerator.
    Gpu,
    /// A device on another machine.
    Remote,
    /// Nothing real: a backend that records or interprets.
    Virtual,
}

/// What a backend can do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The backend's name (`reference`, `flex`, `cube`, ...).
    pub backend: String,
    /// The device it runs on, in words for people (`host CPU`, `wgpu:0 llvmpipe (...)`).
    pub device: String,
    /// The kind of that device.
    pub kind: DeviceKind,
    /// Threads a run may use on the host (1 where the device has parallelism of its own).
    pub threads: usize,
    /// The dtype weights are stored and activations computed in (outputs are always f32).
    pub dtype: DType,
    /// The dtypes [`crate::Backend::with_dtype`] accepts on this device: f32 first, then f16,
    /// bf16 and int8 where the device stores and computes in them.
    pub dtypes: Vec<DType>,
    /// The dtype [`DTypeChoice::Auto`](crate::DTypeChoice) picks here, one of `dtypes`: f16 on
    /// a GPU with half-precision tensor cores, f32 elsewhere.
    pub auto: DType,
    /// The most tokens a batch should hold for speed here, where the device runs smaller
    /// batches faster than the bucket table's largest (flex on AMX, whose activations then stay
    /// in the CPU's caches); `None` where the largest is fastest. Runners keep their batches to
    /// it where the table has a bucket that small.
    pub batch_tokens: Option<usize>,
}

impl Caps {
    /// A backend named `backend` on `device` of `kind`: one thread, computing in f32 only.
    pub fn new(backend: impl Into<String>, device: impl Into<String>, kind: DeviceKind) -> Caps {
        Caps {
            backend: backend.into(),
            device: device.into(),
            kind,
            threads: 1,
            dtype: DType::F32,
            dtypes: vec![DType::F32],
            auto: DType::F32,
            batch_tokens: None,
        }
    }

    /// These caps with `threads` host threads.
    pub fn with_threads(mut self, threads: usize) -> Caps {
        self.threads = threads;
        self
    }

    /// These caps with the dtypes the device can compute in (f32 is always among them).
    pub fn with_dtypes(mut self, dtypes: Vec<DType>) -> Caps {
        self.dtypes = dtypes;
        self
    }

    /// These caps with `dtype` as what `auto` picks, if the device computes in it (else they
    /// keep f32: `auto` never names a dtype the device would refuse).
    pub fn with_auto(mut self, dtype: DType) -> Caps {
        self.auto = if self.dtypes.contains(&dtype) { dtype } else { DType::F32 };
        self
    }

    /// Checks that the device can compute in `dtype`: [`Error::Unsupported`] naming the dtypes it
    /// can compute in if not.
    pub fn check_dtype(&self, dtype: DType) -> Result<()> {
        if self.dtypes.contains(&dtype) {
            return Ok(());
        }
        let can: Vec<&str> = self.dtypes.iter().map(|d| d.name()).collect();
        Err(Error::Unsupported(format!(
            "{} ({}) cannot compute in {dtype}; it can in: {}",
            self.backend,
            self.device,
            can.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_caps_compute_in_f32_on_one_thread() {
        let c = Caps::new("b", "d", DeviceKind::Cpu);
        assert_eq!((c.threads, c.dtype, c.dtypes.as_slice()), (1, DType::F32, &[DType::F32][..]));
        let c = c.with_threads(4).with_dtypes(vec![DType::F32, DType::F16]);
        assert_eq!((c.threads, c.dtypes.len(), c.auto), (4, 2, DType::F32));
    }

    #[test]
    fn auto_names_only_a_dtype_the_device_computes_in() {
        let half = Caps::new("b", "d", DeviceKind::Gpu).with_dtypes(vec![DType::F32, DType::F16]);
        assert_eq!(half.clone().with_auto(DType::F16).auto, DType::F16);
        assert_eq!(half.with_auto(DType::Bf16).auto, DType::F32);
    }

    #[test]
    fn a_dtype_the_device_lacks_is_refused_naming_the_ones_it_has() {
        let c =
            Caps::new("b", "the device", DeviceKind::Gpu).with_dtypes(vec![DType::F32, DType::F16]);
        c.check_dtype(DType::F16).unwrap();
        let e = c.check_dtype(DType::Bf16).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        assert!(
            e.to_string().contains("b (the device) cannot compute in bf16; it can in: f32, f16"),
            "{e}"
        );
    }
}
