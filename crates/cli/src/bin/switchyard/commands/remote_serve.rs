//! `switchyard remote-serve`: a device of this machine, served to other machines.

#[cfg(feature = "remote")]
use anyhow::Context;
use anyhow::Result;
#[cfg(not(feature = "remote"))]
use anyhow::bail;
use switchyard::Device;

/// Serves `device` on `listen` (loopback unless `public`) until the process ends.
#[cfg(feature = "remote")]
pub fn run(device: &Device, listen: &str, public: bool) -> Result<()> {
    use switchyard::dispatch::remote;

    let addr: std::net::SocketAddr = listen.parse().with_context(|| {
        format!("--listen `{listen}` is not an address with a port, such as 127.0.0.1:7878")
    })?;
    let token = std::env::var(remote::TOKEN_ENV).ok().filter(|t| !t.is_empty());
    let server = switchyard::dispatch::server(device, token.as_deref())?;
    let listener = remote::bind(addr, public)?;
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
pub fn run(_: &Device, _: &str, _: bool) -> Result<()> {
    bail!(
        "remote-serve needs the remote backend: rebuild switchyard with the cargo feature `remote`"
    )
}
