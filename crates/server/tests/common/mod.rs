//! What the server tests share: a backend that can be held or unplugged, a server on a
//! loopback port, and a blocking HTTP client.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard_core::{
    Backend, Batch, Bucket, Buckets, Caps, DType, Error, Graph, HostTensor, Outputs,
};
use switchyard_models::{Model, Runner};
use switchyard_server::{Config, ModelSpec, Opener, Replica, Server};

/// The tiny checkpoint `name` from switchyard-models' fixtures.
pub fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny").join(name)
}

/// The prompts [`with_prompts`] gives its model: words of the tiny vocabulary, so that each
/// tokenizes apart from the other.
pub const PROMPTS: [(&str, &str); 2] = [("query", "the sea: "), ("passage", "some long text: ")];

/// A copy of the tiny BERT embedder as a sentence-transformers model (mean pooling, as the bare
/// encoder pools) naming [`PROMPTS`], `query` the default; in a fresh temporary folder per `tag`.
pub fn with_prompts(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-server-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mean = r#"{"pooling_mode_mean_tokens": true}"#;
    switchyard_models::sentence_transformers_copy(&tiny("bert"), &dir, mean).unwrap();
    let prompts: serde_json::Map<String, Value> =
        PROMPTS.iter().map(|(n, t)| ((*n).to_owned(), Value::from(*t))).collect();
    let config = serde_json::json!({"prompts": prompts, "default_prompt_name": "query"});
    std::fs::write(dir.join("config_sentence_transformers.json"), config.to_string()).unwrap();
    dir
}

/// What a test does to a [`Held`] backend: hold its runs, unplug it, and see its batches.
#[derive(Default)]
pub struct Control {
    unplugged: AtomicBool,
    held: Mutex<bool>,
    released: Condvar,
    /// The sequences in each batch run, in order.
    pub batches: Mutex<Vec<usize>>,
    /// How many runs are waiting at the hold.
    waiting: Mutex<usize>,
    /// What the next run does instead of running, once.
    fault: Mutex<Option<Fault>>,
}

/// A failure that is not the device's.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// The run returns an error other than a device error.
    Refuse,
    /// The run panics.
    Panic,
    /// The run panics and leaves the device unplugged, as a device that crashed and stays down.
    PanicUnplugged,
}

impl Control {
    /// Makes every run wait until [`Control::release`].
    pub fn hold(&self) {
        *self.held.lock().unwrap() = true;
    }

    /// Lets held runs go on.
    pub fn release(&self) {
        *self.held.lock().unwrap() = false;
        self.released.notify_all();
    }

    /// Makes every run and every opening fail as a device that went away does.
    pub fn unplug(&self, out: bool) {
        self.unplugged.store(out, Ordering::SeqCst);
    }

    /// Makes the next run fail with `fault`.
    pub fn fail_next(&self, fault: Fault) {
        *self.fault.lock().unwrap() = Some(fault);
    }

