//! The remote backend against real server processes on loopback (flex on the server), which
//! each test starts, pauses and kills: conformance, and every way a server can fail.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use switchyard_core::{Backend, Error, Outputs};
use switchyard_remote::testing::ServerProcess;
use switchyard_remote::{Remote, RemoteOptions, RemotePlan, Serve, Server, TOKEN_ENV};

mod common;
use common::Job;

/// The helper test the server processes run.
const HELPER: &str = "remote_server_process";

/// The timeout the failure tests give the client: long enough for a loaded CI machine to
/// answer a tiny batch, short enough to keep the tests quick.
const TIMEOUT: Duration = Duration::from_secs(5);

#[test]
#[ignore = "run by the other tests as their server process"]
fn remote_server_process() {
    switchyard_remote::testing::serve_if_asked(|listener| {
        let token = std::env::var(TOKEN_ENV).ok();
        Server::of(&switchyard_flex::burn_flex(), token.as_deref()).serve(listener)
    });
}

fn start(listen: &str, token: Option<&str>) -> ServerProcess {
    ServerProcess::start(HELPER, listen, token).expect("a server process")
}

/// A client with the failure tests' short timeout.
fn client(server: &ServerProcess, token: Option<&str>) -> switchyard_core::Result<Remote> {
    client_with(server, RemoteOptions { timeout: TIMEOUT, token: token.map(str::to_owned) })
}

fn client_with(server: &ServerProcess, options: RemoteOptions) -> switchyard_core::Result<Remote> {
    let addr = server.addr();
    switchyard_remote::connect(&addr.ip().to_string(), addr.port(), options)
}

fn signal(server: &ServerProcess, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid this test started and owns (not yet waited for).
    let rc = unsafe { libc::kill(server.pid() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "signal {sig} to the server");
}

/// A client of `server` with the job's weights uploaded and its plan lowered.
fn prepared(server: &ServerProcess) -> (Job, Remote, RemotePlan) {
    let job = Job::new();
    let remote = client(server, None).unwrap();
    let w = remote.upload(&job.weights.tensors(), &job.graph).unwrap();
    let plan = remote.lower(&w, &job.graph, job.bucket).unwrap();
    (job, remote, plan)
}

fn assert_device_error(e: &Error, want: &str) {
    assert!(matches!(e, Error::Device(m) if m.contains(want)), "expected `{want}` in: {e}");
}

/// The server the conformance checks share (it exits with this process).
fn conformance_server() -> &'static ServerProcess {
    static SERVER: OnceLock<ServerProcess> = OnceLock::new();
    SERVER.get_or_init(|| start("127.0.0.1:0", None))
}

/// A client of the shared server, with the default timeout: these checks are about results,
/// and CI machines can be slow.
fn conformance_client() -> Remote {
    client_with(conformance_server(), RemoteOptions::default()).expect("the server is up")
}

mod conformance_on_a_remote_flex_server {
    switchyard_conformance::tests!(super::conformance_client);
}

#[test]
fn results_match_flex_run_locally() {
    let server = start("127.0.0.1:0", None);
    let job = Job::new();
    let remote = job.run(&client(&server, None).unwrap()).unwrap();
    let local = job.run(&switchyard_flex::burn_flex()).unwrap();
    // The same Burn backend runs the same ops on both sides: the values are identical.
    assert_eq!(remote, local);
    let r = client(&server, None).unwrap();
    assert_eq!(r.caps().device, server.device_name());
    assert_eq!(r.caps().kind, switchyard_core::DeviceKind::Remote);
}

#[test]
fn a_server_that_is_down_at_connect_is_an_error_in_bounded_time() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let start = Instant::now();
    let options = RemoteOptions { timeout: Duration::from_secs(2), token: None };
    let e = switchyard_remote::connect("127.0.0.1", port, options).unwrap_err();
    let took = start.elapsed();
    assert_device_error(&e, &format!("remote:127.0.0.1:{port} failed to connect"));
    assert_device_error(&e, "switchyard remote-serve");
    assert!(took < Duration::from_secs(6), "took {took:?} with a 2 s timeout");
}

#[test]
fn a_port_nothing_listens_on_is_refused_at_once_whatever_the_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let start = Instant::now();
    let options = RemoteOptions { timeout: Duration::from_secs(60), token: None };
    let e = switchyard_remote::connect("127.0.0.1", port, options.clone()).unwrap_err();
    // burn-remote alone retried for about 15 s.
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    assert_device_error(&e, "refused the connection");
    let e = switchyard_remote::connect("no-such-host.invalid", 7878, options).unwrap_err();
    assert_device_error(&e, "cannot resolve no-such-host.invalid");
}

