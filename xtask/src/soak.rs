//! `cargo xtask soak`: a `switchyard remote-serve` under connection churn and garbage clients
//! while real clients use it, checking that they see no error, that every request sent is
//! answered, that the server logs no panic, and that its memory stays bounded.
//!
//! The real clients are the `switchyard` binary itself: `switchyard serve` with the remote
//! device, which keeps one session open and answers HTTP requests that this task sends from a
//! few threads, and `switchyard embed` processes started one after another, each opening a
//! session, uploading the model's weights, embedding and leaving. Beside them, threads open
//! garbage connections to the remote server: closed at once, silent, half a request head,
//! burn-remote's `/data` route, bytes that are not HTTP, a 300 MB frame header, random frames,
//! a session dropped mid-opening.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bound on the server's memory: its peak may exceed what it held after warm-up by this
/// much. A connection without a session can make it hold at most 64 KiB (the guard's limit
/// on an opening) and the garbage threads hold at most one connection each, so what is left
/// is the allocator's slack and the sessions the `embed` processes open and close.
const SLACK_MIB: f64 = 64.0;

/// The texts the real clients embed.
const TEXTS: [&str; 4] = [
    "A man is eating food.",
    "The new movie is awesome, and the popcorn was fine too.",
    "A cheetah is running behind its prey across the open savanna at dusk.",
    "hi",
];

/// The soak's settings, from its arguments.
struct Settings {
    requests: usize,
    clients: usize,
    garbage: usize,
    model: PathBuf,
}

fn settings(args: &[String]) -> Result<Settings, String> {
    let count = |name: &str, default: u64| crate::number(args, name, default).map(|n| n as usize);
    let model = crate::flag(args, "--model").map_or_else(
        || crate::workspace().join("crates/models/tests/fixtures/tiny/bert"),
        PathBuf::from,
    );
    Ok(Settings {
        requests: count("--requests", 5000)?,
        clients: count("--clients", 4)?.max(1),
        garbage: count("--garbage", 8)?,
        model,
    })
}

/// Runs the soak.
pub fn soak(args: &[String]) -> ExitCode {
    match settings(args).and_then(|s| run(&s)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask soak: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A child process, killed when dropped, whose stderr is read as it comes.
struct Process {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Process {
    /// Starts `switchyard ARGS` and waits for the stderr line that contains `marker`.
    fn start(bin: &Path, args: &[&str], marker: &str) -> Result<(Process, String), String> {
        let mut child = Command::new(bin)
            .args(args)
            .env_remove("SWITCHYARD_REMOTE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let marker = marker.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(&marker) {
                    let _ = tx.send(line.clone());
                }
                sink.lock().expect("the log").push(line);
            }
        });
        let process = Process { child, log };
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => Ok((process, line)),
            Err(_) => Err(format!(
                "`switchyard {}` did not start: {}",
                args.join(" "),
                process.log.lock().expect("the log").join("\n")
            )),
        }
    }

    /// Its resident memory now, in MiB.
    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok());
        kib.unwrap_or(0.0) / 1024.0
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().expect("the log").clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address after `prefix` in `line`, up to the next space or `)`.
fn address_after(line: &str, prefix: &str) -> Result<SocketAddr, String> {
    line.split(prefix)
        .nth(1)
        .and_then(|rest| rest.split([' ', ')']).next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("no address after `{prefix}` in: {line}"))
}

