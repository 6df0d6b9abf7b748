//! What the per-device test binaries share: which devices to test, and the flex server the
//! `remote` choice starts.

use switchyard_dispatch::Device;

/// The devices to test: the one `SWITCHYARD_CONFORMANCE_DEVICE` names (as `cargo xtask
/// test-all-backends` does), else every device this build has. The name `remote` stands for a
/// flex server process this test starts on loopback; the servers live as long as the guards.
pub fn devices() -> (Vec<Device>, Vec<Server>) {
    match std::env::var("SWITCHYARD_CONFORMANCE_DEVICE") {
        Ok(d) if d == "remote" => {
            let server = Server::start();
            (vec![server.device()], vec![server])
        }
        Ok(d) => (vec![d.parse::<Device>().expect("a device name")], Vec::new()),
        Err(_) => (Device::available(), Vec::new()),
    }
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
        switchyard_dispatch::server(&Device::Flex, None)?.serve(listener)
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
