//! `cargo xtask test-all-backends`: the workspace's tests, then the conformance suite and the
//! real-model test on each backend, one process per backend so a failure is attributed to it.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};

/// The environment a row's build and tests need, or why it cannot run here.
pub(crate) type Ready = Result<Vec<(String, String)>, String>;

/// How a family's row runs.
enum Run {
    /// Always: its backend needs nothing beyond the workspace.
    Always,
    /// When `ready` gives the environment its build and tests need (else skipped with the
    /// reason it gives); its dispatch feature then joins the one build every row shares.
    Needs { ready: fn() -> Ready },
    /// Built (its feature joins the build, so its tests compile and run) when `ready` says the
    /// build can be, but its device is not run here, for the reason given.
    BuildOnly { ready: fn() -> Ready, why: &'static str },
    /// Not at all, for this reason.
    Skip(&'static str),
}

/// A family of devices of the table of backends, and what this task does with it.
struct Row {
    /// The backend that runs it (`flex`, `cube`, ...).
    backend: &'static str,
    /// The device its tests run on (`remote` stands for a flex server the tests start).
    device: &'static str,
    /// Its cargo feature of switchyard-dispatch.
    feature: &'static str,
    run: Run,
}

/// Reads the table of backends (`crates/dispatch/src/backends.rs`, which dispatch reads with a
/// macro of its own) into [`ROWS`]: per family, its backend, first device, feature and `ci`.
macro_rules! backends {
    (
        $(
            backend $bname:literal $variant:ident = $ty:ty {
                $(
                    $(#[doc = $about:literal])*
                    $name:literal $form:ident $($module:ident)::+, feature $feature:literal,
                        ci [$($ci:tt)*] $(, $flag:ident)*;
                )+
            }
        )*
    ) => {
        /// Every family of the table of backends, in its order.
        const ROWS: &[Row] = &[
            $($(
                Row {
                    backend: $bname,
                    device: backends!(@device $form $name),
                    feature: $feature,
                    run: backends!(@ci $($ci)*),
                },
            )+)*
        ];
    };
    (@device bare $name:literal) => { $name };
    (@device indexed $name:literal) => { concat!($name, ":0") };
    (@device server $name:literal) => { $name };
    (@ci run) => { Run::Always };
    (@ci run if $probe:ident) => { Run::Needs { ready: probes::$probe } };
    (@ci build if $probe:ident, skip $why:literal) => {
        Run::BuildOnly { ready: probes::$probe, why: $why }
    };
    (@ci skip $why:literal) => { Run::Skip($why) };
}

include!("../../crates/dispatch/src/backends.rs");

/// The checks the table's `ci [run if PROBE]` names: whether this machine can build and run a
/// family, and with what environment.
pub(crate) mod probes {
    use std::process::Command;

    use super::Ready;

    /// LibTorch's environment, if `cargo xtask fetch-libtorch` has assembled it.
    pub(crate) fn libtorch() -> Ready {
        let dir = crate::libtorch::dir();
        if crate::libtorch::present(&dir) {
            Ok(crate::libtorch::env(&dir))
        } else {
            Err(format!(
                "LibTorch 2.9.0 is not in {}; run `cargo xtask fetch-libtorch`",
                dir.display()
            ))
        }
    }

    /// Whether a Vulkan driver is installed (an ICD manifest where the loader looks), so wgpu
    /// finds an adapter; the environment sets `XDG_RUNTIME_DIR`, whose absence makes the loader
    /// print harmless warnings.
    pub(crate) fn vulkan() -> Ready {
        let manifests = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"].iter().any(|d| {
            std::fs::read_dir(d).is_ok_and(|mut e| {
                e.any(|f| f.is_ok_and(|f| f.path().extension().is_some_and(|x| x == "json")))
            })
        });
        if !manifests {
            return Err("no Vulkan driver: install one (on Debian, for a software one, the \
                        packages mesa-vulkan-drivers and libvulkan1)"
                .into());
        }
        let mut env = Vec::new();
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir = std::env::temp_dir().join("switchyard-xdg-runtime");
            let _ = std::fs::create_dir_all(&dir);
            env.push(("XDG_RUNTIME_DIR".to_owned(), dir.display().to_string()));
        }
        Ok(env)
    }

    /// Whether NVIDIA's driver library is installed, which CUDA devices need at run time.
    /// (Building the cuda feature also needs the network: cubecl-cuda's LLVM is downloaded by
    /// its build.)
    pub(crate) fn cuda_driver() -> Ready {
        library("libcuda.so", "no NVIDIA driver (libcuda.so)", "cuda")
    }

