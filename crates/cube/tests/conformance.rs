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

#[test]
fn half_precision_passes_where_the_adapter_has_it_and_is_refused_where_not() {
    use switchyard_conformance::{Options, suite_with};
    use switchyard_core::DType;
    let caps = switchyard_cube::wgpu(0).expect("a wgpu adapter").caps();
    assert_eq!(caps.float_dtypes.first(), Some(&DType::F32), "{caps:?}");
    for dtype in [DType::F16, DType::Bf16] {
        let half = switchyard_cube::wgpu(0).expect("a wgpu adapter").with_dtype(dtype);
        if caps.float_dtypes.contains(&dtype) {
            assert_eq!(half.expect("a listed dtype is accepted").caps().dtypes, [dtype]);
            let make = || switchyard_cube::wgpu(0).and_then(|c| c.with_dtype(dtype)).unwrap();
            suite_with(make, Options { dtype, ..Options::default() });
        } else {
            let e = half.expect_err("an unlisted dtype is refused").to_string();
            assert!(e.contains(&format!("cannot compute in {dtype}")), "{e}");
        }
    }
}
