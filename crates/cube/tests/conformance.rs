//! The cube backend passes the shared conformance suite on the device under test (see
//! `common`: by default the first wgpu adapter, Mesa's llvmpipe on a machine without a GPU).

#![cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]

mod common;

use switchyard_core::Backend;

mod conformance_on_the_device_under_test {
    switchyard_conformance::tests!(|| super::common::open().expect("the device under test"));
}

#[cfg(feature = "wgpu")]
#[test]
fn a_missing_adapter_is_an_error_listing_the_adapters() {
    let n = switchyard_cube::wgpu::devices();
    let e = switchyard_cube::wgpu::open(n).expect_err("no such adapter").to_string();
    assert!(e.contains(&format!("wgpu:{n}: no such adapter")), "{e}");
}

#[test]
fn a_device_can_be_opened_again_in_one_process() {
    let first = common::open().expect("the device under test");
    let again = common::open().expect("the same device again");
    assert_eq!(first.caps(), again.caps());
}

#[test]
fn half_precision_passes_where_the_adapter_has_it_and_is_refused_where_not() {
    use switchyard_conformance::{Check, Options, check};
    use switchyard_core::DType;
    let caps = common::open().expect("the device under test").caps();
    assert_eq!(caps.dtypes.first(), Some(&DType::F32), "{caps:?}");
    for dtype in [DType::F16, DType::Bf16] {
        let half = common::open().expect("the device under test").with_dtype(dtype);
        if caps.dtypes.contains(&dtype) {
            assert_eq!(half.expect("a listed dtype is accepted").caps().dtype, dtype);
            let make = || common::open().and_then(|c| c.with_dtype(dtype)).unwrap();
            for c in Check::ALL {
                check(c, make, Options { dtype, ..Options::default() });
            }
        } else {
            let e = half.expect_err("an unlisted dtype is refused").to_string();
            assert!(e.contains(&format!("cannot compute in {dtype}")), "{e}");
        }
    }
}

/// Device `n` of a runtime with `n` devices here (counted by `count`) is an error naming it.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn the_missing_one_is_named(
    runtime: &str,
    count: fn() -> usize,
    open: fn(usize) -> switchyard_core::Result<switchyard_cube::Cube>,
) {
    let n = count();
    let e = open(n).expect_err("no such device").to_string();
    assert!(e.contains(&format!("{runtime}:{n}")), "{e}");
}

#[cfg(feature = "cuda")]
#[test]
fn a_missing_cuda_device_is_an_error_naming_it() {
    the_missing_one_is_named("cuda", switchyard_cube::cuda::devices, switchyard_cube::cuda::open);
}

#[cfg(feature = "rocm")]
#[test]
fn a_missing_rocm_device_is_an_error_naming_it() {
    the_missing_one_is_named("rocm", switchyard_cube::rocm::devices, switchyard_cube::rocm::open);
}

#[cfg(feature = "metal")]
#[test]
fn a_missing_metal_adapter_is_an_error_listing_the_adapters() {
    let n = switchyard_cube::metal::devices();
    let e = switchyard_cube::metal::open(n).expect_err("no such adapter").to_string();
    assert!(e.contains(&format!("metal:{n}: no such Metal adapter")), "{e}");
}

#[cfg(feature = "webgpu")]
#[test]
fn webgpu_outside_a_browser_is_an_error_naming_where_it_exists() {
    if cfg!(target_family = "wasm") {
        return;
    }
    let e = switchyard_cube::webgpu::open().expect_err("no browser here").to_string();
    assert!(e.contains("webgpu: no WebGPU adapter"), "{e}");
    assert!(e.contains("WebAssembly") && e.contains("wgpu:N"), "{e}");
}