    /// Whether AMD's HIP runtime is installed, which ROCm devices need at run time. (Building
    /// the rocm feature also needs the network: cubecl-hip's LLVM is downloaded by its build.)
    pub(crate) fn hip_runtime() -> Ready {
        library("libamdhip64.so", "no HIP runtime (libamdhip64.so)", "rocm")
    }

    /// Whether the dynamic loader knows `library`; else why not (`missing`), and that check-gpu
    /// type-checks `feature`.
    fn library(library: &str, missing: &str, feature: &str) -> Ready {
        let listed =
            Command::new("ldconfig").arg("-p").output().map(|o| o.stdout).unwrap_or_default();
        if String::from_utf8_lossy(&listed).contains(library) {
            Ok(Vec::new())
        } else {
            Err(format!(
                "{missing} on this machine; `cargo xtask check-gpu` type-checks the {feature} \
                 feature offline"
            ))
        }
    }
}

/// The one build every row shares: the dispatch features and the environment of each row that
/// can run here, and why each other row cannot. One build, because the GPU features change
/// features deep in Burn, so a build per row would compile the Burn stack again for each.
struct Build {
    features: String,
    env: Vec<(String, String)>,
    skipped: Vec<(usize, String)>,
}

impl Build {
    /// Asks each row whether it can be built and run here.
    fn plan() -> Build {
        let mut b = Build { features: String::new(), env: Vec::new(), skipped: Vec::new() };
        for (i, row) in ROWS.iter().enumerate() {
            let built = match row.run {
                Run::Always => Ok(Vec::new()),
                Run::Skip(why) => Err(why.to_owned()),
                Run::Needs { ready } => ready(),
                Run::BuildOnly { ready, why } => {
                    b.skipped.push((i, why.to_owned()));
                    ready().map_err(|_| String::new())
                }
            };
            match built {
                Ok(env) => {
                    let feature = format!("switchyard-dispatch/{}", row.feature);
                    if !b.features.split(',').any(|f| f == feature) {
                        if !b.features.is_empty() {
                            b.features.push(',');
                        }
                        b.features.push_str(&feature);
                    }
                    b.env.extend(env);
                }
                Err(why) if !why.is_empty() => b.skipped.push((i, why)),
                Err(_) => {}
            }
        }
        // The bench's GPU code (its argument checks among it) sits behind its own feature of
        // the same name; with the dispatch's wgpu built already, it costs only the bench's crate.
        if b.features.split(',').any(|f| f == "switchyard-dispatch/wgpu") {
            b.features.push_str(",switchyard-bench/wgpu");
        }
        b
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    /// Runs `cargo test --workspace` with this build's features and then `more` arguments
    /// (none: every test).
    fn test(&self, extra_env: &[(&str, &str)], more: &[&str]) -> (bool, Counts) {
        let mut env = self.env();
        env.extend_from_slice(extra_env);
        // No fail-fast: one failing test binary must not hide the others' results.
        let mut args =
            vec!["test", "--workspace", "--no-fail-fast", "--features", self.features.as_str()];
        args.extend_from_slice(more);
        cargo_test(&args, &env)
    }

    /// Runs dispatch's per-device tests on `device`: the workspace run's cargo arguments, so
    /// nothing rebuilds (another selection of packages may resolve features differently), with
    /// only the integration tests selected, since the filters would reach the examples, which
    /// run as programs, as arguments. The filters are substrings: every test whose name holds
    /// `_on_each_device` runs, so a new one needs no entry here.
    fn device_tests(&self, device: &str) -> (bool, Counts) {
        self.test(
            &[("SWITCHYARD_CONFORMANCE_DEVICE", device)],
            &[
                "--test",
                "*",
                "--",
                "conformance_through_dispatch",
                "_on_each_device",
                "training_through_dispatch",
            ],
        )
    }

    /// Runs flex's tests (its kernels, conformance, allocation and unit tests) as a CPU without
    /// AVX or FMA runs them, which takes flex's portable kernels: each test executable of the
    /// workspace build, on `qemu-x86_64 -cpu Nehalem` (a user-mode emulator that hides those
    /// features from the CPU's identification). `Err` says why it cannot run here.
    fn baseline_cpu_tests(&self) -> Result<(bool, Counts), String> {
        if !cfg!(target_arch = "x86_64") {
            return Err("emulates an x86-64 CPU, and this machine is another".into());
        }
        if Command::new(QEMU).arg("--version").output().is_err() {
            return Err(format!("{QEMU} is missing (on Debian, the package qemu-user)"));
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let listed = Command::new(cargo)
            .args(["test", "--workspace", "--features", self.features.as_str(), "--no-run"])
            .args(["--message-format", "json-render-diagnostics"])
            .envs(self.env())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("could not start cargo: {e}"))?;
        let listed = String::from_utf8_lossy(&listed.stdout);
        let tests = flex_test_executables(&listed);
        if tests.is_empty() {
            return Ok((false, Counts::default()));
        }
        Ok(run_emulated(&tests, QEMU, &["-cpu", "Nehalem"], &self.env()))
    }
}

/// Runs each test executable `(path, directory)` on `emulator` with `args`, and counts the
/// tests.
fn run_emulated(
    tests: &[(String, String)],
    emulator: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, Counts) {
    let (mut ok, mut counts) = (true, Counts::default());
    for (exe, dir) in tests {
        let mut run = Command::new(emulator);
        run.args(args).arg(exe).current_dir(dir).envs(env.iter().copied());
        let (passed, c) = run_counting(run);
        ok &= passed;
        counts.add(c);
    }
    (ok, counts)
}

/// The user-mode emulator [`Build::baseline_cpu_tests`] runs flex's tests on.
const QEMU: &str = "qemu-x86_64";

/// The target flex's NEON kernels are tested on, emulated.
pub(crate) const ARM: &str = "aarch64-unknown-linux-gnu";
/// The user-mode emulator for [`ARM`], and the C cross toolchain that links for it (Debian's
/// packages qemu-user and gcc-aarch64-linux-gnu), whose libraries lie under [`ARM_SYSROOT`].
const QEMU_ARM: &str = "qemu-aarch64";
const ARM_LINKER: &str = "aarch64-linux-gnu-gcc";
const ARM_SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// The emulated aarch64 CPUs flex's tests run on, one for each of its kernels there: with the
/// int8 and bf16 matrix multiplies, with the int8 dot product alone, and with neither (portable
/// int8 and bf16); all with NEON, which every aarch64 CPU has.
const ARM_CPUS: [(&str, &str); 3] = [
    ("max", "aarch64, int8 and bf16 matrix multiply (qemu -cpu max)"),
    ("neoverse-n1", "aarch64, dot product (qemu -cpu neoverse-n1)"),
    ("cortex-a72", "aarch64, neither (qemu -cpu cortex-a72)"),
];

/// Whether Rust's standard library for [`ARM`] is installed; else how to install it.
pub(crate) fn aarch64_std() -> Result<(), String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(rustc).args(["--print", "sysroot"]).output();
    let sysroot = sysroot.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    std_in(sysroot.as_deref().ok())
}

