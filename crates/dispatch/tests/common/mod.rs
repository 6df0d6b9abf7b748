//! What the per-device test binaries share: the device to test, and the flex server the
//! `remote` choice starts.

#![allow(dead_code)]

use std::sync::OnceLock;

use switchyard_dispatch::Device;

/// The device to test: the one `SWITCHYARD_CONFORMANCE_DEVICE` names (as `cargo xtask
/// test-all-backends` does, one device per run), else the default device, flex. The name
/// `remote` stands for a flex server process this test binary starts on loopback, once, shared
/// by its tests (it exits with the binary).
pub fn device() -> Device {
    match std::env::var("SWITCHYARD_CONFORMANCE_DEVICE") {
        Ok(d) if d == "remote" => shared_server().device(),
        Ok(d) => d.parse::<Device>().expect("a device name"),
        Err(_) => Device::flex(),
    }
}

/// The flex server process the tests of this binary share.
pub fn shared_server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

/// A flex server process of this test binary (its helper test `remote_server_process`).
#[cfg(feature = "remote")]
pub struct Server(switchyard_remote::testing::ServerProcess);

#[cfg(feature = "remote")]
impl Server {
    /// Starts one on a free loopback port.
    pub fn start() -> Server {
        let p = switchyard_remote::testing::ServerProcess::start(
            "remote_server_process",
            "127.0.0.1:0",
            None,
        );
        Server(p.expect("a flex server process"))
    }

    /// The device that reaches it.
    pub fn device(&self) -> Device {
        self.0.device_name().parse().expect("a remote device name")
    }
}

/// What the helper test does: serve flex when started as a server process.
#[cfg(feature = "remote")]
pub fn serve_if_asked() {
    switchyard_remote::testing::serve_if_asked(|listener| {
        switchyard_dispatch::server(&Device::flex(), None)?.serve(listener)
    });
}

/// Without the remote backend, `remote` cannot be tested.
#[cfg(not(feature = "remote"))]
pub struct Server;

#[cfg(not(feature = "remote"))]
impl Server {
    pub fn start() -> Server {
        panic!("SWITCHYARD_CONFORMANCE_DEVICE=remote needs the `remote` feature")
    }

    pub fn device(&self) -> Device {
        unreachable!()
    }
}
