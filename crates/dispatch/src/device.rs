//! Device names: parsed from and printed as strings, checked against what this build has.

use std::fmt;
use std::str::FromStr;

use switchyard_core::{Error, Result};

/// The environment variable that names the default device.
pub const DEVICE_ENV: &str = "SWITCHYARD_DEVICE";

/// Every accepted form, for error messages and `--help`.
pub const FORMS: &str = "flex, ndarray, cpu, cuda[:N], rocm[:N], vulkan[:N], wgpu[:N], metal[:N], \
                         webgpu, tch:cpu, tch:cuda:N, remote:HOST:PORT, capture";

/// A device a model can run on, by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// burn-flex on the host CPU (the default).
    Flex,
    /// burn-ndarray on the host CPU.
    NdArray,
    /// The CubeCL CPU runtime.
    Cpu,
    /// An NVIDIA GPU through CUDA, by index.
    Cuda(u32),
    /// An AMD GPU through ROCm, by index.
    Rocm(u32),
    /// A GPU through Vulkan (SPIR-V kernels), by index.
    Vulkan(u32),
    /// A GPU through wgpu (WGSL kernels), by index.
    Wgpu(u32),
    /// An Apple GPU through Metal, by index.
    Metal(u32),
    /// WebGPU.
    WebGpu,
    /// LibTorch on the CPU.
    TchCpu,
    /// LibTorch on a CUDA GPU, by index.
    TchCuda(u32),
    /// A device served by `switchyard remote-serve` on another machine.
    Remote {
        /// Host name or address (IPv6 in brackets).
        host: String,
        /// TCP port.
        port: u16,
    },
    /// Records what would run instead of running it.
    Capture,
}

