//! The client: the switchyard-burn lowering on burn-remote's backend, on a device the server
//! hosts, with reconnection after the server goes away.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use burn_remote::{HostSpec, RemoteBackend};
use switchyard_burn::{Burn, BurnPlan, BurnWeights, Generic};
use switchyard_core::{
    Backend, Batch, BatchBuf, Bucket, Caps, DType, DeviceKind, Error, Graph, HostTensor, Outputs,
    Result,
};

use crate::worker::Worker;
use crate::{TIMEOUT_ENV, TOKEN_ENV, credential};

/// The Switchyard lowering on burn-remote, for one connection.
type Lowering = Burn<RemoteBackend, Generic>;

/// How a client talks to its server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteOptions {
    /// The longest wait for a connect or for an answer; longer is an [`Error::Device`].
    pub timeout: Duration,
    /// The token the server asks for, if it asks for one.
    pub token: Option<String>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions { timeout: Duration::from_secs(60), token: None }
    }
}

impl RemoteOptions {
    /// The defaults, changed by `SWITCHYARD_REMOTE_TIMEOUT` (seconds, fractions allowed) and
    /// `SWITCHYARD_REMOTE_TOKEN`.
    pub fn from_env() -> Result<RemoteOptions> {
        let mut o = RemoteOptions::default();
        if let Ok(t) = std::env::var(TIMEOUT_ENV) {
            o.timeout = parse_timeout(&t)?;
        }
        o.token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
        Ok(o)
    }
}

/// Seconds, as `SWITCHYARD_REMOTE_TIMEOUT` gives them.
fn parse_timeout(s: &str) -> Result<Duration> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0 && *x < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            Error::Device(format!("{TIMEOUT_ENV}=`{s}` is not a number of seconds above zero"))
        })
}

/// The session each server (by URL and token) is on in this process, shared by all its clients.
///
/// A session is a device to burn-remote, which keeps a thread for each device it has seen for the
/// life of the process; so clients share a session, and a new one is started only when a
/// connected session fails (its number is part of the credential, which is what makes it a new
/// device to burn-remote). A connect that fails leaves its session unopened, to be tried again.
static SESSIONS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());

/// The session clients of `server` are to use.
fn current_session(server: &(String, String)) -> u64 {
    *lock(&SESSIONS).entry(server.clone()).or_insert(0)
}

/// Gives up session `failed` of `server`, unless another client already has.
fn retire_session(server: &(String, String), failed: u64) {
    let mut sessions = lock(&SESSIONS);
    let current = sessions.entry(server.clone()).or_insert(0);
    if *current == failed {
        *current += 1;
    }
}

/// A client's connection: the session it uses, and its own thread that talks to the server.
struct Conn {
    /// Which session of the server it is.
    session: u64,
    lowering: Arc<Lowering>,
    worker: Worker,
}

/// A Switchyard backend on a device of another machine, served by `switchyard remote-serve`.
///
/// Weights are uploaded once and stay on the server; a run streams its ops and reads back only
/// the outputs. A copy of the weights stays on this side too: when the server goes away and
/// comes back, the next call opens a new session and uploads them again.
pub struct Remote {
    /// `remote:HOST:PORT`.
    name: String,
    /// The server's URL and the token: what its sessions are shared by.
    server: (String, String),
    options: RemoteOptions,
    conn: Mutex<Arc<Conn>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.name)
    }
}

/// `remote:HOST:PORT` as the table of backends opens it: [`connect`] with the timeout and token
/// of the environment ([`RemoteOptions::from_env`]).
pub fn open(host: &str, port: u16) -> Result<Remote> {
    connect(host, port, RemoteOptions::from_env()?)
}

/// Connects to the server at `host:port` (the host as a name, an IPv4 address or a bracketed
/// IPv6 address): an [`Error::Device`] within `options.timeout` if it cannot.
pub fn connect(host: &str, port: u16, options: RemoteOptions) -> Result<Remote> {
    let name = format!("remote:{host}:{port}");
    let server = (format!("ws://{host}:{port}"), options.token.clone().unwrap_or_default());
    let _span = tracing::info_span!("connect", device = %name).entered();
    refused_at_once(&name, host, port, options.timeout)?;
    let conn = open_conn(&name, &server, &options)?;
    Ok(Remote { name, server, options, conn: Mutex::new(Arc::new(conn)) })
}

