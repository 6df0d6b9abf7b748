//! switchyard-remote: Switchyard on a device of another machine, on burn-remote (Burn's own
//! engine for remote devices, over its WebSocket transport).
//!
//! - The client, [`Remote`], is the switchyard-burn lowering over burn-remote's backend: a
//!   graph lowered here runs on the server's device. Weights are uploaded once and stay on the
//!   server; a run streams its ops and reads back only the outputs.
//! - The server, [`Server`], hosts one device of this machine (any Burn backend with an IR:
//!   flex, ndarray, CubeCL devices); `switchyard remote-serve` runs one. It listens behind a
//!   [`guard`] that lets through only sessions within its [`Limits`].
//!
//! Failure is an error, never a hang. Every call to the server waits at most a timeout
//! ([`RemoteOptions::timeout`], `SWITCHYARD_REMOTE_TIMEOUT`), and a server that is down, dies
//! mid-batch or stops answering is an [`Error::Device`](switchyard_core::Error::Device). After
//! a failure the next call opens a new session, uploads the weights again from the copy the
//! client keeps, and runs; a run that failed because its session died is retried once that
//! way.
//!
//! Security: the WebSocket transport is neither encrypted nor authenticated. A server can ask
//! for a token (`SWITCHYARD_REMOTE_TOKEN`), which travels in clear; a server binds loopback
//! unless told otherwise. Cross untrusted networks through an SSH tunnel or a TLS-terminating
//! proxy (docs/remote.md).

mod client;
pub mod guard;
mod server;
#[cfg(feature = "testkit")]
pub mod testing;
mod worker;

pub use burn_ir::BackendIr;
pub use burn_remote::telemetry;
pub use client::{Remote, RemoteOptions, RemotePlan, RemoteWeights, connect, open};
pub use guard::Limits;
pub use server::{Serve, Server, Serving, bind, device_name};

/// The environment variable that sets the client's timeout, in seconds.
pub const TIMEOUT_ENV: &str = "SWITCHYARD_REMOTE_TIMEOUT";

/// The environment variable that holds the token a server asks for and a client presents.
pub const TOKEN_ENV: &str = "SWITCHYARD_REMOTE_TOKEN";

/// What a client presents: its session number, which makes each session a new device to
/// burn-remote, then the token.
fn credential(session: u64, token: &str) -> String {
    format!("{session}:{token}")
}

/// The token in a credential: what follows the first `:`, or all of it without one.
fn token_of(credential: &[u8]) -> &[u8] {
    match credential.iter().position(|&b| b == b':') {
        Some(i) => &credential[i + 1..],
        None => credential,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_back_out_of_a_credential() {
        assert_eq!(token_of(credential(12, "tok:en").as_bytes()), b"tok:en");
        assert_eq!(token_of(credential(0, "").as_bytes()), b"");
        assert_eq!(token_of(b"plain"), b"plain");
        assert_ne!(credential(1, "t"), credential(2, "t"));
    }
}
