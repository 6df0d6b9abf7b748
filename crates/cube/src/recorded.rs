//! A run of one batch recorded as a device graph (CubeCL's capture: a CUDA or HIP graph, or on
//! wgpu a software one) and replayed: every kernel of the run again, on the same buffers, with
//! nothing built or launched from the host. What a run costs without the host's launch path is
//! the floor that device graphs could bring a batch of its shape to.
//!
//! A replay runs the recorded batch again, or another batch of its sizes (tokens, sequences and
//! markers), whose tables (ids, types, offsets, positions, attention's blocks, marker rows) are
//! written over the recorded ones first. Every launch's arguments depend only on the sizes, as
//! long as no op read the batch's contents on the host ([`RunCx::read_batch`]: Burn's generic
//! attention and pooling do); another batch is refused on a graph whose run did. A batch of
//! other sizes replays padded to the recorded ones ([`Batch::padded`], [`Recorded::replay_padded`]),
//! its own rows read back. cuBLAS's products are refused: they run on a stream of their own,
//! outside the graph.

use std::marker::PhantomData;

use burn_backend::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::bytes::Bytes;
use cubecl::client::Graph;
use cubecl::server::Handle;
use switchyard_burn::{BurnPlan, BurnState, RunCx, own_rows, read_outputs};
use switchyard_core::{Batch, Error, Outputs, Result};

use crate::kernels::U32s;
use crate::{Cube, Matmul};

