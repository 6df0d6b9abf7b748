//! [`Runner`]: a model on a backend, turning texts into its outputs in batches that fit.

use std::borrow::Borrow;

use switchyard_core::{
    Backend, BatchBuf, Bucket, Buckets, DeviceKind, Executor, LaneId, Outputs, Rows,
};

use crate::heads::{EMBEDDING, LOGITS, SPARSE, TOKENS};
use crate::{Encoded, Error, Model, Result, Task};

/// The most memory one batch's widest per-token value may take. A SPLADE head's logits are a
/// vocabulary wide per token (30522 columns for BERT: 122 KB a token), so its batches are held
/// to a smaller bucket than an embedder's.
const WIDE_VALUE_BUDGET: usize = 256 << 20;

/// Which tokens a token classifier labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Marking {
    /// Each word's first sub-token (the usual convention for NER labels).
    #[default]
    FirstSubToken,
    /// Every token except the special tokens.
    EveryToken,
}

/// Which output [`Runner::run_encoded`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Read {
    /// The model's head: embeddings, logits or SPLADE weights.
    #[default]
    Head,
    /// An embedding model's final row for every token, before pooling.
    Tokens,
}

/// A token classifier's logits for one marked token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogits {
    /// The token's position in the tokenized input (special tokens included).
    pub position: u32,
    /// The byte range in the text it labels: the whole word for [`Marking::FirstSubToken`],
    /// the token alone for [`Marking::EveryToken`].
    pub span: (usize, usize),
    /// One logit per label.
    pub logits: Vec<f32>,
}

/// Runs a model on a backend: texts in, the model's outputs out, in input order.
pub struct Runner<B: Backend> {
    model: Model,
    engine: Engine<B>,
}

/// A tokenized input with its marked tokens (position, byte range in the text): the
/// tokens a per-marker output (a token classifier's) is read at.
pub type Marked = (Encoded, Vec<(u32, (usize, usize))>);

/// An input's marked tokens and the rows of the output it asked for.
type InputRows = (Vec<(u32, (usize, usize))>, Vec<Vec<f32>>);

/// The executor with its reusable batch and outputs, and the batch limit.
struct Engine<B: Backend> {
    exec: Executor<B>,
    buf: BatchBuf,
    out: Outputs,
    /// The most tokens, sequences and markers one batch holds.
    limit: Bucket,
    /// The lane of the model's token graph, if it has one.
    tokens: Option<LaneId>,
    /// Threads that tokenize the texts of the next batches.
    tokenize_threads: usize,
    /// Whether the next batches' texts are tokenized while a batch runs (on a device that
    /// computes elsewhere), not between runs.
    tokenize_ahead: bool,
}

