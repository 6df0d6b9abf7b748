//! Every kernel of ours as CubeCL's CUDA runtime builds it for an H100 or H200 (compute
//! capability 9.0), and the ones whose code depends on the GPU for a T4 (7.5), an A100 (8.0)
//! and an L4 (8.9): CUDA C++ from cubecl-cpp, compiled by NVIDIA's NVRTC to the GPU's own code,
//! with ptxas's count of each kernel's registers and spills. CI has no GPU; this is what finds
//! a kernel NVRTC refuses, or one that spills to local memory, before a GPU lease does. NVRTC and
//! CUDA's headers come from NVIDIA's PyPI packages, which `cargo xtask fetch-models` puts in
//! `.cache/nvrtc` (Linux on x86-64 and aarch64, the platforms they are built for).
//!
//! Each kernel module lists its variants (`cuda_variants`: the dtypes and compile-time choices
//! the encoder launches, all of them for the H200 and a few elsewhere, [`Sm::every`]);
//! [`every_kernel_compiles_for_an_h200_without_spilling`] compiles them all, and prints each
//! one's registers and spills (`--nocapture`).
#![allow(clippy::print_stderr)] // the report, and why the check is skipped

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use cubecl::prelude::*;

/// The GPUs the check compiles for, by compute capability: the H200 the benchmarks ran on
/// first (every variant), then a T4, an A100 and an L4, common GPUs for serving encoders (the
/// variants whose code or products depend on the GPU).
const GPUS: [u32; 4] = [90, 75, 80, 89];

/// A kernel variant's name and its CUDA C++.
pub(crate) struct Variant {
    /// The kernel and its choices, for the report.
    pub(crate) name: String,
    /// The source NVRTC compiles.
    pub(crate) source: String,
    /// Whether it may spill: heads wider than the registers hold, as the kernel's docs say.
    pub(crate) may_spill: bool,
}

/// Builds kernels as for an NVIDIA GPU of one compute capability; the buffers they are built
/// with are the llvmpipe device's, only to build each launch.
pub(crate) struct Sm {
    client: Client,
    props: Arc<DeviceProperties>,
    version: u32,
}

impl Sm {
    /// The llvmpipe device's client, with the properties CubeCL's CUDA runtime gives a GPU of
    /// compute capability `version / 10 . version % 10`: CUDA C++'s types, planes of 32 units
    /// and the GPU's tensor-core shapes.
    pub(crate) fn new(version: u32) -> Self {
        use cubecl_cpp::cuda::arch::CudaArchitecture;
        use cubecl_cpp::cuda::mma::CudaCmmaCompiler;
        let cube = crate::wgpu::open(0).expect("a wgpu adapter");
        let client = cube.device().client();
        let mut props = client.properties().clone();
        cubecl_cpp::register_supported_types(&mut props);
        props.hardware.plane_size_min = 32;
        props.hardware.plane_size_max = 32;
        let arch = CudaArchitecture { version, tensor_cores: true };
        for c in CudaCmmaCompiler::Cpp.supported_cmma_combinations(&arch) {
            props.features.matmul.cmma.insert(c);
        }
        Sm { client, props: Arc::new(props), version }
    }

    /// The GPU as NVRTC names it: Hopper and later with their arch-specific features, as
    /// CubeCL's CUDA runtime compiles for them.
    pub(crate) fn arch(&self) -> String {
        match self.version {
            v if v >= 90 => format!("sm_{v}a"),
            v => format!("sm_{v}"),
        }
    }

    /// Whether this is the H200, which gets every variant; the other GPUs get those whose code
    /// or products depend on the GPU, and one of each kernel in bf16 (emulated before 8.0).
    pub(crate) fn every(&self) -> bool {
        self.version == 90
    }

    /// Whether the tiled attention would run on this GPU's tensor cores in `dtype`, as its
    /// launch asks.
    pub(crate) fn tensor_cores(&self, dtype: ElemType) -> bool {
        super::tiles::tensor_cores_in(&self.props, dtype)
    }

    /// The device properties a kernel is built with.
    pub(crate) fn props(&self) -> Arc<DeviceProperties> {
        self.props.clone()
    }