/// The error of a connect to a server that is not there.
fn cannot_reach(name: &str, why: &str) -> Error {
    Error::Device(format!(
        "{name} failed to connect: {why} (is `switchyard remote-serve` running there, and does \
         {TOKEN_ENV} match its token?)"
    ))
}

/// An error at once where nothing can listen at `host:port` (the name does not resolve, or every
/// address refuses a TCP connection), where burn-remote would retry for about 15 s; `Ok` where
/// something answers or the network is only slow, for burn-remote's connect to decide.
fn refused_at_once(name: &str, host: &str, port: u16, timeout: Duration) -> Result<()> {
    use std::net::{TcpStream, ToSocketAddrs};
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let addrs: Vec<_> = (bare, port)
        .to_socket_addrs()
        .map_err(|e| cannot_reach(name, &format!("cannot resolve {host}: {e}")))?
        .collect();
    let mut refused = format!("{host} has no address");
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = format!("{addr} refused the connection ({e})");
            }
            _ => return Ok(()),
        }
    }
    Err(cannot_reach(name, &refused))
}

/// Connects to the current session of `server`, with a thread of the caller's own, and checks
/// with a round trip that the server answers in it.
fn open_conn(name: &str, server: &(String, String), options: &RemoteOptions) -> Result<Conn> {
    let mut why = String::new();
    // A second try only after finding the session open but its server gone (restarted since).
    for _ in 0..2 {
        let session = current_session(server);
        let worker = Worker::start(name.to_owned(), options.timeout)?;
        let spec = HostSpec::websocket(&server.0).with_credential(credential(session, &server.1));
        let checked = worker.call("connect", move || match spec.connect(0) {
            Ok(device) => match sync(&device) {
                Ok(()) => Ok(device),
                Err(e) => Err((true, strip(&e))),
            },
            Err(e) => Err((false, e.to_string())),
        });
        match checked {
            Ok(Ok(device)) => {
                let lowering = Arc::new(Burn::new(device, Generic, caps(name)));
                tracing::debug!(device = %name, session, "connected");
                return Ok(Conn { session, lowering, worker });
            }
            Ok(Err((true, e))) => {
                why = format!("{name} failed to connect: its session is gone ({e})");
                retire_session(server, session);
            }
            Ok(Err((false, e))) => {
                why = format!("{name} failed to connect: {e}");
                break;
            }
            Err(e) => {
                why = strip(&e);
                break;
            }
        }
    }
    Err(Error::Device(format!(
        "{why} (is `switchyard remote-serve` running there, and does {TOKEN_ENV} match its token?)"
    )))
}

/// What a remote device can do, as far as this side knows: the server does not describe its
/// device, so it computes in f32, which always works.
fn caps(name: &str) -> Caps {
    Caps::new("remote", name, DeviceKind::Remote)
}

/// Checkpoint tensors as they were handed to `upload`, kept to upload again after a restart.
struct HostCopy {
    tensors: Vec<(DType, Vec<usize>, Vec<u8>)>,
    graph: Graph,
}

struct WeightsState {
    host: HostCopy,
    /// The weights on the server, and the session that holds them.
    placed: Mutex<Option<(u64, Arc<BurnWeights<RemoteBackend>>)>>,
    /// Bytes the weights take on the server, once uploaded.
    bytes: AtomicUsize,
}

/// Weights on the server, with the host copy that uploads them again after a restart.
#[derive(Clone)]
pub struct RemoteWeights(Arc<WeightsState>);

impl std::fmt::Debug for RemoteWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteWeights({} tensors)", self.0.host.tensors.len())
    }
}

/// A plan on the server, lowered again when the session changes.
pub struct RemotePlan {
    weights: RemoteWeights,
    graph: Graph,
    bucket: Bucket,
    /// The plan in its session.
    placed: Mutex<Option<(u64, Arc<BurnPlan<RemoteBackend>>)>>,
    bytes: usize,
}

