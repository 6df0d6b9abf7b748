//! The server: a device of this machine, served to clients with burn-remote's WebSocket
//! transport, behind the guard.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use burn_ir::BackendIr;
use burn_remote::server::{
    AuthorizationRequest, BackendServer, PeerAuthorizer, WebSocketTransport,
};
use burn_remote::telemetry::TelemetryProbe;
use switchyard_burn::{Burn, Kernels};
use switchyard_core::{Error, Result};

use crate::guard::{self, Limits};
use crate::token_of;

/// Binds `listen` for a server: a loopback address, or any address when `public` says the
/// operator accepts that the transport is neither authenticated beyond a token nor encrypted.
pub fn bind(listen: SocketAddr, public: bool) -> Result<TcpListener> {
    if !listen.ip().is_loopback() && !public {
        return Err(Error::Device(format!(
            "refusing to listen on {listen}: burn-remote's WebSocket transport is not encrypted, \
             so a server listens on loopback (127.0.0.1) unless told otherwise. Reach it through \
             an SSH tunnel or a TLS-terminating proxy (see docs/remote.md), or pass --public to \
             accept the risk"
        )));
    }
    TcpListener::bind(listen).map_err(|e| Error::Device(format!("cannot listen on {listen}: {e}")))
}

/// A server of one device.
pub struct Server<B: BackendIr> {
    inner: BackendServer<B>,
    limits: Limits,
}

impl<B: BackendIr> Server<B> {
    /// Serves the device of `backend`, to clients that present `token` if one is given.
    pub fn of<K: Kernels<B>>(backend: &Burn<B, K>, token: Option<&str>) -> Server<B> {
        let token = token.filter(|t| !t.is_empty()).map(|t| t.as_bytes().to_vec());
        let inner = BackendServer::<B>::new([backend.device().clone()])
            .with_authorizer(SessionAuthorizer { token });
        Server { inner, limits: Limits::default() }
    }

    /// Reports every session's activity to `probe` (the bench counts ops and reads with it).
    pub fn with_telemetry(self, probe: TelemetryProbe) -> Server<B> {
        Server { inner: self.inner.with_telemetry(probe), ..self }
    }

    /// burn-remote's server on a loopback port of its own, and the guard on `listener` in
    /// front of it; the future ends when either stops.
    fn guarded(&self, listener: TcpListener) -> Result<impl Future<Output = Result<()>> + use<B>> {
        let behind = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::Device(format!("cannot bind the server behind the guard: {e}")))?;
        let inner = behind
            .local_addr()
            .map_err(|e| Error::Device(format!("the server behind the guard: {e}")))?;
        // Its connections inherit the listener's TCP_NODELAY (on Linux), so that small answers
        // are not held back by Nagle's algorithm, as burn-remote's client does for its side.
        if let Err(e) = socket2::SockRef::from(&behind).set_tcp_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY behind the guard: {e}");
        }
        let server = self.inner.serve_async(WebSocketTransport::from_listener(behind));
        let limits = self.limits.clone();
        on(listener, move |listener| async move {
            tokio::select! {
                r = server => r.map_err(|e| Error::Device(format!("the server stopped: {e}"))),
                () = guard::run(listener, inner, limits) => Ok(()),
            }
        })
    }
}

/// What serves `listener` with `serve`, to run in a runtime.
pub(crate) fn on<F, Fut>(
    listener: TcpListener,
    serve: F,
) -> Result<impl Future<Output = Result<()>> + Send + 'static>
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Device(format!("cannot serve on the listener: {e}")))?;
    Ok(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Error::Device(format!("cannot serve on the listener: {e}")))?;
        serve(listener).await
    })
}

/// A server of one device, whatever its backend.
pub trait Serve {
    /// Sets what the guard in front of the server allows (default: [`Limits::default`]).
    fn set_limits(&mut self, limits: Limits);

    /// Serves on `listener` until the process ends.
    fn serve(&self, listener: TcpListener) -> Result<()>;

    /// Serves on `listener` from threads of its own until the returned handle is dropped.
    fn spawn(&self, listener: TcpListener) -> Result<Serving>;
}

