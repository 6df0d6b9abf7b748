//! switchyard-dispatch: devices picked at runtime, and one
//! [`Backend`](switchyard_core::Backend) over every backend this
//! build has.
//!
//! The backends are declared once, in a table (`src/backends.rs`, read by the [`backends!`]
//! macro): each backend with the families of devices it runs, each family with its name
//! grammar (`flex`, `cuda[:N]`, `remote:HOST:PORT`), its cargo feature, and the module of its
//! crate that lists (`devices()`) and opens (`open(..)`) its devices. From that table come
//! [`FAMILIES`], the parsing and printing of a [`Device`], [`Dispatch`] (an enum with one variant
//! per backend compiled in, implementing [`Backend`](switchyard_core::Backend) with enums of weights, plans and states
//! that remember their device), [`Dispatch::available`], and [`server`] (with `remote`).
//!
//! So one process can hold models on several devices, and every call goes to the backend that
//! owns its weights and plan. Handing weights or a plan to another device is an error naming
//! both, never a silent copy; asking for a device this build lacks is an error naming the
//! feature to enable, never a fallback.

mod device;
#[cfg(feature = "remote")]
mod host;

pub use device::{DEVICE_ENV, Device, Family, Form, forms, forms_in};
#[cfg(feature = "capture")]
pub use switchyard_capture as capture;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cubecl-cpu"))]
pub use switchyard_cube as cube;
#[cfg(feature = "flex")]
pub use switchyard_flex as flex;
#[cfg(feature = "ndarray")]
pub use switchyard_ndarray as ndarray;
#[cfg(feature = "remote")]
pub use switchyard_remote as remote;
#[cfg(feature = "tch")]
pub use switchyard_tch as tch;

use switchyard_core::Error;

/// What [`backends!`]'s expansion names, from wherever it is expanded.
#[doc(hidden)]
pub mod __private {
    pub use switchyard_burn as burn;
    pub use switchyard_core as core;
    #[cfg(feature = "remote")]
    pub use switchyard_remote as remote;

    pub use crate::device::not_compiled;
    #[cfg(feature = "remote")]
    pub use crate::host::Host;
    pub use crate::{mismatch, owned};
}

