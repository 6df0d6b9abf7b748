//! switchyard-tch: Switchyard on LibTorch, through burn-tch (deprecated upstream; kept for users
//! who run on LibTorch).
//!
//! A thin crate over [`switchyard_burn`], like flex: it picks the Burn backend, the LibTorch
//! device and the [`Caps`](switchyard_core::Caps). Everything is behind the cargo feature
//! `libtorch`, because building it needs LibTorch 2.9.0 (`LIBTORCH`, `LIBTORCH_CXX11_ABI=1`, and
//! `LD_LIBRARY_PATH` to run; `cargo xtask fetch-libtorch` assembles one and prints them). Without
//! the feature this crate is empty.

// burn-tch is deprecated upstream; this crate exists for the users who still run on LibTorch.
#![allow(deprecated)]

#[cfg(feature = "libtorch")]
mod backend;
#[cfg(feature = "libtorch")]
mod kernels;

#[cfg(feature = "libtorch")]
pub use backend::{TchBackend, caps, cpu, cuda};
#[cfg(feature = "libtorch")]
pub use kernels::TchKernels;
