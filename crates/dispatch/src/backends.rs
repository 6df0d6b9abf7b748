// The table of backends: one entry per backend, one line per family of its devices. Everything
// that lists devices reads it: `Device` parsing and printing, `Dispatch` and its routing, the
// remote-serve list, `switchyard devices`, and `cargo xtask test-all-backends` (which includes
// this file with a macro of its own). Adding a backend is adding its entry here and its cargo
// feature in this crate's Cargo.toml (forwarded by the CLI's; a test checks both).
//
// An entry: `backend "NAME" Variant = Type { FAMILY... }`. A family:
// `"NAME" FORM MODULE, feature "FEATURE", ci [HOW][, served][, trains];` where
// - FORM is `bare` (one device, `NAME`), `indexed` (`NAME[:N]`) or `server` (`NAME:HOST:PORT`);
// - MODULE exports `devices() -> usize` (how many this machine has; not for `server`) and
//   `open(..) -> Result<Type>` taking nothing, the index, or the host and port;
// - `served` means `switchyard remote-serve` can host it (a Burn backend with an IR);
// - `trains` means Type runs on a Burn backend here (it implements switchyard-burn's `OnBurn`),
//   so `switchyard train` and `explain` run on its devices;
// - HOW says what test-all-backends does with it: `run` (always), `run if PROBE`, `build if
//   PROBE, skip "why not run"` or `skip "why"`, PROBE being a check of xtask's `probes`.

backends! {
    backend "flex" Flex = switchyard_flex::FlexBackend {
        /// Pure Rust on the host CPU, an engine of its own (f32, bf16, int8): the default device.
        "flex" bare switchyard_flex, feature "flex", ci [run], served, trains;
    }
    backend "ndarray" NdArray = switchyard_ndarray::NdArrayBackend {
        /// burn-ndarray on the host CPU (deprecated upstream).
        "ndarray" bare switchyard_ndarray, feature "ndarray", ci [run], served, trains;
    }
    backend "capture" Capture = switchyard_capture::Capture {
        /// Records the plans it is asked for, executing nothing.
        "capture" bare switchyard_capture, feature "capture", ci [run];
    }
    backend "cube" Cube = switchyard_cube::Cube {
        /// GPUs through wgpu (Vulkan, Metal, DirectX, OpenGL), with WGSL kernels.
        "wgpu" indexed switchyard_cube::wgpu, feature "wgpu", ci [run if vulkan], served, trains;
        /// Vulkan GPUs through wgpu, with SPIR-V kernels.
        "vulkan" indexed switchyard_cube::vulkan, feature "vulkan", ci [skip
            "not run here: Mesa's llvmpipe, the only Vulkan device without a GPU, crashes on \
             SPIR-V and is refused; `cargo xtask check-gpu` type-checks the feature"], served, trains;
        /// Apple GPUs through wgpu, with MSL kernels.
        "metal" indexed switchyard_cube::metal, feature "metal", ci [skip
            "not run here: Metal is Apple's (macOS); `cargo xtask check-gpu` type-checks the \
             feature"], served, trains;
        /// The browser's WebGPU, in WebAssembly builds.
        "webgpu" bare switchyard_cube::webgpu, feature "webgpu", ci [build if vulkan, skip
            "not run here: the browser's WebGPU exists in WebAssembly builds only; natively the \
             same WGSL kernels run as wgpu:N (the wgpu row), and `webgpu` is refused, tested"], served, trains;
        /// NVIDIA GPUs through CUDA.
        "cuda" indexed switchyard_cube::cuda, feature "cuda", ci [run if cuda_driver], served, trains;
        /// AMD GPUs through ROCm (HIP).
        "rocm" indexed switchyard_cube::rocm, feature "rocm", ci [run if hip_runtime], served, trains;
        /// CubeCL's CPU runtime: kernels compiled for the host CPU through MLIR.
        "cubecl-cpu" bare switchyard_cube::cpu, feature "cubecl-cpu", ci [skip
            "not built here: CubeCL's CPU runtime compiles kernels through MLIR/LLVM, which its \
             build downloads; `cargo xtask check-gpu` type-checks the feature"], served, trains;
    }
    backend "tch" Tch = switchyard_tch::TchBackend {
        /// LibTorch on the host CPU.
        "tch:cpu" bare switchyard_tch::cpu, feature "tch", ci [run if libtorch], trains;
        /// LibTorch on an NVIDIA GPU (a CUDA build of LibTorch).
        "tch:cuda" indexed switchyard_tch::cuda, feature "tch", ci [skip
            "not run here: the LibTorch that `cargo xtask fetch-libtorch` assembles is CPU-only"], trains;
    }
    backend "remote" Remote = switchyard_remote::Remote {
        /// A device of another machine, served there by `switchyard remote-serve`.
        "remote" server switchyard_remote, feature "remote", ci [run];
    }
}
