//! The product `x . wt` of a linear layer by NVIDIA's cuBLAS on a CUDA device
//! ([`Matmul::Cublas`](super::Matmul::Cublas) and
//! [`Matmul::CublasQueued`](super::Matmul::CublasQueued)), for comparing cubek's routines with
//! the vendor's library inside the encoder.
//!
//! cubecl-cuda runs its kernels on a stream of its own that it does not hand out, so cuBLAS
//! cannot simply queue behind them. It runs on a stream of this module's, ordered against
//! CubeCL's one of two ways ([`Order`]): the host waits for CubeCL's queue before each product
//! and for the product after it, or the two streams hand over on the device through flags in
//! device memory, and the host never waits. Both run in the CUDA primary context that CubeCL
//! uses, so CubeCL's device pointers are valid here. Inputs and output are f32, f16 or bf16,
//! with f32 sums (`CUBLAS_COMPUTE_32F`: exact f32 in f32, no TF32). libcublas is loaded at run
//! time, like the driver.

#[cfg(not(feature = "fusion"))]
use burn_cubecl::tensor::CubeTensor;

/// Why cuBLAS cannot compute products on `device`, if it cannot: not a CUDA device, a build
/// without CUDA, or no libcublas to load.
pub(crate) fn unavailable(device: &cubecl::Device) -> Option<String> {
    imp::unavailable(device)
}

/// How a cuBLAS product is ordered against the kernels CubeCL queues before and after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "fusion", allow(dead_code))]
pub(crate) enum Order {
    /// The host waits for CubeCL's queue to drain before the product, and for the product
    /// before CubeCL queues anything more: two host waits, and the device idle while the host
    /// queues what comes next.
    Host,
    /// On the device: a kernel of CubeCL's raises a flag that cuBLAS's stream waits for
    /// (`cuStreamWaitValue32`), and cuBLAS's stream raises one after the product
    /// (`cuStreamWriteValue32`) that a kernel of CubeCL's waits for, so whatever CubeCL queues
    /// next runs after the product. The host queues on and never waits.
    Device,
}

/// Writes `x . wt` into `out` (`x: [m, k]`, `wt: [k, n]`, `out: [m, n]`, each rows of one float
/// dtype, contiguous along a row), ordered by `order`: cuBLAS's error, or why it cannot run
/// here, where it fails.
#[cfg(not(feature = "fusion"))]
pub(crate) fn product(
    x: &CubeTensor,
    wt: &CubeTensor,
    out: &CubeTensor,
    order: Order,
) -> Result<(), String> {
    if let Some(why) = unavailable(&x.device) {
        return Err(why);
    }
    imp::product(x, wt, out, order)
}

/// The device-side handover of [`Order::Device`]: the flag slots and the two kernels of
/// CubeCL's that raise and wait for them. They are plain CubeCL kernels, so any runtime runs
/// them (the tests run them on llvmpipe); only CUDA's products use them.
#[cfg_attr(any(not(feature = "cuda"), feature = "fusion"), allow(dead_code))]
pub(crate) mod flags {
    use cubecl::prelude::*;

    /// Slots a device's queued products take in turn, each a `ready` flag (raised by CubeCL,
    /// waited for by cuBLAS's stream) and a `done` flag (the other way): a slot comes round
    /// again only this many products later, so a slot's generation (what its flags are raised
    /// to) grows by one every `SLOTS` products and stays below 2^31, the most the device's
    /// wrapping comparison tells apart, for 2^41 products.
    pub(crate) const SLOTS: usize = 1024;

    /// The slot and generation of the device's `n`th queued product (from 0): `None` past
    /// 2^41 products.
    pub(crate) fn slot(n: u64) -> Option<(u32, u32)> {
        let generation = u32::try_from(n / SLOTS as u64 + 1).ok().filter(|&g| g < 1 << 31)?;
        Some(((n % SLOTS as u64) as u32, generation))
    }

    /// Raises `flags[at]` to `generation`, never lowering it: products queued from two host
    /// threads (two CubeCL streams) may reach the device in another order than cuBLAS's stream
    /// waits for them.
    #[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
    #[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
    pub(crate) fn raise(flags: &mut [Atomic<u32>], at: u32, generation: u32) {
        flags[at as usize].fetch_max(generation);
    }