impl Device {
    /// The cargo feature that compiles this device's backend in.
    pub fn feature(&self) -> &'static str {
        match self {
            Device::Flex => "flex",
            Device::NdArray => "ndarray",
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            Device::Rocm(_) => "rocm",
            Device::Vulkan(_) => "vulkan",
            Device::Wgpu(_) => "wgpu",
            Device::Metal(_) => "metal",
            Device::WebGpu => "webgpu",
            Device::TchCpu | Device::TchCuda(_) => "tch",
            Device::Remote { .. } => "remote",
            Device::Capture => "capture",
        }
    }

    /// Whether this build has the device's backend compiled in.
    pub fn compiled(&self) -> bool {
        let compiled = [
            ("flex", cfg!(feature = "flex")),
            ("ndarray", cfg!(feature = "ndarray")),
            ("capture", cfg!(feature = "capture")),
            ("tch", cfg!(feature = "tch")),
            ("wgpu", cfg!(feature = "wgpu")),
            ("vulkan", cfg!(feature = "vulkan")),
            ("metal", cfg!(feature = "metal")),
            ("webgpu", cfg!(feature = "webgpu")),
            ("cuda", cfg!(feature = "cuda")),
            ("rocm", cfg!(feature = "rocm")),
            ("cpu", cfg!(feature = "cpu")),
            ("remote", cfg!(feature = "remote")),
        ];
        compiled.iter().any(|&(feature, on)| on && feature == self.feature())
    }

    /// The devices this build has compiled in and this machine has.
    pub fn available() -> Vec<Device> {
        #[allow(unused_mut)]
        let mut all = vec![Device::Flex, Device::NdArray, Device::TchCpu, Device::Capture];
        #[cfg(feature = "tch")]
        all.extend((0..switchyard_tch::cuda_devices()).map(|i| Device::TchCuda(i as u32)));
        #[cfg(feature = "wgpu")]
        {
            // One enumeration serves both names of an adapter.
            let adapters = switchyard_cube::adapters();
            all.extend(adapters.iter().map(|a| Device::Wgpu(a.index as u32)));
            #[allow(unused_variables)]
            let on = |api: &str| adapters.iter().filter(|a| a.api == api).count() as u32;
            #[cfg(feature = "vulkan")]
            all.extend((0..on("Vulkan")).map(Device::Vulkan));
            #[cfg(feature = "metal")]
            all.extend((0..on("Metal")).map(Device::Metal));
            #[cfg(feature = "webgpu")]
            all.extend((on("BrowserWebGpu") > 0).then_some(Device::WebGpu));
        }
        #[cfg(feature = "cuda")]
        all.extend((0..switchyard_cube::cuda_devices()).map(|i| Device::Cuda(i as u32)));
        #[cfg(feature = "rocm")]
        all.extend((0..switchyard_cube::rocm_devices()).map(|i| Device::Rocm(i as u32)));
        #[cfg(feature = "cpu")]
        all.push(Device::Cpu);
        all.into_iter().filter(Device::compiled).collect()
    }

    /// The default device: `SWITCHYARD_DEVICE` if set, else `flex`.
    pub fn from_env() -> Result<Device> {
        Device::from_env_value(std::env::var(DEVICE_ENV).ok().as_deref())
    }

    /// The default device given the value of `SWITCHYARD_DEVICE` (`None` or blank: `flex`).
    pub fn from_env_value(value: Option<&str>) -> Result<Device> {
        match value {
            Some(v) if !v.trim().is_empty() => v.parse().map_err(|e: Error| match e {
                Error::Device(m) => Error::Device(format!("{DEVICE_ENV}: {m}")),
                other => other,
            }),
            _ => Ok(Device::Flex),
        }
    }

    /// Checks that this build has the device, with an error naming the fix if not.
    pub fn check_compiled(&self) -> Result<()> {
        if self.compiled() {
            return Ok(());
        }
        let available: Vec<String> = Device::available().iter().map(Device::to_string).collect();
        let available = if available.is_empty() { "none".to_owned() } else { available.join(", ") };
        let feature = self.feature();
        Err(Error::Device(format!(
            "device `{self}` is not compiled into this build; rebuild with the cargo feature \
             `{feature}` (of switchyard-dispatch, or switchyard's CLI). Available here: {available}"
        )))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Flex => f.write_str("flex"),
            Device::NdArray => f.write_str("ndarray"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Rocm(i) => write!(f, "rocm:{i}"),
            Device::Vulkan(i) => write!(f, "vulkan:{i}"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
            Device::Metal(i) => write!(f, "metal:{i}"),
            Device::WebGpu => f.write_str("webgpu"),
            Device::TchCpu => f.write_str("tch:cpu"),
            Device::TchCuda(i) => write!(f, "tch:cuda:{i}"),
            Device::Remote { host, port } => write!(f, "remote:{host}:{port}"),
            Device::Capture => f.write_str("capture"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        let bad = |why: &str| {
            Error::Device(format!("unknown device `{t}`{why}; expected one of: {FORMS}"))
        };
        let index = |rest: Option<&str>| -> Result<u32> {
            match rest {
                None => Ok(0),
                Some(n) => n.parse().map_err(|_| bad(&format!(" (`{n}` is not a device index)"))),
            }
        };
        if let Some(rest) = t.strip_prefix("remote:") {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad(" (no port)"))?;
            let port =
                port.parse::<u16>().map_err(|_| bad(&format!(" (`{port}` is not a port)")))?;
            if host.is_empty() {
                return Err(bad(" (no host)"));
            }
            return Ok(Device::Remote { host: host.to_owned(), port });
        }
        let lower = t.to_ascii_lowercase();
        let (name, rest) = match lower.split_once(':') {
            Some((n, r)) => (n, Some(r)),
            None => (lower.as_str(), None),
        };
        match (name, rest) {
            ("flex", None) => Ok(Device::Flex),
            ("ndarray", None) => Ok(Device::NdArray),
            ("cpu", None) => Ok(Device::Cpu),
            ("webgpu", None) => Ok(Device::WebGpu),
            ("capture", None) => Ok(Device::Capture),
            ("cuda", r) => Ok(Device::Cuda(index(r)?)),
            ("rocm", r) => Ok(Device::Rocm(index(r)?)),
            ("vulkan", r) => Ok(Device::Vulkan(index(r)?)),
            ("wgpu", r) => Ok(Device::Wgpu(index(r)?)),
            ("metal", r) => Ok(Device::Metal(index(r)?)),
            ("tch", Some("cpu")) => Ok(Device::TchCpu),
            ("tch", Some(r)) => match r.strip_prefix("cuda") {
                Some("") => Ok(Device::TchCuda(0)),
                Some(n) => Ok(Device::TchCuda(index(n.strip_prefix(':'))?)),
                None => Err(bad("")),
            },
            _ => Err(bad("")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_prints_back() {
        let cases = [
            ("flex", Device::Flex),
            ("ndarray", Device::NdArray),
            ("cpu", Device::Cpu),
            ("cuda:0", Device::Cuda(0)),
            ("rocm:1", Device::Rocm(1)),
            ("vulkan:0", Device::Vulkan(0)),
            ("wgpu:2", Device::Wgpu(2)),
            ("metal:0", Device::Metal(0)),
            ("webgpu", Device::WebGpu),
            ("tch:cpu", Device::TchCpu),
            ("tch:cuda:3", Device::TchCuda(3)),
            ("remote:gpu-box:7860", Device::Remote { host: "gpu-box".into(), port: 7860 }),
            ("remote:[::1]:9000", Device::Remote { host: "[::1]".into(), port: 9000 }),
            ("capture", Device::Capture),
        ];
        for (s, d) in cases {
            assert_eq!(s.parse::<Device>().unwrap(), d, "{s}");
            assert_eq!(d.to_string(), s);
        }
    }

    #[test]
    fn short_forms_default_to_index_zero() {
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!(" WGPU ".parse::<Device>().unwrap(), Device::Wgpu(0));
        assert_eq!("tch:cuda".parse::<Device>().unwrap(), Device::TchCuda(0));
    }

    #[test]
    fn bad_names_list_the_accepted_forms() {
        for (s, why) in [
            ("gpu", "unknown device `gpu`"),
            ("cuda:x", "`x` is not a device index"),
            ("remote:host", "no port"),
            ("remote:host:99999", "`99999` is not a port"),
            ("remote::80", "no host"),
            ("tch:rocm", "unknown device `tch:rocm`"),
            ("flex:1", "unknown device `flex:1`"),
        ] {
            let e = s.parse::<Device>().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("remote:HOST:PORT"), "{s}: {e}");
        }
    }

    #[test]
    fn every_device_names_a_cargo_feature_of_this_crate() {
        let manifest = include_str!("../Cargo.toml");
        let all = ["flex", "ndarray", "cpu", "cuda", "rocm", "vulkan", "wgpu", "metal", "webgpu"];
        for d in all.iter().chain(&["tch:cpu", "remote:h:1", "capture"]) {
            let feature = d.parse::<Device>().unwrap().feature();
            assert!(manifest.contains(&format!("\n{feature} = [")), "`{d}`: no feature {feature}");
        }
    }

    #[test]
    fn devices_not_compiled_name_the_feature() {
        if !cfg!(feature = "metal") {
            let e = Device::Metal(1).check_compiled().unwrap_err().to_string();
            assert!(e.contains("rebuild with the cargo feature `metal`"), "{e}");
            assert!(e.contains("Available here:"), "{e}");
        }
        if !cfg!(feature = "ndarray") {
            let e = Device::NdArray.check_compiled().unwrap_err().to_string();
            assert!(e.contains("rebuild with the cargo feature `ndarray`"), "{e}");
        }
    }

    #[test]
    fn the_environment_picks_the_default() {
        assert_eq!(Device::from_env_value(None).unwrap(), Device::Flex);
        assert_eq!(Device::from_env_value(Some("  ")).unwrap(), Device::Flex);
        assert_eq!(Device::from_env_value(Some("capture")).unwrap(), Device::Capture);
        let e = Device::from_env_value(Some("tpu")).unwrap_err().to_string();
        assert!(e.contains("SWITCHYARD_DEVICE: unknown device `tpu`"), "{e}");
    }

    #[test]
    fn available_lists_exactly_the_compiled_backends() {
        let a = Device::available();
        assert_eq!(a.contains(&Device::Flex), cfg!(feature = "flex"));
        assert_eq!(a.contains(&Device::NdArray), cfg!(feature = "ndarray"));
        assert_eq!(a.contains(&Device::Capture), cfg!(feature = "capture"));
        assert_eq!(a.contains(&Device::TchCpu), cfg!(feature = "tch"));
        assert!(a.iter().all(Device::compiled));
    }
}
