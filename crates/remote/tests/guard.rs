//! The guard in front of a server, over real sockets on loopback: what it refuses, what it
//! cuts, what it closes, and that a real client still gets through beside all of it.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Once;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use switchyard_core::testkit::Rng;
use switchyard_core::{Backend, Error};
use switchyard_remote::{Limits, RemoteOptions, Serve, Server, Serving};

mod common;
use common::Job;

/// The request a WebSocket client opens a session with.
const UPGRADE: &str = "GET /session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n\
                       Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                       Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// burn-remote 0.22.1's opening message (protocol 2) in MessagePack, with no token, for a new
/// session id below 128: `[{"Init": [2, [id], 0, b""]}]`. Hand-written so a test can open a
/// session on a raw socket; a change of burn-remote's wire format shows here first.
fn opening() -> Vec<u8> {
    // The server refuses an id still bound to a connection it has not yet seen close, so no
    // two openings share one.
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    assert!(id < 128, "ids are MessagePack fixints");
    vec![0x91, 0x81, 0xa4, b'I', b'n', b'i', b't', 0x94, 0x02, 0x91, id, 0x00, 0xc4, 0x00]
}

/// Panics in this test process off the tests' own threads: the server's and the guard's.
static PANICS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread runs a test, whose failed assertions are not the server's panics.
    static TEST_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a test's and starts counting panics on every other thread.
/// Tests run in parallel in one process, so one test's failure must not fail the others.
fn count_panics() {
    static HOOK: Once = Once::new();
    TEST_THREAD.set(true);
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !TEST_THREAD.get() {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            default(info);
        }));
    });
}

/// A server of burn-flex in this process behind a guard with `limits`, counting panics.
fn serve(limits: Limits) -> Serving {
    count_panics();
    let listener = switchyard_remote::bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
    let mut server = Server::of(&switchyard_flex::burn_flex(), None);
    server.set_limits(limits);
    server.spawn(listener).unwrap()
}

/// Limits with a handshake short enough to wait out, for the test that does.
fn quick() -> Limits {
    Limits { handshake_timeout: Duration::from_secs(1), ..Limits::default() }
}

/// A masked client frame (the mask is zero).
fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    match payload.len() {
        n @ 0..=125 => f.push(0x80 | n as u8),
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(payload);
    f
}

fn connect(addr: SocketAddr) -> TcpStream {
    count_panics();
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the guard closes the connection (or resets it): everything it sent, and when.
fn until_closed(s: &mut TcpStream) -> (Vec<u8>, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, Instant::now()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (got, Instant::now()),
            Err(e) => panic!("the connection was not closed: {e}"),
        }
    }
}

/// Reads the server's answer to an upgrade, up to its blank line, and checks it is 101.
fn upgraded(addr: SocketAddr) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(UPGRADE.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "the upgrade was answered: {head:?}");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s
}

/// A session opened on a raw socket: upgraded, its opening sent and accepted.
fn opened(addr: SocketAddr) -> TcpStream {
    let mut s = upgraded(addr);
    s.write_all(&frame(2, &opening())).unwrap();
    let mut header = [0u8; 2];
    s.read_exact(&mut header).unwrap();
    assert_eq!(header[0], 0x82, "the server answers the opening with a binary frame");
    assert!(header[1] < 126, "a short answer");
    let mut answer = vec![0u8; usize::from(header[1])];
    s.read_exact(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("Init") && !text.contains("Refused"), "{text}");
    s
}

/// A client of `addr` that waits at most `timeout` for each call.
fn client(
    addr: SocketAddr,
    timeout: Duration,
) -> switchyard_core::Result<switchyard_remote::Remote> {
    switchyard_remote::connect("127.0.0.1", addr.port(), RemoteOptions { timeout, token: None })
}

