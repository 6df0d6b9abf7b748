//! `switchyard remote-serve`: a device of this machine, served to other machines.

#[cfg(feature = "remote")]
use anyhow::Context;
use anyhow::Result;
#[cfg(not(feature = "remote"))]
use anyhow::bail;
use switchyard::Device;

use crate::args::RemoteServeArgs;

/// Serves `device` on `--listen` (loopback unless `--public`), behind a guard with the
/// flags' limits, until the process ends.
#[cfg(feature = "remote")]
pub fn run(device: &Device, args: &RemoteServeArgs) -> Result<()> {
    use std::time::Duration;

    use switchyard::dispatch::remote;

    let listen = &args.listen;
    let addr: std::net::SocketAddr = listen.parse().with_context(|| {
        format!("--listen `{listen}` is not an address with a port, such as 127.0.0.1:7878")
    })?;
    // burn-remote's own server logs where it listens, behind the guard: not where clients dial.
    super::logs::install(false, "info,burn_communication=warn")?;
    super::logs::panics_in_one_line();
    let token = std::env::var(remote::TOKEN_ENV).ok().filter(|t| !t.is_empty());
    let mut server = switchyard::dispatch::server(device, token.as_deref())?;
    server.set_limits(remote::Limits {
        max_connections: args.max_connections as usize,
        handshake_timeout: Duration::from_secs_f64(args.handshake_timeout),
        idle_timeout: Duration::from_secs_f64(args.idle_timeout),
        max_message_bytes: u64::from(args.max_message_mib) << 20,
    });
    let listener = remote::bind(addr, args.public)?;
    let bound = listener.local_addr()?;
    let reach = if bound.ip().is_loopback() {
        "loopback only: clients on this machine, or through an SSH tunnel"
    } else {
        "reachable from the network, unencrypted"
    };
    let token = if token.is_some() { "a token is required" } else { "no token required" };
    eprintln!(
        "switchyard: serving `{device}` on {bound} ({reach}; {token}); clients use --device {}",
        remote::device_name(bound)
    );
    server.serve(listener)?;
    Ok(())
}

/// Without the remote backend there is nothing to serve with.
#[cfg(not(feature = "remote"))]
pub fn run(_: &Device, _: &RemoteServeArgs) -> Result<()> {
    bail!(
        "remote-serve needs the remote backend: rebuild switchyard with the cargo feature `remote`"
    )
}
