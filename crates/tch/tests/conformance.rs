//! The tch backend passes the shared conformance suite (with the `libtorch` feature).

#![cfg(feature = "libtorch")]

#[test]
fn conformance() {
    switchyard_conformance::suite(switchyard_tch::tch_cpu);
}

#[test]
fn conformance_in_f16_and_bf16() {
    use switchyard_conformance::Options;
    use switchyard_core::DType;
    for dtype in [DType::F16, DType::Bf16] {
        let make = || switchyard_tch::tch_cpu().with_dtype(dtype).expect("LibTorch has it");
        switchyard_conformance::suite_with(make, Options { dtype, ..Options::default() });
    }
}

#[test]
fn caps_report_libtorch_on_the_cpu() {
    let caps = switchyard_core::Backend::caps(&switchyard_tch::tch_cpu());
    assert_eq!((caps.backend.as_str(), caps.device.as_str()), ("tch", "cpu"));
    assert!(caps.threads >= 1);
}

#[test]
fn a_cuda_device_libtorch_cannot_see_is_an_error() {
    let n = switchyard_tch::cuda_devices();
    let e = switchyard_tch::tch_cuda(n).expect_err("an error").to_string();
    assert!(e.contains(&format!("tch:cuda:{n}")), "{e}");
}