impl std::fmt::Debug for RemotePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemotePlan({})", self.bucket)
    }
}

impl Remote {
    /// The session to use: the current one, or a new one if it has failed.
    fn conn(&self) -> Result<Arc<Conn>> {
        let mut conn = lock(&self.conn);
        if conn.worker.is_broken() {
            let _span = tracing::info_span!("reconnect", device = %self.name).entered();
            retire_session(&self.server, conn.session);
            *conn = Arc::new(open_conn(&self.name, &self.server, &self.options)?);
        }
        Ok(conn.clone())
    }

    /// The weights in `conn`'s session, uploaded there if they are not yet.
    fn place(&self, conn: &Conn, w: &RemoteWeights) -> Result<Arc<BurnWeights<RemoteBackend>>> {
        let mut placed = lock(&w.0.placed);
        if let Some((session, on)) = placed.as_ref()
            && *session == conn.session
        {
            return Ok(on.clone());
        }
        let (state, lowering) = (w.0.clone(), conn.lowering.clone());
        let on = conn.worker.call("upload weights", move || {
            let host = &state.host;
            let views: Vec<HostTensor<'_>> = host
                .tensors
                .iter()
                .map(|(dtype, shape, bytes)| HostTensor { dtype: *dtype, shape, bytes })
                .collect();
            let w = lowering.upload(&views, &host.graph)?;
            // A round trip, so a server that cannot take the weights says so here.
            sync(lowering.device())?;
            Ok::<_, Error>(w)
        })?;
        let on = Arc::new(on.map_err(|e| {
            conn.worker.break_off();
            upload_failed(&self.name, &w.0.host, &e)
        })?);
        w.0.bytes.store(conn.lowering.weight_bytes(&on), Ordering::Relaxed);
        *placed = Some((conn.session, on.clone()));
        Ok(on)
    }

    /// `plan` lowered in `conn`'s session (once per session).
    fn lower_in(&self, conn: &Conn, plan: &RemotePlan) -> Result<Arc<BurnPlan<RemoteBackend>>> {
        let mut placed = lock(&plan.placed);
        if let Some((session, p)) = placed.as_ref()
            && *session == conn.session
        {
            return Ok(p.clone());
        }
        let w = self.place(conn, &plan.weights)?;
        let (lowering, graph, bucket) = (conn.lowering.clone(), plan.graph.clone(), plan.bucket);
        let p = conn.worker.call("lower a plan", move || lowering.lower(&w, &graph, bucket))??;
        let p = Arc::new(p);
        *placed = Some((conn.session, p.clone()));
        Ok(p)
    }

    /// Runs `batch` in `conn`'s session.
    fn run_in(
        &self,
        conn: &Conn,
        plan: &RemotePlan,
        batch: &Arc<BatchBuf>,
        out: &mut Outputs,
    ) -> Result<()> {
        let placed = self.lower_in(conn, plan)?;
        let (lowering, batch) = (conn.lowering.clone(), batch.clone());
        let mut outputs = std::mem::take(out);
        let (outputs, ran) = conn.worker.call("run a batch", move || {
            // A run's state is a slot per value, made where the run happens.
            let ran = lowering.state(&placed).and_then(|mut state| {
                lowering.run(&placed, &mut state, &batch.batch(), &mut outputs)
            });
            (outputs, ran)
        })?;
        *out = outputs;
        ran.map_err(|e| {
            // The lowering only fails a checked batch when the device does: a read came back
            // empty. Whatever the server still holds, this session is not to be trusted.
            conn.worker.break_off();
            Error::Device(format!("{} failed to run a batch: {}", self.name, strip(&e)))
        })
    }
}

/// Waits until the server has run everything sent so far.
fn sync(device: &burn_remote::RemoteDevice) -> Result<()> {
    <RemoteBackend as burn_backend::Backend>::sync(device)
        .map_err(|e| Error::Device(format!("the server failed: {e:?}")))
}

