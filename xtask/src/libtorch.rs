//! `cargo xtask fetch-libtorch`: LibTorch 2.9.0 for the tch backend, assembled from PyPI wheels
//! by package name into a cache outside the repository.
//!
//! tch 0.22 (under burn-tch 0.22.1) needs LibTorch 2.9.0. The `torch==2.9.0` wheel carries it
//! (a CUDA build); its CPU library links two small CUDA runtime libraries, which come from their
//! own wheels. An empty `libtorch.so` stands in for the wheel's, which would pull in the 1 GB
//! `libtorch_cuda.so`; without `libtorch_cuda.so` torch-sys builds for the CPU only.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::models::run;

/// The LibTorch version tch needs.
const VERSION: &str = "2.9.0";

/// The wheels, by package name.
const WHEELS: [&str; 3] =
    ["torch==2.9.0", "nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cuda-cupti-cu12==12.8.90"];

/// Library files taken from the wheels, by their path inside the wheel.
const LIBS: [&str; 5] = [
    "torch/lib/libtorch_cpu.so",
    "torch/lib/libc10.so",
    "torch/lib/libgomp.so.1",
    "nvidia/cuda_runtime/lib/libcudart.so.12",
    "nvidia/cuda_cupti/lib/libcupti.so.12",
];

/// Unpacks `torch/include/` into `include/` and [`LIBS`] into `lib/` of the folder given as the
/// first argument, from the wheels given after it.
const UNPACK: &str = r#"
import os, sys, zipfile
dest, wheels, libs = sys.argv[1], sys.argv[2:], set(os.environ["SWITCHYARD_LIBS"].split(","))
for w in wheels:
    with zipfile.ZipFile(w) as z:
        for m in z.infolist():
            if m.is_dir():
                continue
            if m.filename.startswith("torch/include/"):
                out = os.path.join(dest, "include", m.filename[len("torch/include/"):])
            elif m.filename in libs:
                out = os.path.join(dest, "lib", os.path.basename(m.filename))
            else:
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(m) as src, open(out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
"#;

/// Where the assembled LibTorch lives: `$SWITCHYARD_LIBTORCH`, else
/// `$HOME/.cache/switchyard/libtorch-2.9.0`.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SWITCHYARD_LIBTORCH") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("switchyard").join(format!("libtorch-{VERSION}"))
}

/// Whether `dir` holds an assembled LibTorch.
pub fn present(dir: &Path) -> bool {
    dir.join("lib").join("libtorch_cpu.so").is_file()
        && dir.join("lib").join("libtorch.so").is_file()
        && dir.join("include").join("torch").is_dir()
}

/// The environment a build and run of the tch backend needs.
pub fn env(dir: &Path) -> Vec<(String, String)> {
    let lib = dir.join("lib").display().to_string();
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{lib}:{old}"),
        _ => lib,
    };
    vec![
        ("LIBTORCH".into(), dir.display().to_string()),
        ("LIBTORCH_CXX11_ABI".into(), "1".into()),
        ("LD_LIBRARY_PATH".into(), ld),
    ]
}

fn assemble(dest: &Path) -> Result<(), String> {
    let work = dest.with_extension("download");
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(dest);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    eprintln!("xtask: downloading {} (about 910 MB)", WHEELS.join(" "));
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(&work)
        .args(WHEELS))?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&work)
        .map_err(|e| format!("{}: {e}", work.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    if wheels.len() != WHEELS.len() {
        return Err(format!("pip left {} wheels in {}, not {}", wheels.len(), work.display(), 3));
    }
    eprintln!("xtask: unpacking LibTorch's headers and CPU libraries into {}", dest.display());
    run(Command::new("python3")
        .args(["-c", UNPACK])
        .arg(dest)
        .args(&wheels)
        .env("SWITCHYARD_LIBS", LIBS.join(",")))?;
    // An empty stand-in for libtorch.so, which would load libtorch_cuda.so.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    run(Command::new(cc)
        .args(["-shared", "-x", "c", "/dev/null", "-o"])
        .arg(dest.join("lib").join("libtorch.so")))?;
    std::fs::remove_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    if !present(dest) {
        return Err(format!("{} is incomplete after unpacking", dest.display()));
    }
    Ok(())
}

/// The task: assembles LibTorch unless it is there, then prints the environment to use.
pub fn fetch_libtorch() -> ExitCode {
    let dest = dir();
    if present(&dest) {
        eprintln!("xtask: LibTorch {VERSION} is present in {}", dest.display());
    } else if let Err(e) = assemble(&dest) {
        eprintln!("xtask fetch-libtorch: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!("xtask: build and run the tch backend with:");
    println!("export LIBTORCH={}", dest.display());
    println!("export LIBTORCH_CXX11_ABI=1");
    println!("export LD_LIBRARY_PATH=$LIBTORCH/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}");
    ExitCode::SUCCESS
}
