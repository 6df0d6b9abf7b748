//! The conformance suite through `Dispatch`, on every device this build has, or on the one
//! named by `SWITCHYARD_CONFORMANCE_DEVICE` (as `cargo xtask test-all-backends` does).

use switchyard_conformance::{Options, suite_with};
use switchyard_dispatch::{Device, Dispatch};

#[test]
fn conformance_through_dispatch() {
    let devices = match std::env::var("SWITCHYARD_CONFORMANCE_DEVICE") {
        Ok(d) => vec![d.parse::<Device>().expect("a device name")],
        Err(_) => Device::available(),
    };
    for d in devices {
        let opts = Options { compare_values: d != Device::Capture, ..Options::default() };
        suite_with(|| Dispatch::new(&d).expect("the device is compiled in"), opts);
    }
}
