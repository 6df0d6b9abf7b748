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

#[test]
// burn-tch marks its backend deprecated; this crate exists to keep it.
#[allow(deprecated)]
fn runs_on_the_cpu_wait_for_the_turn_and_on_cuda_do_not_take_it() {
    use std::sync::mpsc;
    use std::time::Duration;
    use switchyard_burn::Kernels;
    use switchyard_core::testkit::{self, EncoderSpec};
    use switchyard_core::{Backend, BatchBuf, Bucket, Outputs};

    let be = tch_cpu();
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 1);
    let w = be.upload(&weights.tensors(), &g).unwrap();
    let plan = be.lower(&w, &g, Bucket::new(64, 8, 64)).unwrap();
    let mut batch = BatchBuf::new();
    batch.push(&[1, 2, 3], None, &[]).unwrap();

    assert!(
        Kernels::<burn_tch::LibTorch>::exclusive(&switchyard_tch::TchKernels::cuda()).is_none()
    );
    let turn = Kernels::<burn_tch::LibTorch>::exclusive(be.kernels()).expect("tch:cpu takes turns");
    let (done, finished) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut state = be.state(&plan).unwrap();
            let mut out = Outputs::new();
            be.run(&plan, &mut state, &batch.batch(), &mut out).unwrap();
            done.send(()).unwrap();
        });
        // The run waits while this test holds the turn, and ends once it is given back.
        assert!(finished.recv_timeout(Duration::from_millis(500)).is_err(), "ran out of turn");
        drop(turn);
        finished.recv_timeout(Duration::from_secs(60)).expect("the run, after the turn");
    });
}

#[test]
#[allow(deprecated)]
fn a_panic_while_holding_the_cpu_turn_passes_the_turn_on() {
    use switchyard_burn::Kernels;
    let kernels = switchyard_tch::TchKernels::cpu();
    let held = std::thread::spawn(move || {
        let _turn = Kernels::<burn_tch::LibTorch>::exclusive(&kernels);
        panic!("a run failing while it holds the turn");
    })
    .join();
    assert!(held.is_err(), "the thread panicked");
    // The lock is poisoned now; the next caller still gets the turn, and a run still runs.
    assert!(Kernels::<burn_tch::LibTorch>::exclusive(&kernels).is_some());
    let be = tch_cpu();
    let g = switchyard_core::testkit::bert_like(switchyard_core::testkit::EncoderSpec::TINY);
    let weights = switchyard_core::testkit::random_weights(&g, 1);
    switchyard_core::Backend::upload(&be, &weights.tensors(), &g).expect("an upload after it");
}
