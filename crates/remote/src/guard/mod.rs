//! The guard: what stands between the network and burn-remote's server.
//!
//! burn-remote's server reads whole WebSocket messages of up to 1 GiB before it checks a
//! session's token, serves a `/data` route whose handler panics on unexpected frames, and
//! holds every connection for as long as its peer keeps it open. So a server of this crate
//! listens on a loopback port of its own, and the guard, on the address clients dial, relays
//! each connection to it once the connection has shown it is a session:
//!
//! - a request head of at most 8 KiB, within the handshake timeout, that upgrades `GET
//!   /session` to a WebSocket; anything else is answered (400, 404, 405, 431) and closed;
//! - then the session's first message, which carries the token: at most [`MAX_OPENING`] bytes,
//!   still within the handshake timeout. Nothing more of the client's is read until the server
//!   has answered it; a server that refuses the token closes the session after its answer;
//! - after that, messages of up to [`Limits::max_message_bytes`], each refused at the header
//!   that declares it, before any of its payload reaches the server; and a session silent both
//!   ways for [`Limits::idle_timeout`] is closed (its client opens a new one on its next call).
//!
//! At most [`Limits::max_connections`] connections are held at once; the next is answered 503
//! and closed. A connection the guard closes costs one log line, never a backtrace.

mod frames;
mod head;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::time::{Instant, timeout, timeout_at};

use switchyard_core::{Error, Result};

use crate::server::{self, Serving};
pub use frames::{Fed, Frames, Violation};
pub use head::{MAX_HEAD, Refusal, Request, request};

/// The longest first message of a session: its opening, which carries the token.
pub const MAX_OPENING: u64 = 64 * 1024;

/// What a guard allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections held at once; the next is answered 503 and closed.
    pub max_connections: usize,
    /// The time from accepting a connection until its session's first message is in.
    pub handshake_timeout: Duration,
    /// The time a session may be silent both ways before it is closed.
    pub idle_timeout: Duration,
    /// The longest message a session may send once it is open: the largest tensor (with the
    /// ops batched beside it) its client uploads.
    pub max_message_bytes: u64,
}

impl Default for Limits {
    /// 64 connections, 10 s to open a session, 15 min of silence, messages up to 256 MiB (67 M
    /// f32 values: bge-large's word embeddings take 125 MB).
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15 * 60),
            max_message_bytes: 256 << 20,
        }
    }
}

/// Why the guard closed a connection.
#[derive(Debug)]
enum Closed {
    /// Its request was refused with this answer.
    Refused(Refusal),
    /// It did not open a session within the handshake timeout.
    Handshake,
    /// It broke a limit or the protocol.
    Violation(Violation),
    /// Its session was silent for the idle timeout.
    Idle,
    /// The server behind the guard could not be reached, or failed mid-session.
    Server(io::Error),
    /// Reading or writing the client failed.
    Io(io::Error),
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Closed::Refused(r) => write!(f, "refused: {}", r.reason()),
            Closed::Handshake => f.write_str("no session opened within the handshake timeout"),
            Closed::Violation(v) => write!(f, "cut: {v}"),
            Closed::Idle => f.write_str("silent for the idle timeout"),
            Closed::Server(e) => write!(f, "the server behind the guard failed: {e}"),
            Closed::Io(e) => write!(f, "{e}"),
        }
    }
}

/// How a connection ended: by its peer (`Ok`) or closed by the guard.
type Outcome = std::result::Result<(), Closed>;

impl From<io::Error> for Closed {
    fn from(e: io::Error) -> Closed {
        Closed::Io(e)
    }
}

/// Guards `listener` for a burn-remote server listening at `inner` (on loopback), from threads
/// of its own until the returned handle is dropped.
pub fn spawn(
    listener: std::net::TcpListener,
    inner: SocketAddr,
    limits: Limits,
) -> Result<Serving> {
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Device(format!("the listener has no address: {e}")))?;
    let guarding = server::on(listener, move |listener| async move {
        run(listener, inner, limits).await;
        Ok(())
    })?;
    Serving::start(addr, guarding)
}

/// Guards `listener`, relaying the connections that pass to the server at `inner`.
pub(crate) async fn run(listener: TcpListener, inner: SocketAddr, limits: Limits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let limits = Arc::new(limits);
    loop {
        let (client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, mostly: wait for connections to close.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "refused: {}", Refusal::Busy.reason());
            tokio::spawn(answer(client, Refusal::Busy));
            continue;
        };
        let limits = limits.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match connection(client, inner, &limits).await {
                Ok(()) => tracing::debug!(%peer, "connection ended"),
                Err(Closed::Io(e)) => tracing::debug!(%peer, "connection failed: {e}"),
                Err(why) => tracing::warn!(%peer, "connection closed: {why}"),
            }
        });
    }
}

/// Answers a refused request and closes, giving a client that does not read one second.
async fn answer(mut client: TcpStream, refusal: Refusal) {
    let _ = timeout(Duration::from_secs(1), client.write_all(refusal.response())).await;
}

