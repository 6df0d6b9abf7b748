//! `cargo xtask build-cuda [--tests]`: release binaries with `cuda-nvrtc` on a machine that
//! cannot download LLVM.
//!
//! cubecl-cuda always depends on cubecl-llvm, whose build (with tracel-llvm-bundler's and
//! llvm-sys') wants an LLVM bundle from the network, to compile kernels to PTX through LLVM. With
//! `cuda-nvrtc`, CubeCL compiles every kernel with NVRTC instead, and no LLVM function is ever
//! called, but they are still referenced, so the link needs them. This task builds with
//! `DOCS_RS=1` (under which those build scripts skip the download and the link), links a static
//! library of stand-ins for the LLVM symbols the link finds missing, each printing its name and
//! aborting if ever called, and sets `CUDARC_CUDA_VERSION` (cudarc's bindings, for CUDA 13,
//! which it cannot detect without a toolkit). Its own target dir (`TARGET/cuda-offline`) keeps
//! the other builds' flags apart. The binaries need NVIDIA's driver and the CUDA toolkit's NVRTC
//! where they run; they are built here, where neither is.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The CUDA version cudarc's bindings are built for.
const CUDA_VERSION: &str = "13000";

/// The names the linker says are missing: GNU ld's `undefined reference to `NAME'` lines and
/// lld's `undefined symbol: NAME` (Rust links with lld on x86-64 Linux).
pub(crate) fn undefined_symbols(linker_output: &str) -> Vec<String> {
    let mut names: Vec<String> = linker_output
        .lines()
        .filter_map(|l| {
            if let Some(rest) = l.split("undefined reference to `").nth(1) {
                return Some(rest.split('\'').next()?.to_owned());
            }
            Some(l.split("undefined symbol: ").nth(1)?.trim().to_owned())
        })
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// C source of a stand-in for each of `names`: it says which function was called, and aborts.
pub(crate) fn stubs_source(names: &[String]) -> String {
    let mut c = String::from(
        "/* Stand-ins for the LLVM functions cubecl-llvm references, written by `cargo xtask\n   \
         build-cuda`: with cuda-nvrtc none is called. */\n#include <stdio.h>\n#include <stdlib.h>\n\
         static void called(const char *name) {\n    fprintf(stderr, \"switchyard: %s is an LLVM \
         function, which this cuda-nvrtc build does not have\\n\", name);\n    abort();\n}\n",
    );
    for n in names {
        c.push_str(&format!("void {n}(void) {{ called(\"{n}\"); }}\n"));
    }
    c
}

fn run(what: &str, cmd: &mut Command) -> Result<(), String> {
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{what} failed ({s})")),
        Err(e) => Err(format!("{what}: could not start it: {e}")),
    }
}

/// Compiles `names`' stand-ins into the static library `archive` (an empty one for none).
fn write_stubs(names: &[String], archive: &Path) -> Result<(), String> {
    let dir = archive.parent().expect("the archive's folder");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(archive);
    let mut ar = Command::new("ar");
    ar.arg("rcs").arg(archive);
    if !names.is_empty() {
        let source = dir.join("llvm_stubs.c");
        std::fs::write(&source, stubs_source(names))
            .map_err(|e| format!("{}: {e}", source.display()))?;
        let object = dir.join("llvm_stubs.o");
        run(
            "compiling the LLVM stand-ins",
            Command::new("cc").args(["-c", "-O1", "-fPIC", "-o"]).arg(&object).arg(&source),
        )?;
        ar.arg(&object);
    }
    run("archiving the LLVM stand-ins", &mut ar)
}

