//! `switchyard-bench serve` and `switchyard-bench soak`: switchyard-server on loopback with a
//! real model, loaded by a generator of clients in this process, beside the CLI's way of
//! embedding the same texts (one process, batches of the bucket table), as a ratio.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_core::Buckets;
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner};
use switchyard_server::{Config, ModelSpec, Opener, Replica, Server};

use crate::args::Args;

/// The model at `dir`, truncating at `max_len` tokens if given.
fn model(dir: &str, max_len: Option<usize>) -> switchyard_models::Result<Model> {
    let mut m = Model::load(dir.as_ref())?;
    if let Some(n) = max_len {
        m.set_max_len(n)?;
    }
    Ok(m)
}

/// A replica of the model at `dir` on `device` (flex on `threads` threads).
fn replica(dir: &str, max_len: Option<usize>, device: Device, threads: usize) -> Replica<Dispatch> {
    let (dir, name) = (dir.to_owned(), device.to_string());
    let open: Opener<Dispatch> = Arc::new(move || {
        let backend = if device == Device::flex() {
            Dispatch::Flex {
                device: Device::flex(),
                backend: switchyard_dispatch::flex::with_threads(Some(threads))?,
            }
        } else {
            Dispatch::new(&device)?
        };
        Runner::new(model(&dir, max_len)?, backend, Buckets::default())
    });
    Replica { device: name, open }
}

/// A server on a loopback port in this process, stopped when dropped.
struct Local(switchyard_server::Running);

impl Local {
    fn start(replicas: Vec<Replica<Dispatch>>, config: Config) -> Local {
        let spec = ModelSpec { name: "model".into(), replicas };
        let server = Server::new(config, vec![spec]).expect("the server starts");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        Local(server.spawn(listener).expect("the server serves"))
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.0.addr())
    }
}

/// `clients` clients, each on its own keep-alive connection, POSTing one text per request to
/// `/embed` until every text has been sent: the wall time, and each request's latency.
fn load(server: &Local, texts: &Arc<Vec<String>>, clients: usize) -> (Duration, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let url = server.url("/embed");
    let start = Instant::now();
    let workers: Vec<JoinHandle<Vec<Duration>>> = (0..clients)
        .map(|_| {
            let (texts, next, url) = (Arc::clone(texts), Arc::clone(&next), url.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().build();
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(text) = texts.get(i) else { return latencies };
                    let t = Instant::now();
                    let r = agent.post(&url).send_json(json!({ "inputs": text, "truncate": true }));
                    let body = r.expect("an answer").into_string().expect("a body");
                    latencies.push(t.elapsed());
                    assert!(body.starts_with("[["), "not an embedding: {body:.200}");
                }
            })
        })
        .collect();
    let latencies = workers.into_iter().flat_map(|w| w.join().expect("a client")).collect();
    (start.elapsed(), latencies)
}

/// The `q` quantile of `d`, in milliseconds.
fn quantile(d: &mut [Duration], q: f64) -> f64 {
    d.sort_unstable();
    let i = ((d.len() as f64 - 1.0) * q).round() as usize;
    d[i].as_secs_f64() * 1e3
}

