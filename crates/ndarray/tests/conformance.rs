//! The ndarray backend passes the shared conformance suite.

#[test]
fn conformance() {
    switchyard_conformance::suite(switchyard_ndarray::ndarray);
}