#[test]
fn a_server_that_dies_mid_batch_is_an_error_in_bounded_time() {
    let mut server = start("127.0.0.1:0", None);
    let (job, remote, plan) = prepared(&server);
    // Stopped, the server cannot answer: the batch is surely in flight when it is killed.
    signal(&server, libc::SIGSTOP);
    let (tx, rx) = std::sync::mpsc::channel();
    let batch = job.batch.clone();
    let started = Instant::now();
    let running = std::thread::spawn(move || {
        let mut out = Outputs::new();
        let r = remote.run(&plan, &mut (), &batch.batch(), &mut out);
        let _ = tx.send(started.elapsed());
        r
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(rx.try_recv().is_err(), "the batch finished on a stopped server");
    server.kill();
    let e = running.join().unwrap().unwrap_err();
    let took = rx.recv().unwrap();
    // The read fails as the socket closes, and the one reconnect is refused within the timeout.
    assert_device_error(&e, &format!("{} failed to run a batch", server.device_name()));
    assert_device_error(&e, "reconnecting failed too");
    assert!(took < TIMEOUT * 3, "took {took:?} with a {TIMEOUT:?} timeout");
}

#[test]
fn a_server_that_stops_answering_is_an_error_after_the_timeout_and_then_recovers() {
    let server = start("127.0.0.1:0", None);
    let (job, remote, plan) = prepared(&server);
    let want = job.again(&remote, &plan).unwrap();

    signal(&server, libc::SIGSTOP);
    let started = Instant::now();
    let e = job.again(&remote, &plan).unwrap_err();
    let took = started.elapsed();
    assert_device_error(&e, &format!("no answer within {TIMEOUT:?}"));
    assert!(took >= TIMEOUT && took < TIMEOUT * 3, "took {took:?} with a {TIMEOUT:?} timeout");

    // Answering again, the server gets a new session with the weights uploaded again.
    signal(&server, libc::SIGCONT);
    assert_eq!(job.again(&remote, &plan).unwrap(), want);
}

#[test]
fn after_a_restart_the_next_call_uploads_the_weights_again_and_runs() {
    let mut server = start("127.0.0.1:0", None);
    let listen = server.addr().to_string();
    let (job, remote, plan) = prepared(&server);
    let want = job.again(&remote, &plan).unwrap();

    server.kill();
    let e = job.again(&remote, &plan).unwrap_err();
    assert_device_error(&e, "failed to connect");

    // The same port again: the restarted server holds nothing of the old session.
    let restarted = start(&listen, None);
    assert_eq!(job.again(&remote, &plan).unwrap(), want);
    // A restart between two calls is not even seen: the run is retried in a new session.
    drop(restarted);
    let _again = start(&listen, None);
    assert_eq!(job.again(&remote, &plan).unwrap(), want);
}

#[test]
fn a_server_with_a_token_refuses_clients_without_it() {
    let server = start("127.0.0.1:0", Some("s3cret"));
    let e = client(&server, None).unwrap_err();
    assert_device_error(&e, "rejected the credential");
    let e = client(&server, Some("guess")).unwrap_err();
    assert_device_error(&e, "rejected the credential");
    let job = Job::new();
    let local = job.run(&switchyard_flex::burn_flex()).unwrap();
    assert_eq!(job.run(&client(&server, Some("s3cret")).unwrap()).unwrap(), local);
}

#[test]
fn a_server_in_this_process_serves_until_dropped() {
    let listener = switchyard_remote::bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
    let serving = Server::of(&switchyard_flex::burn_flex(), None).spawn(listener).unwrap();
    let addr = serving.addr();
    let options = RemoteOptions { timeout: TIMEOUT, token: None };
    let remote = switchyard_remote::connect("127.0.0.1", addr.port(), options.clone()).unwrap();
    let job = Job::new();
    assert_eq!(job.run(&remote).unwrap(), job.run(&switchyard_flex::burn_flex()).unwrap());
    drop(serving);
    let options = RemoteOptions { timeout: Duration::from_secs(1), ..options };
    assert!(switchyard_remote::connect("127.0.0.1", addr.port(), options).is_err());
}