    /// Returns once `flags[at]` reaches `generation`: read through the cache each time
    /// (CubeCL's atomic load is a volatile read on CUDA), so a write from cuBLAS's stream
    /// ends the loop. It never gives up: the flag is queued on cuBLAS's stream before this is,
    /// and a timeout here could only let what comes next read a product not yet written.
    #[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
    #[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
    pub(crate) fn wait(flags: &[Atomic<u32>], at: u32, generation: u32) {
        while flags[at as usize].load() < generation {}
    }

    /// `raise` and `wait` as CUDA C++ for [`crate::kernels::cuda_check`].
    #[cfg(all(test, feature = "wgpu", not(feature = "fusion")))]
    pub(crate) fn cuda_variants(
        sm: &crate::kernels::cuda_check::Sm,
    ) -> Vec<crate::kernels::cuda_check::Variant> {
        let one = || (CubeCount::Static(1, 1, 1), CubeDim::new_1d(1));
        let (count, dim) = one();
        let raise =
            raise::create_dummy_kernel(sm.props(), sm.target(), count, dim, sm.buffer(8), 1, 1);
        let (count, dim) = one();
        let wait =
            wait::create_dummy_kernel(sm.props(), sm.target(), count, dim, sm.buffer(8), 1, 1);
        vec![sm.variant("cublas flags: raise", raise), sm.variant("cublas flags: wait", wait)]
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn slots_come_round_with_the_next_generation_and_end_before_the_comparison_wraps() {
            assert_eq!(slot(0), Some((0, 1)));
            assert_eq!(slot(SLOTS as u64 - 1), Some((SLOTS as u32 - 1, 1)));
            assert_eq!(slot(SLOTS as u64), Some((0, 2)));
            assert_eq!(slot(5 * SLOTS as u64 + 7), Some((7, 6)));
            let last = (1u64 << 31) * SLOTS as u64 - SLOTS as u64 - 1;
            assert_eq!(slot(last), Some((SLOTS as u32 - 1, (1 << 31) - 1)));
            assert_eq!(slot(last + 1), None);
        }

        /// On llvmpipe: `raise` raises and never lowers, `wait` returns on a flag already at
        /// or past its generation (on llvmpipe a shader loop ends by itself after 65535
        /// iterations, so a wait that never saw its flag would end too, and is not told
        /// apart here: the CUDA source below is what shows that it reads the flag afresh).
        #[cfg(feature = "wgpu")]
        #[test]
        fn raise_never_lowers_a_flag_and_wait_returns_once_it_is_reached() {
            let cube = crate::wgpu::open(0).expect("a wgpu adapter");
            let client = cube.device().client();
            let values = [5u32, 0, 9];
            let handle = client.create_from_slice(u32::as_bytes(&values));
            let arg = || {
                // SAFETY: a live device buffer of three u32s.
                unsafe { BufferArg::from_raw_parts(handle.clone(), values.len()) }
            };
            let one = || (CubeCount::Static(1, 1, 1), CubeDim::new_1d(1));
            // Each flag raised past what it holds, then offered a lower generation, which a
            // plain store would write.
            for (at, generation) in [(0, 7), (1, 4), (0, 3), (1, 2), (2, 1)] {
                let (count, dim) = one();
                raise::launch(&client, count, dim, arg(), at, generation);
            }
            for (at, generation) in [(0, 7), (1, 2), (2, 9)] {
                let (count, dim) = one();
                wait::launch(&client, count, dim, arg(), at, generation);
            }
            let bytes = client.read_one(handle.clone()).expect("the flags");
            assert_eq!(u32::from_bytes(&bytes), [7, 4, 9]);
        }

        /// `wait` compiled to CUDA C++: the flag is read through a `volatile` pointer inside the
        /// loop, so the compiler cannot read it once and spin on a register.
        #[cfg(all(feature = "wgpu", not(feature = "fusion")))]
        #[test]
        fn the_wait_reads_its_flag_afresh_each_time_round_on_cuda() {
            let sm = crate::kernels::cuda_check::Sm::new(90);
            let (count, dim) = (CubeCount::Static(1, 1, 1), CubeDim::new_1d(1));
            let kernel =
                wait::create_dummy_kernel(sm.props(), sm.target(), count, dim, sm.buffer(2), 1, 1);
            let src = sm.source(kernel);
            let body = &src[src.find("while").or_else(|| src.find("for (")).expect("a loop")..];
            assert!(body.contains("volatile uint32_t const*"), "{src}");
        }
    }
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
        _: super::Order,
    ) -> Result<(), String> {
        unreachable!("`unavailable` refuses every device in a build without CUDA")
    }
}

