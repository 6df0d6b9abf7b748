//! `switchyard serve`: models over HTTP, through switchyard-server.

#[cfg(feature = "serve")]
use anyhow::Context;
use anyhow::Result;
#[cfg(not(feature = "serve"))]
use anyhow::bail;

use crate::args::ServeArgs;

/// Opens every model on every device and serves them until Ctrl-C or SIGTERM.
#[cfg(feature = "serve")]
pub fn run(args: &ServeArgs) -> Result<()> {
    use std::sync::Arc;
    use std::time::Duration;

    use switchyard::{Buckets, Options};
    use switchyard_server::{Config, DefaultPrompt, ModelSpec, Opener, Replica, Server};

    super::logs::install(args.json_logs, "info")?;
    let addr: std::net::SocketAddr = args.listen.parse().with_context(|| {
        format!("--listen `{}` is not an address with a port, such as 127.0.0.1:8080", args.listen)
    })?;
    let devices = match args.devices.as_slice() {
        [] => vec![super::device(None)?],
        named => named.iter().map(|d| super::device(Some(d))).collect::<Result<_>>()?,
    };
    let buckets = match &args.buckets {
        Some(p) => Buckets::from_file(p)?,
        None => Buckets::default(),
    };
    let mut specs = Vec::new();
    for arg in &args.models {
        let (name, model) = named(arg);
        // Resolved once: a hub id is fetched now, and a replica reopening after a failure
        // reads the same files.
        super::say_source(model);
        let dir = switchyard::resolve(model)
            .with_context(|| format!("loading {}", switchyard::describe(model)))?;
        let name = name.map_or_else(|| default_name(model, &dir), str::to_owned);
        let replicas = devices
            .iter()
            .map(|device| {
                let options = Options {
                    device: device.clone(),
                    dtype: args.dtype,
                    buckets: buckets.clone(),
                    threads: args.threads,
                    max_len: None,
                };
                let dir = dir.to_string_lossy().into_owned();
                let open: Opener<switchyard::Dispatch> = Arc::new(move || {
                    switchyard::open_runner(&dir, &options).map_err(into_models_error)
                });
                Replica { device: device.to_string(), open }
            })
            .collect();
        specs.push(ModelSpec { name, replicas });
    }
    let config = Config {
        max_client_batch_size: args.max_client_batch_size,
        max_concurrent_requests: args.max_concurrent_requests,
        max_batch_tokens: args.max_batch_tokens,
        max_batch_requests: args.max_batch_requests,
        auto_truncate: args.auto_truncate,
        api_key: args
            .api_key
            .clone()
            .or_else(|| std::env::var("SWITCHYARD_API_KEY").ok())
            .filter(|k| !k.is_empty()),
        payload_limit: args.payload_limit,
        request_timeout: Duration::from_secs(args.request_timeout),
        cors_origins: args.cors_origins.clone(),
        default_prompt: match (&args.default_prompt_name, &args.default_prompt) {
            (Some(name), _) => DefaultPrompt::Named(name.clone()),
            (None, Some(text)) => DefaultPrompt::Text(text.clone()),
            (None, None) => DefaultPrompt::Model,
        },
    };
    let listener = switchyard_server::bind(addr, args.public)?;
    let keyed = if config.api_key.is_some() { "an API key is required" } else { "no API key" };
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let names = names.join(", ");
    let on: Vec<String> = devices.iter().map(ToString::to_string).collect();
    let server = Server::new(config, specs)?;
    eprintln!(
        "switchyard: serving {names} on {} at http://{} ({keyed}); Ctrl-C stops",
        on.join(" + "),
        listener.local_addr()?
    );
    server.run(listener)?;
    Ok(())
}

/// `NAME=MODEL` split into its name and model; a bare model has no name.
#[cfg(feature = "serve")]
fn named(arg: &str) -> (Option<&str>, &str) {
    match arg.split_once('=') {
        Some((name, model)) if !name.is_empty() && !name.contains('/') && !model.is_empty() => {
            (Some(name), model)
        }
        _ => (None, arg),
    }
}

/// A model's name when none is given: a hub id as given, else the directory's name.
#[cfg(feature = "serve")]
fn default_name(model: &str, dir: &std::path::Path) -> String {
    if std::path::Path::new(model).exists() {
        let base = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        base.unwrap_or_else(|| model.to_owned())
    } else {
        model.to_owned()
    }
}

/// The front door's error as the server's replicas report it.
#[cfg(feature = "serve")]
fn into_models_error(e: switchyard::Error) -> switchyard::models::Error {
    match e {
        switchyard::Error::Model(m) => m,
        other => switchyard::core::Error::Unsupported(other.to_string()).into(),
    }
}

/// Without the server there is nothing to serve with.
#[cfg(not(feature = "serve"))]
pub fn run(_: &ServeArgs) -> Result<()> {
    bail!("serve needs the HTTP server: rebuild switchyard with the cargo feature `serve`")
}

#[cfg(all(test, feature = "serve"))]
mod tests {
    use super::named;

    #[test]
    fn a_model_may_be_named() {
        assert_eq!(
            named("mini=sentence-transformers/all-MiniLM-L6-v2"),
            (Some("mini"), "sentence-transformers/all-MiniLM-L6-v2")
        );
        assert_eq!(
            named("sentence-transformers/all-MiniLM-L6-v2"),
            (None, "sentence-transformers/all-MiniLM-L6-v2")
        );
        assert_eq!(named("./dir/a=b"), (None, "./dir/a=b"));
        assert_eq!(named("=x"), (None, "=x"));
    }
}
