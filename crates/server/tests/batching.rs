//! The batcher over loopback: inputs of concurrent requests share a batch and come back to the
//! right request in order; two devices serve one model; a failing device leaves the rotation,
//! its batch is retried, and it comes back; limits, shutdown and clients that leave.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;

use common::{Control, Fault, Running, eventually, floats, held_model, runner, worst};
use serde_json::json;
use switchyard_core::{Backend, Buckets, DType};
use switchyard_dispatch::Dispatch;
use switchyard_models::{Model, Runner};
use switchyard_server::{Config, ModelSpec, Opener, Replica};

/// The queue depth of the model `embedder`.
fn depth(s: &Running) -> f64 {
    s.metric("switchyard_queue_depth{model=\"embedder\"}").unwrap_or(0.0)
}

/// POSTs `texts` to `/embed` from another thread.
fn embed_later(s: &Running, texts: Vec<&'static str>) -> thread::JoinHandle<common::Reply> {
    let url = s.url("");
    thread::spawn(move || {
        let r = ureq::post(&format!("{url}/embed"))
            .send_json(json!({ "inputs": texts, "normalize": false }));
        let r = match r {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{e}"),
        };
        let status = r.status();
        let body = r.into_json().unwrap_or_default();
        common::Reply { status, body, headers: Vec::new() }
    })
}

/// Whether `reply` holds the runner's vectors for `texts`, in order.
fn answers(reply: &common::Reply, texts: &[&str]) -> bool {
    let want = runner("bert").embed(texts, |_| {}).unwrap();
    let got = reply.body.as_array().unwrap();
    got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| worst(&floats(g), w) <= 1e-6)
}

#[test]
fn inputs_of_concurrent_requests_share_one_batch_and_come_back_in_order() {
    let c = Arc::new(Control::default());
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    c.hold();
    let first = embed_later(&s, vec!["the man"]);
    c.wait_for_held(1);
    let requests = [
        vec!["a cat sat", "on the mat"],
        vec!["quick brown fox"],
        vec!["the dog", "is lazy", "sat"],
    ];
    let waiting: Vec<_> = requests.iter().map(|t| embed_later(&s, t.clone())).collect();
    eventually("six inputs queued", || depth(&s) == 6.0);
    c.release();
    let first = first.join().unwrap();
    assert!(first.status == 200 && answers(&first, &["the man"]), "{:?}", first.body);
    for (w, texts) in waiting.into_iter().zip(&requests) {
        let r = w.join().unwrap();
        assert!(r.status == 200 && answers(&r, texts), "{texts:?}: {:?}", r.body);
    }
    // The three requests queued behind the held one ran as one batch of six.
    assert_eq!(*c.batches.lock().unwrap(), [1, 6]);
}

#[test]
fn a_batch_budget_splits_one_request_over_batches() {
    let c = Arc::new(Control::default());
    let config = Config { max_batch_requests: Some(2), ..Config::default() };
    let s = Running::start(config, vec![held_model("embedder", "bert", &[&c])]);
    let texts = vec!["a", "b", "c", "d", "e"];
    let r = embed_later(&s, texts.clone()).join().unwrap();
    assert!(r.status == 200 && answers(&r, &texts));
    assert_eq!(*c.batches.lock().unwrap(), [2, 2, 1]);
}

/// A replica of the tiny BERT on the device named `device`, through dispatch.
fn dispatch_replica(device: &str) -> Replica<Dispatch> {
    dispatch_replica_in(device, DType::F32)
}

/// [`dispatch_replica`] computing in `dtype`.
fn dispatch_replica_in(device: &str, dtype: DType) -> Replica<Dispatch> {
    let name = device.to_owned();
    let open: Opener<Dispatch> = Arc::new(move || {
        let backend = Dispatch::new(&name.parse().unwrap())?.with_dtype(dtype)?;
        Runner::new(Model::load(&common::tiny("bert"))?, backend, Buckets::default())
    });
    Replica { device: device.to_owned(), open }
}

#[test]
fn info_gives_the_dtype_each_replica_computes_in() {
    // As `--dtype auto` on a GPU and on flex: f16 on one device, f32 on the other.
    let replicas = vec![dispatch_replica_in("flex", DType::Bf16), dispatch_replica("ndarray")];
    let s = Running::start(Config::default(), vec![ModelSpec { name: "e".into(), replicas }]);
    let info = s.get("/info").body;
    assert_eq!(info["model_dtype"], json!("bfloat16"), "the first replica's");
    let devices = &info["models"][0]["devices"];
    assert_eq!(devices[0], json!({ "device": "flex", "dtype": "bfloat16", "healthy": true }));
    assert_eq!(devices[1], json!({ "device": "ndarray", "dtype": "float32", "healthy": true }));
}

