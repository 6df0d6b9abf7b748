//! The tch backend passes the shared conformance suite (with the `libtorch` feature).

#![cfg(feature = "libtorch")]

fn tch_cpu() -> switchyard_tch::TchBackend {
    switchyard_tch::cpu::open().expect("LibTorch on the CPU")
}

mod conformance {
    switchyard_conformance::tests!(super::tch_cpu);
}

/// `tch:cpu` computing in `dtype`.
fn tch_in(dtype: switchyard_core::DType) -> switchyard_tch::TchBackend {
    switchyard_core::Backend::with_dtype(tch_cpu(), dtype).expect("LibTorch has it")
}

mod conformance_in_f16 {
    use switchyard_conformance::Options;
    use switchyard_core::DType;
    switchyard_conformance::tests!(
        || super::tch_in(DType::F16),
        Options { dtype: DType::F16, ..Options::default() }
    );
}

mod conformance_in_bf16 {
    use switchyard_conformance::Options;
    use switchyard_core::DType;
    switchyard_conformance::tests!(
        || super::tch_in(DType::Bf16),
        Options { dtype: DType::Bf16, ..Options::default() }
    );
}

#[test]
fn caps_report_libtorch_on_the_cpu() {
    let caps = switchyard_core::Backend::caps(&tch_cpu());
    assert_eq!((caps.backend.as_str(), caps.kind), ("tch", switchyard_core::DeviceKind::Cpu));
    assert!(caps.threads >= 1);
}

#[test]
fn a_cuda_device_libtorch_cannot_see_is_an_error() {
    let n = switchyard_tch::cuda::devices();
    let e = switchyard_tch::cuda::open(n).expect_err("an error").to_string();
    assert!(e.contains(&format!("tch:cuda:{n}")), "{e}");
}
