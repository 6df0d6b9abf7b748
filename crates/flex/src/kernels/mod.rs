//! The flex backend's kernels: plain Rust over f32 slices (and int8 and bf16 ones for the int8
//! and bf16 GEMMs), multiversioned for the CPU's vector instructions (AVX-512 or AVX2 with FMA,
//! chosen at run time; elsewhere what the build's target has), parallel on the current rayon
//! pool.

pub(crate) mod amx;
pub mod attention;
pub mod gemm;
pub mod gemm16;
pub mod gemm8;
pub mod math;
pub mod rows;
pub mod scratch;

pub use gemm::Isa;
pub use gemm8::Isa8;
pub use gemm16::Isa16;

/// Defines `fn $name(isa: Isa, args..)`, which runs `$body` compiled for `isa`'s target features:
/// the body once per instruction set, each copy free to vectorise with its registers. Written
/// `fn $name<M>(..)`, the body computes its multiply-adds with `M` ([`math::MulAdd`]):
/// [`math::Fused`] where the copy has FMA instructions, [`math::Baseline`] in the portable one.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis unsafe fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block
    ) => {
        $crate::kernels::multiversion! {
            $(#[$meta])*
            $vis unsafe fn $name<Unused>($($arg: $ty),*) $body
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis unsafe fn $name:ident<$m:ident>($($arg:ident: $ty:ty),* $(,)?) $body:block
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis unsafe fn $name(isa: $crate::kernels::Isa, $($arg: $ty),*) {
            #[inline(always)]
            // A body written without `<M>` leaves it unused.
            #[allow(clippy::too_many_arguments, clippy::extra_unused_type_parameters)]
            unsafe fn body<$m: $crate::kernels::math::MulAdd>($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx512($($arg: $ty),*) {
                // SAFETY: the caller's contract.
                unsafe { body::<$crate::kernels::math::Fused>($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx2($($arg: $ty),*) {
                // SAFETY: the caller's contract.
                unsafe { body::<$crate::kernels::math::Fused>($($arg),*) }
            }
            match isa {
                // SAFETY: `isa` was detected on this CPU, so it has the features enabled.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::Isa::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::Isa::Avx2 => unsafe { avx2($($arg),*) },
                // SAFETY: the caller's contract.
                _ => unsafe { body::<$crate::kernels::math::Baseline>($($arg),*) },
            }
        }
    };
}
pub(crate) use multiversion;
