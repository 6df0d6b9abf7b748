//! The flex backend's kernels: plain Rust over f32 slices (and int8 and bf16 ones for the int8
//! and bf16 GEMMs), multiversioned for the CPU's vector instructions (AVX-512 or AVX2 with FMA,
//! chosen at run time; elsewhere what the build's target has), parallel on the current rayon
//! pool.

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
/// the body once per instruction set, each copy free to vectorise with its registers.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis unsafe fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis unsafe fn $name(isa: $crate::kernels::Isa, $($arg: $ty),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            unsafe fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx512($($arg: $ty),*) {
                // SAFETY: the caller's contract.
                unsafe { body($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx2($($arg: $ty),*) {
                // SAFETY: the caller's contract.
                unsafe { body($($arg),*) }
            }
            match isa {
                // SAFETY: `isa` was detected on this CPU, so it has the features enabled.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::Isa::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::kernels::Isa::Avx2 => unsafe { avx2($($arg),*) },
                // SAFETY: the caller's contract.
                _ => unsafe { body($($arg),*) },
            }
        }
    };
}
pub(crate) use multiversion;
