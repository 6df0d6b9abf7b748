//! `cargo xtask test-python`: the Python package's tests alone. They are a cargo test of
//! `switchyard-python` (`crates/python/tests/pytest.rs` runs pytest), which `cargo test
//! --workspace` runs with the rest; this task fetches what they need first and builds the
//! `switchyard` command they compare with. Also the staging of a release build for the bench.

use std::path::Path;
use std::process::{Command, ExitCode};

/// The native module's file as cargo names it, and as Python imports it.
const NATIVE: (&str, &str) = if cfg!(target_os = "macos") {
    ("lib_switchyard.dylib", "_switchyard.abi3.so")
} else {
    ("lib_switchyard.so", "_switchyard.abi3.so")
};

/// The task.
pub fn test_python() -> ExitCode {
    if crate::models::fetch_models() != ExitCode::SUCCESS {
        return ExitCode::FAILURE;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let steps = [
        vec!["build", "--package", "switchyard", "--bin", "switchyard"],
        vec!["test", "--package", "switchyard-python", "--", "--nocapture"],
    ];
    for args in steps {
        if let Err(e) = crate::models::run(Command::new(&cargo).args(&args)) {
            eprintln!("xtask test-python: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Copies the package's Python files from `source` and the native module cargo built into
/// `built` into a fresh `staged/switchyard`, as an installed wheel lays them out.
pub fn stage(source: &Path, built: &Path, staged: &Path) -> Result<(), String> {
    let package = staged.join("switchyard");
    let _ = std::fs::remove_dir_all(&package);
    std::fs::create_dir_all(&package).map_err(|e| format!("{}: {e}", package.display()))?;
    let entries = std::fs::read_dir(source).map_err(|e| format!("{}: {e}", source.display()))?;
    for entry in entries {
        let from = entry.map_err(|e| format!("{}: {e}", source.display()))?.path();
        if from.is_file() {
            let to = package.join(from.file_name().unwrap_or_default());
            std::fs::copy(&from, &to).map_err(|e| format!("{}: {e}", from.display()))?;
        }
    }
    let native = built.join(NATIVE.0);
    std::fs::copy(&native, package.join(NATIVE.1))
        .map_err(|e| format!("{}: {e}", native.display()))?;
    Ok(())
}