/// Checks that a real client gets [`Job`]'s outputs through the guard.
fn works(addr: SocketAddr) {
    let remote = client(addr, Duration::from_secs(30)).expect("a real client connects");
    let job = Job::new();
    let got = job.run(&remote).expect("a real client gets through");
    assert_eq!(got, job.run(&switchyard_flex::burn_flex()).unwrap());
}

#[test]
fn only_a_session_upgrade_is_let_through() {
    let serving = serve(Limits::default());
    let addr = serving.addr();
    let answers = [
        (UPGRADE.replace("/session", "/data"), "HTTP/1.1 404"),
        (UPGRADE.replace("GET", "POST"), "HTTP/1.1 405"),
        ("\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03".to_owned(), "HTTP/1.1 400"),
        (format!("GET /session HTTP/1.1\r\nX: {}\r\n", "a".repeat(9000)), "HTTP/1.1 431"),
    ];
    for (request, want) in answers {
        let mut s = connect(addr);
        s.write_all(request.as_bytes()).unwrap();
        let (got, _) = until_closed(&mut s);
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with(want), "{request:.40?}: {got}");
    }
    works(addr);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}

#[test]
fn connections_that_open_no_session_are_closed_at_the_handshake_timeout() {
    let serving = serve(quick());
    let addr = serving.addr();
    let start = Instant::now();
    let mut silent = connect(addr);
    let mut partial = connect(addr);
    partial.write_all(b"GET /sess").unwrap();
    let mut upgraded_only = upgraded(addr);
    let mut half_a_frame = upgraded(addr);
    half_a_frame.write_all(&frame(2, &opening())[..5]).unwrap();
    for (name, s) in [
        ("silent", &mut silent),
        ("partial request", &mut partial),
        ("upgraded", &mut upgraded_only),
        ("half a frame", &mut half_a_frame),
    ] {
        let (_, closed) = until_closed(s);
        let after = closed - start;
        assert!(after >= quick().handshake_timeout, "{name} closed after {after:?}");
        assert!(after < Duration::from_secs(6), "{name} closed after {after:?}");
    }
    works(addr);
}

#[test]
fn connections_over_the_limit_are_answered_503_and_closed() {
    let serving = serve(Limits { max_connections: 2, ..Limits::default() });
    let addr = serving.addr();
    // Upgraded through the guard, so it holds both.
    let held = [upgraded(addr), upgraded(addr)];
    let mut third = connect(addr);
    let (got, _) = until_closed(&mut third);
    assert!(got.starts_with(b"HTTP/1.1 503"), "{}", String::from_utf8_lossy(&got));
    drop(held);
    // The guard frees their slots once it sees them close.
    std::thread::sleep(Duration::from_secs(1));
    works(addr);
}

#[test]
fn a_huge_first_message_is_cut_at_its_header() {
    let serving = serve(Limits::default());
    let mut s = upgraded(serving.addr());
    // The header of a 300 MB message, and nothing of its payload.
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&300_000_000u64.to_be_bytes());
    header.extend_from_slice(&[0; 4]);
    let sent = Instant::now();
    s.write_all(&header).unwrap();
    let (_, closed) = until_closed(&mut s);
    assert!(closed - sent < Duration::from_secs(2), "closed after {:?}", closed - sent);
}

#[test]
fn nothing_is_read_past_the_opening_until_the_server_answers_it() {
    // A stand-in for the server that records what reaches it and answers when told.
    let behind = TcpListener::bind("127.0.0.1:0").unwrap();
    let inner = behind.local_addr().unwrap();
    let listener = switchyard_remote::bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
    let guarding = switchyard_remote::guard::spawn(listener, inner, Limits::default()).unwrap();
    let mut client = connect(guarding.addr());
    let mut opening = UPGRADE.as_bytes().to_vec();
    opening.extend(frame(2, b"opening"));
    let second = frame(2, &vec![9; 100_000]);
    client.write_all(&opening).unwrap();
    client.write_all(&second).unwrap();

    let (mut server, _) = behind.accept().unwrap();
    server.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n @ 1..) = server.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, opening, "only the head and the opening pass before the answer");
    server.write_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n\x82\x00").unwrap();
    server.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = vec![0u8; second.len()];
    server.read_exact(&mut rest).unwrap();
    assert_eq!(rest, second, "the rest passes once the server has answered");
}

