//! switchyard-server: an HTTP inference server for encoders, compatible with
//! text-embeddings-inference's routes and OpenAI's embeddings API, batching the inputs of
//! concurrent requests together and spreading batches over several devices.
//!
//! A [`Server`] holds one or more models ([`ModelSpec`]), each with a replica per device
//! ([`Replica`]). Every request is tokenized off the async threads and its inputs queued on
//! its model's queue; each replica runs on its own thread and takes the next ragged batch
//! (no padding) whenever it is idle, so devices add up and a slow one takes less work. A
//! replica whose device fails leaves the rotation, its batch is retried once on another, and
//! it comes back when reopening the model works again.
//!
//! The routes and every flag of `switchyard serve` are in `docs/server.md`.

mod api;
mod config;
mod error;
mod metrics;
mod pool;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use switchyard_core::Backend;
use switchyard_models::{Prompt, Task};

pub use config::{Config, DefaultPrompt};
pub use error::{Error, Result};
pub use pool::{ModelSpec, Opener, Replica};

/// Models opened on their devices, ready to serve.
pub struct Server {
    app: Arc<api::App>,
}

impl Server {
    /// Opens every replica of every model, each on its own thread: an error naming the model
    /// and device if one fails to open, or for models or limits that make no server.
    pub fn new<B: Backend + 'static>(config: Config, models: Vec<ModelSpec<B>>) -> Result<Server> {
        check(&config, &models)?;
        let metrics = Arc::new(metrics::Metrics::new());
        let mut served = Vec::with_capacity(models.len());
        for spec in models {
            let name = spec.name.clone();
            let (pool, meta) = pool::Pool::start(spec, &config, Arc::clone(&metrics))?;
            let default_prompt = default_prompt(&config.default_prompt, &name, &meta)?;
            tracing::info!(model = %name, task = meta.task.describe(), ?default_prompt, "serving");
            let devices: Vec<String> = pool.health().into_iter().map(|(d, _)| d).collect();
            let devices = devices.join(",");
            served.push(api::Served { name, devices, meta, default_prompt, pool });
        }
        if config.default_prompt != DefaultPrompt::Model
            && !served.iter().any(|s| takes_prompts(&s.meta.task))
        {
            return Err(Error::Setup(
                "a default prompt goes before the texts of embedding and sparse models, and none \
                 is served"
                    .into(),
            ));
        }
        Ok(Server { app: Arc::new(api::App::new(config, served, metrics)) })
    }

    /// Serves on `listener` until `shutdown` completes; then stops accepting, answers every
    /// request already received, and stops the replicas.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let router = api::router(Arc::clone(&self.app));
        axum::serve(listener, router).with_graceful_shutdown(shutdown).await?;
        let app = self.app;
        tokio::task::spawn_blocking(move || app.models.iter().for_each(|m| m.pool.close()))
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        tracing::info!("stopped");
        Ok(())
    }
}

impl Server {
    /// Serves on `listener` until Ctrl-C or SIGTERM, on a runtime of its own; then finishes
    /// as [`Server::serve`] does.
    pub fn run(self, listener: std::net::TcpListener) -> Result<()> {
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            self.serve(listener, shutdown_signal()).await
        })
    }
}

impl Server {
    /// Serves on `listener` from a thread of its own, on a runtime of its own, until
    /// [`Running::shutdown`] or the handle is dropped: a server inside another program.
    pub fn spawn(self, listener: std::net::TcpListener) -> Result<Running> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread =
            std::thread::Builder::new().name("switchyard-serve".into()).spawn(move || {
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let until = async move {
                        let _ = stopped.await;
                    };
                    self.serve(listener, until).await
                })
            })?;
        Ok(Running { addr, stop: Some(stop), thread: Some(thread) })
    }
}

/// A server serving on a thread of its own ([`Server::spawn`]).
pub struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Asks it to shut down (it stops accepting and answers what it received), without
    /// waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Shuts it down and waits until it has stopped: how serving ended.
    pub fn shutdown(mut self) -> Result<()> {
        self.begin_shutdown();
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(ended)) => ended,
            Some(Err(_)) => Err(Error::Io(std::io::Error::other("the server's thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    /// Asks the server to shut down without waiting for it (see [`Running::shutdown`]).
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}

/// Binds `listen`: a loopback address, or any address when `public` says the operator means
/// to serve beyond this machine.
pub fn bind(listen: SocketAddr, public: bool) -> Result<std::net::TcpListener> {
    if !listen.ip().is_loopback() && !public {
        return Err(Error::Setup(format!(
            "refusing to listen on {listen}: the server listens on loopback (127.0.0.1) unless \
             --public says to serve the network (then set --api-key, and put TLS in front: \
             see docs/server.md)"
        )));
    }
    std::net::TcpListener::bind(listen).map_err(|e| {
        Error::Io(std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))
    })
}

/// Completes on Ctrl-C or, on Unix, SIGTERM: the usual reasons to shut down.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing the requests received");
}

/// Refuses models and limits that make no server.
fn check<B: Backend>(config: &Config, models: &[ModelSpec<B>]) -> Result<()> {
    if models.is_empty() {
        return Err(Error::Setup("a server needs at least one model".into()));
    }
    for (i, m) in models.iter().enumerate() {
        if models[..i].iter().any(|o| o.name == m.name) {
            return Err(Error::Setup(format!(
                "two models are named {:?}; name them with --model NAME=PATH",
                m.name
            )));
        }
    }
    let limits = [
        ("--max-client-batch-size", config.max_client_batch_size),
        ("--max-concurrent-requests", config.max_concurrent_requests),
        ("--payload-limit", config.payload_limit),
    ];
    if let Some((flag, _)) = limits.iter().find(|(_, v)| *v == 0) {
        return Err(Error::Setup(format!("{flag} must be at least 1")));
    }
    Ok(())
}

/// Whether a model of this task puts prompts before its texts: embedding and sparse models do.
pub(crate) fn takes_prompts(task: &Task) -> bool {
    matches!(task, Task::Embed(_) | Task::Sparse)
}

/// The text model `name` puts before the texts of a request that names no prompt: the one
/// `choice` makes where the model takes prompts, else the model's own default; an error for a
/// name it does not have, or a prompt it cannot take.
fn default_prompt(choice: &DefaultPrompt, name: &str, meta: &pool::Meta) -> Result<String> {
    let choice = if takes_prompts(&meta.task) { choice.choice() } else { Prompt::Default };
    match meta.prompts.text(choice) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => Err(Error::Setup(format!("model {name:?}: {e}"))),
    }
}