/// Locks `m`, whose data stays consistent even if a holder panicked (it is only ever replaced
/// whole).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Backend for Remote {
    type Weights = RemoteWeights;
    type Plan = RemotePlan;
    /// Nothing: a run's state lives on the connection's thread, which takes one run at a time.
    type State = ();

    fn caps(&self) -> Caps {
        caps(&self.name)
    }

    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<RemoteWeights> {
        let _span = tracing::info_span!("upload", device = %self.name).entered();
        graph.check_weights(tensors)?;
        let host = HostCopy {
            tensors: tensors
                .iter()
                .map(|t| (t.dtype, t.shape.to_vec(), t.bytes.to_vec()))
                .collect(),
            graph: graph.clone(),
        };
        let state = WeightsState { host, placed: Mutex::new(None), bytes: AtomicUsize::new(0) };
        let w = RemoteWeights(Arc::new(state));
        self.place(&*self.conn()?, &w)?;
        Ok(w)
    }

    fn lower(&self, w: &RemoteWeights, graph: &Graph, bucket: Bucket) -> Result<RemotePlan> {
        let _span = tracing::debug_span!("lower", device = %self.name, %bucket).entered();
        let conn = self.conn()?;
        let mut plan = RemotePlan {
            weights: w.clone(),
            graph: graph.clone(),
            bucket,
            placed: Mutex::new(None),
            bytes: 0,
        };
        let placed = self.lower_in(&conn, &plan)?;
        plan.bytes = conn.lowering.plan_bytes(&placed);
        Ok(plan)
    }

    fn state(&self, _plan: &RemotePlan) -> Result<()> {
        Ok(())
    }

    fn run(
        &self,
        plan: &RemotePlan,
        _state: &mut (),
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()> {
        let _span =
            tracing::trace_span!("run", device = %self.name, tokens = batch.tokens()).entered();
        plan.bucket.admit(batch)?;
        let batch = Arc::new(BatchBuf::copy_of(batch));
        let conn = self.conn()?;
        match self.run_in(&conn, plan, &batch, out) {
            Err(first) if conn.worker.is_broken() => {
                // The session failed. A run changes nothing on the server, so it is safe to run
                // again once, in a new session with the weights uploaded again; if the server is
                // still away, the error says both what failed and that reconnecting did.
                tracing::warn!(device = %self.name, error = %first, "session lost; reconnecting");
                let conn = self.conn().map_err(|e| {
                    Error::Device(format!(
                        "{}; reconnecting failed too: {}",
                        strip(&first),
                        strip(&e)
                    ))
                })?;
                self.run_in(&conn, plan, &batch, out)
            }
            other => other,
        }
    }

    fn weight_bytes(&self, w: &RemoteWeights) -> usize {
        w.0.bytes.load(Ordering::Relaxed)
    }

    fn plan_bytes(&self, p: &RemotePlan) -> usize {
        p.bytes
    }
}

/// An upload's failure, with the one limit of the server's that an upload alone can break.
fn upload_failed(name: &str, host: &HostCopy, e: &Error) -> Error {
    let largest = host.tensors.iter().map(|(_, _, bytes)| bytes.len()).max().unwrap_or(0);
    Error::Device(format!(
        "{name} failed to take the weights: {}; their largest tensor is {:.1} MiB, which a \
         server started with a smaller --max-message-mib refuses (its log then says the message \
         is over the limit)",
        strip(e),
        largest as f64 / f64::from(1 << 20)
    ))
}

/// An error's message without the `device error: ` that its display starts with.
fn strip(e: &Error) -> String {
    match e {
        Error::Device(m) => m.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_as_seconds_and_nonsense_is_refused() {
        assert_eq!(parse_timeout("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_timeout(" 30 ").unwrap(), Duration::from_secs(30));
        for bad in ["0", "-1", "soon", "inf", "NaN", ""] {
            let e = parse_timeout(bad).unwrap_err().to_string();
            assert!(e.contains("SWITCHYARD_REMOTE_TIMEOUT") && e.contains(bad), "{bad}: {e}");
        }
    }
}