/// Whether the Rust `sysroot` (none: rustc could not say) holds the standard library for
/// [`ARM`]; else how to install it.
fn std_in(sysroot: Option<&str>) -> Result<(), String> {
    let lib = |s: &str| std::path::Path::new(s).join("lib/rustlib").join(ARM).join("lib");
    if sysroot.is_some_and(|s| lib(s).is_dir()) {
        Ok(())
    } else {
        Err(format!("Rust's standard library for {ARM} is not installed (rustup target add {ARM})"))
    }
}

/// Why `tool` cannot run here, naming the Debian `package` that has it; `None` if it runs.
fn missing(tool: &str, package: &str) -> Option<String> {
    let runs = Command::new(tool).arg("--version").output().is_ok();
    (!runs).then(|| format!("{tool} is missing (on Debian, the package {package})"))
}

/// Builds flex's tests for [`ARM`] and runs them on each of [`ARM_CPUS`], emulated: a result
/// per CPU, or why they cannot run here.
fn aarch64_tests() -> Result<Vec<(bool, Counts)>, String> {
    if cfg!(target_arch = "aarch64") {
        return Err("this machine is aarch64: the workspace's own tests ran there".into());
    }
    aarch64_std()?;
    for (tool, package) in [(ARM_LINKER, "gcc-aarch64-linux-gnu"), (QEMU_ARM, "qemu-user")] {
        if let Some(why) = missing(tool, package) {
            return Err(why);
        }
    }
    let linker = ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", ARM_LINKER);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let listed = Command::new(cargo)
        .args(["test", "-p", "switchyard-flex", "--target", ARM, "--no-run"])
        .args(["--message-format", "json-render-diagnostics"])
        .env(linker.0, linker.1)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    let tests = flex_test_executables(&String::from_utf8_lossy(&listed.stdout));
    if !listed.status.success() || tests.is_empty() {
        return Ok(ARM_CPUS.iter().map(|_| (false, Counts::default())).collect());
    }
    let run = |cpu| run_emulated(&tests, QEMU_ARM, &["-L", ARM_SYSROOT, "-cpu", cpu], &[]);
    Ok(ARM_CPUS.iter().map(|(cpu, _)| run(cpu)).collect())
}

