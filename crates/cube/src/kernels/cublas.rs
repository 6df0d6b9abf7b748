//! The product `x . wt` of a linear layer by NVIDIA's cuBLAS on a CUDA device
//! ([`Matmul::Cublas`](super::Matmul::Cublas)), for comparing cubek's routines with the vendor's
//! library inside the encoder.
//!
//! cubecl-cuda runs its kernels on a stream of its own that it does not hand out, so cuBLAS
//! cannot queue behind them: each product waits for the device to finish what CubeCL queued,
//! runs on a stream of this module's, and waits for that too before CubeCL queues what reads
//! it. Those two waits per product are the price of the comparison. Both run in the CUDA
//! primary context that CubeCL uses, so CubeCL's device pointers are valid here. Inputs and
//! output are f32, f16 or bf16, with f32 sums (`CUBLAS_COMPUTE_32F`: exact f32 in f32, no TF32).
//! libcublas is loaded at run time, like the driver.

#[cfg(not(feature = "fusion"))]
use burn_cubecl::tensor::CubeTensor;

/// Why cuBLAS cannot compute products on `device`, if it cannot: not a CUDA device, a build
/// without CUDA, or no libcublas to load.
pub(crate) fn unavailable(device: &cubecl::Device) -> Option<String> {
    imp::unavailable(device)
}

/// Writes `x . wt` into `out` (`x: [m, k]`, `wt: [k, n]`, `out: [m, n]`, each rows of one float
/// dtype, contiguous along a row): cuBLAS's error, or why it cannot run here, where it fails.
#[cfg(not(feature = "fusion"))]
pub(crate) fn product(x: &CubeTensor, wt: &CubeTensor, out: &CubeTensor) -> Result<(), String> {
    if let Some(why) = unavailable(&x.device) {
        return Err(why);
    }
    imp::product(x, wt, out)
}

/// A matrix's rows, columns and row stride in elements, as cuBLAS reads it: an error where its
/// values are not contiguous along a row.
#[cfg(all(feature = "cuda", not(feature = "fusion")))]
fn rows(t: &CubeTensor, what: &str) -> Result<(usize, usize, usize), String> {
    let shape = t.meta.shape();
    let strides = t.meta.strides();
    if shape.len() != 2 || strides[1] != 1 || strides[0] < shape[1] {
        return Err(format!("cuBLAS takes rows: {what} is {shape:?} with strides {strides:?}"));
    }
    Ok((shape[0], shape[1], strides[0]))
}

#[cfg(not(feature = "cuda"))]
mod imp {
    pub(super) fn unavailable(_: &cubecl::Device) -> Option<String> {
        Some("cuBLAS computes products on CUDA devices, and this build has no CUDA".to_owned())
    }

    #[cfg(not(feature = "fusion"))]
    pub(super) fn product(
        _: &super::CubeTensor,
        _: &super::CubeTensor,
        _: &super::CubeTensor,
    ) -> Result<(), String> {
        unreachable!("`unavailable` refuses every device in a build without CUDA")
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use std::collections::HashMap;
    use std::ffi::{c_int, c_void};
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};

    use burn_backend::DType;
    use cudarc::cublas::{CudaBlas, result, sys};
    use cudarc::driver::{CudaContext, CudaStream};

    /// A cuBLAS handle on a stream of its own, on one device's primary context.
    struct Blas {
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        blas: CudaBlas,
    }

