//! The conformance suite through `Dispatch`, on every device this build has, or on the one
//! named by `SWITCHYARD_CONFORMANCE_DEVICE` (as `cargo xtask test-all-backends` does; `remote`
//! is a flex server this test starts).

mod common;

use switchyard_conformance::{Options, suite_with};
use switchyard_dispatch::{Device, Dispatch};

#[test]
fn conformance_through_dispatch() {
    let (devices, _servers) = common::devices();
    for d in devices {
        let opts = Options { compare_values: d != Device::Capture, ..Options::default() };
        suite_with(|| Dispatch::new(&d).expect("the device is compiled in"), opts);
    }
}

#[cfg(feature = "remote")]
#[test]
#[ignore = "run by the remote tests as their server process"]
fn remote_server_process() {
    common::serve_if_asked();
}