impl<B: BackendIr> Serve for Server<B> {
    fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    fn serve(&self, listener: TcpListener) -> Result<()> {
        let addr = listener.local_addr().ok();
        let _span = tracing::info_span!("serve", ?addr).entered();
        let guarded = self.guarded(listener)?;
        runtime()?.block_on(guarded)
    }

    fn spawn(&self, listener: TcpListener) -> Result<Serving> {
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Device(format!("the listener has no address: {e}")))?;
        Serving::start(addr, self.guarded(listener)?)
    }
}

/// A runtime for a server's sessions.
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Device(format!("cannot start the server's runtime: {e}")))
}

/// A server running in this process; dropping it stops the server and ends its sessions.
pub struct Serving {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl Serving {
    /// Runs `serving`, which listens on `addr`, on a runtime of its own.
    pub(crate) fn start(
        addr: SocketAddr,
        serving: impl Future<Output = Result<()>> + Send + 'static,
    ) -> Result<Serving> {
        let runtime = runtime()?;
        let task = runtime.spawn(serving);
        Ok(Serving { addr, runtime: Some(runtime), task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The name a client gives the device: `remote:HOST:PORT`.
    pub fn device_name(&self) -> String {
        device_name(self.addr)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// `remote:HOST:PORT` for a server at `addr` (IPv6 hosts in brackets).
pub fn device_name(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("remote:{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("remote:[{}]:{}", a.ip(), a.port()),
    }
}

/// Opens every session when no token is set, else the sessions whose credential carries it.
struct SessionAuthorizer {
    token: Option<Vec<u8>>,
}

impl PeerAuthorizer for SessionAuthorizer {
    fn authorize(&self, request: AuthorizationRequest<'_>) -> std::result::Result<(), String> {
        match &self.token {
            None => Ok(()),
            Some(token) if same(token_of(request.credential.as_bytes()), token) => Ok(()),
            Some(_) => Err(format!("{} presented the wrong token", request.client)),
        }
    }
}

/// Compares in time that depends only on the lengths, so timing does not reveal the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let diff = (0..n).fold(a.len() ^ b.len(), |d, i| {
        d | usize::from(a.get(i).unwrap_or(&0) ^ b.get(i).unwrap_or(&0))
    });
    diff == 0
}

#[cfg(test)]
mod tests {
    use burn_remote::Credential;
    use burn_remote::server::ClientId;

    use super::*;
    use crate::credential;

    fn request(c: &Credential) -> AuthorizationRequest<'_> {
        AuthorizationRequest {
            client: ClientId::WebSocket("127.0.0.1:5000".parse().unwrap()),
            device_index: 0,
            credential: c,
        }
    }

    #[test]
    fn a_server_without_a_token_opens_every_session() {
        let a = SessionAuthorizer { token: None };
        assert!(a.authorize(request(&Credential::default())).is_ok());
        assert!(a.authorize(request(&credential(3, "anything").into())).is_ok());
    }

    #[test]
    fn a_server_with_a_token_opens_only_sessions_that_carry_it() {
        let a = SessionAuthorizer { token: Some(b"s3cret".to_vec()) };
        for session in [0, 7, u64::MAX] {
            assert!(a.authorize(request(&credential(session, "s3cret").into())).is_ok());
        }
        for wrong in ["", "s3cre", "s3cret!", "S3CRET"] {
            let e = a.authorize(request(&credential(1, wrong).into())).unwrap_err();
            assert!(e.contains("wrong token"), "{e}");
        }
        assert!(a.authorize(request(&Credential::default())).is_err());
    }

    #[test]
    fn same_compares_whole_slices() {
        assert!(same(b"abc", b"abc"));
        assert!(same(b"", b""));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"abc", b""));
    }

    #[test]
    fn only_loopback_is_bound_unless_public() {
        let e = bind("0.0.0.0:0".parse().unwrap(), false).unwrap_err().to_string();
        assert!(e.contains("refusing to listen on 0.0.0.0:0") && e.contains("--public"), "{e}");
        let l = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
    }

    #[test]
    fn device_names_bracket_ipv6_hosts() {
        assert_eq!(device_name("127.0.0.1:7878".parse().unwrap()), "remote:127.0.0.1:7878");
        assert_eq!(device_name("[::1]:7878".parse().unwrap()), "remote:[::1]:7878");
    }
}
