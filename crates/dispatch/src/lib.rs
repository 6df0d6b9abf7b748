//! switchyard-dispatch: devices picked at runtime, and one [`Backend`] over every backend this
//! build has.
//!
//! [`Device`] names a device (`flex`, `cuda:1`, `remote:HOST:PORT`, ...). [`Dispatch`] is an enum
//! with one variant per backend compiled in (cargo features `flex` (default), `ndarray`,
//! `capture`, `tch`, `wgpu`, `vulkan`, `metal`, `webgpu`, `cuda`, `rocm`, `cpu`, `remote`); it
//! implements [`Backend`] with enums of weights
//! and plans that remember their device, so one process can hold models on several devices and
//! every call goes to the backend that owns its weights and plan. Handing weights or a plan to
//! another device is an error naming both, never a silent copy; asking for a device this build
//! lacks is an error naming the feature to enable, never a fallback. With `remote`, [`server`]
//! serves any device of this build that burn-remote can host to `remote:HOST:PORT` clients.

#[cfg(not(any(
    feature = "flex",
    feature = "ndarray",
    feature = "capture",
    feature = "tch",
    feature = "wgpu",
    feature = "cuda",
    feature = "rocm",
    feature = "cpu",
    feature = "remote"
)))]
compile_error!(
    "switchyard-dispatch needs at least one backend feature: flex, ndarray, capture, tch, wgpu, \
     vulkan, metal, webgpu, cuda, rocm, cpu or remote"
);

mod device;
mod precision;

pub use device::{DEVICE_ENV, Device, FORMS};
use precision::Precision;
use switchyard_core::{
    Backend, Batch, Bucket, Caps, DType, Error, Graph, HostTensor, Outputs, Result,
};

