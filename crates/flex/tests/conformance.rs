//! The flex backend passes the shared conformance suite.

#[test]
fn conformance() {
    switchyard_conformance::suite(switchyard_flex::flex);
}

#[test]
fn caps_report_the_thread_pool() {
    let caps = switchyard_core::Backend::caps(&switchyard_flex::flex());
    assert_eq!(caps.backend, "flex");
    assert_eq!(caps.threads, rayon::current_num_threads());
    assert!(!caps.padded_attention, "flex runs attention per sequence, unpadded");
}