    /// Each device's handle, made on its first product and kept for the process (cuBLAS's
    /// handle creation allocates on the device); the lock also keeps two threads' products on
    /// one device from sharing the handle at once.
    fn handles() -> &'static Mutex<HashMap<usize, Arc<Mutex<Blas>>>> {
        static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Mutex<Blas>>>>> = OnceLock::new();
        HANDLES.get_or_init(Default::default)
    }

    pub(super) fn unavailable(device: &cubecl::Device) -> Option<String> {
        if !matches!(device, cubecl::Device::Cuda(_)) {
            return Some(format!(
                "cuBLAS computes products on CUDA devices (cuda:N) only, not on {:?}'s",
                device.runtime()
            ));
        }
        // Looked for once: each look loads and unloads the library.
        static PRESENT: OnceLock<bool> = OnceLock::new();
        // SAFETY: only tries to load the library under each of its usual names.
        if !*PRESENT.get_or_init(|| unsafe { sys::is_culib_present() }) {
            return Some(
                "cuBLAS's library (libcublas.so, part of the CUDA toolkit) is not on the \
                 loader's path"
                    .to_owned(),
            );
        }
        None
    }

    /// The handle for CUDA device `index`, made on first use.
    fn handle(index: usize) -> Result<Arc<Mutex<Blas>>, String> {
        let mut all = handles().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = all.get(&index) {
            return Ok(b.clone());
        }
        let ctx = CudaContext::new(index).map_err(|e| format!("CUDA device {index}: {e}"))?;
        let stream = ctx.new_stream().map_err(|e| format!("a CUDA stream for cuBLAS: {e}"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("a cuBLAS handle: {e}"))?;
        let b = Arc::new(Mutex::new(Blas { ctx, stream, blas }));
        all.insert(index, b.clone());
        Ok(b)
    }

    /// cuBLAS's name for a dtype of products.
    fn data_type(dtype: DType) -> Result<sys::cudaDataType, String> {
        match dtype {
            DType::F32 => Ok(sys::cudaDataType::CUDA_R_32F),
            DType::F16 => Ok(sys::cudaDataType::CUDA_R_16F),
            DType::BF16 => Ok(sys::cudaDataType::CUDA_R_16BF),
            other => Err(format!("cuBLAS products here take f32, f16 or bf16, not {other:?}")),
        }
    }

    /// A dimension or stride as cuBLAS's `int`.
    fn int(v: usize) -> Result<c_int, String> {
        c_int::try_from(v).map_err(|_| format!("{v} is past what cuBLAS takes ({})", c_int::MAX))
    }

    #[cfg(not(feature = "fusion"))]
    pub(super) fn product(
        x: &super::CubeTensor,
        wt: &super::CubeTensor,
        out: &super::CubeTensor,
    ) -> Result<(), String> {
        let cubecl::Device::Cuda(device) = &x.device else {
            unreachable!("`unavailable` refuses other devices")
        };
        let (m, k, ldx) = super::rows(x, "x")?;
        let (k2, n, ldw) = super::rows(wt, "wt")?;
        let (m2, n2, ldo) = super::rows(out, "out")?;
        if (k2, m2, n2) != (k, m, n) {
            return Err(format!("cuBLAS: [{m}, {k}] x [{k2}, {n}] into [{m2}, {n2}]"));
        }
        if wt.dtype != x.dtype || out.dtype != x.dtype {
            return Err(format!("cuBLAS: {:?} x {:?} into {:?}", x.dtype, wt.dtype, out.dtype));
        }
        let ty = data_type(x.dtype)?;
        let blas = handle(device.index)?;
        let blas = blas.lock().unwrap_or_else(PoisonError::into_inner);

        // Each buffer's device address, pinned in place while held.
        let client = &x.client;
        let resource = |t: &super::CubeTensor| {
            client
                .get_resource::<<cubecl::cuda::CudaRuntime as cubecl_runtime::runtime::Runtime>::Server>(
                    t.handle.clone(),
                )
                .map_err(|e| format!("a CubeCL buffer's device address: {e}"))
        };
        let (xr, wr, or) = (resource(x)?, resource(wt)?, resource(out)?);
        // What CubeCL queued (the operands among it) done before cuBLAS reads them.
        cubecl::future::block_on(client.sync()).map_err(|e| format!("CUDA device: {e}"))?;

        // Column-major, as cuBLAS reads memory: out^T [n, m] = wt^T [n, k] . x^T [k, m], where
        // each transpose is the row-major matrix itself.
        let (cm, cn, ck) = (int(n)?, int(m)?, int(k)?);
        let (lda, ldb, ldc) = (int(ldw)?, int(ldx)?, int(ldo)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        blas.ctx.bind_to_thread().map_err(|e| format!("CUDA context: {e}"))?;
        // SAFETY: the three addresses are live CubeCL buffers of the dims and strides checked
        // above, pinned while `xr`, `wr` and `or` are held; CubeCL's queue is drained, and the
        // stream is waited on below before they are released.
        unsafe {
            result::gemm_ex(
                *blas.blas.handle(),
                sys::cublasOperation_t::CUBLAS_OP_N,
                sys::cublasOperation_t::CUBLAS_OP_N,
                cm,
                cn,
                ck,
                (&alpha as *const f32).cast::<c_void>(),
                wr.resource().ptr as *const c_void,
                ty,
                lda,
                xr.resource().ptr as *const c_void,
                ty,
                ldb,
                (&beta as *const f32).cast::<c_void>(),
                or.resource().ptr as *mut c_void,
                ty,
                ldc,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| format!("cuBLAS's gemm: {e}"))?;
        // The product written before CubeCL queues anything that reads `out`.
        blas.stream.synchronize().map_err(|e| format!("cuBLAS's stream: {e}"))?;
        drop((xr, wr, or));
        Ok(())
    }
}