/// Declares the backends: adding one is one line here (plus its feature in Cargo.toml and its
/// name in [`Device::compiled`]). `$make` builds the backend from the device, or says why not.
macro_rules! backends {
    ($($feature:literal => $variant:ident($ty:ty) for $pat:pat => $make:expr;)*) => {
        /// A backend of this build, on one device.
        pub enum Dispatch {
            $(
                #[cfg(feature = $feature)]
                #[doc = concat!("The `", $feature, "` backend.")]
                $variant {
                    /// The device it runs on.
                    device: Device,
                    /// The backend itself.
                    backend: $ty,
                },
            )*
        }

        /// Weights on one device, in the layout of its backend.
        pub enum DispatchWeights {
            $(
                #[cfg(feature = $feature)]
                #[doc = concat!("Weights of the `", $feature, "` backend.")]
                $variant(Device, <$ty as Backend>::Weights),
            )*
        }

        /// A plan on one device.
        pub enum DispatchPlan {
            $(
                #[cfg(feature = $feature)]
                #[doc = concat!("A plan of the `", $feature, "` backend.")]
                $variant(Device, <$ty as Backend>::Plan),
            )*
        }

        impl Dispatch {
            /// The backend for `device`: an error if this build does not have it.
            pub fn new(device: &Device) -> Result<Dispatch> {
                device.check_compiled()?;
                #[allow(unreachable_patterns)]
                match device {
                    $(
                        #[cfg(feature = $feature)]
                        $pat => Ok(Dispatch::$variant { device: device.clone(), backend: ($make)(device)? }),
                    )*
                    _ => Err(Error::Device(format!("device `{device}` has no backend in this build"))),
                }
            }

            /// The device this backend runs on.
            pub fn device(&self) -> &Device {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        Dispatch::$variant { device, .. } => device,
                    )*
                }
            }

            /// This backend computing in `dtype` (weights stored in it, activations following):
            /// [`Error::Unsupported`] where the device or backend cannot (see
            /// [`Caps::float_dtypes`]).
            pub fn with_dtype(self, dtype: DType) -> Result<Dispatch> {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        Dispatch::$variant { device, backend } => Ok(Dispatch::$variant {
                            device,
                            backend: Precision::with_dtype(backend, dtype)?,
                        }),
                    )*
                }
            }
        }

        impl DispatchWeights {
            /// The device holding these weights.
            pub fn device(&self) -> &Device {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        DispatchWeights::$variant(d, _) => d,
                    )*
                }
            }
        }

        impl DispatchPlan {
            /// The device this plan runs on.
            pub fn device(&self) -> &Device {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        DispatchPlan::$variant(d, _) => d,
                    )*
                }
            }
        }

        impl Backend for Dispatch {
            type Weights = DispatchWeights;
            type Plan = DispatchPlan;

            fn caps(&self) -> Caps {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        Dispatch::$variant { backend, .. } => backend.caps(),
                    )*
                }
            }

            fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<DispatchWeights> {
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        Dispatch::$variant { device, backend } => {
                            Ok(DispatchWeights::$variant(device.clone(), backend.upload(tensors, graph)?))
                        }
                    )*
                }
            }

            fn lower(&self, w: &DispatchWeights, graph: &Graph, bucket: Bucket) -> Result<DispatchPlan> {
                owned(self.device(), w.device(), "weights")?;
                #[allow(unreachable_patterns)]
                match (self, w) {
                    $(
                        #[cfg(feature = $feature)]
                        (Dispatch::$variant { device, backend }, DispatchWeights::$variant(_, w)) => {
                            Ok(DispatchPlan::$variant(device.clone(), backend.lower(w, graph, bucket)?))
                        }
                    )*
                    _ => Err(mismatch(self.device(), w.device(), "weights")),
                }
            }

            fn run(&self, plan: &mut DispatchPlan, batch: &Batch<'_>, out: &mut Outputs) -> Result<()> {
                owned(self.device(), plan.device(), "a plan")?;
                #[allow(unreachable_patterns)]
                match (self, plan) {
                    $(
                        #[cfg(feature = $feature)]
                        (Dispatch::$variant { backend, .. }, DispatchPlan::$variant(_, p)) => backend.run(p, batch, out),
                    )*
                    (this, plan) => Err(mismatch(this.device(), plan.device(), "a plan")),
                }
            }

            fn weight_bytes(&self, w: &DispatchWeights) -> usize {
                #[allow(unreachable_patterns)]
                match (self, w) {
                    $(
                        #[cfg(feature = $feature)]
                        (Dispatch::$variant { backend, .. }, DispatchWeights::$variant(_, w)) => backend.weight_bytes(w),
                    )*
                    _ => 0,
                }
            }

            fn plan_bytes(&self, p: &DispatchPlan) -> usize {
                #[allow(unreachable_patterns)]
                match (self, p) {
                    $(
                        #[cfg(feature = $feature)]
                        (Dispatch::$variant { backend, .. }, DispatchPlan::$variant(_, p)) => backend.plan_bytes(p),
                    )*
                    _ => 0,
                }
            }
        }
    };
}

backends! {
    "flex" => Flex(switchyard_flex::FlexBackend) for Device::Flex => |_| Ok(switchyard_flex::flex());
    "ndarray" => NdArray(switchyard_ndarray::NdArrayBackend) for Device::NdArray => |_| Ok(switchyard_ndarray::ndarray());
    "capture" => Capture(switchyard_capture::Capture) for Device::Capture => |_| Ok(switchyard_capture::Capture::new());
    "tch" => Tch(switchyard_tch::TchBackend) for Device::TchCpu | Device::TchCuda(_) => tch;
    "wgpu" => Wgpu(switchyard_cube::Cube) for Device::Wgpu(_) => cube;
    "vulkan" => Vulkan(switchyard_cube::Cube) for Device::Vulkan(_) => cube;
    "metal" => Metal(switchyard_cube::Cube) for Device::Metal(_) => cube;
    "webgpu" => WebGpu(switchyard_cube::Cube) for Device::WebGpu => cube;
    "cuda" => Cuda(switchyard_cube::Cube) for Device::Cuda(_) => cube;
    "rocm" => Rocm(switchyard_cube::Cube) for Device::Rocm(_) => cube;
    "cpu" => Cpu(switchyard_cube::Cube) for Device::Cpu => cube;
    "remote" => Remote(switchyard_remote::Remote) for Device::Remote { .. } => remote;
}

