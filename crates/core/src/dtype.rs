//! Element types and borrowed host tensors, the form in which checkpoint weights reach a backend.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Element types: of a checkpoint tensor (f32, f16, bf16), and what a backend computes in
/// (those, and int8: weights quantized at upload, activations at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16: binary32 with the low 16 mantissa bits dropped.
    Bf16,
    /// Signed 8-bit integers. A checkpoint tensor of them is read as its integer values; as a
    /// compute dtype, linear layers run on int8 weights (per output channel) and 8-bit
    /// activations (per row, with a zero point where the backend's kernel takes one), each with
    /// an f32 scale.
    I8,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::I8 => 1,
        }
    }

    /// The lower-case name used in files and messages (`f32`, `f16`, `bf16`, `int8`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I8 => "int8",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(DType::F32),
            "f16" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "int8" | "i8" => Ok(DType::I8),
            _ => {
                Err(Error::Format(format!("unknown dtype `{s}`; expected f32, f16, bf16 or int8")))
            }
        }
    }
}

/// The dtype a user asks for: one in particular, or whatever suits the device
/// ([`Caps::auto`](crate::Caps::auto)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DTypeChoice {
    /// The device's choice: half precision on a GPU with fast half precision, f32 elsewhere.
    #[default]
    Auto,
    /// This dtype, or an error where the device cannot compute in it.
    Exact(DType),
}

impl DTypeChoice {
    /// The dtype this choice means on a device with `caps`.
    pub fn resolve(self, caps: &crate::Caps) -> DType {
        match self {
            DTypeChoice::Auto => caps.auto,
            DTypeChoice::Exact(d) => d,
        }
    }
}

impl From<DType> for DTypeChoice {
    fn from(d: DType) -> Self {
        DTypeChoice::Exact(d)
    }
}

impl std::fmt::Display for DTypeChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DTypeChoice::Auto => f.write_str("auto"),
            DTypeChoice::Exact(d) => d.fmt(f),
        }
    }
}

impl std::str::FromStr for DTypeChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(DTypeChoice::Auto);
        }
        s.parse().map(DTypeChoice::Exact).map_err(|_| {
            Error::Format(format!("unknown dtype `{s}`; expected auto, f32, f16, bf16 or int8"))
        })
    }
}

/// A tensor borrowed from host memory: little-endian elements in row-major order.
#[derive(Clone, Copy, Debug)]
pub struct HostTensor<'a> {
    /// Element type of `bytes`.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: &'a [usize],
    /// The raw little-endian elements; `shape.product() * dtype.size()` bytes.
    pub bytes: &'a [u8],
}

impl<'a> HostTensor<'a> {
    /// A tensor over `bytes`, checked to hold exactly `shape` elements of `dtype`.
    pub fn new(dtype: DType, shape: &'a [usize], bytes: &'a [u8]) -> Result<Self> {
        let t = HostTensor { dtype, shape, bytes };
        t.check()?;
        Ok(t)
    }

    /// Number of elements the shape describes.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Checks that the byte length matches the shape and dtype.
    pub fn check(&self) -> Result<()> {
        let want = self.shape.iter().try_fold(self.dtype.size(), |acc, &d| acc.checked_mul(d));
        match want {
            Some(n) if n == self.bytes.len() => Ok(()),
            Some(n) => Err(Error::Format(format!(
                "{} tensor of shape {:?} needs {n} bytes, got {}",
                self.dtype,
                self.shape,
                self.bytes.len()
            ))),
            None => Err(Error::Format(format!("tensor shape {:?} overflows", self.shape))),
        }
    }

