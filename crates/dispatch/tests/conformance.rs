//! The conformance suite through `Dispatch`, on the device `SWITCHYARD_CONFORMANCE_DEVICE`
//! names (as `cargo xtask test-all-backends` does for each device; `remote` is a flex server
//! this test binary starts), else on flex.

mod common;

use switchyard_conformance::Options;
use switchyard_dispatch::Dispatch;

/// The device under test, through `Dispatch`.
fn open() -> Dispatch {
    Dispatch::new(&common::device()).expect("the device under test is compiled in and present")
}

/// Capture computes nothing: its shapes and errors are checked, not its values.
fn options() -> Options {
    Options { compare_values: common::device().family().backend != "capture", ..Options::default() }
}

mod conformance_through_dispatch {
    switchyard_conformance::tests!(super::open, super::options());
}

#[cfg(feature = "remote")]
#[test]
#[ignore = "run by the remote tests as their server process"]
fn remote_server_process() {
    common::serve_if_asked();
}