/// With `fusion`, products go through Burn's fusion and only [`unavailable`] is used.
#[cfg(feature = "cuda")]
#[cfg_attr(feature = "fusion", allow(dead_code, unused_imports))]
mod imp {
    use std::collections::HashMap;
    use std::ffi::{c_int, c_void};
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};

    use burn_backend::DType;
    use cubecl::cuda::CudaRuntime;
    use cubecl::prelude::*;
    use cubecl_runtime::runtime::Runtime;
    use cubecl_runtime::storage::ManagedResource;
    use cudarc::cublas::{CudaBlas, result, sys};
    use cudarc::driver::sys as driver;
    use cudarc::driver::{CudaContext, CudaStream};

    /// CubeCL's CUDA server, whose buffers' device addresses cuBLAS reads and writes.
    type Server = <CudaRuntime as Runtime>::Server;

    /// A device buffer as CubeCL's CUDA storage hands it out.
    type GpuResource = <<Server as cubecl_runtime::server::ServerStorage>::Storage as cubecl_runtime::storage::ComputeStorage>::Resource;

    /// A cuBLAS handle on a stream of its own, on one device's primary context, and the flags
    /// its queued products hand over through.
    struct Blas {
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        blas: CudaBlas,
        /// The flag slots, made by the device's first queued product.
        flags: Option<Flags>,
        /// Products queued on the device so far.
        queued: u64,
    }

    /// [`super::flags::SLOTS`] `ready` flags, then as many `done` flags, in one CubeCL buffer
    /// of u32s (zeros at first), and its device address.
    struct Flags {
        handle: cubecl::server::Handle,
        /// Keeps the buffer where `ptr` says for the process: CubeCL never frees, hands out
        /// again or moves a buffer whose resource is held.
        resource: ManagedResource<GpuResource>,
    }

    impl Flags {
        /// The device address of flag `at`.
        fn ptr(&self, at: u32) -> u64 {
            self.resource.resource().ptr + u64::from(at) * 4
        }

        /// The buffer as a kernel argument.
        fn arg(&self) -> BufferArg {
            // SAFETY: `handle` is a live device buffer of 2 * SLOTS u32s.
            unsafe { BufferArg::from_raw_parts(self.handle.clone(), 2 * super::flags::SLOTS) }
        }
    }

    /// Each device's handle, made on its first product and kept for the process (cuBLAS's
    /// handle creation allocates on the device); the lock also keeps two threads' products on
    /// one device from sharing the handle at once, and makes the order in which products are
    /// queued on cuBLAS's stream the order their slots are taken in.
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
        let b = Arc::new(Mutex::new(Blas { ctx, stream, blas, flags: None, queued: 0 }));
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

    /// The result of a driver call, as a message naming `what` it did where it failed.
    fn driver_call(result: driver::CUresult, what: &str) -> Result<(), String> {
        match result {
            driver::CUresult::CUDA_SUCCESS => Ok(()),
            e => Err(format!("{what}: {e:?}")),
        }
    }

    #[cfg(not(feature = "fusion"))]
    pub(super) fn product(
        x: &super::CubeTensor,
        wt: &super::CubeTensor,
        out: &super::CubeTensor,
        order: super::Order,
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
        let mut blas = blas.lock().unwrap_or_else(PoisonError::into_inner);

        // Each buffer's device address, pinned in place while held.
        let client = &x.client;
        let resource = |t: &super::CubeTensor| {
            client
                .get_resource::<Server>(t.handle.clone())
                .map_err(|e| format!("a CubeCL buffer's device address: {e}"))
        };
        let (xr, wr, or) = (resource(x)?, resource(wt)?, resource(out)?);
        blas.ctx.bind_to_thread().map_err(|e| format!("CUDA context: {e}"))?;
        let queued = match order {
            super::Order::Host => {
                // What CubeCL queued (the operands among it) done before cuBLAS reads them.
                cubecl::future::block_on(client.sync()).map_err(|e| format!("CUDA device: {e}"))?;
                None
            }
            super::Order::Device => Some(queue_after_cubecl(&mut blas, client)?),
        };

        // Column-major, as cuBLAS reads memory: out^T [n, m] = wt^T [n, k] . x^T [k, m], where
        // each transpose is the row-major matrix itself.
        let (cm, cn, ck) = (int(n)?, int(m)?, int(k)?);
        let (lda, ldb, ldc) = (int(ldw)?, int(ldx)?, int(ldo)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the three addresses are live CubeCL buffers of the dims and strides checked
        // above, pinned while `xr`, `wr` and `or` are held. Their values are written before
        // the product runs (CubeCL's queue drained, or cuBLAS's stream waiting for the flag
        // raised behind it), and nothing CubeCL queues later runs before the product is done
        // (the stream waited on below, or CubeCL's queue waiting for the flag raised after
        // it), so they may be released once it is queued.
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
        match queued {
            // The product written before CubeCL queues anything that reads `out`.
            None => blas.stream.synchronize().map_err(|e| format!("cuBLAS's stream: {e}"))?,
            Some(slot) => queue_cubecl_after(&blas, client, slot)?,
        }
        drop((xr, wr, or));
        Ok(())
    }

    /// Queues, for [`super::Order::Device`], a kernel on CubeCL's stream that raises the next
    /// product's `ready` flag behind what CubeCL has queued, and a wait for that flag on cuBLAS's
    /// stream: the slot and generation taken.
    #[cfg(not(feature = "fusion"))]
    fn queue_after_cubecl(blas: &mut Blas, client: &Client) -> Result<(u32, u32), String> {
        use super::flags::{SLOTS, raise, slot};
        if blas.flags.is_none() {
            let handle = client.create_from_slice(&vec![0u8; 2 * SLOTS * 4]);
            let resource = client
                .get_resource::<Server>(handle.clone())
                .map_err(|e| format!("the device address of cuBLAS's flags: {e}"))?;
            // The zeros in place before cuBLAS's stream first reads a flag: whatever the memory
            // held before could let a product run early, or a late zero hide its `done` flag.
            cubecl::future::block_on(client.sync()).map_err(|e| format!("CUDA device: {e}"))?;
            blas.flags = Some(Flags { handle, resource });
        }
        let (at, generation) = slot(blas.queued)
            .ok_or_else(|| "more than 2^41 cuBLAS products queued on one device".to_owned())?;
        blas.queued += 1;
        let flags = blas.flags.as_ref().expect("made above");
        let one = CubeCount::Static(1, 1, 1);
        raise::launch(client, one, CubeDim::new_1d(1), flags.arg(), at, generation);
        let wait = driver::CUstreamWaitValue_flags_enum::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: the flag is a u32 of a live device buffer held for the process, on the
        // context bound to this thread; cuBLAS's stream is this context's.
        let queued = unsafe {
            driver::cuStreamWaitValue32_v2(blas.stream.cu_stream(), flags.ptr(at), generation, wait)
        };
        driver_call(queued, "cuBLAS's stream waiting on CubeCL's (cuStreamWaitValue32)")?;
        Ok((at, generation))
    }

    /// Queues, for [`super::Order::Device`], the `done` flag of slot `at` raised to `generation`
    /// on cuBLAS's stream behind the product, and a kernel on CubeCL's stream that waits for it.
    #[cfg(not(feature = "fusion"))]
    fn queue_cubecl_after(
        blas: &Blas,
        client: &Client,
        (at, generation): (u32, u32),
    ) -> Result<(), String> {
        use super::flags::{SLOTS, wait};
        let flags = blas.flags.as_ref().expect("made by `queue_after_cubecl`");
        let done = SLOTS as u32 + at;
        let write = driver::CUstreamWriteValue_flags_enum::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
        // SAFETY: as in `queue_after_cubecl`. The default write comes after a memory barrier, so
        // the product's values are in memory before the flag is.
        let raised = unsafe {
            driver::cuStreamWriteValue32_v2(
                blas.stream.cu_stream(),
                flags.ptr(done),
                generation,
                write,
            )
        };
        if let Err(e) =
            driver_call(raised, "cuBLAS's stream raising CubeCL's (cuStreamWriteValue32)")
        {
            // Nothing tells CubeCL's queue the product is done, so wait for it here before
            // CubeCL reuses its buffers: CubeCL's queue first, which raises the ready flag.
            let _ = cubecl::future::block_on(client.sync());
            let _ = blas.stream.synchronize();
            return Err(e);
        }
        let one = CubeCount::Static(1, 1, 1);
        wait::launch(client, one, CubeDim::new_1d(1), flags.arg(), done, generation);
        Ok(())
    }
}