/// Generates, from a table of backends (see `src/backends.rs` for its grammar): [`FAMILIES`],
/// [`Dispatch`] with its weights, plans and states, [`Dispatch::new`], [`Dispatch::count`],
/// [`Dispatch::available`], and with the `remote` feature [`server`]. This crate expands it once
/// over its table; a test expands it over a table of its own.
#[macro_export]
macro_rules! backends {
    (
        $(
            backend $bname:literal $variant:ident = $ty:ty {
                $(
                    $(#[doc = $about:literal])*
                    $name:literal $form:ident $($module:ident)::+, feature $feature:literal,
                        ci [$($ci:tt)*] $(, $flag:ident)*;
                )+
            }
        )*
    ) => {
        #[cfg(not(any($($(feature = $feature),+),*)))]
        compile_error!(concat!(
            "switchyard-dispatch needs at least one backend feature:",
            $($(" ", $feature),+),*
        ));

        /// Every device family of the table of backends, compiled into this build or not, in
        /// the table's order.
        pub static FAMILIES: &[$crate::Family] = &[
            $($(
                $crate::Family {
                    name: $name,
                    form: $crate::backends!(@form $form),
                    backend: $bname,
                    feature: $feature,
                    compiled: cfg!(feature = $feature),
                    served: $crate::backends!(@has served [$($flag)*]),
                    trains: $crate::backends!(@has trains [$($flag)*]),
                    about: concat!($($about),*),
                },
            )+)*
        ];

        /// A backend of this build, on one device.
        pub enum Dispatch {
            $(
                #[cfg(any($(feature = $feature),+))]
                #[doc = concat!("The `", $bname, "` backend.")]
                $variant {
                    /// The device it runs on.
                    device: $crate::Device,
                    /// The backend itself.
                    backend: $ty,
                },
            )*
        }

        /// Weights on one device, in the layout of its backend.
        pub enum DispatchWeights {
            $(
                #[cfg(any($(feature = $feature),+))]
                #[doc = concat!("Weights of the `", $bname, "` backend.")]
                $variant($crate::Device, <$ty as $crate::__private::core::Backend>::Weights),
            )*
        }

        /// A plan on one device.
        pub enum DispatchPlan {
            $(
                #[cfg(any($(feature = $feature),+))]
                #[doc = concat!("A plan of the `", $bname, "` backend.")]
                $variant($crate::Device, <$ty as $crate::__private::core::Backend>::Plan),
            )*
        }

        /// The state of one run of a plan.
        pub enum DispatchState {
            $(
                #[cfg(any($(feature = $feature),+))]
                #[doc = concat!("A run state of the `", $bname, "` backend.")]
                $variant(<$ty as $crate::__private::core::Backend>::State),
            )*
        }

        impl Dispatch {
            /// The backend for `device`: an error if this build does not have it, or this
            /// machine does not.
            pub fn new(device: &$crate::Device) -> $crate::__private::core::Result<Dispatch> {
                let family = device.family();
                if !family.compiled {
                    return Err($crate::__private::not_compiled(device, &Dispatch::available()));
                }
                #[allow(unreachable_patterns)]
                match family.name {
                    $($(
                        #[cfg(feature = $feature)]
                        $name => Ok(Dispatch::$variant {
                            device: device.clone(),
                            backend: $crate::backends!(@open $form ($($module)::+) device)?,
                        }),
                    )+)*
                    _ => Err($crate::__private::core::Error::Device(format!(
                        "device `{device}` is not in this build's table of backends"
                    ))),
                }
            }

            /// How many devices of `family` this machine has (0 for a family this build
            /// lacks, and for servers, which are named, not found).
            pub fn count(family: &$crate::Family) -> usize {
                #[allow(unreachable_patterns)]
                match family.name {
                    $($(
                        #[cfg(feature = $feature)]
                        $name => $crate::backends!(@count $form ($($module)::+)),
                    )+)*
                    _ => 0,
                }
            }

            /// The devices this build has compiled in and this machine has, in the table's
            /// order.
            pub fn available() -> Vec<$crate::Device> {
                FAMILIES
                    .iter()
                    .filter(|f| f.compiled)
                    .flat_map(|f| {
                        (0..Dispatch::count(f)).filter_map(move |i| f.device(i as u32))
                    })
                    .collect()
            }

            /// The device this backend runs on.
            pub fn device(&self) -> &$crate::Device {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        Dispatch::$variant { device, .. } => device,
                    )*
                }
            }

            /// Runs `work` on the Burn backend and device under this one (training's way in):
            /// [`Error::Unsupported`](switchyard_core::Error::Unsupported) for a backend the
            /// table does not mark `trains`.
            pub fn on_burn<V: $crate::__private::burn::BurnVisitor>(
                &self,
                work: V,
            ) -> $crate::__private::core::Result<V::Out> {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        Dispatch::$variant { backend, device } => match device.family().name {
                            $(
                                #[cfg(feature = $feature)]
                                $name => $crate::backends!(@on_burn [$($flag)*] backend, work, device),
                            )+
                            _ => unreachable!("Dispatch::new opened `{device}` as this backend"),
                        },
                    )*
                }
            }
        }

        impl DispatchWeights {
            /// The device holding these weights.
            pub fn device(&self) -> &$crate::Device {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        DispatchWeights::$variant(d, _) => d,
                    )*
                }
            }
        }

        impl DispatchPlan {
            /// The device this plan runs on.
            pub fn device(&self) -> &$crate::Device {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        DispatchPlan::$variant(d, _) => d,
                    )*
                }
            }
        }

        impl $crate::__private::core::Backend for Dispatch {
            type Weights = DispatchWeights;
            type Plan = DispatchPlan;
            type State = DispatchState;

            fn caps(&self) -> $crate::__private::core::Caps {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        Dispatch::$variant { backend, .. } => backend.caps(),
                    )*
                }
            }

            fn upload(
                &self,
                tensors: &[$crate::__private::core::HostTensor<'_>],
                graph: &$crate::__private::core::Graph,
            ) -> $crate::__private::core::Result<DispatchWeights> {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        Dispatch::$variant { device, backend } => Ok(DispatchWeights::$variant(
                            device.clone(),
                            backend.upload(tensors, graph)?,
                        )),
                    )*
                }
            }

            fn lower(
                &self,
                w: &DispatchWeights,
                graph: &$crate::__private::core::Graph,
                bucket: $crate::__private::core::Bucket,
            ) -> $crate::__private::core::Result<DispatchPlan> {
                $crate::__private::owned(self.device(), w.device(), "weights")?;
                #[allow(unreachable_patterns)]
                match (self, w) {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        (Dispatch::$variant { device, backend }, DispatchWeights::$variant(_, w)) => {
                            Ok(DispatchPlan::$variant(device.clone(), backend.lower(w, graph, bucket)?))
                        }
                    )*
                    _ => Err($crate::__private::mismatch(self.device(), w.device(), "weights")),
                }
            }

            fn state(&self, plan: &DispatchPlan) -> $crate::__private::core::Result<DispatchState> {
                $crate::__private::owned(self.device(), plan.device(), "a plan")?;
                #[allow(unreachable_patterns)]
                match (self, plan) {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        (Dispatch::$variant { backend, .. }, DispatchPlan::$variant(_, p)) => {
                            Ok(DispatchState::$variant(backend.state(p)?))
                        }
                    )*
                    _ => Err($crate::__private::mismatch(self.device(), plan.device(), "a plan")),
                }
            }

            fn run(
                &self,
                plan: &DispatchPlan,
                state: &mut DispatchState,
                batch: &$crate::__private::core::Batch<'_>,
                out: &mut $crate::__private::core::Outputs,
            ) -> $crate::__private::core::Result<()> {
                $crate::__private::owned(self.device(), plan.device(), "a plan")?;
                #[allow(unreachable_patterns)]
                match (self, plan, state) {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        (
                            Dispatch::$variant { backend, .. },
                            DispatchPlan::$variant(_, p),
                            DispatchState::$variant(s),
                        ) => backend.run(p, s, batch, out),
                    )*
                    _ => Err($crate::__private::core::Error::Device(format!(
                        "a run state made for another backend handed to device `{}`; make it \
                         with this device's `state`",
                        self.device()
                    ))),
                }
            }

            fn with_dtype(
                self,
                dtype: $crate::__private::core::DType,
            ) -> $crate::__private::core::Result<Self> {
                match self {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        Dispatch::$variant { device, backend } => Ok(Dispatch::$variant {
                            device,
                            backend: backend.with_dtype(dtype)?,
                        }),
                    )*
                }
            }

            fn weight_bytes(&self, w: &DispatchWeights) -> usize {
                #[allow(unreachable_patterns)]
                match (self, w) {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        (Dispatch::$variant { backend, .. }, DispatchWeights::$variant(_, w)) => {
                            backend.weight_bytes(w)
                        }
                    )*
                    _ => 0,
                }
            }

            fn plan_bytes(&self, p: &DispatchPlan) -> usize {
                #[allow(unreachable_patterns)]
                match (self, p) {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        (Dispatch::$variant { backend, .. }, DispatchPlan::$variant(_, p)) => {
                            backend.plan_bytes(p)
                        }
                    )*
                    _ => 0,
                }
            }

            fn state_bytes(&self, s: &DispatchState) -> usize {
                #[allow(unreachable_patterns)]
                match (self, s) {
                    $(
                        #[cfg(any($(feature = $feature),+))]
                        (Dispatch::$variant { backend, .. }, DispatchState::$variant(s)) => {
                            backend.state_bytes(s)
                        }
                    )*
                    _ => 0,
                }
            }
        }

        impl ::std::fmt::Debug for Dispatch {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "Dispatch({})", self.device())
            }
        }

        impl ::std::fmt::Debug for DispatchWeights {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "DispatchWeights({})", self.device())
            }
        }

        impl ::std::fmt::Debug for DispatchPlan {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, "DispatchPlan({})", self.device())
            }
        }

        impl ::std::fmt::Debug for DispatchState {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str("DispatchState")
            }
        }

        /// A server of `device` for `remote:HOST:PORT` clients, to clients presenting `token`
        /// if one is given: [`Error::Unsupported`](switchyard_core::Error::Unsupported) for a
        /// device the table does not mark `served` (burn-remote hosts Burn backends with an
        /// IR: flex, ndarray and the CubeCL devices; not tch, capture or another remote).
        #[cfg(feature = "remote")]
        pub fn server(
            device: &$crate::Device,
            token: Option<&str>,
        ) -> $crate::__private::core::Result<Box<dyn $crate::__private::remote::Serve>> {
            match Dispatch::new(device)? {
                $(
                    #[cfg(any($(feature = $feature),+))]
                    Dispatch::$variant { backend, .. } => match device.family().name {
                        $(
                            #[cfg(feature = $feature)]
                            $name => $crate::backends!(@serve [$($flag)*] backend, token, device),
                        )+
                        _ => unreachable!("Dispatch::new opened `{device}` as this backend"),
                    },
                )*
            }
        }
    };

    (@form bare) => { $crate::Form::Bare };
    (@form indexed) => { $crate::Form::Indexed };
    (@form server) => { $crate::Form::Server };

    (@has $want:ident []) => { false };
    (@has served [served $($rest:ident)*]) => { true };
    (@has trains [trains $($rest:ident)*]) => { true };
    (@has $want:ident [served $($rest:ident)*]) => { $crate::backends!(@has $want [$($rest)*]) };
    (@has $want:ident [trains $($rest:ident)*]) => { $crate::backends!(@has $want [$($rest)*]) };
    (@has $want:ident [$other:ident $($rest:ident)*]) => {
        compile_error!(concat!(
            "unknown family flag `", stringify!($other), "`; expected `served` or `trains`"
        ))
    };

    (@on_burn [trains $($rest:ident)*] $backend:ident, $work:ident, $device:ident) => {
        Ok($crate::__private::burn::OnBurn::on_burn($backend, $work))
    };
    (@on_burn [$other:ident $($rest:ident)*] $backend:ident, $work:ident, $device:ident) => {
        $crate::backends!(@on_burn [$($rest)*] $backend, $work, $device)
    };
    (@on_burn [] $backend:ident, $work:ident, $device:ident) => {{
        let _ = (&$backend, $work);
        Err($crate::__private::core::Error::Unsupported(format!(
            "`{}` cannot train: training runs on the devices of Burn backends on this machine \
             ({}), not the `{}` backend",
            $device,
            $crate::forms_trained(FAMILIES),
            $device.family().backend,
        )))
    }};

    (@open bare ($($m:ident)::+) $d:ident) => { $($m)::+::open() };
    (@open indexed ($($m:ident)::+) $d:ident) => {
        $($m)::+::open($d.index().unwrap_or(0) as usize)
    };
    (@open server ($($m:ident)::+) $d:ident) => {
        match $d.server() {
            Some((host, port)) => $($m)::+::open(host, port),
            None => Err($crate::__private::core::Error::Device(format!(
                "device `{}` names no server", $d
            ))),
        }
    };

    (@count server ($($m:ident)::+)) => { 0 };
    (@count $form:ident ($($m:ident)::+)) => { $($m)::+::devices() };

    (@serve [served $($rest:ident)*] $backend:ident, $token:ident, $device:ident) => {
        Ok($crate::__private::Host::host(&$backend, $token))
    };
    (@serve [$other:ident $($rest:ident)*] $backend:ident, $token:ident, $device:ident) => {
        $crate::backends!(@serve [$($rest)*] $backend, $token, $device)
    };
    (@serve [] $backend:ident, $token:ident, $device:ident) => {{
        let _ = &$backend;
        Err($crate::__private::core::Error::Unsupported(format!(
            "`{}` cannot be served: remote-serve hosts Burn backends with an IR ({}), not the \
             `{}` backend",
            $device,
            $crate::forms_served(FAMILIES),
            $device.family().backend,
        )))
    }};
}