    /// Waits until `n` runs wait at the hold.
    pub fn wait_for_held(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while *self.waiting.lock().unwrap() < n {
            assert!(Instant::now() < deadline, "no run reached the hold");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The sequences run so far, over all batches.
    pub fn sequences(&self) -> usize {
        self.batches.lock().unwrap().iter().sum()
    }
}

/// A backend run under a test's [`Control`].
pub struct Held<B> {
    inner: B,
    control: Arc<Control>,
}

impl<B: Backend> Backend for Held<B> {
    type Weights = B::Weights;
    type Plan = B::Plan;
    type State = B::State;

    fn caps(&self) -> Caps {
        self.inner.caps()
    }

    fn upload(
        &self,
        tensors: &[HostTensor<'_>],
        graph: &Graph,
    ) -> switchyard_core::Result<B::Weights> {
        self.inner.upload(tensors, graph)
    }

    fn lower(
        &self,
        w: &B::Weights,
        graph: &Graph,
        bucket: Bucket,
    ) -> switchyard_core::Result<B::Plan> {
        self.inner.lower(w, graph, bucket)
    }

    fn state(&self, plan: &B::Plan) -> switchyard_core::Result<B::State> {
        self.inner.state(plan)
    }

    fn run(
        &self,
        plan: &B::Plan,
        state: &mut B::State,
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> switchyard_core::Result<()> {
        let c = &self.control;
        let mut held = c.held.lock().unwrap();
        if *held {
            *c.waiting.lock().unwrap() += 1;
            while *held {
                held = c.released.wait(held).unwrap();
            }
            *c.waiting.lock().unwrap() -= 1;
        }
        drop(held);
        if c.unplugged.load(Ordering::SeqCst) {
            return Err(Error::Device("unplugged by the test".into()));
        }
        let fault = c.fault.lock().unwrap().take();
        match fault {
            Some(Fault::Refuse) => return Err(Error::Unsupported("refused by the test".into())),
            Some(Fault::Panic) => panic!("a run panicked, as the test asked"),
            Some(Fault::PanicUnplugged) => {
                c.unplugged.store(true, Ordering::SeqCst);
                panic!("a run panicked and unplugged its device, as the test asked")
            }
            None => {}
        }
        c.batches.lock().unwrap().push(batch.seqs());
        self.inner.run(plan, state, batch, out)
    }

    fn with_dtype(self, dtype: DType) -> switchyard_core::Result<Self> {
        Ok(Held { inner: self.inner.with_dtype(dtype)?, control: self.control })
    }
}

/// A replica of the tiny model `name` on flex under `control`.
pub fn held_replica(
    name: &str,
    device: &str,
    control: &Arc<Control>,
) -> Replica<Held<switchyard_flex::FlexBackend>> {
    held_replica_at(tiny(name), device, control)
}

/// A replica of the checkpoint in `dir` on flex under `control`.
pub fn held_replica_at(
    dir: PathBuf,
    device: &str,
    control: &Arc<Control>,
) -> Replica<Held<switchyard_flex::FlexBackend>> {
    let control = Arc::clone(control);
    let open: Opener<Held<switchyard_flex::FlexBackend>> = Arc::new(move || {
        if control.unplugged.load(Ordering::SeqCst) {
            return Err(Error::Device("unplugged by the test".into()).into());
        }
        let backend = Held { inner: switchyard_flex::flex(), control: Arc::clone(&control) };
        Runner::new(Model::load(&dir)?, backend, Buckets::default())
    });
    Replica { device: device.to_owned(), open }
}

/// A model of one replica per control, named `name`.
pub fn held_model(
    name: &str,
    fixture: &str,
    controls: &[&Arc<Control>],
) -> ModelSpec<Held<switchyard_flex::FlexBackend>> {
    let replicas = controls
        .iter()
        .enumerate()
        .map(|(i, c)| held_replica(fixture, &format!("held:{i}"), c))
        .collect();
    ModelSpec { name: name.to_owned(), replicas }
}

/// A server on a loopback port, asked to stop when dropped.
pub struct Running {
    pub addr: SocketAddr,
    server: switchyard_server::Running,
}

impl Running {
    /// Starts `models` with `config` on 127.0.0.1, on a port of the system's choosing.
    pub fn start<B: Backend + 'static>(config: Config, models: Vec<ModelSpec<B>>) -> Running {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Server::new(config, models).unwrap().spawn(listener).unwrap();
        Running { addr: server.addr(), server }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Asks the server to shut down, and returns without waiting.
    pub fn begin_shutdown(&mut self) {
        self.server.begin_shutdown();
    }

    /// Shuts the server down and waits for it to stop.
    pub fn stop(self) -> switchyard_server::Result<()> {
        self.server.shutdown()
    }

    /// POSTs `body` as JSON to `path`: the status, the JSON answer, and the answer's headers.
    pub fn post(&self, path: &str, body: &Value) -> Reply {
        reply(ureq::post(&self.url(path)).send_json(body.clone()))
    }

    /// POSTs `body` as JSON with an `Authorization` header.
    pub fn post_with_key(&self, path: &str, key: &str, body: &Value) -> Reply {
        let r = ureq::post(&self.url(path)).set("Authorization", &format!("Bearer {key}"));
        reply(r.send_json(body.clone()))
    }

    /// POSTs raw bytes as a JSON body.
    pub fn post_raw(&self, path: &str, body: &[u8]) -> Reply {
        let r = ureq::post(&self.url(path)).set("Content-Type", "application/json");
        reply(r.send_bytes(body))
    }

    /// GETs `path`.
    pub fn get(&self, path: &str) -> Reply {
        reply(ureq::get(&self.url(path)).call())
    }

    /// The value of the metric line starting with `prefix`, if `/metrics` has it.
    pub fn metric(&self, prefix: &str) -> Option<f64> {
        let text = ureq::get(&self.url("/metrics")).call().ok()?.into_string().ok()?;
        let line = text.lines().find(|l| l.starts_with(prefix))?;
        line.rsplit(' ').next()?.parse().ok()
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// The header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

fn reply(r: Result<ureq::Response, ureq::Error>) -> Reply {
    let response = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("no answer: {e}"),
    };
    let status = response.status();
    let headers = response
        .headers_names()
        .into_iter()
        .filter_map(|n| response.header(&n).map(|v| (n.clone(), v.to_owned())))
        .collect();
    let text = response.into_string().unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Reply { status, body, headers }
}

/// Polls `ok` until it holds, for at most 30 s.
pub fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A flex runner of the tiny model `name`, to compare answers with.
pub fn runner(name: &str) -> Runner<switchyard_flex::FlexBackend> {
    Runner::new(Model::load(&tiny(name)).unwrap(), switchyard_flex::flex(), Buckets::default())
        .unwrap()
}

/// The largest difference between two vectors.
pub fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A JSON array of numbers as f32.
pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}