/// The test executables of `crates/flex` (switchyard-flex) in cargo's JSON messages, each with
/// its package's directory (where `cargo test` runs it).
fn flex_test_executables(json: &str) -> Vec<(String, String)> {
    json.lines()
        .filter(|l| l.contains(r#""reason":"compiler-artifact""#) && built_as_test(l))
        .filter_map(|l| {
            let manifest = string_field(l, "manifest_path")?;
            let dir =
                manifest.strip_suffix("/Cargo.toml").filter(|d| d.ends_with("/crates/flex"))?;
            Some((string_field(l, "executable")?.to_owned(), dir.to_owned()))
        })
        .collect()
}

/// Whether an artifact's line says its profile is a test's (the target's own `"test"` says
/// only whether `cargo test` tests it).
fn built_as_test(line: &str) -> bool {
    let Some(at) = line.find(r#""profile":{"#) else { return false };
    line[at..].split('}').next().is_some_and(|profile| profile.contains(r#""test":true"#))
}

/// The value of the first `"key":"value"` in a line of JSON, if it has no escapes.
fn string_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(r#""{key}":""#))? + key.len() + 4;
    let value = &line[start..];
    let end = value.find('"')?;
    let value = &value[..end];
    (!value.contains('\\')).then_some(value)
}

/// Test counts from cargo's `test result:` lines.
#[derive(Default, Clone, Copy)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
    }
}

/// Runs `cargo ARGS`, passing its output through, and counts the tests it reports.
fn cargo_test(args: &[&str], env: &[(&str, &str)]) -> (bool, Counts) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args).envs(env.iter().copied());
    run_counting(cmd)
}

/// Runs `cmd`, passing its output through, and counts the tests it reports.
fn run_counting(mut cmd: Command) -> (bool, Counts) {
    let mut child = match cmd.stdout(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xtask: could not start {:?}: {e}", cmd.get_program());
            return (false, Counts::default());
        }
    };
    let mut counts = Counts::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some(c) = parse_result(&line) {
                counts.add(c);
            }
        }
    }
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    (ok, counts)
}

/// Parses `test result: ok. 3 passed; 0 failed; 1 ignored; ...`.
fn parse_result(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let mut c = Counts::default();
    for part in rest.split([';', '.']) {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else { continue };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => c.passed = n,
            "failed" => c.failed = n,
            "ignored" => c.ignored = n,
            _ => {}
        }
    }
    Some(c)
}

/// A row's result from its run's success and counts, clearing `all_ok` on a failure: a run
/// in which no test ran is one too, since a filter that matches nothing passes vacuously.
fn verdict(ok: bool, c: Counts, all_ok: &mut bool) -> String {
    let ran = c.passed > 0;
    *all_ok &= ok && ran;
    match (ok, ran) {
        (true, true) => format!("passed ({} tests)", c.passed),
        (true, false) => "FAILED (no test ran)".to_owned(),
        (false, _) => format!("FAILED ({} failed)", c.failed.max(1)),
    }
}