#[test]
fn two_devices_serve_one_model_with_the_same_answers() {
    let spec = ModelSpec {
        name: "embedder".into(),
        replicas: vec![dispatch_replica("flex"), dispatch_replica("ndarray")],
    };
    let s = Running::start(Config { max_batch_requests: Some(1), ..Config::default() }, vec![spec]);
    let texts = ["the man is eating food", "a cat sat on the mat", "quick brown fox", "the dog"];
    let want = runner("bert").embed(&texts, |_| {}).unwrap();
    let calls: Vec<_> = (0..24).map(|i| (i % 4, embed_later(&s, vec![texts[i % 4]]))).collect();
    for (i, call) in calls {
        let r = call.join().unwrap();
        assert_eq!(r.status, 200, "{:?}", r.body);
        // flex and ndarray sum in different orders: values of about 1 agree to 1e-5.
        let diff = worst(&floats(&r.body[0]), &want[i]);
        assert!(diff <= 1e-5, "{}: {diff}", texts[i]);
    }
    for device in ["flex", "ndarray"] {
        let busy = s.metric(&format!(
            "switchyard_device_busy_seconds_total{{model=\"embedder\",device=\"{device}\"}}"
        ));
        assert!(busy.is_some_and(|b| b > 0.0), "{device} did no work: {busy:?}");
    }
}

#[test]
fn a_failing_device_leaves_the_rotation_its_batch_is_retried_and_it_comes_back() {
    let (bad, good) = (Arc::new(Control::default()), Arc::new(Control::default()));
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&bad, &good])]);
    bad.unplug(true);
    good.hold();
    // One request holds the good replica; the next can only go to the bad one, which fails it
    // over to the good one.
    let first = embed_later(&s, vec!["the man"]);
    good.wait_for_held(1);
    let second = embed_later(&s, vec!["a cat sat"]);
    let failures = "switchyard_device_failures_total{model=\"embedder\",device=\"held:0\"}";
    eventually("the bad replica failed", || s.metric(failures) == Some(1.0));
    let health = s.get("/health");
    assert_eq!((health.status, &health.body["status"]), (200, &json!("degraded")));
    assert_eq!(health.body["models"][0]["failed"], json!(["held:0"]));
    good.release();
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    assert!(answers(&first, &["the man"]) && answers(&second, &["a cat sat"]));
    // Plugged back in, it reopens, passes its probe and rejoins.
    bad.unplug(false);
    eventually("the replica recovered", || s.get("/health").body["status"] == json!("ok"));
    assert_eq!(s.get("/info").body["models"][0]["devices"][0]["healthy"], json!(true));
}

#[test]
fn with_no_healthy_device_requests_fail_clearly_until_one_recovers() {
    let c = Arc::new(Control::default());
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    c.unplug(true);
    let failed = s.post("/embed", &json!({ "inputs": "the man" }));
    assert_eq!((failed.status, &failed.body["error_type"]), (424, &json!("Backend")));
    assert!(failed.body["error"].as_str().unwrap().contains("unplugged"), "{:?}", failed.body);
    assert_eq!(s.get("/health").status, 503);
    let refused = s.post("/embed", &json!({ "inputs": "the man" }));
    assert_eq!((refused.status, &refused.body["error_type"]), (503, &json!("Unhealthy")));
    c.unplug(false);
    eventually("the device recovered", || s.get("/health").status == 200);
    assert_eq!(s.post("/embed", &json!({ "inputs": "the man" })).status, 200);
}

#[test]
fn past_the_concurrency_limit_requests_get_429() {
    let c = Arc::new(Control::default());
    let config = Config { max_concurrent_requests: 1, ..Config::default() };
    let s = Running::start(config, vec![held_model("embedder", "bert", &[&c])]);
    c.hold();
    let first = embed_later(&s, vec!["the man"]);
    c.wait_for_held(1);
    let r = s.post("/embed", &json!({ "inputs": "a cat" }));
    assert_eq!((r.status, &r.body["error_type"]), (429, &json!("Overloaded")));
    c.release();
    assert_eq!(first.join().unwrap().status, 200);
    assert_eq!(s.post("/embed", &json!({ "inputs": "a cat" })).status, 200);
}

#[test]
fn shutdown_answers_the_requests_in_flight_then_stops() {
    let c = Arc::new(Control::default());
    let mut s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    c.hold();
    let first = embed_later(&s, vec!["the man"]);
    c.wait_for_held(1);
    let queued = embed_later(&s, vec!["a cat sat"]);
    eventually("the second request queued", || depth(&s) == 1.0);
    s.begin_shutdown();
    // Once the server has stopped accepting, new connections are refused.
    let addr = s.addr;
    eventually("new connections refused", || TcpStream::connect(addr).is_err());
    c.release();
    let (first, queued) = (first.join().unwrap(), queued.join().unwrap());
    assert!(answers(&first, &["the man"]) && answers(&queued, &["a cat sat"]));
    s.stop().unwrap();
}

