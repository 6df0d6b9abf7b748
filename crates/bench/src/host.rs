//! Where a run's time goes on the host: the Burn backends' `forward` span (building the ops and
//! queuing their launches) against their `read` span (waiting for the device and copying the
//! outputs back). Beside the device's own time per run (`kernel-times`), it says whether a batch
//! is bound by the GPU, by the thread that queues the launches, or by what lies between.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchyard_core::{Backend, BatchBuf, Graph, LaneId, Outputs};
use tracing::span::Id;
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::executor_for;

/// The median of a run's parts over the timed runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostSplit {
    /// The whole run, as the caller sees it.
    pub wall: Duration,
    /// Building the ops and queuing their launches.
    pub forward: Duration,
    /// Waiting for the results and reading them back.
    pub read: Duration,
}

/// Untimed runs before the timed ones: compiling and tuning stay out of the figures.
const WARM_UPS: usize = 2;

/// Times `reps` runs of `g` on `batch` with `be` (after two warm-ups), each split into its
/// `forward` and `read` spans; the medians of each part.
pub(crate) fn host_split<B: Backend>(be: B, g: &Graph, batch: &BatchBuf, reps: usize) -> HostSplit {
    let runs = timed_runs(be, g, batch, reps);
    let part = |i: usize| crate::middle(runs.iter().map(|r| r[i]).collect());
    HostSplit { wall: part(0), forward: part(1), read: part(2) }
}

/// Each of `reps` runs (after two warm-ups) as its wall time and its time in the `forward` and
/// `read` spans.
fn timed_runs<B: Backend>(be: B, g: &Graph, batch: &BatchBuf, reps: usize) -> Vec<[Duration; 3]> {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    tracing::subscriber::with_default(subscriber, || {
        let mut ex = executor_for(be, g, batch);
        let mut out = Outputs::new();
        let mut runs = Vec::with_capacity(reps);
        for i in 0..WARM_UPS + reps.max(1) {
            spans.take();
            let start = Instant::now();
            ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("the bench batch runs");
            let wall = start.elapsed();
            let [forward, read] = spans.take();
            if i >= WARM_UPS {
                runs.push([wall, forward, read]);
            }
        }
        runs
    })
}

/// Replays of one batch's run, medians of `reps` after two ([`replayed`]).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) struct Replays {
    /// In a graph recorded on the batch itself.
    pub(crate) exact: Duration,
    /// In a graph recorded on a batch padded to these sizes, and the time.
    pub(crate) padded: (switchyard_core::Bucket, Duration),
}

/// Granule of the padded graph's tokens: the batch's rounded up past it, as a table of graphs
/// a granule apart would hold it.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
const GRAPH_TOKENS: usize = 256;

/// Replays of `batch`'s run of `g` on `be`, a cube device, recorded as a device graph, each
/// writing every table of the batch first and reading the outputs back, as a replay of a new
/// batch would: in a graph of the batch's own sizes (the run without the host's launch path, the
/// floor device graphs could bring a batch of these sizes to), and in one of more tokens and a
/// sequence more, which the batch is padded to (what a table of graphs a granule apart would
/// give it). An error where the device records no graphs.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn replayed(
    be: &switchyard_dispatch::Dispatch,
    g: &Graph,
    batch: &BatchBuf,
    reps: usize,
) -> switchyard_core::Result<Replays> {
    use switchyard_core::{Bucket, testkit};
    use switchyard_dispatch::cube::record;
    let switchyard_dispatch::Dispatch::Cube { backend: cube, .. } = be else {
        let what = format!("a device graph on {}: not a cube device", be.device());
        return Err(switchyard_core::Error::Unsupported(what));
    };
    let weights = testkit::random_weights(g, crate::WEIGHTS_SEED);
    let w = cube.upload(&weights.tensors(), g)?;
    let b = batch.batch();
    let bucket = crate::bucket_for(batch);
    let sizes =
        Bucket::new((b.tokens() + 1).next_multiple_of(GRAPH_TOKENS), b.seqs() + 1, bucket.markers);
    let mut times = Vec::new();
    for (bucket, pad) in [(bucket, false), (sizes, true)] {
        let plan = cube.lower(&w, g, bucket)?;
        let mut state = cube.state(&plan)?;
        let on = if pad { b.padded(sizes, &g.limits())? } else { batch.clone() };
        let on = on.batch();
        let recorded = record(cube, &plan, &mut state, &on)?;
        let mut out = Outputs::new();
        let mut failed = None;
        let t = crate::median(WARM_UPS, reps.max(1), || {
            let replay = if pad {
                recorded.replay_padded(&b, &mut out)
            } else {
                recorded.replay_on(&b, &mut out)
            };
            if let Err(e) = replay {
                failed.get_or_insert(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        times.push(t);
    }
    Ok(Replays { exact: times[0], padded: (sizes, times[1]) })
}

/// The spans it times, by name, as the Burn backends name them.
const TIMED: [&str; 2] = ["forward", "read"];

/// A layer that sums the time spent inside each of the `TIMED` spans of `switchyard_burn`, and
/// enables nothing else (so no other span or event costs anything while it listens).
#[derive(Clone, Default)]
struct Spans {
    sums: Arc<Mutex<[Duration; 2]>>,
}

impl Spans {
    /// The sums since the last call, and a fresh start.
    fn take(&self) -> [Duration; 2] {
        std::mem::take(&mut *self.sums.lock().expect("no panic while holding it"))
    }

    fn which(meta: &Metadata<'_>) -> Option<usize> {
        if !meta.is_span() || !meta.target().starts_with("switchyard_burn") {
            return None;
        }
        TIMED.iter().position(|n| *n == meta.name())
    }
}

/// When a timed span was entered, kept in the span's extensions.
struct Entered(Instant);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        match Self::which(meta) {
            Some(_) => Interest::always(),
            None => Interest::never(),
        }
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        Self::which(meta).is_some()
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().replace(Entered(Instant::now()));
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let Some(i) = Self::which(span.metadata()) else { return };
        let Some(Entered(at)) = span.extensions_mut().remove::<Entered>() else { return };
        self.sums.lock().expect("no panic while holding it")[i] += at.elapsed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::testkit;

    /// On ndarray (a Burn backend, like cube), both parts of every run are timed and lie within
    /// it. (flex is no Burn backend: it has no such spans.)
    #[test]
    fn a_run_splits_into_forward_and_read() {
        let spec = testkit::EncoderSpec::TINY;
        let g = testkit::bert_like(spec);
        let batch = crate::ragged(4, 3, 9, spec.vocab);
        let be = switchyard_dispatch::Dispatch::new(&"ndarray".parse().unwrap()).unwrap();
        let runs = timed_runs(be, &g, &batch, 3);
        assert_eq!(runs.len(), 3);
        for [wall, forward, read] in runs {
            assert!(forward > Duration::ZERO && read > Duration::ZERO, "{forward:?} {read:?}");
            assert!(forward + read <= wall, "{forward:?} + {read:?} > {wall:?}");
        }
    }

    /// A span of the same name from another crate is not timed.
    #[test]
    fn only_the_backends_spans_count() {
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry().with(spans.clone());
        tracing::subscriber::with_default(subscriber, || {
            let _other = tracing::error_span!("forward").entered();
            std::thread::sleep(Duration::from_millis(2));
        });
        assert_eq!(spans.take(), [Duration::ZERO; 2]);
    }
}
