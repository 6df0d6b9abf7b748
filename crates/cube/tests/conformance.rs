//! The cube backend on wgpu passes the shared conformance suite (with the `wgpu` feature, on the
//! first adapter: Mesa's llvmpipe on a machine without a GPU).

#![cfg(feature = "wgpu")]

use switchyard_core::Backend;

#[test]
fn conformance_on_the_first_wgpu_adapter() {
    switchyard_conformance::suite(|| switchyard_cube::wgpu(0).expect("a wgpu adapter"));
}

#[test]
fn a_missing_adapter_is_an_error_listing_the_adapters() {
    let n = switchyard_cube::adapters().len();
    let e = switchyard_cube::wgpu(n).expect_err("no such adapter").to_string();
    assert!(e.contains(&format!("wgpu:{n}: no such adapter")), "{e}");
}

#[test]
fn an_adapter_can_be_opened_again_in_one_process() {
    let first = switchyard_cube::wgpu(0).expect("a wgpu adapter");
    let again = switchyard_cube::wgpu(0).expect("the same adapter again");
    assert_eq!(first.caps(), again.caps());
}
