//! Test support: a real server process on loopback, which a test starts, pauses and kills.
//!
//! The server is the test binary itself, run again with [`SERVE_ENV`] set and filtered to one
//! helper test that serves when it sees that variable. A test binary that starts servers
//! declares the helper:
//!
//! ```ignore
//! #[test]
//! #[ignore = "started by the remote tests as their server process"]
//! fn remote_server_process() {
//!     switchyard_remote::testing::serve_if_asked(|listener| serve_somehow(listener));
//! }
//! ```
//!
//! and starts one with `ServerProcess::start("remote_server_process", "127.0.0.1:0", None)`. The
//! server exits when its standard input closes, so one whose test dies does not outlive it.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use switchyard_core::{Error, Result};

use crate::TOKEN_ENV;
use crate::server::device_name;

/// Set in a server process's environment: the address it is to listen on.
pub const SERVE_ENV: &str = "SWITCHYARD_TEST_SERVE";

/// What a server process prints before its address, once it listens.
const LISTENING: &str = "switchyard test server listening on ";

/// In a server process (one with [`SERVE_ENV`] set), binds the address it names and serves
/// with `serve` until killed or until standard input closes; elsewhere, returns at once.
pub fn serve_if_asked(serve: impl FnOnce(TcpListener) -> Result<()>) {
    let Ok(listen) = std::env::var(SERVE_ENV) else { return };
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let listener = listen
        .parse::<SocketAddr>()
        .map_err(|e| Error::Device(format!("{SERVE_ENV}=`{listen}`: {e}")))
        .and_then(|addr| crate::bind(addr, false));
    let result = listener.and_then(|l| {
        let addr = l.local_addr().map_err(|e| Error::Device(e.to_string()))?;
        // The test reads this line from the pipe; print! goes through libtest's capture.
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut out, format!("{LISTENING}{addr}\n").as_bytes());
        let _ = std::io::Write::flush(&mut out);
        drop(out);
        serve(l)
    });
    if let Err(e) = result {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{e}\n").as_bytes());
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// A server process started by a test; killed when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// Held open: the server exits when it closes.
    _stdin: Option<ChildStdin>,
    addr: SocketAddr,
}

impl ServerProcess {
    /// Runs this test binary again as a server listening on `listen` (port 0: any free port),
    /// through its helper test `helper`, with `token` in its [`TOKEN_ENV`], and waits until it
    /// listens.
    pub fn start(helper: &str, listen: &str, token: Option<&str>) -> Result<ServerProcess> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::Device(format!("cannot find this test binary: {e}")))?;
        let mut command = Command::new(exe);
        command
            .args([helper, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(SERVE_ENV, listen)
            .env_remove(TOKEN_ENV);
        if let Some(token) = token {
            command.env(TOKEN_ENV, token);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Device(format!("cannot start a server process: {e}")))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(std::result::Result::ok) {
                // libtest may have printed the test's name on the same line.
                if let Some(i) = line.find(LISTENING) {
                    let _ = tx.send(line[i + LISTENING.len()..].trim().parse::<SocketAddr>());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(addr)) => addr,
            other => {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(Error::Device(format!(
                    "the server process did not report an address ({other:?}); it ended with \
                     {status:?}"
                )));
            }
        };
        Ok(ServerProcess { child, _stdin: stdin, addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The device name that reaches it: `remote:HOST:PORT`.
    pub fn device_name(&self) -> String {
        device_name(self.addr)
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process and waits until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