    /// Iterates the elements converted exactly to `f64`.
    pub fn iter_f64(&self) -> impl Iterator<Item = f64> + 'a {
        let dtype = self.dtype;
        self.bytes.chunks_exact(dtype.size()).map(move |b| match dtype {
            DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::I8 => f64::from(i8::from_le_bytes([b[0]])),
        })
    }

    /// The elements converted to `f32` (exact for every supported dtype), appended to `out`.
    pub fn extend_f32(&self, out: &mut Vec<f32>) {
        // A loop for each dtype, not `iter_f64`'s match per element through f64: this converts
        // every weight of a checkpoint at load, where the detour took a third of a small
        // model's start. Every f16, bf16 and i8 value is exactly representable in f32.
        out.reserve(self.numel());
        let b = self.bytes;
        match self.dtype {
            DType::F32 => {
                out.extend(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            }
            DType::F16 => out
                .extend(b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())),
            // A bf16 is the top half of the f32 with the same bits.
            DType::Bf16 => out.extend(
                b.chunks_exact(2)
                    .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)),
            ),
            DType::I8 => out.extend(b.iter().map(|&x| f32::from(x as i8))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names_round_trip() {
        for d in [DType::F32, DType::F16, DType::Bf16, DType::I8] {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert_eq!(DType::F32.size(), 4);
        assert_eq!(DType::Bf16.size(), 2);
        assert_eq!(DType::I8.size(), 1);
        assert!("f8".parse::<DType>().unwrap_err().to_string().contains("expected f32"));
    }

    #[test]
    fn a_choice_is_auto_or_a_dtype_and_auto_resolves_to_the_devices_pick() {
        assert_eq!("AUTO".parse::<DTypeChoice>().unwrap(), DTypeChoice::Auto);
        assert_eq!("bf16".parse::<DTypeChoice>().unwrap(), DTypeChoice::Exact(DType::Bf16));
        let e = "fp8".parse::<DTypeChoice>().unwrap_err().to_string();
        assert!(e.contains("`fp8`; expected auto, f32"), "{e}");
        assert_eq!(DTypeChoice::default().to_string(), "auto");
        assert_eq!(DTypeChoice::from(DType::I8).to_string(), "int8");
        let gpu = crate::Caps::new("b", "d", crate::DeviceKind::Gpu)
            .with_dtypes(vec![DType::F32, DType::F16])
            .with_auto(DType::F16);
        assert_eq!(DTypeChoice::Auto.resolve(&gpu), DType::F16);
        assert_eq!(DTypeChoice::Exact(DType::F32).resolve(&gpu), DType::F32);
        let cpu = crate::Caps::new("b", "d", crate::DeviceKind::Cpu);
        assert_eq!(DTypeChoice::Auto.resolve(&cpu), DType::F32);
    }

    #[test]
    fn decodes_each_dtype_little_endian() {
        let f32s: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = HostTensor::new(DType::F32, &[2], &f32s).unwrap();
        assert_eq!(t.iter_f64().collect::<Vec<_>>(), [1.5, -2.0]);

        // 0x3C00 is 1.0 in binary16; 0xC000 is -2.0.
        let f16s = [0x00, 0x3C, 0x00, 0xC0];
        let t = HostTensor::new(DType::F16, &[1, 2], &f16s).unwrap();
        assert_eq!(t.iter_f64().collect::<Vec<_>>(), [1.0, -2.0]);

        // 0x3FC0 is 1.5 in bfloat16.
        let bf16s = [0xC0, 0x3F];
        let t = HostTensor::new(DType::Bf16, &[1], &bf16s).unwrap();
        let mut v = Vec::new();
        t.extend_f32(&mut v);
        assert_eq!(v, [1.5]);

        let i8s = [0x7f, 0x80, 0xff];
        let t = HostTensor::new(DType::I8, &[3], &i8s).unwrap();
        assert_eq!(t.iter_f64().collect::<Vec<_>>(), [127.0, -128.0, -1.0]);
    }

    #[test]
    fn extend_f32_keeps_every_value_of_every_dtype_bit_for_bit() {
        // Every bit pattern of the 16-bit dtypes (NaNs, infinities, subnormals and signed
        // zeros included), and f32's special values: the same bits as widening through f64,
        // appended after what `out` held.
        let every16: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let f32s: Vec<u8> = [0.0f32, -0.0, 1e-45, -3.4e38, f32::INFINITY, f32::NAN, 0.1]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let i8s: Vec<u8> = (0..=u8::MAX).collect();
        for (dtype, bytes) in [
            (DType::F16, &every16),
            (DType::Bf16, &every16),
            (DType::F32, &f32s),
            (DType::I8, &i8s),
        ] {
            let shape = [bytes.len() / dtype.size()];
            let t = HostTensor::new(dtype, &shape, bytes).unwrap();
            let mut got = vec![7.0f32];
            t.extend_f32(&mut got);
            let want: Vec<u32> = [7.0f32]
                .into_iter()
                .chain(t.iter_f64().map(|x| x as f32))
                .map(f32::to_bits)
                .collect();
            // A NaN's payload may change through f64; only that it is a NaN of that sign counts.
            let same = |(a, b): (&f32, &u32)| {
                let b = f32::from_bits(*b);
                a.to_bits() == b.to_bits()
                    || (a.is_nan() && b.is_nan() && a.is_sign_negative() == b.is_sign_negative())
            };
            assert_eq!(got.len(), want.len(), "{dtype}");
            assert!(got.iter().zip(&want).all(same), "{dtype}");
        }
    }

    #[test]
    fn rejects_byte_length_that_disagrees_with_shape() {
        let e = HostTensor::new(DType::F32, &[2, 3], &[0; 20]).unwrap_err();
        assert!(e.to_string().contains("needs 24 bytes, got 20"), "{e}");
        assert!(HostTensor::new(DType::F16, &[usize::MAX, 4], &[]).is_err());
    }
}
