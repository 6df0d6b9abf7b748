//! A run of one batch recorded as a device graph (CubeCL's capture: a CUDA or HIP graph, or on
//! wgpu a software one) and replayed: every kernel of the run again, on the same buffers, with
//! nothing built or launched from the host. What a run costs without the host's launch path is
//! the floor that device graphs could bring a batch of its shape to.
//!
//! A replay runs the recorded batch again, or another batch of its shape (the same sequence
//! lengths and markers), whose ids and types are written over the recorded ones first: every
//! other table the graph reads and every launch's arguments depend only on the shape. cuBLAS's
//! products are refused: they run on a stream of their own, outside the graph.

use std::marker::PhantomData;

use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::client::Graph;
use switchyard_burn::{BurnPlan, BurnState, RunCx, read_outputs};
use switchyard_core::{Batch, Error, Outputs, Result};

use crate::kernels::{TOKEN_IDS, TOKEN_TYPES, U32s};
use crate::{Cube, Matmul};

/// One batch's run of a plan, recorded as a device graph, with what the graph reads and writes;
/// used on the thread that recorded it (its stream is the graph's).
pub struct Recorded<'a> {
    graph: Graph,
    plan: &'a BurnPlan<CubeBackend>,
    /// The recorded run's context: the batch's tables on the device, which the graph reads.
    cx: RunCx<'a, CubeBackend>,
    /// The recorded run's outputs, which each replay writes again.
    outs: Vec<Option<CubeTensor>>,
    /// Replays and reads stay on the recording thread, whose stream the graph was recorded on.
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for Recorded<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorded").field("graph", &self.graph).finish_non_exhaustive()
    }
}

/// Records a run of `plan` on `batch` on `cube`'s device as a device graph, from this thread's
/// stream: one run as usual (compiling and tuning whatever is new), one to leave in the pools
/// what the recorded run allocates, then the recorded one. [`Error::Unsupported`] where the
/// runtime records no graphs or the plan's products are cuBLAS's.
pub fn record<'a>(
    cube: &'a Cube,
    plan: &'a BurnPlan<CubeBackend>,
    state: &mut BurnState<CubeBackend>,
    batch: &'a Batch<'a>,
) -> Result<Recorded<'a>> {
    let _span = tracing::debug_span!("record", tokens = batch.tokens()).entered();
    if matches!(cube.kernels().matmul(), Matmul::Cublas | Matmul::CublasQueued) {
        return Err(Error::Unsupported(
            "a device graph of cuBLAS's products: they run on a stream outside it".into(),
        ));
    }
    let client = cube.device().client();
    let cx = RunCx::new(plan.graph(), batch, cube.device());
    cube.forward_in(plan, state, &cx)?;
    cubecl::future::block_on(client.sync()).map_err(refused)?;
    client.graph_prepare().map_err(refused)?;
    // From here on the stream stays in the capture's hands until `stop_capture`, whatever fails.
    let recorded = cube.forward_in(plan, state, &cx).and_then(|warm| {
        drop(warm);
        client.start_capture().map_err(refused)?;
        cube.forward_in(plan, state, &cx)
    });
    let graph = client.stop_capture().map_err(refused);
    let outs = recorded?;
    Ok(Recorded { graph: graph?, plan, cx, outs, _thread: PhantomData })
}

/// CubeCL's error while recording: [`Error::Unsupported`] where the runtime has no graphs.
fn refused(e: cubecl::server::ServerError) -> Error {
    let m = e.to_string();
    if m.contains("not supported by this backend") {
        Error::Unsupported(format!("a device graph on this runtime: {m}"))
    } else {
        Error::Device(format!("recording a device graph: {m}"))
    }
}

