//! The ndarray backend passes the shared conformance suite.

mod conformance {
    switchyard_conformance::tests!(switchyard_ndarray::ndarray);
}

#[test]
fn half_precision_is_refused_naming_what_ndarray_computes_in() {
    use switchyard_core::{Backend, DType};
    assert_eq!(switchyard_ndarray::ndarray().caps().dtypes, [DType::F32]);
    let e = switchyard_ndarray::ndarray().with_dtype(DType::F16).unwrap_err().to_string();
    assert!(e.contains("ndarray (host CPU) cannot compute in f16; it can in: f32"), "{e}");
}
