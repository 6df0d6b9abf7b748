//! `switchyard serve`, end to end: the real all-MiniLM-L6-v2 behind the binary, called by HTTP
//! clients nobody here wrote (the `openai` and `huggingface_hub` Python packages, installed by
//! `cargo xtask fetch-models`), answering with the CLI's numbers; and its refusals.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use switchyard_models::scores::cosine;

const THREE: [&str; 3] = ["A man is eating food.", "A man eats a meal.", "The stock market fell."];

/// The Python clients `cargo xtask fetch-models` installs.
fn clients_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/pyclients");
    assert!(
        dir.join("openai").is_dir(),
        "{} is missing: run `cargo xtask fetch-models`",
        dir.display()
    );
    dir
}

fn model_dir() -> PathBuf {
    switchyard_models::fetched_model_dir("all-MiniLM-L6-v2").unwrap()
}

/// A `switchyard serve` process, killed if a test fails before stopping it.
struct Serving {
    child: Child,
    url: String,
}

impl Serving {
    /// Starts `switchyard serve ARGS --listen 127.0.0.1:0` and waits for its address.
    fn start(args: &[&str]) -> Serving {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("SWITCHYARD_DEVICE")
            .env_remove("SWITCHYARD_API_KEY")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("serve printed its address").unwrap();
            if let Some(at) = line.split(" at ").nth(1) {
                break at.split_whitespace().next().unwrap().to_owned();
            }
        };
        // The logs go on; read them so the server never blocks writing.
        std::thread::spawn(move || lines.for_each(drop));
        Serving { child, url }
    }

    /// Sends SIGTERM and waits: whether the process exited with success.
    fn terminate(mut self) -> bool {
        // The shell's own `kill`: no procps package needed.
        let kill = format!("kill -TERM {}", self.child.id());
        assert!(Command::new("sh").args(["-c", &kill]).status().unwrap().success());
        self.child.wait().unwrap().success()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// The CLI's embeddings of `texts`, as f32, with the flags `flags`.
fn cli_embeddings(model: &Path, flags: &[&str], texts: &[&str]) -> Vec<Vec<f32>> {
    let mut args = vec!["embed", "--model", model.to_str().unwrap()];
    args.extend(flags);
    args.extend(texts);
    let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(&args)
        .env_remove("SWITCHYARD_DEVICE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            floats(&v["embedding"])
        })
        .collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn real_clients_get_the_clis_numbers_and_sigterm_stops_cleanly() {
    let model = model_dir();
    let clients = clients_dir();
    let want = cli_embeddings(&model, &[], &THREE);
    let server = Serving::start(&["--model", model.to_str().unwrap()]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(&server.url)
        .arg("all-MiniLM-L6-v2")
        .args(THREE)
        .env("PYTHONPATH", &clients)
        .output()
        .unwrap();
    assert!(o.status.success(), "clients.py: {}", String::from_utf8_lossy(&o.stderr));
    let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The same f32 values, to the last bit: the same device, model and batch rows as the CLI.
    let openai: Vec<Vec<f32>> = got["openai"].as_array().unwrap().iter().map(floats).collect();
    assert_eq!(openai, want, "openai's embeddings differ from the CLI's");
    let hub: Vec<Vec<f32>> = got["hub"].as_array().unwrap().iter().map(floats).collect();
    assert_eq!(hub, want, "huggingface_hub's embeddings differ from the CLI's");
    let similarity = floats(&got["similarity"]);
    assert_eq!(similarity, [cosine(&want[0], &want[1]), cosine(&want[0], &want[2])]);
    assert!(got["openai_tokens"].as_u64().unwrap() > 3);
    assert!(server.terminate(), "SIGTERM did not end serve with success");
}

/// `POST path` with a JSON body to the server at `url` (`http://HOST:PORT`): the reply's body.
fn post(url: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all([head, body].concat().as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (status, rest) = reply.split_once("\r\n").unwrap();
    assert!(status.ends_with("200 OK"), "{reply}");
    serde_json::from_str(rest.split_once("\r\n\r\n").unwrap().1).unwrap()
}

#[test]
fn a_default_prompt_goes_before_every_request_that_names_none() {
    let model = model_dir();
    let want = cli_embeddings(&model, &["--prompt", "query: "], &THREE);
    assert_ne!(want, cli_embeddings(&model, &[], &THREE), "the prompt changes the embeddings");
    let server =
        Serving::start(&["--model", model.to_str().unwrap(), "--default-prompt", "query: "]);
    let r = post(&server.url, "/embed", &serde_json::json!({ "inputs": THREE }));
    let got: Vec<Vec<f32>> = r.as_array().unwrap().iter().map(floats).collect();
    assert_eq!(got, want, "/embed differs from `embed --prompt`");
    let r = post(&server.url, "/v1/embeddings", &serde_json::json!({ "input": THREE[0] }));
    assert_eq!(floats(&r["data"][0]["embedding"]), want[0], "/v1/embeddings differs");
    assert!(server.terminate());
}

#[test]
fn serve_refuses_what_it_cannot_serve() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("serve")
            .args(args)
            .env_remove("SWITCHYARD_DEVICE")
            .output()
            .unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny/bert");
    let tiny = tiny.to_str().unwrap();
    let (ok, e) = run(&["--model", tiny, "--listen", "0.0.0.0:0"]);
    // One line, read as written: no run of spaces left by a wrapped string literal.
    assert!(!ok && e.contains("--public") && e.lines().count() == 1 && !e.contains("  "), "{e}");
    let (ok, e) = run(&["--model", "/no/such/model", "--listen", "127.0.0.1:0"]);
    assert!(!ok && e.contains("/no/such/model") && e.lines().count() == 1, "{e}");
    let (ok, e) = run(&[
        "--model",
        &format!("a={tiny}"),
        "--model",
        &format!("a={tiny}"),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(!ok && e.contains("two models are named"), "{e}");
    let (ok, e) = run(&["--model", tiny, "--device", "nosuch", "--listen", "127.0.0.1:0"]);
    assert!(!ok && e.contains("nosuch"), "{e}");
    let (ok, e) = run(&["--model", tiny, "--max-batch-tokens", "0", "--listen", "127.0.0.1:0"]);
    assert!(!ok && e.contains("--max-batch-tokens"), "{e}");
    let (ok, e) =
        run(&["--model", tiny, "--default-prompt-name", "query", "--listen", "127.0.0.1:0"]);
    assert!(!ok && e.contains(r#"has no prompt named "query"; its prompts: none"#), "{e}");
    let both = ["--default-prompt-name", "query", "--default-prompt", "query: "];
    let (ok, e) = run(&[&["--model", tiny, "--listen", "127.0.0.1:0"][..], &both].concat());
    assert!(!ok && e.contains("cannot be used with"), "{e}");
}