/// `test-aarch64`: flex's tests on emulated aarch64 CPUs alone; fails if they cannot run here.
pub fn test_aarch64() -> ExitCode {
    match aarch64_tests() {
        Err(why) => {
            eprintln!("xtask test-aarch64: {why}");
            ExitCode::FAILURE
        }
        Ok(runs) => {
            let mut all_ok = true;
            for ((ok, c), (_, device)) in runs.into_iter().zip(ARM_CPUS) {
                println!("flex on {device}: {}", verdict(ok, c, &mut all_ok));
            }
            if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
    }
}

/// The task: exits non-zero if any test or any runnable backend failed.
pub fn test_all() -> ExitCode {
    if crate::models::fetch_models() != ExitCode::SUCCESS {
        eprintln!("xtask: the real models could not be fetched; the model tests need them");
        return ExitCode::FAILURE;
    }
    let build = Build::plan();
    let mut total = Counts::default();
    eprintln!("xtask: the workspace's tests, with dispatch features {}", build.features);
    let (workspace_ok, c) = build.test(&[], &[]);
    total.add(c);

    let mut table = Vec::new();
    let mut all_ok = workspace_ok;
    for (i, row) in ROWS.iter().enumerate() {
        let result = if let Some((_, why)) = build.skipped.iter().find(|(j, _)| *j == i) {
            format!("skipped: {why}")
        } else {
            eprintln!("xtask: conformance and model tests on `{}`", row.device);
            let (ok, c) = build.device_tests(row.device);
            total.add(c);
            verdict(ok, c, &mut all_ok)
        };
        let shown = match row.backend {
            "remote" => "remote:127.0.0.1:PORT (flex, started by the test)",
            _ => row.device,
        };
        table.push((row.backend, shown, result));
    }
    eprintln!("xtask: flex's tests on a CPU without AVX or FMA, emulated");
    let baseline = match build.baseline_cpu_tests() {
        Err(why) => format!("skipped: {why}"),
        Ok((ok, c)) => {
            total.add(c);
            verdict(ok, c, &mut all_ok)
        }
    };
    table.push(("flex", "host CPU without AVX or FMA (qemu -cpu Nehalem)", baseline));
    eprintln!("xtask: flex's tests on aarch64, emulated");
    match aarch64_tests() {
        Err(why) => table.push(("flex", "aarch64 (qemu-aarch64)", format!("skipped: {why}"))),
        Ok(runs) => {
            for ((ok, c), (_, device)) in runs.into_iter().zip(ARM_CPUS) {
                total.add(c);
                table.push(("flex", device, verdict(ok, c, &mut all_ok)));
            }
        }
    }

    println!();
    println!("{:<9} {:<50} result", "backend", "device");
    for (b, d, r) in &table {
        println!("{b:<9} {d:<50} {r}");
    }
    println!(
        "{:<9} {:<50} {}",
        "workspace",
        "(every crate's tests)",
        if workspace_ok { "passed" } else { "FAILED" }
    );
    println!();
    println!(
        "test-all-backends: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.ignored
    );
    if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aarch64_rows_are_skipped_without_the_standard_library_or_a_tool_and_say_why() {
        let root = std::env::temp_dir().join(format!("xtask-sysroot-{}", std::process::id()));
        let root_str = root.to_str().expect("a UTF-8 temporary directory");
        let why = std_in(Some(root_str)).expect_err("an empty sysroot has no library");
        assert!(why.contains(&format!("rustup target add {ARM}")), "{why}");
        assert!(std_in(None).is_err(), "rustc could not say where its sysroot is");
        let lib = root.join("lib/rustlib").join(ARM).join("lib");
        std::fs::create_dir_all(&lib).expect("a temporary sysroot");
        assert_eq!(std_in(Some(root_str)), Ok(()));
        std::fs::remove_dir_all(&root).expect("the temporary sysroot removed");

        let why = missing("switchyard-no-such-tool", "some-package").expect("no such tool");
        assert_eq!(why, "switchyard-no-such-tool is missing (on Debian, the package some-package)");
        assert_eq!(missing("cargo", "cargo"), None, "cargo runs here");
    }

    #[test]
    fn the_table_of_backends_gives_one_row_per_family() {
        assert!(ROWS.iter().any(|r| r.device == "flex" && matches!(r.run, Run::Always)));
        assert!(ROWS.iter().any(|r| r.device == "wgpu:0" && matches!(r.run, Run::Needs { .. })));
        assert!(ROWS.iter().any(|r| r.backend == "remote" && r.device == "remote"));
        let mut devices: Vec<&str> = ROWS.iter().map(|r| r.device).collect();
        devices.sort_unstable();
        devices.dedup();
        assert_eq!(devices.len(), ROWS.len(), "one row per family");
    }

    #[test]
    fn finds_flex_test_executables_in_cargo_json() {
        let line = |manifest: &str, exe: &str, test: bool| {
            format!(
                r#"{{"reason":"compiler-artifact","package_id":"path+file:///w#p@0.1.0","manifest_path":"{manifest}","target":{{"name":"kernels","test":true}},"profile":{{"opt_level":"1","test":{test}}},"executable":"{exe}","fresh":true}}"#
            )
        };
        let json = [
            line("/w/crates/flex/Cargo.toml", "/t/deps/kernels-1", true),
            line("/w/crates/flex/Cargo.toml", "/t/examples/probe", false),
            line("/w/crates/models/Cargo.toml", "/t/deps/tiny-2", true),
            r#"{"reason":"build-finished","success":true}"#.to_owned(),
        ]
        .join("\n");
        let found = flex_test_executables(&json);
        assert_eq!(found, [("/t/deps/kernels-1".to_owned(), "/w/crates/flex".to_owned())]);
        assert_eq!(string_field(r#"{"a":"x\"y"}"#, "a"), None, "an escape is refused");
    }

    #[test]
    fn parses_cargo_test_summaries() {
        let c = parse_result("test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.21s").unwrap();
        assert_eq!((c.passed, c.failed, c.ignored), (12, 1, 3));
        assert!(parse_result("running 3 tests").is_none());
    }
}