/// `serve --model DIR --corpus FILE [--max-len N] [--threads N] [--clients N] [--texts N]
/// [--remote]`: the CLI's throughput on the corpus, then the server's with `--clients`
/// concurrent clients and with one, and with `--remote` a second device (flex served by a
/// remote-serve on loopback) beside the first.
pub fn serve(args: &[String]) {
    let usage = "serve --model DIR --corpus FILE [--max-len N] [--threads N] [--clients N] \
                 [--texts N] [--remote]";
    let args = Args::new(args, usage);
    let (dir, corpus) = (args.need("--model"), args.need("--corpus"));
    let max_len: Option<usize> = args.parsed("--max-len");
    let threads = args.parsed("--threads").unwrap_or(2);
    let clients = args.parsed("--clients").unwrap_or(64);
    let mut texts = crate::corpus::load(&corpus).unwrap_or_else(|e| args.fail(e));
    texts.truncate(args.parsed("--texts").unwrap_or(texts.len()));
    let texts = Arc::new(texts);
    let n = texts.len();
    let flex = || replica(&dir, max_len, Device::flex(), threads);
    println!("switchyard serve on {dir}: {n} texts of {corpus}, flex on {threads} threads");

    // The CLI's way: every text in one process, in file order.
    let backend = Dispatch::Flex {
        device: Device::flex(),
        backend: switchyard_dispatch::flex::with_threads(Some(threads)).expect("flex"),
    };
    let mut runner =
        Runner::new(model(&dir, max_len).expect("the model loads"), backend, Buckets::default())
            .expect("the model uploads");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    runner.embed(&refs[..32.min(n)], |_| {}).expect("a warm-up batch");
    let t = Instant::now();
    runner.embed(&refs, |_| {}).expect("the corpus embeds");
    let cli = n as f64 / t.elapsed().as_secs_f64();
    println!("  {:<42} {cli:>8.1} texts/s", "CLI (one process, bucket batches)");

    let config = Config { max_client_batch_size: 1, ..Config::default() };
    let server = Local::start(vec![flex()], config.clone());
    load(&server, &Arc::new(texts[..32.min(n)].to_vec()), 4);
    let (wall, mut lat) = load(&server, &texts, clients);
    let rate = n as f64 / wall.as_secs_f64();
    println!(
        "  {:<42} {rate:>8.1} texts/s  {:>5.2}x the CLI  p50 {:.1} ms  p99 {:.1} ms",
        format!("server, {clients} clients, one text each"),
        rate / cli,
        quantile(&mut lat, 0.5),
        quantile(&mut lat, 0.99),
    );

    // One client: each request's latency beside the model's own time on that text.
    let few = Arc::new(texts[..100.min(n)].to_vec());
    let (_, lat) = load(&server, &few, 1);
    let mut alone = Vec::new();
    for t in few.iter() {
        let s = Instant::now();
        runner.embed(&[t.as_str()], |_| {}).expect("a text embeds");
        alone.push(s.elapsed());
    }
    let mean =
        |d: &[Duration]| d.iter().map(Duration::as_secs_f64).sum::<f64>() / d.len() as f64 * 1e3;
    let (served, own) = (mean(&lat), mean(&alone));
    println!(
        "  {:<42} {served:>8.2} ms a request, the model alone {own:.2} ms: {:.2} ms overhead",
        "server, 1 client",
        served - own
    );
    server.0.shutdown().expect("the server stops");

    if args.flag("--remote") {
        use switchyard_dispatch::remote::{self, Serve, Server as RemoteServer};
        let listener =
            remote::bind("127.0.0.1:0".parse().expect("an address"), false).expect("a port");
        let serving = RemoteServer::of(&switchyard_dispatch::flex::burn_flex(), None)
            .spawn(listener)
            .expect("a remote-serve in this process");
        let device: Device = remote::device_name(serving.addr()).parse().expect("a device name");
        let remote = replica(&dir, max_len, device, threads);
        let two = Local::start(vec![flex(), remote], config);
        load(&two, &Arc::new(texts[..32.min(n)].to_vec()), 4);
        let (wall, _) = load(&two, &texts, clients);
        let both = n as f64 / wall.as_secs_f64();
        println!(
            "  {:<42} {both:>8.1} texts/s  {:>5.2}x one device",
            "server, flex + remote flex on loopback",
            both / rate
        );
    }
}

/// This process's resident memory, in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok());
    kb.unwrap_or(0.0) / 1024.0
}

/// What a soak request is, and what it must get back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A valid text: 200.
    Valid,
    /// A body that is not JSON: 422.
    Malformed,
    /// More inputs than a request may carry: 413.
    TooMany,
    /// A client that sends its request and hangs up at once: no answer to wait for.
    Leaves,
}