/// Serves one connection: its request head, then the relay.
async fn connection(mut client: TcpStream, inner: SocketAddr, limits: &Limits) -> Outcome {
    let deadline = Instant::now() + limits.handshake_timeout;
    let mut head = Vec::with_capacity(1024);
    let len = loop {
        match request(&head) {
            Request::Session { len } => break len,
            Request::Refused(r) => {
                answer(client, r).await;
                return Err(Closed::Refused(r));
            }
            Request::Partial => {}
        }
        let mut chunk = [0u8; 1024];
        let n = timeout_at(deadline, client.read(&mut chunk))
            .await
            .map_err(|_| Closed::Handshake)??;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let mut server = match timeout_at(deadline, TcpStream::connect(inner)).await {
        Ok(Ok(server)) => server,
        Ok(Err(e)) => return Err(Closed::Server(e)),
        Err(_) => return Err(Closed::Server(io::ErrorKind::TimedOut.into())),
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    server.write_all(&head[..len]).await.map_err(Closed::Server)?;
    let early = head.split_off(len);
    relay(client, server, early, deadline, limits).await
}

/// Relays a session both ways until either side closes, a limit is broken or it falls silent.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    early: Vec<u8>,
    deadline: Instant,
    limits: &Limits,
) -> Outcome {
    let (from_client, to_client) = client.into_split();
    let (from_server, to_server) = server.into_split();
    let activity = Activity::new();
    let (answered, on_answer) = oneshot::channel();
    let mut upstream = Upstream {
        frames: Frames::new(MAX_OPENING),
        to: to_server,
        opening: Some((on_answer, deadline)),
        max_message: limits.max_message_bytes,
    };
    let up = async {
        upstream.pass(&early).await?;
        upstream.relay(from_client, &activity).await
    };
    let down = downstream(from_server, to_client, answered, &activity);
    tokio::select! {
        r = up => r,
        r = down => r,
        () = activity.silent_for(limits.idle_timeout) => Err(Closed::Idle),
    }
}

/// The client-to-server half, which reads frames as they pass.
struct Upstream {
    frames: Frames,
    to: OwnedWriteHalf,
    /// Until the session is open: the server's answer to its first message, and the deadline.
    opening: Option<(oneshot::Receiver<()>, Instant)>,
    max_message: u64,
}

impl Upstream {
    /// Relays what the client sends until it closes.
    async fn relay(&mut self, mut from: OwnedReadHalf, activity: &Activity) -> Outcome {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match self.opening {
                Some((_, deadline)) => timeout_at(deadline, from.read(&mut buf))
                    .await
                    .map_err(|_| Closed::Handshake)??,
                None => from.read(&mut buf).await?,
            };
            if n == 0 {
                return Ok(());
            }
            activity.touch();
            self.pass(&buf[..n]).await?;
        }
    }

    /// Forwards `bytes` frame by frame; after the session's first message, waits for the
    /// server's answer before reading on.
    async fn pass(&mut self, mut bytes: &[u8]) -> Outcome {
        while !bytes.is_empty() {
            let fed = self.frames.feed(bytes).map_err(Closed::Violation)?;
            self.to.write_all(&bytes[..fed.consumed]).await?;
            bytes = &bytes[fed.consumed..];
            if fed.message_ended
                && let Some((answer, deadline)) = self.opening.take()
            {
                match timeout_at(deadline, answer).await {
                    Ok(Ok(())) => self.frames.set_limit(self.max_message),
                    // The server closed without answering; the other half ends the relay.
                    Ok(Err(_)) => std::future::pending().await,
                    Err(_) => return Err(Closed::Handshake),
                }
            }
        }
        Ok(())
    }
}

/// The server-to-client half: copies, and says when the server has answered the session's
/// first message (the first byte after its HTTP response head).
async fn downstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    answered: oneshot::Sender<()>,
    activity: &Activity,
) -> Outcome {
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = HeadEnd::default();
    let mut answered = Some(answered);
    loop {
        let n = from.read(&mut buf).await.map_err(Closed::Server)?;
        if n == 0 {
            return Ok(());
        }
        activity.touch();
        to.write_all(&buf[..n]).await?;
        if answered.is_some()
            && head.past_end(&buf[..n])
            && let Some(answered) = answered.take()
        {
            let _ = answered.send(());
        }
    }
}

/// Finds the blank line that ends an HTTP head across reads.
#[derive(Default)]
struct HeadEnd {
    /// How much of `\r\n\r\n` the bytes so far end with (4: the head has ended).
    matched: usize,
}

impl HeadEnd {
    /// Reads the next bytes: whether any byte follows the end of the head.
    fn past_end(&mut self, bytes: &[u8]) -> bool {
        const END: &[u8; 4] = b"\r\n\r\n";
        for &b in bytes {
            if self.matched == END.len() {
                return true;
            }
            self.matched =
                if b == END[self.matched] { self.matched + 1 } else { usize::from(b == END[0]) };
        }
        false
    }
}

/// When a connection last carried bytes, either way.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity { start: Instant::now(), last_ms: AtomicU64::new(0) }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Returns once no bytes have passed for `idle`.
    async fn silent_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            if last.elapsed() >= idle {
                return;
            }
            tokio::time::sleep_until(last + idle).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_head_is_found_across_reads() {
        let response = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n";
        for cut in 0..response.len() {
            let mut h = HeadEnd::default();
            assert!(!h.past_end(&response[..cut]));
            assert!(!h.past_end(&response[cut..]), "cut at {cut}");
            assert!(h.past_end(&[0x82]));
        }
        let mut h = HeadEnd::default();
        assert!(h.past_end(b"HTTP/1.1 101 OK\r\n\r\r\n\r\n\x82"));
        assert!(!HeadEnd::default().past_end(b"HTTP/1.1 101 OK\r\n\r\n"));
    }
}