/// Builds the binary, starts the server and the clients, and reports; whether it passed.
fn run(s: &Settings) -> Result<bool, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask soak: building switchyard (dev profile)");
    let built = Command::new(&cargo)
        .args(["build", "--quiet", "--package", "switchyard", "--bin", "switchyard"])
        .status()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if !built.success() {
        return Err(format!("the build failed ({built})"));
    }
    let target = crate::target_dir();
    let bin = target.join("debug/switchyard");
    let model = s.model.to_str().ok_or("the model's path is not UTF-8")?;

    let (server, first) = Process::start(
        &bin,
        &["remote-serve", "--listen", "127.0.0.1:0", "--handshake-timeout", "1"],
        "clients use --device",
    )?;
    let device = first.split("--device ").nth(1).unwrap_or_default().trim().to_owned();
    let remote = address_after(&first, "--device remote:")?;
    let (client, line) = Process::start(
        &bin,
        &["serve", "--model", model, "--device", &device, "--listen", "127.0.0.1:0"],
        "at http://",
    )?;
    let http = address_after(&line, "at http://")?;
    eprintln!(
        "xtask soak: remote-serve at {remote}; switchyard serve on it at {http}; {} requests \
         from {} clients, `switchyard embed` processes one after another, {} garbage threads",
        s.requests, s.clients, s.garbage
    );

    // Warm-up: the session is open and the weights are on the server.
    for text in TEXTS {
        embed(http, text).map_err(|e| format!("the warm-up request failed: {e}"))?;
    }
    let mut embeds = 0;
    embed_process(&bin, model, &device).map_err(|e| format!("the warm-up embed failed: {e}"))?;
    let warm = server.rss_mib();

    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(warm.to_bits()));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let (failures, garbage_sent) = std::thread::scope(|scope| {
        let server = &server;
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let now = server.rss_mib();
                if now > f64::from_bits(peak.load(Ordering::Relaxed)) {
                    peak.store(now.to_bits(), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let garbage: Vec<_> = (0..s.garbage)
            .map(|g| {
                let done = &done;
                scope.spawn(move || {
                    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ (g as u64 + 1));
                    let mut kinds = [0usize; GARBAGE.len()];
                    while !done.load(Ordering::Relaxed) {
                        let k = r.below(GARBAGE.len());
                        garbage_connection(remote, k, &mut r);
                        kinds[k] += 1;
                    }
                    kinds
                })
            })
            .collect();
        let clients: Vec<_> = (0..s.clients)
            .map(|_| {
                let next = &next;
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= s.requests {
                            return failures;
                        }
                        if let Err(e) = embed(http, TEXTS[i % TEXTS.len()]) {
                            failures.push(format!("request {i}: {e}"));
                        }
                    }
                })
            })
            .collect();
        let churn = scope.spawn(|| {
            let mut failures = Vec::new();
            while next.load(Ordering::Relaxed) < s.requests {
                match embed_process(&bin, model, &device) {
                    Ok(()) => embeds += 1,
                    Err(e) => failures.push(format!("switchyard embed: {e}")),
                }
            }
            failures
        });
        let mut failures: Vec<String> =
            clients.into_iter().flat_map(|c| c.join().expect("a client")).collect();
        failures.extend(churn.join().expect("the churn"));
        done.store(true, Ordering::Relaxed);
        let mut sent = [0usize; GARBAGE.len()];
        for g in garbage {
            for (s, n) in sent.iter_mut().zip(g.join().expect("a garbage thread")) {
                *s += n;
            }
        }
        (failures, sent)
    });
    let wall = start.elapsed();
    // Let the server close what the garbage threads left behind.
    std::thread::sleep(Duration::from_millis(1500));
    let after = server.rss_mib();
    let peak = f64::from_bits(peak.load(Ordering::Relaxed));
    let log = server.lines();
    let panics = log.iter().filter(|l| l.contains("panicked")).count();
    drop(client);

    println!("soak: {:.1} s", wall.as_secs_f64());
    println!(
        "  real clients: {} HTTP requests through `switchyard serve` and {embeds} `switchyard \
         embed` processes, {} failed",
        s.requests,
        failures.len()
    );
    for f in failures.iter().take(10) {
        println!("    {f}");
    }
    let total: usize = garbage_sent.iter().sum();
    println!("  garbage connections: {total}");
    for (kind, n) in GARBAGE.iter().zip(garbage_sent) {
        println!("    {n:>7}  {kind}");
    }
    println!(
        "  remote-serve: {} log lines, {panics} panics; memory after warm-up {warm:.1} MiB, \
         peak {peak:.1} MiB, after {after:.1} MiB (bound: warm-up + {SLACK_MIB} MiB)",
        log.len()
    );
    let ok = failures.is_empty() && panics == 0 && peak <= warm + SLACK_MIB;
    println!("  {}", if ok { "passed" } else { "FAILED" });
    Ok(ok)
}

/// Sends one `/embed` request to `switchyard serve`: an error unless it answers 200 with one
/// embedding.
fn embed(http: SocketAddr, text: &str) -> Result<(), String> {
    let body = format!("{{\"inputs\": \"{text}\"}}");
    let mut s = TcpStream::connect(http).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
    let head = format!(
        "POST /embed HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body.as_bytes()))
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&answer);
    if answer.starts_with("HTTP/1.1 200") && answer.contains("[[") {
        Ok(())
    } else {
        Err(answer.chars().take(300).collect())
    }
}

/// Runs `switchyard embed` on the remote device: a session opened, used and closed.
fn embed_process(bin: &Path, model: &str, device: &str) -> Result<(), String> {
    let o = Command::new(bin)
        .args(["embed", "--model", model, "--device", device, "A man is eating food."])
        .env_remove("SWITCHYARD_REMOTE_TOKEN")
        .output()
        .map_err(|e| e.to_string())?;
    if o.status.success() && o.stdout.starts_with(b"{") {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
    }
}

/// The kinds of garbage connection.
const GARBAGE: [&str; 8] = [
    "connected and closed at once",
    "silent until the server closes it",
    "half a request head, then closed",
    "burn-remote's /data route, with a frame",
    "bytes that are not HTTP",
    "a session whose first frame declares 300 MB",
    "a session sending random frames, dropped",
    "a session dropped in the middle of its opening",
];

/// The WebSocket upgrade to `path`.
fn upgrade(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: soak\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

/// One garbage connection of kind `k` to `addr`; whatever happens to it is fine, as long as it
/// ends.
fn garbage_connection(addr: SocketAddr, k: usize, r: &mut Rng) {
    let Ok(mut s) = TcpStream::connect(addr) else { return };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let noise: Vec<u8> = (0..1 + r.below(300)).map(|_| r.next() as u8).collect();
    let _ = match k {
        0 => Ok(()),
        1 => s.read(&mut [0u8; 64]).map(drop),
        2 => s.write_all(&upgrade("/session").as_bytes()[..20]),
        3 => s.write_all(
            &[upgrade("/data").as_bytes(), &[0x82, 0x84, 0, 0, 0, 0, 1, 2, 3, 4]].concat(),
        ),
        4 => s.write_all(&noise),
        5 => {
            let mut frame = vec![0x82, 0xff];
            frame.extend_from_slice(&300_000_000u64.to_be_bytes());
            frame.extend_from_slice(&[0; 4]);
            s.write_all(&[upgrade("/session").as_bytes(), &frame].concat())
        }
        6 => {
            let [hi, lo] = (noise.len() as u16).to_be_bytes();
            let header = [0x82, 0xfe, hi, lo, 0, 0, 0, 0];
            s.write_all(&[upgrade("/session").as_bytes(), &header, &noise].concat())
        }
        _ => {
            s.write_all(&[upgrade("/session").as_bytes(), &[0x82, 0x8e, 0, 0, 0, 0, 0x91]].concat())
        }
    };
    if k != 1 && r.below(2) == 0 {
        // Wait for the server's answer or its close.
        let _ = s.read(&mut [0u8; 512]);
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