#[test]
fn an_open_session_may_send_up_to_the_limit_and_is_cut_above_it() {
    let limit = 200_000;
    let serving = serve(Limits { max_message_bytes: limit, ..Limits::default() });
    // Past the opening, a message too large for an opening passes the guard (the server
    // cannot decode it and closes the session: its own answer, not the guard's).
    let mut s = opened(serving.addr());
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(limit + 1).to_be_bytes());
    header.extend_from_slice(&[0; 4]);
    let sent = Instant::now();
    s.write_all(&header).unwrap();
    let (_, closed) = until_closed(&mut s);
    assert!(closed - sent < Duration::from_secs(2), "closed after {:?}", closed - sent);
    // A real client whose upload does not fit is an error, not a hang.
    let tight = serve(Limits { max_message_bytes: 1024, ..Limits::default() });
    let e =
        client(tight.addr(), Duration::from_secs(10)).and_then(|c| Job::new().run(&c)).unwrap_err();
    assert!(matches!(&e, Error::Device(m) if m.contains("--max-message-mib")), "{e}");
}

#[test]
fn a_silent_session_is_closed_and_its_client_opens_another() {
    let idle = Duration::from_millis(500);
    let serving = serve(Limits { idle_timeout: idle, ..Limits::default() });
    let addr = serving.addr();
    // Its last bytes pass after `start`, so the guard may close it no sooner than idle after.
    let start = Instant::now();
    let mut s = opened(addr);
    let (_, closed) = until_closed(&mut s);
    assert!(closed - start >= idle, "closed after {:?}", closed - start);
    assert!(closed - start < Duration::from_secs(5), "closed after {:?}", closed - start);

    // A real client idle beyond the timeout reconnects on its next call, uploads again, and
    // gets the same outputs.
    let remote = client(addr, Duration::from_secs(30)).unwrap();
    let job = Job::new();
    let w = remote.upload(&job.weights.tensors(), &job.graph).unwrap();
    let plan = remote.lower(&w, &job.graph, job.bucket).unwrap();
    let first = job.again(&remote, &plan).unwrap();
    std::thread::sleep(idle * 3);
    assert_eq!(job.again(&remote, &plan).unwrap(), first);
}

#[test]
fn garbage_and_abrupt_closes_cost_no_panic() {
    let serving = serve(Limits::default());
    let addr = serving.addr();
    let mut r = Rng::new(5);
    let garbage_from =
        |r: &mut Rng, n: usize| -> Vec<u8> { (0..n).map(|_| r.next_u64() as u8).collect() };
    for case in 0..40 {
        let mut s = match case % 4 {
            0 => connect(addr),
            1 => upgraded(addr),
            2 => opened(addr),
            _ => {
                let mut s = upgraded(addr);
                s.write_all(&frame(2, &garbage_from(&mut r, 64))).unwrap();
                s
            }
        };
        let n = r.below(200);
        let _ = s.write_all(&garbage_from(&mut r, n));
        // Dropped mid-frame, often with the server's answer unread (a reset rather than a FIN).
        drop(s);
    }
    // burn-remote's `/data` route, whose handler panicked on such frames, is not reachable.
    let mut data = connect(addr);
    data.write_all(UPGRADE.replace("/session", "/data").as_bytes()).unwrap();
    let _ = data.write_all(&frame(2, &garbage_from(&mut r, 32)));
    let (got, _) = until_closed(&mut data);
    assert!(got.starts_with(b"HTTP/1.1 404"));
    std::thread::sleep(Duration::from_millis(300));
    works(addr);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a task panicked");
}
