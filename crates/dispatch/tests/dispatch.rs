//! Several devices in one process, each call routed to the backend that owns its data.

use switchyard_core::{Backend, Error};
use switchyard_dispatch::{Device, Dispatch};

fn d(s: &str) -> Device {
    s.parse().unwrap()
}

#[test]
fn a_device_this_build_lacks_is_an_error_not_a_fallback() {
    let e = Dispatch::new(&d("rocm:0")).unwrap_err();
    assert!(matches!(e, Error::Device(_)), "{e}");
    assert!(e.to_string().contains("rocm:0"), "{e}");
}

#[cfg(feature = "cuda")]
#[test]
fn a_cuda_device_this_machine_lacks_is_an_error_not_a_fallback() {
    let e = Dispatch::new(&d("cuda:99")).unwrap_err();
    assert!(matches!(e, Error::Device(_)), "{e}");
    assert!(e.to_string().contains("cuda:99") && e.to_string().contains("libcuda"), "{e}");
}

#[cfg(feature = "webgpu")]
#[test]
fn webgpu_in_a_native_build_is_an_error_not_a_fallback() {
    let e = Dispatch::new(&d("webgpu")).unwrap_err();
    assert!(matches!(e, Error::Device(_)), "{e}");
    assert!(e.to_string().contains("no WebGPU adapter"), "{e}");
}

#[cfg(all(feature = "remote", feature = "capture"))]
#[test]
fn a_device_burn_remote_cannot_host_is_refused_as_a_server() {
    let Err(e) = switchyard_dispatch::server(&d("capture"), None) else {
        panic!("capture has no IR for burn-remote to serve")
    };
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("`capture` cannot be served"), "{e}");
}

#[cfg(feature = "flex")]
#[test]
fn dispatch_reports_its_device_and_caps() {
    let flex = Dispatch::new(&Device::flex()).unwrap();
    assert_eq!(flex.device(), &Device::flex());
    assert_eq!(flex.caps().backend, "flex");
}

#[cfg(feature = "flex")]
#[test]
fn a_compute_dtype_is_chosen_where_the_device_has_it() {
    use switchyard_core::DType;
    let bf16 = Dispatch::new(&Device::flex()).unwrap().with_dtype(DType::Bf16).unwrap();
    assert_eq!((bf16.device(), bf16.caps().dtype), (&Device::flex(), DType::Bf16));
}

#[cfg(feature = "capture")]
#[test]
fn a_backend_that_computes_in_f32_only_refuses_another_dtype() {
    use switchyard_core::DType;
    let capture = || Dispatch::new(&d("capture")).unwrap();
    assert!(capture().with_dtype(DType::F32).is_ok());
    let Err(e) = capture().with_dtype(DType::F16) else { panic!("capture is f32 only") };
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(
        e.to_string()
            .contains("the capture backend (nothing: it records plans) computes in f32 only"),
        "{e}"
    );
}

#[cfg(all(feature = "flex", feature = "ndarray"))]
mod two_devices {
    use switchyard_core::testkit::{self, EncoderSpec};
    use switchyard_core::{BatchBuf, Bucket, Buckets, Executor, LaneId, Outputs};

    use super::*;

    fn sample() -> BatchBuf {
        let mut b = BatchBuf::new();
        b.push(&[1, 5, 9, 2], Some(&[0, 0, 1, 1]), &[1, 2]).unwrap();
        b.push(&[3, 3], None, &[0]).unwrap();
        b
    }

    #[test]
    fn the_same_model_on_flex_and_ndarray_side_by_side() {
        let g = testkit::bert_like(EncoderSpec::TINY);
        let weights = testkit::random_weights(&g, 9);
        let make = |d: Device| {
            Executor::new(
                Dispatch::new(&d).unwrap(),
                &weights.tensors(),
                g.clone(),
                "default",
                Buckets::default(),
            )
            .unwrap()
        };
        let (mut flex, mut nd) = (make(Device::flex()), make(d("ndarray")));
        let (mut a, mut b) = (Outputs::new(), Outputs::new());
        for _ in 0..2 {
            flex.run(LaneId::MAIN, &sample().batch(), &mut a).unwrap();
            nd.run(LaneId::MAIN, &sample().batch(), &mut b).unwrap();
        }
        assert_eq!(flex.caps().backend, "flex");
        assert_eq!(nd.caps().backend, "ndarray");
        for (x, y) in a.mats().iter().zip(b.mats()) {
            assert_eq!((x.rows, x.width), (y.rows, y.width));
            for (p, q) in x.data.iter().zip(&y.data) {
                // Both are f32 within 2e-5 of the f64 reference (the conformance tolerance).
                assert!((p - q).abs() <= 4e-5 + 4e-5 * q.abs(), "{}: {p} vs {q}", x.name);
            }
        }
    }

    #[test]
    fn weights_and_plans_stay_with_their_device() {
        let g = testkit::bert_like(EncoderSpec::TINY);
        let weights = testkit::random_weights(&g, 9);
        let (flex, nd) =
            (Dispatch::new(&Device::flex()).unwrap(), Dispatch::new(&d("ndarray")).unwrap());
        let fw = flex.upload(&weights.tensors(), &g).unwrap();
        let e = nd.lower(&fw, &g, Bucket::new(16, 2, 16)).unwrap_err().to_string();
        assert!(e.contains("weights on device `flex` handed to device `ndarray`"), "{e}");

        let plan = flex.lower(&fw, &g, Bucket::new(16, 2, 16)).unwrap();
        let mut state = flex.state(&plan).unwrap();
        let e = nd.state(&plan).unwrap_err().to_string();
        assert!(e.contains("a plan on device `flex` handed to device `ndarray`"), "{e}");
        let e = nd.run(&plan, &mut state, &sample().batch(), &mut Outputs::new());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("a plan on device `flex` handed to device `ndarray`"), "{e}");
        // The owner still runs it.
        flex.run(&plan, &mut state, &sample().batch(), &mut Outputs::new()).unwrap();
        // A run state of another backend is refused too.
        let nw = nd.upload(&weights.tensors(), &g).unwrap();
        let mut nd_state = nd.state(&nd.lower(&nw, &g, Bucket::new(16, 2, 16)).unwrap()).unwrap();
        let e = flex.run(&plan, &mut nd_state, &sample().batch(), &mut Outputs::new());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("a run state made for another backend handed to device `flex`"), "{e}");
        // Another flex backend is the same device and may use these weights.
        let again = Dispatch::new(&Device::flex()).unwrap();
        again.lower(&fw, &g, Bucket::new(16, 2, 16)).unwrap();
    }
}