impl<B: Backend> Runner<B> {
    /// Uploads `model`'s weights to `backend`, with `buckets` (stage `default`).
    pub fn new(mut model: Model, backend: B, buckets: Buckets) -> Result<Self> {
        let limit = batch_limit(&model, &buckets, backend.caps().batch_tokens);
        let mut exec = model.executor(backend, buckets)?;
        // `executor` refused a table whose largest bucket holds no full-length sequence.
        let limit = limit.ok_or_else(|| Error::format("the bucket table is empty"))?;
        let stage = switchyard_core::DEFAULT_STAGE;
        let tokens = model.token_graph().map(|g| exec.add_graph(g.clone(), stage)).transpose()?;
        let caps = exec.caps();
        let (tokenize_threads, tokenize_ahead) = (tokenize_threads(&caps), tokenize_ahead(&caps));
        let (buf, out) = (BatchBuf::new(), Outputs::new());
        let engine = Engine { exec, buf, out, limit, tokens, tokenize_threads, tokenize_ahead };
        // The backend holds the weights now.
        model.checkpoint.release_pages();
        Ok(Runner { model, engine })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The executor (for its caps and memory).
    pub fn executor(&self) -> &Executor<B> {
        &self.engine.exec
    }

    /// The most tokens, sequences and markers one batch holds.
    pub fn batch_limit(&self) -> Bucket {
        self.engine.limit
    }

    /// How many threads tokenize texts: the backend's host threads on a CPU, every core for a
    /// device that computes elsewhere (its host threads are idle while it tokenizes).
    pub fn tokenize_threads(&self) -> usize {
        self.engine.tokenize_threads
    }

    /// Whether texts are tokenized a batch limit's worth ahead, while the device runs the
    /// batches before them: on a device that computes elsewhere, whose host cores would
    /// otherwise wait. On a CPU they tokenize between runs, as the cores are the model's.
    pub fn tokenizes_ahead(&self) -> bool {
        self.engine.tokenize_ahead
    }

    /// One embedding per text (for an embedding model). `progress` is called with the number
    /// of texts done after each batch, as are all the methods here.
    pub fn embed(&mut self, texts: &[&str], progress: impl FnMut(usize)) -> Result<Vec<Vec<f32>>> {
        self.expect(|t| matches!(t, Task::Embed(_)), "an embedding model")?;
        let rows = self.run_texts(texts, None, EMBEDDING, progress)?;
        Ok(rows.into_iter().map(one_row).collect())
    }

    /// Class logits per text (for a sequence classifier).
    pub fn classify(
        &mut self,
        texts: &[&str],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>> {
        self.expect(|t| matches!(t, Task::Classify { .. }), "a sequence classifier")?;
        let rows = self.run_texts(texts, None, LOGITS, progress)?;
        Ok(rows.into_iter().map(one_row).collect())
    }

    /// Class logits for each `(query, document)` pair, in document order (for a cross-encoder).
    pub fn classify_pairs(
        &mut self,
        query: &str,
        docs: &[&str],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>> {
        self.expect(
            |t| matches!(t, Task::Classify { .. }),
            "a cross-encoder (a sequence classifier)",
        )?;
        let (tokens, engine) = (&self.model.tokenizer, &mut self.engine);
        let encode = |d: &str| Ok((tokens.encode_pair(query, d)?, Vec::new()));
        let rows = tokenized(docs, engine.tokenizing(), encode, |inputs| {
            engine.run(inputs, LOGITS, Rows::Seqs, progress)
        })?;
        Ok(rows.into_iter().map(one_row).collect())
    }

    /// Label logits for the tokens `marking` picks in each text (for a token classifier).
    pub fn classify_tokens(
        &mut self,
        texts: &[&str],
        marking: Marking,
        progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<TokenLogits>>> {
        self.expect(|t| matches!(t, Task::ClassifyTokens { .. }), "a token classifier")?;
        let rows = self.run_texts(texts, Some(marking), LOGITS, progress)?;
        Ok(rows
            .into_iter()
            .map(|(spans, logits)| {
                spans
                    .into_iter()
                    .zip(logits)
                    .map(|((position, span), logits)| TokenLogits { position, span, logits })
                    .collect()
            })
            .collect())
    }

    /// SPLADE term weights per text: the non-zero `(token id, weight)` pairs, heaviest first
    /// (for a sparse encoder).
    pub fn sparse(
        &mut self,
        texts: &[&str],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<(u32, f32)>>> {
        self.expect(|t| matches!(t, Task::Sparse), "a sparse (SPLADE) encoder")?;
        let rows = self.run_texts(texts, None, SPARSE, progress)?;
        Ok(rows.into_iter().map(|r| crate::scores::sparse_terms(&one_row(r))).collect())
    }

    /// The rows of the model's output for inputs tokenized elsewhere, per input: one row for a
    /// per-sequence output (embeddings, logits, SPLADE weights a vocabulary wide), one per
    /// marked token for a token classifier, one per token for [`Read::Tokens`] (an embedding
    /// model only). Batches are cut at the batch limit.
    pub fn run_encoded<'a>(
        &mut self,
        inputs: impl IntoIterator<Item = &'a Marked>,
        read: Read,
    ) -> Result<Vec<Vec<Vec<f32>>>> {
        let (lane, output, rows) = match (read, &self.model.task) {
            (Read::Head, Task::Embed(_)) => (LaneId::MAIN, EMBEDDING, Rows::Seqs),
            (Read::Head, Task::Classify { .. }) => (LaneId::MAIN, LOGITS, Rows::Seqs),
            (Read::Head, Task::ClassifyTokens { .. }) => (LaneId::MAIN, LOGITS, Rows::Markers),
            (Read::Head, Task::Sparse) => (LaneId::MAIN, SPARSE, Rows::Seqs),
            (Read::Tokens, task) => {
                let lane = self.engine.tokens.ok_or_else(|| {
                    Error::unsupported(format!(
                        "token states come from an embedding model, and this is {}",
                        task.describe()
                    ))
                })?;
                (lane, TOKENS, Rows::Tokens)
            }
        };
        let inputs = inputs.into_iter().map(Ok);
        let rows = self.engine.run_lane(lane, inputs, output, rows, |_| {})?;
        Ok(rows.into_iter().map(|(_, r)| r).collect())
    }

    fn expect(&self, ok: impl Fn(&Task) -> bool, what: &str) -> Result<()> {
        if ok(&self.model.task) {
            Ok(())
        } else {
            Err(Error::unsupported(format!(
                "this model is {}, not {what}",
                self.model.task.describe()
            )))
        }
    }

    /// Tokenizes `texts`, marks tokens if asked, and runs them; per text, the marked tokens and
    /// the output's rows.
    fn run_texts(
        &mut self,
        texts: &[&str],
        marking: Option<Marking>,
        output: &str,
        progress: impl FnMut(usize),
    ) -> Result<Vec<InputRows>> {
        let (tokens, engine) = (&self.model.tokenizer, &mut self.engine);
        let encode = |t: &str| {
            let e = tokens.encode(t)?;
            let marks = match marking {
                None => Vec::new(),
                Some(Marking::FirstSubToken) => e.word_starts(),
                Some(Marking::EveryToken) => e.text_tokens(),
            };
            Ok((e, marks))
        };
        let rows = if marking.is_some() { Rows::Markers } else { Rows::Seqs };
        let result = tokenized(texts, engine.tokenizing(), encode, |inputs| {
            engine.run(inputs, output, rows, progress)
        })?;
        Ok(result.into_iter().map(|((_, marks), rows)| (marks, rows)).collect())
    }
}

/// The single row of a per-sequence output.
fn one_row<T>((_, rows): (T, Vec<Vec<f32>>)) -> Vec<f32> {
    rows.into_iter().next().unwrap_or_default()
}

/// The largest bucket whose widest per-token value fits [`WIDE_VALUE_BUDGET`] and that holds
/// at most `preferred` tokens (the backend's [`Caps::batch_tokens`](switchyard_core::Caps)),
/// or else the smallest that holds one sequence of the model's maximum length.
fn batch_limit(model: &Model, buckets: &Buckets, preferred: Option<usize>) -> Option<Bucket> {
    let stage = buckets.stage(switchyard_core::DEFAULT_STAGE);
    let g = model.graph();
    let widest = g.vals.iter().filter(|s| s.rows == Rows::Tokens).map(|s| s.width).max();
    let bytes = |b: &Bucket| b.tokens * widest.unwrap_or(0) * size_of::<f32>();
    let max_len = model.tokenizer().max_len();
    stage
        .iter()
        .rev()
        .find(|b| {
            let fast = preferred.is_none_or(|p| b.tokens <= p);
            b.tokens >= max_len && bytes(b) <= WIDE_VALUE_BUDGET && fast
        })
        .or_else(|| stage.iter().find(|b| b.tokens >= max_len))
        .copied()
}

/// How texts are tokenized: `chunk` at a time (a batch's worth), each chunk on `threads`
/// threads; with `ahead`, on a thread of its own while the batches before it run.
#[derive(Clone, Copy, Debug)]
struct Tokenizing {
    chunk: usize,
    threads: usize,
    ahead: bool,
}

/// `consume` of the inputs `encode` makes of `texts`, in order, tokenized as `how` says:
/// lazily, a chunk when `consume` needs it; or ahead, where a thread tokenizes the chunks in
/// turn and hands each over, at most one waiting beside the one it is on. A `consume` that
/// stops early stops that thread after its chunk.
fn tokenized<R>(
    texts: &[&str],
    how: Tokenizing,
    encode: impl Fn(&str) -> Result<Marked> + Sync,
    consume: impl FnOnce(&mut dyn Iterator<Item = Result<Marked>>) -> R,
) -> R {
    let chunks = texts.chunks(how.chunk.max(1));
    let encode = &encode;
    let tokenize = move |chunk: &[&str]| crate::par::map_ordered(chunk, how.threads, |t| encode(t));
    if !how.ahead {
        return consume(&mut chunks.flat_map(tokenize));
    }
    std::thread::scope(|s| {
        let (send, chunks_done) = std::sync::mpsc::sync_channel(1);
        s.spawn(move || {
            for chunk in chunks {
                // Sending fails once `consume` is done and dropped the receiver.
                if send.send(tokenize(chunk)).is_err() {
                    break;
                }
            }
        });
        consume(&mut chunks_done.into_iter().flatten())
    })
}

/// The threads [`Runner::tokenize_threads`] says.
fn tokenize_threads(caps: &switchyard_core::Caps) -> usize {
    match caps.kind {
        DeviceKind::Cpu => caps.threads.max(1),
        _ => std::thread::available_parallelism().map_or(1, usize::from),
    }
}

/// What [`Runner::tokenizes_ahead`] says.
fn tokenize_ahead(caps: &switchyard_core::Caps) -> bool {
    caps.kind != DeviceKind::Cpu
}

impl<B: Backend> Engine<B> {
    /// How this engine's texts are tokenized.
    fn tokenizing(&self) -> Tokenizing {
        Tokenizing {
            chunk: self.limit.seqs,
            threads: self.tokenize_threads,
            ahead: self.tokenize_ahead,
        }
    }

    /// Runs inputs in batches within the limit; per input, the input and `output`'s rows: one
    /// for a per-sequence output (`rows` is [`Rows::Seqs`]), one per mark for a per-marker one.
    fn run<M: Borrow<Marked>>(
        &mut self,
        inputs: impl Iterator<Item = Result<M>>,
        output: &str,
        rows: Rows,
        progress: impl FnMut(usize),
    ) -> Result<Vec<(M, Vec<Vec<f32>>)>> {
        self.run_lane(LaneId::MAIN, inputs, output, rows, progress)
    }

    /// [`Engine::run`] on the graph of `lane`; [`Rows::Tokens`] gives one row per token.
    fn run_lane<M: Borrow<Marked>>(
        &mut self,
        lane: LaneId,
        inputs: impl Iterator<Item = Result<M>>,
        output: &str,
        rows: Rows,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<(M, Vec<Vec<f32>>)>> {
        let mut result = Vec::new();
        let mut pending: Vec<M> = Vec::new();
        let (mut tokens, mut marks) = (0, 0);
        for input in inputs {
            let input = input?;
            let (n, m) = (input.borrow().0.ids.len(), input.borrow().1.len());
            if !pending.is_empty()
                && (tokens + n > self.limit.tokens
                    || marks + m > self.limit.markers
                    || pending.len() == self.limit.seqs)
            {
                self.flush(lane, &mut pending, output, rows, &mut result)?;
                (tokens, marks) = (0, 0);
                progress(result.len());
            }
            tokens += n;
            marks += m;
            pending.push(input);
        }
        if !pending.is_empty() {
            self.flush(lane, &mut pending, output, rows, &mut result)?;
        }
        progress(result.len());
        Ok(result)
    }

    /// Runs the pending inputs as one batch and appends their rows to `result`.
    fn flush<M: Borrow<Marked>>(
        &mut self,
        lane: LaneId,
        pending: &mut Vec<M>,
        output: &str,
        rows: Rows,
        result: &mut Vec<(M, Vec<Vec<f32>>)>,
    ) -> Result<()> {
        self.buf.clear();
        let mut positions = Vec::new();
        for (e, marks) in pending.iter().map(Borrow::borrow) {
            positions.clear();
            positions.extend(marks.iter().map(|&(p, _)| p));
            self.buf.push(&e.ids, Some(&e.types), &positions)?;
        }
        self.exec.run(lane, &self.buf.batch(), &mut self.out)?;
        let m = self
            .out
            .get(output)
            .ok_or_else(|| Error::format(format!("the graph has no `{output}` output")))?;
        let mut it = m.iter_rows();
        for input in pending.drain(..) {
            let n = match rows {
                Rows::Markers => input.borrow().1.len(),
                Rows::Tokens => input.borrow().0.ids.len(),
                Rows::Seqs => 1,
            };
            let taken: Vec<Vec<f32>> = it.by_ref().take(n).map(<[f32]>::to_vec).collect();
            result.push((input, taken));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use switchyard_core::{Caps, DeviceKind};

    use super::{Tokenizing, tokenize_ahead, tokenize_threads, tokenized};
    use crate::{Encoded, Error, Marked, Result};

    #[test]
    fn a_cpu_backend_tokenizes_on_its_threads_and_another_device_on_every_core_ahead() {
        let cpu = |n| Caps::new("flex", "host CPU", DeviceKind::Cpu).with_threads(n);
        assert_eq!(tokenize_threads(&cpu(3)), 3);
        assert_eq!(tokenize_threads(&cpu(0)), 1);
        assert!(!tokenize_ahead(&cpu(3)));
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let gpu = Caps::new("cube", "cuda:0", DeviceKind::Gpu);
        assert_eq!(tokenize_threads(&gpu), cores);
        assert!(tokenize_ahead(&gpu));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_runner_lets_the_checkpoints_pages_go_once_uploaded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/bert");
        let model = crate::Model::load(&dir).unwrap();
        let buckets = switchyard_core::Buckets::default();
        let mut run = super::Runner::new(model, switchyard_flex::flex(), buckets).unwrap();
        assert_eq!(run.model().checkpoint().resident_bytes(), 0);
        // Still served from the file after release: the runner embeds, and the weights read.
        assert_eq!(run.embed(&["a text"], |_| {}).unwrap().len(), 1);
        assert!(run.model().tensors().is_ok());
    }

    /// Forty texts, "0" to "39", in chunks of four.
    const TEXTS: usize = 40;
    const CHUNK: usize = 4;

    /// Tokenizes the text `i` as one token `i`, logging `i`; `i == fail` is an error.
    fn encoder(log: &Mutex<Vec<usize>>, fail: usize) -> impl Fn(&str) -> Result<Marked> + Sync {
        move |t| {
            let i: usize = t.parse().unwrap();
            log.lock().unwrap().push(i);
            if i == fail {
                return Err(Error::Tokenizer(format!("text {i}")));
            }
            let e = Encoded {
                ids: vec![i as u32],
                types: vec![0],
                tokens: vec![t.to_owned()],
                words: vec![Some(0)],
                offsets: vec![(0, t.len())],
                special: vec![false],
            };
            Ok((e, Vec::new()))
        }
    }

    fn most(log: &Mutex<Vec<usize>>) -> Option<usize> {
        log.lock().unwrap().iter().copied().max()
    }

    #[test]
    fn ahead_the_next_chunks_tokenize_while_one_is_consumed_and_lazily_they_wait() {
        let texts: Vec<String> = (0..TEXTS).map(|i| i.to_string()).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        for ahead in [false, true] {
            let log = Mutex::new(Vec::new());
            let how = Tokenizing { chunk: CHUNK, threads: 1, ahead };
            let ids = tokenized(&texts, how, encoder(&log, usize::MAX), |inputs| {
                let first = inputs.next().unwrap().unwrap();
                if ahead {
                    // The next chunk is tokenized while the first is still being consumed.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while most(&log) < Some(CHUNK) {
                        assert!(Instant::now() < deadline, "the next chunk was not tokenized");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // And no more than one chunk waits beside the one being tokenized.
                    std::thread::sleep(Duration::from_millis(50));
                    assert!(most(&log) < Some(3 * CHUNK), "{:?} tokenized", most(&log));
                } else {
                    assert_eq!(most(&log), Some(CHUNK - 1), "lazily, one chunk at a time");
                }
                let rest = inputs.map(|r| r.unwrap().0.ids[0] as usize);
                std::iter::once(first.0.ids[0] as usize).chain(rest).collect::<Vec<_>>()
            });
            assert_eq!(ids, (0..TEXTS).collect::<Vec<_>>(), "ahead: {ahead}");
        }
    }

    #[test]
    fn an_error_ahead_stops_the_tokenizing_thread() {
        let texts: Vec<String> = (0..TEXTS).map(|i| i.to_string()).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let log = Mutex::new(Vec::new());
        let how = Tokenizing { chunk: CHUNK, threads: 1, ahead: true };
        let got: Result<Vec<Marked>> =
            tokenized(&texts, how, encoder(&log, 9), |inputs| inputs.collect());
        assert!(matches!(got, Err(Error::Tokenizer(m)) if m == "text 9"));
        // The consumer stopped at text 9, in the third chunk: the thread tokenized at most two
        // chunks more, then found no one to hand them to.
        assert!(most(&log) < Some(5 * CHUNK), "{:?} tokenized", most(&log));
    }
}