    /// The target properties a kernel is built with.
    pub(crate) fn target(&self) -> Arc<TargetProperties> {
        self.client.target_properties_shared()
    }

    /// A buffer argument of `len` 4-byte values.
    pub(crate) fn buffer(&self, len: usize) -> BufferArg {
        let handle = self.client.create_from_slice(&vec![0u8; len * 4]);
        // SAFETY: a live device buffer of `len` 4-byte values.
        unsafe { BufferArg::from_raw_parts(handle, len) }
    }

    /// `kernel`'s CUDA C++ as CubeCL's CUDA runtime compiles it for this GPU (fast math, grid
    /// constants, and from 9.0 clusters: the features it turns on there).
    pub(crate) fn source(&self, kernel: impl CubeKernel) -> String {
        use cubecl::Compiler;
        use cubecl_cpp::shared::{CompilationOptions, CppCompiler, CppSupportedFeatures};
        use cubecl_cpp::target::Cuda;
        let options = CompilationOptions {
            warp_size: 32,
            supports_features: CppSupportedFeatures {
                grid_constants: true,
                clusters: self.version >= 90,
                fast_math: true,
                fast_tanh: true,
                elect_sync: self.version >= 90,
                dp4a: true,
            },
            ..Default::default()
        };
        CppCompiler::<Cuda>::default()
            .compile(CubeKernel::define(&kernel), &options)
            .expect("CUDA C++")
            .to_string()
    }

    /// `kernel` as a variant named `name`, which must not spill.
    pub(crate) fn variant(&self, name: impl Into<String>, kernel: impl CubeKernel) -> Variant {
        Variant { name: name.into(), source: self.source(kernel), may_spill: false }
    }
}

/// What ptxas reports of a compiled kernel.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Registers per unit.
    pub(crate) registers: u32,
    /// Bytes stored to and loaded from local memory for want of registers.
    pub(crate) spill_stores: u32,
    pub(crate) spill_loads: u32,
    /// Bytes of the unit's stack frame (local arrays and spills).
    pub(crate) stack: u32,
    /// Bytes of shared memory declared with a fixed size (CubeCL's own is sized at launch and
    /// not counted here).
    pub(crate) shared: u32,
}

impl Report {
    /// Reads ptxas's verbose lines ("N bytes stack frame, N bytes spill stores, N bytes spill
    /// loads", "Used N registers"): `None` where they are not there.
    pub(crate) fn parse(log: &str) -> Option<Report> {
        let before = |text: &str, what: &str| -> Option<u32> {
            let head = &text[..text.find(what)?];
            head.split_whitespace().last()?.parse().ok()
        };
        let after = |text: &str, what: &str| -> Option<u32> {
            let tail = &text[text.find(what)? + what.len()..];
            tail.split_whitespace().next()?.parse().ok()
        };
        Some(Report {
            registers: after(log, "Used ")?,
            spill_stores: before(log, " bytes spill stores")?,
            spill_loads: before(log, " bytes spill loads")?,
            stack: before(log, " bytes stack frame")?,
            shared: before(log, " bytes smem").unwrap_or(0),
        })
    }
}

/// NVIDIA's runtime compiler, loaded from `.cache/nvrtc`.
struct Nvrtc {
    lib: libloading::Library,
    /// NVRTC's built-in headers, which NVRTC 13 opens by name when it first compiles: loaded
    /// from the same folder first, so that name is already in the process.
    _builtins: libloading::Library,
    include: PathBuf,
}

type Program = *mut c_void;