impl Recorded<'_> {
    /// Replays the recorded run on `batch`, a batch of the recorded one's shape (the same
    /// sequence lengths and markers), whose token ids and types are first written over the
    /// recorded ones on the device, and reads its outputs into `out`, as a run of `batch` would.
    /// [`Error::BadBatch`] for a batch of another shape; [`Error::Unsupported`] where the run
    /// looked its embeddings up the generic way, whose ids and types are not rewritten.
    pub fn replay_on(&self, batch: &Batch<'_>, out: &mut Outputs) -> Result<()> {
        let was = self.cx.batch;
        if (batch.cu, batch.markers, batch.mcu) != (was.cu, was.markers, was.mcu) {
            return Err(Error::BadBatch(format!(
                "a batch of {} tokens in {} sequences replayed on a graph recorded for another \
                 shape ({} tokens in {} sequences, or other lengths or markers)",
                batch.tokens(),
                batch.seqs(),
                was.tokens(),
                was.seqs()
            )));
        }
        if self.cx.uploaded_ids_or_types() {
            return Err(Error::Unsupported(
                "new ids on a graph whose run looked its embeddings up the generic way".into(),
            ));
        }
        let client = self.cx.device.client();
        for (key, values) in [(TOKEN_IDS, batch.ids), (TOKEN_TYPES, batch.types)] {
            if let Some((handle, len)) = self.cx.memoed::<U32s>(key) {
                debug_assert_eq!(len, values.len(), "the same tokens");
                let bytes = <u32 as cubecl::CubeElement>::as_bytes(values).to_vec();
                client.write(&handle, cubecl::bytes::Bytes::from_bytes_vec(bytes));
            }
        }
        self.replay(out)
    }

    /// Replays the recorded run and reads its outputs into `out`, as a run of the recorded batch
    /// would.
    pub fn replay(&self, out: &mut Outputs) -> Result<()> {
        let _span = tracing::trace_span!("replay").entered();
        // SAFETY: the graph retains the buffers its kernels read and write (CubeCL's capture
        // keeps their handles), and `self` holds the weights' plan, the batch's tables and the
        // outputs besides; the replay and the reads below are on this thread's stream, the one
        // recorded, so they are ordered after it.
        unsafe { self.graph.replay() }.map_err(|e| Error::Device(format!("replaying: {e}")))?;
        read_outputs(self.plan, self.cx.batch, self.outs.clone(), out)
    }
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod tests {
    use switchyard_core::testkit::{EncoderSpec, bert_like, random_weights};
    use switchyard_core::{Backend, BatchBuf, Bucket};

    use super::*;

    /// The device under test: wgpu's first adapter (llvmpipe in CI), or in a build without wgpu,
    /// the first CUDA device (the device tests' bundle).
    fn device() -> Cube {
        #[cfg(feature = "wgpu")]
        return crate::wgpu::open(0).expect("a wgpu adapter");
        #[cfg(not(feature = "wgpu"))]
        return crate::cuda::open(0).expect("a CUDA device");
    }

    /// `graph` on `cube` with random weights from `seed`, lowered for `bucket`, and a state.
    fn planned(
        cube: &Cube,
        graph: &switchyard_core::Graph,
        seed: u64,
        bucket: Bucket,
    ) -> (BurnPlan<CubeBackend>, BurnState<CubeBackend>) {
        let weights = random_weights(graph, seed);
        let w = cube.upload(&weights.tensors(), graph).expect("weights");
        let plan = cube.lower(&w, graph, bucket).expect("a plan");
        let state = cube.state(&plan).expect("a state");
        (plan, state)
    }

    fn values(out: &Outputs) -> Vec<Vec<f32>> {
        out.mats().iter().map(|m| m.data.clone()).collect()
    }

    /// Each replay computes the outputs again (they are overwritten before it), bit for bit the
    /// run's, in every dtype the device has; and the stream runs as before once it is dropped.
    #[test]
    fn a_recorded_run_replays_to_the_runs_outputs_and_runs_go_on_as_before() {
        for dtype in device().caps().dtypes {
            replays_in(dtype);
        }
    }

    fn replays_in(dtype: switchyard_core::DType) {
        let spec = EncoderSpec { vocab: 50, width: 32, heads: 2, ffn: 48, layers: 2, max_pos: 64 };
        let graph = bert_like(spec);
        let cube = device().with_dtype(dtype).expect("a dtype the device lists");
        let (plan, mut state) = planned(&cube, &graph, 5, Bucket::new(64, 4, 64));
        let mut buf = BatchBuf::new();
        // Markers too: the graph gathers their rows, by a table the run uploads.
        let seqs: [(&[u32], &[u32]); 3] =
            [(&[1, 2, 3, 4, 5], &[1, 3]), (&[6, 7], &[]), (&[8, 9, 10, 11, 12, 13, 14], &[6])];
        for (ids, markers) in seqs {
            buf.push(ids, None, markers).expect("a sequence");
        }
        let batch = buf.batch();
        let mut eager = Outputs::new();
        cube.run(&plan, &mut state, &batch, &mut eager).expect("a run");

        let recorded = record(&cube, &plan, &mut state, &batch).expect("recorded");
        for _ in 0..3 {
            // The outputs overwritten first: what comes back was written by the replay.
            for t in recorded.outs.iter().flatten() {
                let garbage = vec![0xffu8; t.handle.size() as usize];
                t.client.write(&t.handle, cubecl::bytes::Bytes::from_bytes_vec(garbage));
            }
            let mut replayed = Outputs::new();
            recorded.replay(&mut replayed).expect("a replay");
            assert_eq!(values(&replayed), values(&eager), "{dtype}");
        }
        drop(recorded);
        // The stream is out of the capture's hands: a run launches and reads as before.
        let mut after = Outputs::new();
        cube.run(&plan, &mut state, &batch, &mut after).expect("a run after the recording");
        assert_eq!(values(&after), values(&eager), "{dtype}");
    }

    /// A batch of the recorded shape with other ids and types replays to its own run's outputs,
    /// bit for bit, and back again; one of another shape is refused.
    #[test]
    fn a_recorded_run_replays_on_new_ids_of_the_same_shape() {
        let spec = EncoderSpec { vocab: 50, width: 32, heads: 2, ffn: 48, layers: 2, max_pos: 64 };
        let graph = bert_like(spec);
        let cube = device();
        let (plan, mut state) = planned(&cube, &graph, 6, Bucket::new(64, 4, 64));
        let batch_of = |first: u32, types: u32| {
            let mut buf = BatchBuf::new();
            for (len, markers) in [(5u32, &[1u32, 3][..]), (2, &[]), (7, &[6])] {
                let ids: Vec<u32> = (0..len).map(|i| (first + 7 * i) % 50).collect();
                let kinds: Vec<u32> = (0..len).map(|i| (i + types) % 2).collect();
                buf.push(&ids, Some(&kinds), markers).expect("a sequence");
            }
            buf
        };
        let (a, b) = (batch_of(1, 0), batch_of(11, 1));
        let eager = |buf: &BatchBuf, state: &mut BurnState<CubeBackend>| {
            let mut out = Outputs::new();
            cube.run(&plan, state, &buf.batch(), &mut out).expect("a run");
            values(&out)
        };
        let (want_a, want_b) = (eager(&a, &mut state), eager(&b, &mut state));
        assert_ne!(want_a, want_b, "the two batches differ");

        let recorded_on = a.batch();
        let recorded = record(&cube, &plan, &mut state, &recorded_on).expect("recorded");
        for (buf, want) in [(&b, &want_b), (&a, &want_a), (&b, &want_b)] {
            let mut out = Outputs::new();
            recorded.replay_on(&buf.batch(), &mut out).expect("a replay");
            assert_eq!(&values(&out), want);
        }
        let mut other = BatchBuf::new();
        other.push(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], None, &[1, 3, 6]).unwrap();
        let e = recorded.replay_on(&other.batch(), &mut Outputs::new()).expect_err("refused");
        assert!(matches!(&e, Error::BadBatch(m) if m.contains("another shape")), "{e}");
    }

    /// Ids looked up the generic way are index tensors that `replay_on` does not rewrite: new
    /// ids are refused there rather than replayed with the recorded ones.
    #[test]
    fn new_ids_are_refused_where_the_run_looked_them_up_the_generic_way() {
        let graph = bert_like(EncoderSpec::TINY);
        let cube = device();
        let set = crate::KernelSet { embed_norm: false, ..cube.kernels().set() };
        let cube = crate::with_kernels(&cube, set);
        let (plan, mut state) = planned(&cube, &graph, 2, Bucket::new(16, 2, 16));
        let mut buf = BatchBuf::new();
        buf.push(&[1, 2, 3], None, &[]).expect("a sequence");
        let batch = buf.batch();
        let recorded = record(&cube, &plan, &mut state, &batch).expect("recorded");
        recorded.replay(&mut Outputs::new()).expect("the recorded batch replays");
        let e = recorded.replay_on(&batch, &mut Outputs::new()).expect_err("refused");
        assert!(matches!(&e, Error::Unsupported(m) if m.contains("generic")), "{e}");
    }

    /// cuBLAS runs on a stream of its own, which a graph of CubeCL's stream would not hold.
    #[test]
    fn cublas_products_are_not_recorded() {
        let graph = bert_like(EncoderSpec {
            vocab: 20,
            width: 16,
            heads: 2,
            ffn: 16,
            layers: 1,
            max_pos: 16,
        });
        let cube = crate::with_matmul(&device(), Matmul::Cublas);
        let (plan, mut state) = planned(&cube, &graph, 1, Bucket::new(16, 2, 16));
        let mut buf = BatchBuf::new();
        buf.push(&[1, 2, 3], None, &[]).expect("a sequence");
        let batch = buf.batch();
        let e = record(&cube, &plan, &mut state, &batch).expect_err("cuBLAS is refused");
        assert!(matches!(&e, Error::Unsupported(m) if m.contains("cuBLAS")), "{e}");
    }
}