#[test]
fn inputs_of_a_client_that_left_are_never_computed() {
    let c = Arc::new(Control::default());
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    c.hold();
    let first = embed_later(&s, vec!["the man"]);
    c.wait_for_held(1);
    let body = json!({ "inputs": ["a cat sat", "on the mat"] }).to_string();
    let mut gone = TcpStream::connect(s.addr).unwrap();
    let head = format!(
        "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    gone.write_all(head.as_bytes()).unwrap();
    gone.write_all(body.as_bytes()).unwrap();
    eventually("two inputs queued", || depth(&s) == 2.0);
    drop(gone);
    // Let the server notice the closed connection before the device frees up.
    thread::sleep(std::time::Duration::from_millis(200));
    c.release();
    assert_eq!(first.join().unwrap().status, 200);
    eventually("the queue drained", || depth(&s) == 0.0);
    assert_eq!(s.post("/embed", &json!({ "inputs": "x" })).status, 200);
    assert_eq!(*c.batches.lock().unwrap(), [1, 1], "the departed client's inputs ran");
}

#[test]
fn a_request_past_its_timeout_gets_408_and_is_not_computed() {
    let c = Arc::new(Control::default());
    let config =
        Config { request_timeout: std::time::Duration::from_millis(300), ..Config::default() };
    let s = Running::start(config, vec![held_model("embedder", "bert", &[&c])]);
    c.hold();
    let first = embed_later(&s, vec!["the man"]);
    c.wait_for_held(1);
    let late = s.post("/embed", &json!({ "inputs": "a cat" }));
    assert_eq!((late.status, &late.body["error_type"]), (408, &json!("Timeout")));
    c.release();
    assert_eq!(first.join().unwrap().status, 408);
    assert_eq!(s.post("/embed", &json!({ "inputs": "x" })).status, 200);
    // The held batch ran; the request that timed out in the queue never did.
    assert_eq!(*c.batches.lock().unwrap(), [1, 1]);
}

#[test]
fn pooled_and_per_token_inputs_never_share_a_batch() {
    let c = Arc::new(Control::default());
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    c.hold();
    let first = embed_later(&s, vec!["the man"]);
    c.wait_for_held(1);
    let pooled = embed_later(&s, vec!["a cat sat"]);
    eventually("one input queued", || depth(&s) == 1.0);
    let url = s.url("/embed_all");
    let states = thread::spawn(move || {
        let r = ureq::post(&url).send_json(json!({ "inputs": "the dog" }));
        r.map(|r| r.status()).map_err(|e| e.to_string())
    });
    eventually("two inputs queued", || depth(&s) == 2.0);
    c.release();
    assert_eq!(first.join().unwrap().status, 200);
    assert_eq!(pooled.join().unwrap().status, 200);
    assert_eq!(states.join().unwrap().unwrap(), 200);
    // Each kind ran in a batch of its own, in arrival order.
    assert_eq!(*c.batches.lock().unwrap(), [1, 1, 1]);
}

#[test]
fn a_failure_that_is_not_the_devices_gets_500_and_a_panic_reopens_the_model() {
    let c = Arc::new(Control::default());
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    // An error that is not the device's fails the batch; the replica stays in rotation.
    c.fail_next(Fault::Refuse);
    let r = s.post("/embed", &json!({ "inputs": "the man" }));
    assert_eq!((r.status, &r.body["error_type"]), (500, &json!("Backend")));
    assert!(r.body["error"].as_str().unwrap().contains("refused by the test"), "{:?}", r.body);
    assert_eq!(s.get("/health").body["status"], json!("ok"));
    // A panic fails the batch too, and the replica reopens its model before it serves again.
    c.fail_next(Fault::Panic);
    let r = s.post("/embed", &json!({ "inputs": "the man" }));
    assert_eq!(r.status, 500, "{:?}", r.body);
    eventually("the replica reopened", || s.get("/health").body["status"] == json!("ok"));
    let r = s.post("/embed", &json!({ "inputs": "the man", "normalize": false }));
    assert!(r.status == 200 && answers(&r, &["the man"]), "{:?}", r.body);
}

#[test]
fn a_client_answered_after_a_panic_already_sees_the_replica_out_of_rotation() {
    let c = Arc::new(Control::default());
    let s = Running::start(Config::default(), vec![held_model("embedder", "bert", &[&c])]);
    // The replica must leave the rotation before the batch's clients hear of the panic: once
    // answered, a client that checks health (or retries) must not find it still serving.
    // The device stays down, so the replica cannot have recovered in between.
    c.fail_next(Fault::PanicUnplugged);
    let r = s.post("/embed", &json!({ "inputs": "the man" }));
    assert_eq!(r.status, 500, "{:?}", r.body);
    let h = s.get("/health");
    assert_eq!((h.status, &h.body["status"]), (503, &json!("unhealthy")), "{:?}", h.body);
    c.unplug(false);
    eventually("the replica reopened", || s.get("/health").body["status"] == json!("ok"));
}

#[test]
fn a_replica_that_cannot_open_is_an_error_naming_the_model_and_device() {
    let c = Arc::new(Control::default());
    c.unplug(true);
    let spec = held_model("embedder", "bert", &[&c]);
    let e = switchyard_server::Server::new(Config::default(), vec![spec]).err().unwrap();
    let e = e.to_string();
    assert!(e.contains("opening embedder on held:0") && e.contains("unplugged"), "{e}");
}