/// One batch's run of a plan, recorded as a device graph, with what the graph reads and writes;
/// used on the thread that recorded it (its stream is the graph's).
pub struct Recorded<'a> {
    graph: Graph,
    plan: &'a BurnPlan<CubeBackend>,
    /// The recorded batch.
    batch: &'a Batch<'a>,
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
/// what the recorded run allocates, then the recorded one. [`Error::BadBatch`] for a batch the
/// plan's graph would not run (checked as an executor checks it) or its bucket does not hold;
/// [`Error::Unsupported`] where the runtime records no graphs or the plan's products are cuBLAS's.
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
    // Kernels index the tables without checks (ids into the vocabulary, markers into their
    // sequences): the batch is checked here, as `Executor::run` checks it, before any runs.
    batch.check(&plan.graph().limits())?;
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
    Ok(Recorded { graph: graph?, plan, batch, cx, outs, _thread: PhantomData })
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
    /// Replays the recorded run on `batch`, a batch of the recorded one's sizes (tokens,
    /// sequences and markers), whose tables are first written over the recorded ones on the
    /// device, and reads its outputs into `out`, as a run of `batch` would.
    /// [`Error::BadBatch`] for a batch of other sizes, or one the plan's graph would not run;
    /// [`Error::Unsupported`] for a batch other than the recorded one where the recorded run
    /// read its batch's contents on the host ([`RunCx::read_batch`]), which the graph keeps.
    pub fn replay_on(&self, batch: &Batch<'_>, out: &mut Outputs) -> Result<()> {
        let (was, is) = (self.batch.sizes(), batch.sizes());
        if is != was {
            return Err(Error::BadBatch(format!(
                "a batch of {} tokens in {} sequences with {} markers replayed on a graph \
                 recorded for other sizes ({} tokens in {} sequences with {} markers)",
                is.tokens, is.seqs, is.markers, was.tokens, was.seqs, was.markers
            )));
        }
        batch.check(&self.plan.graph().limits())?;
        self.write_tables(batch)?;
        self.replay_batch(batch, out)
    }

    /// Writes every table of the recorded run's batch with its values for `batch`, all made and
    /// checked before any is written. [`Error::Unsupported`] for a batch other than the
    /// recorded one where the recorded run read its batch's contents on the host.
    fn write_tables(&self, batch: &Batch<'_>) -> Result<()> {
        let b = self.batch;
        let same = (batch.ids, batch.types, batch.cu, batch.markers, batch.mcu)
            == (b.ids, b.types, b.cu, b.markers, b.mcu);
        if self.cx.read_batch() && !same {
            return Err(Error::Unsupported(
                "another batch on a graph whose run read its batch's lengths or ids on the host \
                 (Burn's generic attention or pooling), which the graph keeps"
                    .into(),
            ));
        }
        let mut writes = Vec::new();
        let mut failed = None;
        self.cx.for_each_table(batch, |table, values| {
            let key = table.key;
            let write = if values.len() != table.len {
                Err(Error::BadBatch(format!(
                    "{} values of the table `{key}` for the batch, where the graph reads {}",
                    values.len(),
                    table.len
                )))
            } else {
                device_values(table.value, &values).ok_or_else(|| {
                    Error::Device(format!("the table `{key}`: of a kind this crate does not write"))
                })
            };
            match write {
                Ok(w) => writes.push(w),
                Err(e) => drop(failed.get_or_insert(e)),
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let client = self.cx.device.client();
        for (handle, bytes) in writes {
            // On this thread's stream, the graph's: ordered before the replay.
            client.write(&handle, Bytes::from_bytes_vec(bytes));
        }
        Ok(())
    }

    /// Replays the recorded run and reads its outputs into `out`, as a run of the recorded batch
    /// would.
    pub fn replay(&self, out: &mut Outputs) -> Result<()> {
        self.replay_batch(self.batch, out)
    }

    /// Replays the graph as it stands and reads its outputs into `out` as `batch`'s.
    fn replay_batch(&self, batch: &Batch<'_>, out: &mut Outputs) -> Result<()> {
        self.replay_graph()?;
        read_outputs(self.plan, batch, self.outs.clone(), out)
    }

    /// Replays the graph as it stands.
    fn replay_graph(&self) -> Result<()> {
        let _span = tracing::trace_span!("replay").entered();
        // SAFETY: the graph retains the buffers its kernels read and write (CubeCL's capture
        // keeps their handles), and `self` holds the weights' plan, the batch's tables and the
        // outputs besides; the replay and the reads after it are on this thread's stream, the
        // one recorded, so they are ordered after it.
        unsafe { self.graph.replay() }.map_err(|e| Error::Device(format!("replaying: {e}")))
    }

    /// Replays the recorded run on `batch` padded to the recorded batch's sizes ([`Batch::padded`]), and
    /// reads the outputs of `batch`'s own rows (the padding's come after them) into `out`, as a
    /// run of `batch` would. So one graph, recorded on a padded batch, serves every batch that
    /// pads to its sizes. [`Error::BadBatch`] where `batch` does not pad to them; else as
    /// [`Recorded::replay_on`].
    pub fn replay_padded(&self, batch: &Batch<'_>, out: &mut Outputs) -> Result<()> {
        let padded = batch.padded(self.batch.sizes(), &self.plan.graph().limits())?;
        self.write_tables(&padded.batch())?;
        self.replay_graph()?;
        let mine = own_rows(self.plan, batch, self.outs.clone());
        read_outputs(self.plan, batch, mine, out)
    }
}

/// The buffer of a table of the batch made by [`RunCx::table`] (ours as [`U32s`], Burn's as an
/// int tensor) and `values` as its bytes; `None` for a value of another kind.
fn device_values(value: &dyn std::any::Any, values: &[i64]) -> Option<(Handle, Vec<u8>)> {
    if let Some((handle, _)) = value.downcast_ref::<U32s>() {
        return Some((
            handle.clone(),
            values.iter().flat_map(|&v| (v as u32).to_ne_bytes()).collect(),
        ));
    }
    let t = value.downcast_ref::<CubeTensor>()?;
    let bytes = match t.dtype {
        DType::I64 => values.iter().flat_map(|&v| v.to_ne_bytes()).collect(),
        DType::I32 => values.iter().flat_map(|&v| (v as i32).to_ne_bytes()).collect(),
        DType::U32 => values.iter().flat_map(|&v| (v as u32).to_ne_bytes()).collect(),
        _ => return None,
    };
    Some((t.handle.clone(), bytes))
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

    /// The encoder of most tests here: 2 layers, 32 wide, 64 positions.
    const SMALL: EncoderSpec =
        EncoderSpec { vocab: 50, width: 32, heads: 2, ffn: 48, layers: 2, max_pos: 64 };

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
        let graph = bert_like(SMALL);
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
                t.client.write(&t.handle, Bytes::from_bytes_vec(garbage));
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

    /// A batch of the recorded sizes (tokens, sequences, markers), with other ids and types,
    /// or other lengths and marker positions too, replays to its own run's outputs, bit for
    /// bit, and back again; one of other sizes is refused.
    #[test]
    fn a_recorded_run_replays_on_any_batch_of_its_sizes() {
        let graph = bert_like(SMALL);
        let cube = device();
        let (plan, mut state) = planned(&cube, &graph, 6, Bucket::new(64, 4, 64));
        let a = batch_of(&[(5, &[1, 3]), (2, &[]), (34, &[6])], 1, 0);
        let b = batch_of(&[(5, &[1, 3]), (2, &[]), (34, &[6])], 11, 1);
        // Other lengths, and markers elsewhere: other offsets, positions and rows, and three
        // blocks of 32 query rows where `a` has four (the attention launch's spare ones).
        let c = batch_of(&[(20, &[0]), (8, &[2, 7]), (13, &[])], 4, 1);
        let eager = |buf: &BatchBuf, state: &mut BurnState<CubeBackend>| {
            let mut out = Outputs::new();
            cube.run(&plan, state, &buf.batch(), &mut out).expect("a run");
            values(&out)
        };
        let want = [&a, &b, &c].map(|buf| eager(buf, &mut state));
        assert!(want[0] != want[1] && want[1] != want[2], "the batches differ");

        let recorded_on = a.batch();
        let recorded = record(&cube, &plan, &mut state, &recorded_on).expect("recorded");
        for i in [1, 2, 0, 2, 1] {
            let mut out = Outputs::new();
            recorded.replay_on(&[&a, &b, &c][i].batch(), &mut out).expect("a replay");
            assert_eq!(values(&out), want[i], "batch {i}");
        }
        let other = batch_of(&[(41, &[1, 3, 6])], 1, 0);
        let e = recorded.replay_on(&other.batch(), &mut Outputs::new()).expect_err("refused");
        assert!(matches!(&e, Error::BadBatch(m) if m.contains("other sizes")), "{e}");
    }

    /// A batch of sequences of `(length, markers)`, its ids from `first` and types from `types`.
    fn batch_of(seqs: &[(u32, &[u32])], first: u32, types: u32) -> BatchBuf {
        let mut buf = BatchBuf::new();
        for &(len, markers) in seqs {
            let ids: Vec<u32> = (0..len).map(|i| (first + 7 * i) % 50).collect();
            let kinds: Vec<u32> = (0..len).map(|i| (i + types) % 2).collect();
            buf.push(&ids, Some(&kinds), markers).expect("a sequence");
        }
        buf
    }

    /// One graph recorded on a padded batch serves batches of other sizes padded to it: each
    /// gives its own run's outputs, its own rows only (none for markers it lacks).
    #[test]
    fn a_graph_of_a_padded_batch_replays_smaller_batches_padded_to_it() {
        let graph = bert_like(SMALL);
        let cube = device();
        let (plan, mut state) = planned(&cube, &graph, 7, Bucket::new(64, 4, 64));
        let sizes = Bucket::new(48, 4, 4);
        let first = batch_of(&[(5, &[1, 3]), (2, &[]), (7, &[6])], 1, 0);
        let recorded_on = first.batch().padded(sizes, &graph.limits()).expect("pads");
        let recorded_on = recorded_on.batch();
        let recorded = record(&cube, &plan, &mut state, &recorded_on).expect("recorded");
        let batches = [
            batch_of(&[(9, &[0]), (4, &[])], 3, 1),
            batch_of(&[(20, &[2, 5]), (3, &[1]), (1, &[])], 8, 0),
            batch_of(&[(6, &[])], 2, 1),
            first,
        ];
        for buf in &batches {
            let mut want = Outputs::new();
            cube.run(&plan, &mut state, &buf.batch(), &mut want).expect("a run");
            let mut got = Outputs::new();
            recorded.replay_padded(&buf.batch(), &mut got).expect("a replay");
            let shapes =
                |o: &Outputs| o.mats().iter().map(|m| (m.rows, m.width)).collect::<Vec<_>>();
            assert_eq!(shapes(&got), shapes(&want), "the batch's own rows");
            // The padded run's products have more rows, which may tile them otherwise (another
            // order of the sums), so equal to f32's rounding of the largest value.
            for (g, w) in values(&got).iter().zip(values(&want)) {
                let top = w.iter().fold(0f32, |a, v| a.max(v.abs()));
                let off = g.iter().zip(&w).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
                assert!(off <= 1e-5 * top.max(1.0), "{off} off, of {top}");
            }
        }
        let big = batch_of(&[(30, &[]), (30, &[])], 1, 0);
        let e = recorded.replay_padded(&big.batch(), &mut Outputs::new()).expect_err("refused");
        assert!(matches!(&e, Error::BadBatch(m) if m.contains("does not pad")), "{e}");
    }

    /// Burn's generic embedding lookups read index tensors made as tables of the batch, which
    /// `replay_on` rewrites like ours; where an op read the batch's lengths on the host (Burn's
    /// generic attention, a launch per sequence), another batch is refused, padded or not, and the
    /// recorded one still replays.
    #[test]
    fn generic_lookups_replay_on_new_ids_and_a_run_that_read_its_lengths_only_its_own_batch() {
        let graph = bert_like(EncoderSpec::TINY);
        let (a, b) = (batch_of(&[(3, &[]), (2, &[])], 1, 0), batch_of(&[(2, &[]), (3, &[])], 5, 1));
        for (set, replays) in [
            (crate::KernelSet { embed_norm: false, ..device().kernels().set() }, true),
            (crate::KernelSet { attention: false, ..device().kernels().set() }, false),
        ] {
            let cube = crate::with_kernels(&device(), set);
            let (plan, mut state) = planned(&cube, &graph, 2, Bucket::new(16, 2, 16));
            let mut want_b = Outputs::new();
            cube.run(&plan, &mut state, &b.batch(), &mut want_b).expect("a run");
            let recorded_on = a.batch();
            let recorded = record(&cube, &plan, &mut state, &recorded_on).expect("recorded");
            let mut out = Outputs::new();
            if replays {
                recorded.replay_on(&b.batch(), &mut out).expect("new ids and lengths replay");
                assert_eq!(values(&out), values(&want_b));
            } else {
                let e = recorded.replay_on(&b.batch(), &mut out).expect_err("refused");
                assert!(matches!(&e, Error::Unsupported(m) if m.contains("generic")), "{e}");
                let e = recorded.replay_padded(&b.batch(), &mut out).expect_err("refused");
                assert!(matches!(&e, Error::Unsupported(m) if m.contains("generic")), "{e}");
                recorded.replay_on(&a.batch(), &mut out).expect("the recorded batch replays");
                recorded.replay_padded(&a.batch(), &mut out).expect("so does it padded");
            }
        }
    }

    /// A batch the graph would not run (an id past the vocabulary) or the bucket does not hold
    /// is refused before anything is launched or recorded, and runs go on as before.
    #[test]
    fn a_batch_the_plan_would_not_run_is_refused_and_nothing_is_recorded() {
        let graph = bert_like(SMALL);
        let cube = device();
        let (plan, mut state) = planned(&cube, &graph, 3, Bucket::new(16, 2, 16));
        let ok = batch_of(&[(5, &[1]), (3, &[])], 1, 0);
        let mut before = Outputs::new();
        cube.run(&plan, &mut state, &ok.batch(), &mut before).expect("a run");

        let mut past_vocab = BatchBuf::new();
        past_vocab.push(&[1, 2, SMALL.vocab as u32], None, &[]).expect("a sequence");
        let batch = past_vocab.batch();
        let e = record(&cube, &plan, &mut state, &batch).expect_err("refused");
        assert!(matches!(&e, Error::BadBatch(m) if m.contains("vocab")), "{e}");

        let big = batch_of(&[(12, &[]), (12, &[])], 1, 0);
        let batch = big.batch();
        let e = record(&cube, &plan, &mut state, &batch).expect_err("refused");
        assert!(matches!(&e, Error::BadBatch(m) if m.contains("does not fit")), "{e}");

        let mut after = Outputs::new();
        cube.run(&plan, &mut state, &ok.batch(), &mut after).expect("a run after");
        assert_eq!(values(&after), values(&before));
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