/// A client of the server named by `device` (`remote:HOST:PORT`), with the timeout and token
/// of the environment.
#[cfg(feature = "remote")]
fn remote(device: &Device) -> Result<switchyard_remote::Remote> {
    match device {
        Device::Remote { host, port } => {
            switchyard_remote::connect(host, *port, switchyard_remote::RemoteOptions::from_env()?)
        }
        _ => Err(Error::Device(format!("device `{device}` is not a remote device"))),
    }
}

/// A server of `device` for `remote:HOST:PORT` clients, to clients presenting `token` if one is
/// given: [`Error::Unsupported`] for a device burn-remote cannot host (it hosts Burn backends
/// with an IR: flex, ndarray and the CubeCL devices; not tch, capture or another remote).
#[cfg(feature = "remote")]
pub fn server(device: &Device, token: Option<&str>) -> Result<Box<dyn switchyard_remote::Serve>> {
    /// One arm per hostable backend of this build; each backend is a different type.
    macro_rules! serve {
        ($($feature:literal => $variant:ident),*) => {
            #[allow(unreachable_patterns)]
            match Dispatch::new(device)? {
                $(
                    #[cfg(feature = $feature)]
                    Dispatch::$variant { backend, .. } => {
                        Ok(Box::new(switchyard_remote::Server::of(&backend, token)))
                    }
                )*
                _ => Err(Error::Unsupported(format!(
                    "`{device}` cannot be served: burn-remote hosts Burn backends with an IR \
                     (flex, ndarray and the CubeCL devices), not tch, capture or another remote \
                     device"
                ))),
            }
        };
    }
    serve!("flex" => Flex, "ndarray" => NdArray, "wgpu" => Wgpu, "vulkan" => Vulkan,
        "metal" => Metal, "webgpu" => WebGpu, "cuda" => Cuda, "rocm" => Rocm, "cpu" => Cpu)
}

/// The cube backend on a CubeCL device (`wgpu:N`, `vulkan:N`, `metal:N`, `webgpu`, `cuda:N`,
/// `rocm:N`, `cpu`).
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]
fn cube(device: &Device) -> Result<switchyard_cube::Cube> {
    match *device {
        #[cfg(feature = "wgpu")]
        Device::Wgpu(i) => switchyard_cube::wgpu(i as usize),
        #[cfg(feature = "vulkan")]
        Device::Vulkan(i) => switchyard_cube::vulkan(i as usize),
        #[cfg(feature = "metal")]
        Device::Metal(i) => switchyard_cube::metal(i as usize),
        #[cfg(feature = "webgpu")]
        Device::WebGpu => switchyard_cube::webgpu(),
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => switchyard_cube::cuda(i as usize),
        #[cfg(feature = "rocm")]
        Device::Rocm(i) => switchyard_cube::rocm(i as usize),
        #[cfg(feature = "cpu")]
        Device::Cpu => switchyard_cube::cpu(),
        _ => Err(Error::Device(format!("device `{device}` is not a CubeCL device of this build"))),
    }
}

/// The tch backend on `device` (`tch:cpu` or `tch:cuda:N`).
#[cfg(feature = "tch")]
fn tch(device: &Device) -> Result<switchyard_tch::TchBackend> {
    match *device {
        Device::TchCuda(i) => switchyard_tch::tch_cuda(i as usize),
        _ => Ok(switchyard_tch::tch_cpu()),
    }
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dispatch({})", self.device())
    }
}

impl std::fmt::Debug for DispatchWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DispatchWeights({})", self.device())
    }
}

impl std::fmt::Debug for DispatchPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DispatchPlan({})", self.device())
    }
}

fn owned(this: &Device, other: &Device, what: &str) -> Result<()> {
    if this == other { Ok(()) } else { Err(mismatch(this, other, what)) }
}

fn mismatch(this: &Device, other: &Device, what: &str) -> Error {
    Error::Device(format!(
        "{what} on device `{other}` handed to device `{this}`; a device only runs what it holds \
         (upload the weights to `{this}` instead)"
    ))
}
