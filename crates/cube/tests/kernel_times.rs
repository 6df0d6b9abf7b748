//! CubeCL's time for each kernel, logged and added up by kernel, and each kernel's source. A test
//! binary of its own: CubeCL reads its configuration once a process, before the first device
//! opens.

#![cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]

mod common;

use switchyard_core::testkit::{EncoderSpec, bert_like, random_weights};
use switchyard_core::{BatchBuf, Buckets, Executor, LaneId, Outputs};
use switchyard_cube::{kernel_sources, kernel_times, log_kernel_times, settled_log};

#[test]
fn each_kernel_a_run_launches_is_timed_and_added_up_by_kernel() {
    let temp = |what: &str| {
        let file = std::env::temp_dir()
            .join(format!("switchyard-kernel-{what}-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&file);
        file
    };
    let (file, sources) = (temp("times"), temp("sources"));
    // A sources log that cannot be opened is an error naming it, before CubeCL's configuration
    // is set (CubeCL would panic opening it).
    let nowhere = std::env::temp_dir().join("switchyard-no-such-folder").join("sources.log");
    let e = log_kernel_times(&file, Some(&nowhere)).expect_err("no such folder");
    assert!(e.to_string().contains("switchyard-no-such-folder"), "{e}");
    log_kernel_times(&file, Some(&sources)).expect("before any device, the bad call set nothing");
    let again = log_kernel_times(&file, None).expect_err("the configuration is set");
    assert!(again.to_string().contains("before opening any cube device"), "{again}");

    let spec = EncoderSpec { vocab: 50, width: 32, heads: 2, ffn: 48, layers: 3, max_pos: 64 };
    let graph = bert_like(spec);
    let weights = random_weights(&graph, 3);
    let buckets: Buckets = "default 64 4 64\n".parse().expect("a valid table");
    let cube = common::open().expect("the device under test");
    let mut ex = Executor::new(cube, &weights.tensors(), graph.clone(), "default", buckets)
        .expect("an executor");
    let mut batch = BatchBuf::new();
    batch.push(&[1, 2, 3, 4, 5], None, &[]).expect("a sequence");
    batch.push(&[6, 7], None, &[]).expect("a sequence");
    let mut out = Outputs::new();
    ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("a warm-up run");
    let from = std::fs::metadata(&file).expect("the log").len();
    for _ in 0..2 {
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("a run");
    }
    let times = kernel_times(&settled_log(&file, from).expect("the log"));
    let _ = std::fs::remove_file(&file);
    // Each kernel compiled, once, with the source the device's compiler was given: the
    // warm-up run compiled them all.
    let compiled = kernel_sources(&settled_log(&sources, 0).expect("the sources log"));
    let _ = std::fs::remove_file(&sources);
    let attention: Vec<_> =
        compiled.iter().filter(|k| k.name.ends_with("::VarlenAttention")).collect();
    assert_eq!(attention.len(), 1, "{:?}", compiled.iter().map(|k| &k.name).collect::<Vec<_>>());
    assert!(attention[0].source.len() > 500 && !attention[0].lang.is_empty(), "{attention:?}");
    assert!(compiled.len() >= times.len(), "{} sources, {} kernels", compiled.len(), times.len());
    let find = |name: &str| {
        times.iter().find(|k| k.name == name).unwrap_or_else(|| panic!("no {name} in {times:?}"))
    };
    // Two runs of three layers: attention once a layer, LayerNorm twice and the embeddings'.
    assert_eq!(find("VarlenAttention").launches, 2 * spec.layers, "{times:?}");
    assert_eq!(find("LayerNormKernel").launches, 2 * (2 * spec.layers + 1), "{times:?}");
    assert!(times.iter().all(|k| !k.time.is_zero() && !k.name.is_empty()), "{times:?}");
    assert!(times.windows(2).all(|w| w[0].time >= w[1].time), "longest first: {times:?}");
}
