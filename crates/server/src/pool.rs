//! The batcher: one queue per model, and one replica of the model per device, each on its own
//! thread, pulling the next batch whenever it is idle.
//!
//! Requests put their inputs on the queue in arrival order; a replica takes inputs from the
//! front until the batch's token or input budget is full, so inputs of several requests share
//! a batch and one request's inputs may spread over several. A replica whose device fails
//! leaves the rotation, its batch is retried once on another replica, and it reopens its model
//! (with a probe run) until the device works again.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use switchyard_core::{Backend, Bucket, DType};
use switchyard_models::{Marked, Prompts, Read, Runner, Task, Tokenizer};
use tokio::sync::oneshot;

use crate::metrics::{DeviceLabels, Metrics, ModelLabels};
use crate::{Config, Error, Result};

/// Opens a model on a device: called once at start, and again each time the replica
/// recovers from a failure.
pub type Opener<B> = Arc<dyn Fn() -> switchyard_models::Result<Runner<B>> + Send + Sync>;

/// One device's copy of a model.
pub struct Replica<B: Backend> {
    /// The device's name, for `/info`, `/health`, metrics and messages.
    pub device: String,
    /// Opens the model on the device.
    pub open: Opener<B>,
}

/// A model to serve: its name and a replica per device.
pub struct ModelSpec<B: Backend> {
    /// The name clients select it by (`model` in requests).
    pub name: String,
    /// One replica per device; at least one.
    pub replicas: Vec<Replica<B>>,
}

/// One input's output rows: one for a per-sequence output, one per marked token.
pub(crate) type Rows = Vec<Vec<f32>>;

/// Why a request got no result.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// A device failed running the request's batch, and no other replica could take it.
    Device(String),
    /// No replica of the model is healthy, or the server is shutting down.
    Unavailable(String),
    /// Running the batch failed for another reason.
    Internal(String),
}

/// A request's result: its inputs' rows in order, and how long it waited and computed.
pub(crate) struct Done {
    pub rows: Vec<Rows>,
    pub queued: Duration,
    pub computed: Duration,
}

/// What a request waits on.
pub(crate) type Reply = oneshot::Receiver<std::result::Result<Done, Failure>>;

/// What the HTTP side needs to know of a model, read from its first replica.
pub(crate) struct Meta {
    pub tokenizer: Tokenizer,
    pub task: Task,
    pub vocab: usize,
    /// The width of an embedding model's vectors (0 for other tasks).
    pub dim: usize,
    pub limit: Bucket,
    /// The prompts its sentence-transformers configuration names.
    pub prompts: Prompts,
    /// How an embedding model's vectors are compared.
    pub similarity: switchyard_models::scores::Similarity,
}

/// A request in flight: its inputs' slots, filled as batches finish.
struct Job {
    slots: Mutex<Vec<Option<Rows>>>,
    left: AtomicUsize,
    reply: Mutex<Option<oneshot::Sender<std::result::Result<Done, Failure>>>>,
    queued_at: Instant,
    started: OnceLock<Instant>,
}

impl Job {
    /// True once the client has gone away (its receiver dropped) or the job has its answer.
    fn abandoned(&self) -> bool {
        lock(&self.reply).as_ref().is_none_or(oneshot::Sender::is_closed)
    }

    /// Stores input `index`'s rows, answering the request when they were the last.
    fn put(&self, index: usize, rows: Rows) {
        lock(&self.slots)[index] = Some(rows);
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let rows = lock(&self.slots).drain(..).map(Option::unwrap_or_default).collect();
            let started = self.started.get().copied().unwrap_or(self.queued_at);
            let done = Done {
                rows,
                queued: started.duration_since(self.queued_at),
                computed: started.elapsed(),
            };
            if let Some(tx) = lock(&self.reply).take() {
                let _ = tx.send(Ok(done));
            }
        }
    }

    /// Answers the request with `failure`, unless it has its answer already.
    fn fail(&self, failure: Failure) {
        if let Some(tx) = lock(&self.reply).take() {
            let _ = tx.send(Err(failure));
        }
    }
}