include!("backends.rs");

/// The device patterns of `families` that training runs on.
pub fn forms_trained(families: &[Family]) -> String {
    let trained: Vec<String> = families.iter().filter(|f| f.trains).map(Family::pattern).collect();
    trained.join(", ")
}

/// The device patterns of `families` that `switchyard remote-serve` can host.
pub fn forms_served(families: &[Family]) -> String {
    let served: Vec<String> = families.iter().filter(|f| f.served).map(Family::pattern).collect();
    served.join(", ")
}

/// Checks that a plan or weights on `other` belong to `this` device.
#[doc(hidden)]
pub fn owned(this: &Device, other: &Device, what: &str) -> switchyard_core::Result<()> {
    if this == other { Ok(()) } else { Err(mismatch(this, other, what)) }
}

/// The error for `what` on device `other` handed to device `this`.
#[doc(hidden)]
pub fn mismatch(this: &Device, other: &Device, what: &str) -> Error {
    Error::Device(format!(
        "{what} on device `{other}` handed to device `{this}`; a device only runs what it holds \
         (upload the weights to `{this}` instead)"
    ))
}

/// A [`Dispatch`] on `device` computing in `dtype`: the one call a program needs to pick a
/// device by name.
pub fn open(device: &Device, dtype: switchyard_core::DType) -> switchyard_core::Result<Dispatch> {
    switchyard_core::Backend::with_dtype(Dispatch::new(device)?, dtype)
}
