//! The Python package's tests (the `test_*.py` files beside this one), run by pytest against
//! the native module this build made, so that `cargo test --workspace` runs them in the build
//! the rest of the workspace's tests share.
//!
//! They need python3 with numpy, pytest and Ray Data, and the real models: `cargo xtask
//! fetch-models` puts the packages in `.cache/pyclients` and the models in `.cache/models`.
//! They compare with the `switchyard` command of the same target dir, which the workspace's
//! tests build (`cargo xtask test-python` builds it when it is missing).

// The test passes pytest's summary on to the workspace's test log.
#![allow(clippy::print_stderr)]

use std::path::Path;
use std::process::Command;

/// The native module as cargo names it, in the `deps` folder beside this test.
const NATIVE: &str =
    if cfg!(target_os = "macos") { "lib_switchyard.dylib" } else { "lib_switchyard.so" };

#[test]
fn the_python_packages_tests_pass() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().expect("the test knows its path");
    let deps = exe.parent().expect("the test runs from PROFILE/deps");
    let profile = deps.parent().expect("the test runs from PROFILE/deps");
    let staged = profile.join("python-package");
    let package = staged.join("switchyard");
    let _ = std::fs::remove_dir_all(&package);
    std::fs::create_dir_all(&package).unwrap();
    for entry in std::fs::read_dir(here.join("python/switchyard")).unwrap() {
        let from = entry.unwrap().path();
        if from.is_file() {
            std::fs::copy(&from, package.join(from.file_name().unwrap())).unwrap();
        }
    }
    // Python imports an extension module by this name, as an installed wheel has it.
    std::fs::copy(deps.join(NATIVE), package.join("_switchyard.abi3.so"))
        .expect("cargo built the native module beside this test");
    let binary = profile.join("switchyard");
    assert!(
        binary.is_file(),
        "{} is missing: the Python tests compare with the switchyard command; build it \
         (`cargo build -p switchyard`) or run `cargo xtask test-python`",
        binary.display()
    );
    let clients = here.join("../../.cache/pyclients");
    let path = std::env::join_paths([staged, clients]).unwrap();
    let out = Command::new("python3")
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"])
        // Ray's warnings about its own settings are not ours to fix.
        .args(["-W", "ignore::DeprecationWarning"])
        .arg(here.join("tests"))
        .env("PYTHONPATH", path)
        .env("SWITCHYARD_BIN", &binary)
        .current_dir(here)
        .output()
        .expect("python3 runs");
    let report =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pytest failed:\n{report}");
    // The summary, so the workspace's test log shows how many ran.
    eprintln!("{}", report.lines().last().unwrap_or_default());
}