/// Sends one raw HTTP/1.1 request and reads the status (`None` for a client that left).
fn raw(addr: SocketAddr, body: &[u8], leave: bool) -> Option<u16> {
    let mut s = TcpStream::connect(addr).expect("a connection");
    let head = format!(
        "POST /embed HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("a request");
    s.write_all(body).expect("a body");
    if leave {
        return None;
    }
    s.set_read_timeout(Some(Duration::from_secs(120))).expect("a timeout");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("an answer");
    let line = String::from_utf8_lossy(&answer);
    line.split_whitespace().nth(1).and_then(|c| c.parse().ok())
}

/// `soak --model DIR --corpus FILE [--requests N] [--clients N] [--max-len N]`: N requests from
/// concurrent clients, mixing valid texts, malformed bodies, oversized batches and clients that
/// leave; every request must get its documented answer, and the server's memory after the soak
/// must be within 10% of its memory after warm-up.
pub fn soak(args: &[String]) {
    let usage = "soak --model DIR --corpus FILE [--requests N] [--clients N] [--max-len N]";
    let args = Args::new(args, usage);
    let (dir, corpus) = (args.need("--model"), args.need("--corpus"));
    let max_len: Option<usize> = args.parsed("--max-len");
    let requests = args.parsed("--requests").unwrap_or(10_000);
    let clients = args.parsed("--clients").unwrap_or(16);
    let texts = Arc::new(crate::corpus::load(&corpus).unwrap_or_else(|e| args.fail(e)));
    let server = Local::start(vec![replica(&dir, max_len, Device::flex(), 2)], Config::default());
    // Warmed up with as many client threads as the soak has: they live in this process, and
    // each thread's allocator arena counts in its memory.
    load(&server, &texts, clients);
    let warm = rss_mib();
    let kinds = [
        Kind::Valid,
        Kind::Valid,
        Kind::Valid,
        Kind::Malformed,
        Kind::Valid,
        Kind::TooMany,
        Kind::Valid,
        Kind::Leaves,
    ];
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let addr = server.0.addr();
    let tallies: Vec<[usize; 4]> = (0..clients)
        .map(|_| {
            let (texts, next) = (Arc::clone(&texts), Arc::clone(&next));
            std::thread::spawn(move || {
                // Answered as documented, answered otherwise, left, and which kinds went out.
                let mut t = [0; 4];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        return t;
                    }
                    let kind = kinds[i % kinds.len()];
                    let text = &texts[i % texts.len()];
                    let (body, want) = match kind {
                        Kind::Valid => {
                            (json!({ "inputs": text, "truncate": true }).to_string(), Some(200))
                        }
                        Kind::Malformed => ("{\"inputs\": [\"a\",".to_owned(), Some(422)),
                        Kind::TooMany => {
                            (json!({ "inputs": vec!["a"; 40] }).to_string(), Some(413))
                        }
                        Kind::Leaves => (json!({ "inputs": text }).to_string(), None),
                    };
                    match (raw(addr, body.as_bytes(), kind == Kind::Leaves), want) {
                        (None, None) => t[2] += 1,
                        (got, want) if got == want => t[0] += 1,
                        (got, want) => {
                            println!("soak: request {i} ({kind:?}) got {got:?}, not {want:?}");
                            t[1] += 1;
                        }
                    }
                    t[3] += 1;
                }
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("a client"))
        .collect();
    let wall = start.elapsed();
    let sum = |k: usize| tallies.iter().map(|t| t[k]).sum::<usize>();
    let (documented, other, left, sent) = (sum(0), sum(1), sum(2), sum(3));
    // Let the server drop what the departed clients left queued.
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_mib();
    println!("soak: {sent} requests from {clients} clients in {:.1} s", wall.as_secs_f64());
    println!(
        "  answered as documented {documented}, answered otherwise {other}, clients that left {left}, lost {}",
        sent - documented - other - left
    );
    println!(
        "  memory after warm-up {warm:.1} MiB, after the soak {after:.1} MiB ({:+.1}%)",
        (after / warm - 1.0) * 100.0
    );
    let ok = other == 0 && documented + left == requests && after <= warm * 1.1;
    println!("  {}", if ok { "passed" } else { "FAILED" });
    if !ok {
        std::process::exit(1);
    }
}