/// One input on the queue.
struct Item {
    input: Marked,
    /// The output it wants; a batch holds inputs of one kind.
    read: Read,
    job: Arc<Job>,
    index: usize,
    /// Whether a replica already failed on it (it is retried once).
    retried: bool,
}

/// The queue and whether the pool is closing.
#[derive(Default)]
struct Queue {
    items: std::collections::VecDeque<Item>,
    closing: bool,
}

/// What a replica's thread shares with the others and with the HTTP side.
struct ReplicaState {
    device: String,
    /// The dtype the replica's backend computes in, as it reported when it opened.
    dtype: DType,
    healthy: AtomicBool,
}

/// The state the pool's threads and the HTTP side share.
struct Shared {
    model: String,
    queue: Mutex<Queue>,
    wake: Condvar,
    replicas: Vec<ReplicaState>,
    /// The most tokens, inputs and marked tokens a batch takes.
    budget: Bucket,
    metrics: Arc<Metrics>,
}

/// A model's queue and its replicas.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The first wait before a failed replica reopens its model; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two attempts to reopen a failed replica.
const MAX_BACKOFF: Duration = Duration::from_secs(15);

/// `m` locked, whether or not a thread panicked holding it (every update here is one step).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    /// Opens every replica of `spec` on its own thread; the model's metadata, or the first
    /// replica's error (the others are then stopped).
    pub fn start<B: Backend + 'static>(
        spec: ModelSpec<B>,
        config: &Config,
        metrics: Arc<Metrics>,
    ) -> Result<(Pool, Meta)> {
        if spec.replicas.is_empty() {
            return Err(Error::Setup(format!("the model {} has no device", spec.name)));
        }
        let devices: Vec<String> = spec.replicas.iter().map(|r| r.device.clone()).collect();
        let mut dtypes = vec![DType::F32; devices.len()];
        let (tx, rx) = mpsc::channel();
        let mut threads = Vec::new();
        for (me, replica) in spec.replicas.into_iter().enumerate() {
            let (tx, model) = (tx.clone(), spec.name.clone());
            let name = format!("{}@{}", spec.name, replica.device);
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || opening(me, model, replica, tx))
                .map_err(Error::Io)?;
            threads.push(handle);
        }
        drop(tx);
        let (mut meta, mut failure, mut waiting) = (None, None, Vec::new());
        for opened in rx {
            match opened {
                Ok((me, dtype, m, go)) => {
                    dtypes[me] = dtype;
                    meta.get_or_insert(m);
                    waiting.push(go);
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let setup = match (meta, failure) {
            (Some(meta), None) => batch_budget(meta.limit, config).map(|b| (meta, b)),
            (_, Some(e)) => Err(e),
            (None, None) => Err(Error::Setup(format!("no replica of {} started", spec.name))),
        };
        let (meta, budget) = match setup {
            Ok(ok) => ok,
            Err(e) => {
                // Every thread that opened its model waits on `go`; dropping it stops them.
                drop(waiting);
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        };
        let replicas = devices
            .into_iter()
            .zip(dtypes)
            .map(|(device, dtype)| ReplicaState { device, dtype, healthy: AtomicBool::new(true) })
            .collect();
        let shared = Arc::new(Shared {
            model: spec.name,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            replicas,
            budget,
            metrics,
        });
        for go in waiting {
            let _ = go.send(Arc::clone(&shared));
        }
        Ok((Pool { shared, threads: Mutex::new(threads) }, meta))
    }

    /// Queues a request's inputs; what to wait on for the answer, or why it cannot be queued.
    pub fn submit(&self, inputs: Vec<Marked>, read: Read) -> std::result::Result<Reply, Failure> {
        let (tx, rx) = oneshot::channel();
        let n = inputs.len();
        let job = Arc::new(Job {
            slots: Mutex::new(vec![None; n]),
            left: AtomicUsize::new(n),
            reply: Mutex::new(Some(tx)),
            queued_at: Instant::now(),
            started: OnceLock::new(),
        });
        let shared = &self.shared;
        let mut q = lock(&shared.queue);
        if q.closing {
            return Err(Failure::Unavailable("the server is shutting down".into()));
        }
        if !shared.any_healthy() {
            return Err(shared.none_healthy());
        }
        for (index, input) in inputs.into_iter().enumerate() {
            let job = Arc::clone(&job);
            q.items.push_back(Item { input, read, job, index, retried: false });
        }
        shared.depth().inc_by(n as i64);
        drop(q);
        shared.wake.notify_all();
        Ok(rx)
    }

    /// Each replica's device and whether it is in rotation.
    pub fn health(&self) -> Vec<(String, bool)> {
        let replicas = &self.shared.replicas;
        replicas.iter().map(|r| (r.device.clone(), r.healthy.load(Ordering::Acquire))).collect()
    }

    /// The dtype each replica computes in (`auto` resolves per device), in replica order.
    pub fn dtypes(&self) -> Vec<DType> {
        self.shared.replicas.iter().map(|r| r.dtype).collect()
    }

    /// The most tokens and inputs one batch takes.
    pub fn budget(&self) -> Bucket {
        self.shared.budget
    }

    /// Refuses new requests, lets the replicas finish what is queued, and waits for them.
    pub fn close(&self) {
        lock(&self.shared.queue).closing = true;
        self.shared.wake.notify_all();
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
    }
}

/// The batch budget: the model's batch limit, lowered by `--max-batch-tokens` and
/// `--max-batch-requests`; an error for a zero or for more tokens than the limit.
fn batch_budget(limit: Bucket, config: &Config) -> Result<Bucket> {
    let mut budget = limit;
    if let Some(t) = config.max_batch_tokens {
        if t == 0 || t > limit.tokens {
            return Err(Error::Setup(format!(
                "--max-batch-tokens {t}: a batch takes 1 to {} tokens here (the largest \
                 bucket of the bucket table that the model's widest value fits)",
                limit.tokens
            )));
        }
        budget.tokens = t;
    }
    if let Some(n) = config.max_batch_requests {
        if n == 0 {
            return Err(Error::Setup("--max-batch-requests must be at least 1".into()));
        }
        budget.seqs = budget.seqs.min(n);
    }
    Ok(budget)
}

/// What a replica's thread reports once it has opened its model (or failed to): which replica
/// it is, the dtype its backend computes in, the model's metadata, and the channel that starts
/// it serving.
type Opened = Result<(usize, DType, Meta, mpsc::Sender<Arc<Shared>>)>;

/// A replica's thread: opens the model, reports to [`Pool::start`], then serves batches until
/// the pool closes.
fn opening<B: Backend + 'static>(
    me: usize,
    model: String,
    replica: Replica<B>,
    report: mpsc::Sender<Opened>,
) {
    let _span = tracing::info_span!("open", device = %replica.device).entered();
    let runner = match (replica.open)() {
        Ok(r) => r,
        Err(source) => {
            let device = replica.device.clone();
            let _ = report.send(Err(Error::Open { model, device, source }));
            return;
        }
    };
    let model = runner.model();
    let meta = Meta {
        tokenizer: model.tokenizer().clone(),
        task: model.task().clone(),
        vocab: model.config().vocab,
        dim: model.embedding_dim().unwrap_or(0),
        limit: runner.batch_limit(),
        prompts: model.prompts().clone(),
        similarity: model.similarity(),
    };
    let dtype = runner.executor().caps().dtype;
    let (go_tx, go) = mpsc::channel();
    if report.send(Ok((me, dtype, meta, go_tx))).is_err() {
        return;
    }
    drop(report);
    // Started only if every replica opened.
    let Ok(shared) = go.recv() else { return };
    drop(_span);
    serving(&shared, me, &replica.open, runner);
}

/// Serves batches from the queue; after a failure, reopens the model until it works again.
fn serving<B: Backend>(shared: &Shared, me: usize, open: &Opener<B>, runner: Runner<B>) {
    let mut runner = Some(runner);
    let mut backoff = MIN_BACKOFF;
    loop {
        match runner.as_mut() {
            Some(r) => {
                let Some(batch) = shared.next_batch() else { return };
                if !shared.run(me, r, batch) {
                    runner = None;
                    backoff = MIN_BACKOFF;
                }
            }
            None => {
                if shared.closing_within(backoff) {
                    return;
                }
                runner = shared.recover(me, open);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

impl Shared {
    fn any_healthy(&self) -> bool {
        self.replicas.iter().any(|r| r.healthy.load(Ordering::Acquire))
    }

    fn none_healthy(&self) -> Failure {
        let devices: Vec<&str> = self.replicas.iter().map(|r| r.device.as_str()).collect();
        Failure::Unavailable(format!(
            "no device of {} is healthy ({}); retry once one recovers",
            self.model,
            devices.join(", ")
        ))
    }

    fn depth(&self) -> prometheus_client::metrics::gauge::Gauge {
        self.metrics.queue_depth.get_or_create(&ModelLabels { model: self.model.clone() }).clone()
    }

    fn device_labels(&self, me: usize) -> DeviceLabels {
        DeviceLabels { model: self.model.clone(), device: self.replicas[me].device.clone() }
    }

    /// The next batch in arrival order within the budget, skipping inputs whose client has
    /// gone; `None` once the pool is closing and the queue is empty.
    fn next_batch(&self) -> Option<Vec<Item>> {
        let mut q = lock(&self.queue);
        let mut dropped = 0;
        let mut batch = Vec::new();
        let (mut tokens, mut marks) = (0, 0);
        loop {
            while let Some(front) = q.items.front() {
                let (n, m) = (front.input.0.ids.len(), front.input.1.len());
                if front.job.abandoned() {
                    q.items.pop_front();
                    dropped += 1;
                    continue;
                }
                let other_read = batch.first().is_some_and(|b: &Item| b.read != front.read);
                if !batch.is_empty()
                    && (other_read
                        || tokens + n > self.budget.tokens
                        || marks + m > self.budget.markers
                        || batch.len() == self.budget.seqs)
                {
                    break;
                }
                tokens += n;
                marks += m;
                batch.extend(q.items.pop_front());
            }
            if dropped > 0 {
                self.depth().dec_by(dropped);
                tracing::debug!(model = %self.model, dropped, "inputs of requests whose client left");
                dropped = 0;
            }
            if !batch.is_empty() || q.closing {
                break;
            }
            q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        drop(q);
        self.depth().dec_by(batch.len() as i64);
        (!batch.is_empty()).then_some(batch)
    }

    /// Runs a batch on replica `me` and answers its inputs; false if the device failed (the
    /// replica has then left the rotation).
    fn run<B: Backend>(&self, me: usize, runner: &mut Runner<B>, batch: Vec<Item>) -> bool {
        let tokens: usize = batch.iter().map(|i| i.input.0.ids.len()).sum();
        let model = ModelLabels { model: self.model.clone() };
        self.metrics.batch_inputs.get_or_create(&model).observe(batch.len() as f64);
        self.metrics.batch_tokens.get_or_create(&model).observe(tokens as f64);
        let start = Instant::now();
        for item in &batch {
            item.job.started.get_or_init(|| start);
        }
        let span = tracing::debug_span!("batch", device = %self.replicas[me].device, inputs = batch.len(), tokens);
        let read = batch.first().map_or(Read::Head, |i| i.read);
        let ran = span.in_scope(|| {
            let inputs = batch.iter().map(|i| &i.input);
            catch_unwind(AssertUnwindSafe(|| runner.run_encoded(inputs, read)))
        });
        let busy = start.elapsed().as_secs_f64();
        self.metrics.device_busy.get_or_create(&self.device_labels(me)).inc_by(busy);
        match ran {
            Ok(Ok(rows)) => {
                for (item, rows) in batch.into_iter().zip(rows) {
                    item.job.put(item.index, rows);
                }
                true
            }
            Ok(Err(e)) if device_failed(&e) => {
                self.failed(me, batch, &e.to_string());
                false
            }
            Ok(Err(e)) => {
                tracing::error!(model = %self.model, error = %e, "a batch failed");
                for item in batch {
                    item.job.fail(Failure::Internal(e.to_string()));
                }
                true
            }
            Err(_) => {
                // A panic leaves the runner in an unknown state: out of rotation first, so that
                // a client answered below already sees it gone, then fail the batch (retrying it
                // could take down the next replica too); the model reopens.
                self.failed(me, Vec::new(), "running a batch panicked");
                for item in &batch {
                    item.job.fail(Failure::Internal("running the batch panicked".into()));
                }
                false
            }
        }
    }

    /// Takes replica `me` out of rotation and retries its batch once on another; with no
    /// healthy replica left, fails the batch and everything queued.
    fn failed(&self, me: usize, batch: Vec<Item>, error: &str) {
        let device = &self.replicas[me].device;
        self.replicas[me].healthy.store(false, Ordering::Release);
        self.metrics.device_failures.get_or_create(&self.device_labels(me)).inc();
        tracing::warn!(model = %self.model, %device, %error, "replica out of rotation until it recovers");
        let mut q = lock(&self.queue);
        let others = self.any_healthy() && !q.closing;
        let mut requeued = 0;
        for mut item in batch.into_iter().rev() {
            if others && !item.retried {
                item.retried = true;
                q.items.push_front(item);
                requeued += 1;
            } else {
                item.job.fail(Failure::Device(format!("{device}: {error}")));
            }
        }
        let stranded: Vec<Item> = if others { Vec::new() } else { q.items.drain(..).collect() };
        drop(q);
        self.depth().inc_by(requeued);
        self.depth().dec_by(stranded.len() as i64);
        let failure = self.none_healthy();
        for item in stranded {
            item.job.fail(failure.clone());
        }
        self.wake.notify_all();
    }

    /// Waits `wait`, or less if the pool starts closing; whether it is closing.
    fn closing_within(&self, wait: Duration) -> bool {
        let q = lock(&self.queue);
        let (q, _) = self
            .wake
            .wait_timeout_while(q, wait, |q| !q.closing)
            .unwrap_or_else(PoisonError::into_inner);
        q.closing
    }

    /// Reopens the model on replica `me` and runs one short input; the runner, back in
    /// rotation, if both worked.
    fn recover<B: Backend>(&self, me: usize, open: &Opener<B>) -> Option<Runner<B>> {
        let device = &self.replicas[me].device;
        let probe = |r: &mut Runner<B>| -> switchyard_models::Result<()> {
            let input = (r.model().tokenizer().encode("")?, Vec::new());
            r.run_encoded([&input], Read::Head).map(drop)
        };
        let attempt = catch_unwind(AssertUnwindSafe(|| {
            let mut r = open()?;
            probe(&mut r)?;
            Ok::<_, switchyard_models::Error>(r)
        }));
        match attempt {
            Ok(Ok(r)) => {
                self.replicas[me].healthy.store(true, Ordering::Release);
                tracing::info!(model = %self.model, %device, "replica recovered, back in rotation");
                self.wake.notify_all();
                Some(r)
            }
            Ok(Err(e)) => {
                tracing::debug!(model = %self.model, %device, error = %e, "replica still failing");
                None
            }
            Err(_) => None,
        }
    }
}

/// Whether a run's error means the device failed (rather than the batch or the model).
fn device_failed(e: &switchyard_models::Error) -> bool {
    use switchyard_core::Error as E;
    matches!(e, switchyard_models::Error::Core(E::Device(_) | E::Io { .. }))
}