/// The task.
pub fn build_cuda(args: &[String]) -> ExitCode {
    match build(args.iter().any(|a| a == "--tests")) {
        Ok(bins) => {
            println!("xtask build-cuda: built, for a machine with NVIDIA's driver and NVRTC:");
            for b in bins {
                println!("  {}", b.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask build-cuda: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn build(tests: bool) -> Result<Vec<PathBuf>, String> {
    let features = "switchyard/cuda-nvrtc,switchyard-bench/cuda-nvrtc";
    cargo_linked(&["build", "--release", "-p", "switchyard", "-p", "switchyard-bench"], features)?;
    if tests {
        let packages =
            ["switchyard-cube", "switchyard-dispatch", "switchyard-models", "switchyard-train"];
        let mut args = vec!["test", "--release", "--no-run"];
        packages.iter().for_each(|p| args.extend(["-p", p]));
        let stderr = cargo_linked(&args, features)?;
        // `cargo test --no-run` names each test binary it built.
        stderr.lines().filter(|l| l.contains("Executable")).for_each(|l| eprintln!("{l}"));
    }
    let release = crate::target_dir().join("cuda-offline/release");
    Ok(vec![release.join("switchyard"), release.join("switchyard-bench")])
}

/// The release test binaries of `package` with `cuda-nvrtc`, each with its source as cargo
/// names it (`tests/kernels.rs`, `src/lib.rs`).
pub(crate) fn build_tests(package: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let features = format!("{package}/cuda-nvrtc");
    let stderr = cargo_linked(&["test", "--release", "--no-run", "-p", package], &features)?;
    let built = test_binaries(&stderr);
    if built.is_empty() {
        return Err(format!("cargo named no test binary of {package}:\n{stderr}"));
    }
    Ok(built)
}

/// The test binaries `cargo test --no-run` names in its output: lines such as
/// `Executable tests/kernels.rs (/target/release/deps/kernels-0123abcd)`.
pub(crate) fn test_binaries(cargo_output: &str) -> Vec<(String, PathBuf)> {
    cargo_output
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("Executable ")?;
            let (source, path) = rest.rsplit_once(" (")?;
            let source = source.strip_prefix("unittests ").unwrap_or(source);
            Some((source.to_owned(), PathBuf::from(path.strip_suffix(')')?)))
        })
        .collect()
}

/// Runs cargo with `args` and `features` in the offline CUDA build's target dir, linking the
/// stand-ins for cubecl-llvm's symbols: cargo's output on success.
fn cargo_linked(args: &[&str], features: &str) -> Result<String, String> {
    let target = crate::target_dir().join("cuda-offline");
    let archive = std::path::absolute(target.join("llvm-stubs/libswitchyard_llvm_stubs.a"))
        .map_err(|e| format!("the stand-ins' path: {e}"))?;
    if !archive.is_file() {
        write_stubs(&[], &archive)?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Every undefined symbol in one link, not lld's first 20.
    let rustflags = format!("-C link-arg={} -C link-arg=-Wl,--error-limit=0", archive.display());
    // A first link may miss LLVM symbols the stand-ins do not cover yet: add them, link again.
    let mut round = 0;
    loop {
        eprintln!("xtask build-cuda: cargo {} (round {})", args.join(" "), round + 1);
        let out = Command::new(&cargo)
            .args(args)
            .args(["--features", features])
            .env("CARGO_TARGET_DIR", &target)
            .env("DOCS_RS", "1")
            .env("CUDARC_CUDA_VERSION", CUDA_VERSION)
            .env("RUSTFLAGS", &rustflags)
            .output()
            .map_err(|e| format!("could not start cargo: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            return Ok(stderr);
        }
        let missing = undefined_symbols(&stderr);
        if missing.is_empty() || round == 2 {
            return Err(format!("the build failed:\n{stderr}"));
        }
        let mut names = missing;
        let known = target.join("llvm-stubs/symbols.txt");
        if let Ok(old) = std::fs::read_to_string(&known) {
            names.extend(old.lines().map(str::to_owned));
        }
        names.sort();
        names.dedup();
        eprintln!("xtask build-cuda: {} LLVM symbols to stand in for", names.len());
        std::fs::write(&known, names.join("\n"))
            .map_err(|e| format!("{}: {e}", known.display()))?;
        write_stubs(&names, &archive)?;
        round += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_symbols_are_read_from_the_linkers_lines() {
        let out = "/usr/bin/ld: libcubecl_llvm.rlib(x.o): in function `f':\n\
                   x.rs:(.text+0x1): undefined reference to `LLVMContextCreate'\n\
                   x.rs:(.text+0x9): undefined reference to `LLVMContextCreate'\n\
                   y.rs:(.text+0x2): undefined reference to `cubecl_llvm_emit_bitcode'\n\
                   collect2: error: ld returned 1 exit status\n\
                   \x20         rust-lld: error: undefined symbol: LLVMDisposeMessage\n";
        let want = ["LLVMContextCreate", "LLVMDisposeMessage", "cubecl_llvm_emit_bitcode"];
        assert_eq!(undefined_symbols(out), want);
        assert!(undefined_symbols("error[E0425]: cannot find value").is_empty());
        let c = stubs_source(&["LLVMContextCreate".to_owned()]);
        assert!(
            c.contains("void LLVMContextCreate(void) { called(\"LLVMContextCreate\"); }"),
            "{c}"
        );
    }

    #[test]
    fn test_binaries_are_read_from_cargos_executable_lines() {
        let out = "   Compiling switchyard-cube v0.1.0\n\
                   \x20   Finished `release` profile [optimized] target(s) in 1m\n\
                   \x20 Executable unittests src/lib.rs (/t/release/deps/switchyard_cube-0a1b)\n\
                   \x20 Executable tests/kernels.rs (/t/release/deps/kernels-2c3d)\n";
        let want = [
            ("src/lib.rs".to_owned(), PathBuf::from("/t/release/deps/switchyard_cube-0a1b")),
            ("tests/kernels.rs".to_owned(), PathBuf::from("/t/release/deps/kernels-2c3d")),
        ];
        assert_eq!(test_binaries(out), want);
        assert!(test_binaries("error: could not compile").is_empty());
    }
}