impl Nvrtc {
    /// The folder `cargo xtask fetch-models` fetches NVRTC into.
    fn dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/nvrtc")
    }

    /// NVRTC, or why it cannot be loaded.
    fn load() -> Result<Nvrtc, String> {
        let dir = Self::dir();
        let open = |name: &str| {
            let path = dir.join("lib").join(name);
            // SAFETY: NVIDIA's libraries, whose initialisation has no preconditions.
            unsafe { libloading::Library::new(&path) }
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let builtins = open("libnvrtc-builtins.so.13.0")?;
        Ok(Nvrtc {
            lib: open("libnvrtc.so.13")?,
            _builtins: builtins,
            include: dir.join("include"),
        })
    }

    /// Compiles `source` for `arch` (`sm_90a`): ptxas's report, or NVRTC's log where it
    /// refuses.
    fn compile(&self, source: &str, arch: &str) -> Result<Report, String> {
        type Create = unsafe extern "C" fn(
            *mut Program,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        type Compile = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
        type LogSize = unsafe extern "C" fn(Program, *mut usize) -> c_int;
        type Log = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
        type Destroy = unsafe extern "C" fn(*mut Program) -> c_int;
        let options: Vec<CString> = [
            format!("--gpu-architecture={arch}"),
            format!("--include-path={}", self.include.display()),
            format!("--include-path={}", self.include.join("cccl").display()),
            "--ptxas-options=--verbose".to_owned(),
        ]
        .into_iter()
        .map(|o| CString::new(o).expect("no NUL"))
        .collect();
        let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let source = CString::new(source).map_err(|e| format!("the source: {e}"))?;
        // SAFETY: NVRTC's C API as its header declares it; every pointer passed is live for the
        // call, the program is destroyed once, and the log buffer is the size NVRTC asks for.
        unsafe {
            let create =
                self.lib.get::<Create>(b"nvrtcCreateProgram\0").map_err(|e| e.to_string())?;
            let compile =
                self.lib.get::<Compile>(b"nvrtcCompileProgram\0").map_err(|e| e.to_string())?;
            let log_size =
                self.lib.get::<LogSize>(b"nvrtcGetProgramLogSize\0").map_err(|e| e.to_string())?;
            let log = self.lib.get::<Log>(b"nvrtcGetProgramLog\0").map_err(|e| e.to_string())?;
            let destroy =
                self.lib.get::<Destroy>(b"nvrtcDestroyProgram\0").map_err(|e| e.to_string())?;
            let mut program: Program = std::ptr::null_mut();
            let name = c"kernel.cu";
            let made = create(
                &mut program,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            if made != 0 {
                return Err(format!("nvrtcCreateProgram: error {made}"));
            }
            let compiled = compile(program, pointers.len() as c_int, pointers.as_ptr());
            let mut size = 0usize;
            log_size(program, &mut size);
            let mut text = vec![0 as c_char; size.max(1)];
            log(program, text.as_mut_ptr());
            destroy(&mut program);
            let text = CStr::from_ptr(text.as_ptr()).to_string_lossy().into_owned();
            if compiled != 0 {
                return Err(text);
            }
            Report::parse(&text)
                .ok_or_else(|| format!("no register report in ptxas's log:\n{text}"))
        }
    }
}

#[test]
fn ptxas_reports_are_read_and_a_log_without_one_is_none() {
    let log = "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
               ptxas info    : Function properties for k\n\
               ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
               ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 352 bytes cmem[0]\n";
    let want = Report { registers: 40, spill_stores: 8, spill_loads: 4, stack: 16, shared: 4096 };
    assert_eq!(Report::parse(log), Some(want));
    assert_eq!(Report::parse("kernel.cu(3): error: expected a \";\""), None);
}

/// Every kernel variant the encoder launches compiles with NVRTC for an H200, and none spills
/// to local memory but those whose docs say they may (the row attention's widest heads).
#[test]
fn every_kernel_compiles_for_an_h200_without_spilling() {
    let nvrtc = match Nvrtc::load() {
        Ok(n) => n,
        Err(e)
            if cfg!(all(
                target_os = "linux",
                any(target_arch = "x86_64", target_arch = "aarch64")
            )) =>
        {
            panic!("NVRTC is missing ({e}): run `cargo xtask fetch-models`")
        }
        Err(e) => {
            eprintln!("skipped: no NVRTC for this platform ({e})");
            return;
        }
    };
    let mut failed = Vec::new();
    let mut count = 0;
    for version in GPUS {
        let sm = Sm::new(version);
        let variants: Vec<Variant> = [
            super::attention::cuda_variants(&sm),
            super::tiles::cuda_variants(&sm),
            super::norm::cuda_variants(&sm),
            super::epilogue::cuda_variants(&sm),
            super::gemm::cuda_variants(&sm),
            super::pool::cuda_variants(&sm),
            super::matmul::cuda_variants(&sm),
            super::cublas::flags::cuda_variants(&sm),
        ]
        .into_iter()
        .flatten()
        .collect();
        let arch = sm.arch();
        eprintln!(
            "{:<60} {:>9} {:>7} {:>8} {:>8}",
            format!("kernel (CUDA, {arch})"),
            "registers",
            "stack",
            "spill-st",
            "spill-ld"
        );
        for v in &variants {
            match nvrtc.compile(&v.source, &arch) {
                Ok(r) => {
                    eprintln!(
                        "{:<60} {:>9} {:>7} {:>8} {:>8}",
                        v.name, r.registers, r.stack, r.spill_stores, r.spill_loads
                    );
                    if !v.may_spill && (r.spill_stores > 0 || r.spill_loads > 0) {
                        failed.push(format!("{} on {arch} spills: {r:?}", v.name));
                    }
                }
                Err(log) => failed
                    .push(format!("{} on {arch}: NVRTC refused it:\n{log}\n{}", v.name, v.source)),
            }
        }
        count += variants.len();
    }
    assert!(failed.is_empty(), "{} of {} variants:\n{}", failed.len(), count, failed.join("\n"));
}

/// A kernel's name cut to `width` characters, its middle left out.
fn short(name: &str, width: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= width {
        return name.to_owned();
    }
    let half = (width - 1) / 2;
    let head: String = chars[..half].iter().collect();
    let tail: String = chars[chars.len() - (width - 1 - half)..].iter().collect();
    format!("{head}…{tail}")
}

/// The kernels a GPU run compiled, read from a sources log of `switchyard-bench kernel-times
/// --sources FILE` (the device script keeps one: docs/benchmarks.md), compiled again here by
/// NVRTC for an H200 with ptxas's registers, spills and fixed shared memory for each: cubek's
/// matmul kernels too, which the check above cannot build without the GPU. On demand:
/// `SWITCHYARD_KERNEL_SOURCES=FILE cargo test -p switchyard-cube --features wgpu --lib
/// ptxas_report -- --ignored --nocapture`.
#[test]
#[ignore = "a report on a GPU run's sources log, named by SWITCHYARD_KERNEL_SOURCES"]
fn ptxas_report_of_the_kernels_a_gpu_run_compiled() {
    let path = std::env::var_os("SWITCHYARD_KERNEL_SOURCES")
        .map(PathBuf::from)
        .expect("SWITCHYARD_KERNEL_SOURCES names a sources log");
    let log = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut kernels = crate::kernel_sources(&log);
    let mut seen = std::collections::HashSet::new();
    // CubeCL's CUDA runtime tags the C++ it gives NVRTC `cpp` (its compiler's own tag is `cuda`).
    kernels.retain(|k| matches!(k.lang.as_str(), "cpp" | "cuda") && seen.insert(k.source.clone()));
    assert!(!kernels.is_empty(), "no CUDA C++ kernel in {}", path.display());
    let nvrtc = Nvrtc::load().unwrap_or_else(|e| panic!("{e}: run `cargo xtask fetch-models`"));
    eprintln!(
        "{:<72} {:>9} {:>7} {:>8} {:>8} {:>7}",
        "kernel (CUDA, sm_90a)", "registers", "stack", "spill-st", "spill-ld", "smem"
    );
    let mut refused = Vec::new();
    for k in &kernels {
        match nvrtc.compile(&k.source, "sm_90a") {
            Ok(r) => eprintln!(
                "{:<72} {:>9} {:>7} {:>8} {:>8} {:>7}",
                short(&k.name, 72),
                r.registers,
                r.stack,
                r.spill_stores,
                r.spill_loads,
                r.shared
            ),
            Err(log) => refused.push(format!("{}:\n{log}", k.name)),
        }
    }
    assert!(
        refused.is_empty(),
        "NVRTC refused {} of {}:\n{}",
        refused.len(),
        kernels.len(),
        refused.join("\n")
    );
}

#[test]
fn a_long_name_keeps_its_ends() {
    assert_eq!(short("MatmulEntry", 72), "MatmulEntry");
    assert_eq!(short("abcdefghij", 7), "abc…hij");
    assert_eq!(short("abcdefghij", 6).chars().count(), 6);
}
