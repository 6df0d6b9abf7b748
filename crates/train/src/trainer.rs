//! [`Trainer`]: optimizer steps on ragged batches, evaluation, checkpoints and resuming, and the
//! whole job ([`Trainer::fit`]) that `switchyard train` runs.

use std::path::{Path, PathBuf};

use burn_backend::Backend as BurnBackend;
use burn_backend::tensor::FloatTensor;
use serde::{Deserialize, Serialize};
use switchyard_burn::{floats, read_f32};
use switchyard_core::{BatchBuf, Caps, HostTensor};
use switchyard_models::heads::{self, Init, NewHeadKind};
use switchyard_models::{Model, Task as ModelTask};

use crate::data::{self, Data, Example, Kind, ReadTask, Reader};
use crate::export::{self, Tensor};
use crate::loss;
use crate::metrics;
use crate::optim::{self, AdamState, AdamW, Schedule};
use crate::{Ad, Error, Graded, Pass, Result};

/// What a model is trained to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// An embedding model, from pairs with in-batch negatives or from scored pairs.
    Embed,
    /// A sequence classifier or cross-encoder.
    Classify,
    /// A token classifier.
    Tokens,
}

/// Training settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Passes over the data.
    pub epochs: usize,
    /// The peak learning rate.
    pub lr: f64,
    /// The share of all steps spent warming up from 0 to `lr` (then the rate decays linearly
    /// to 0).
    pub warmup_ratio: f64,
    /// AdamW's coefficients and weight decay.
    pub adamw: AdamW,
    /// The largest L2 norm of all gradients together; larger ones are scaled down.
    pub max_grad_norm: f64,
    /// The most tokens a batch holds.
    pub batch_tokens: usize,
    /// The most examples a batch holds.
    pub batch_size: usize,
    /// Seeds the shuffle of each epoch, dropout, and a new head's weights.
    pub seed: u64,
    /// Whether the data is shuffled each epoch (else it runs in file order).
    pub shuffle: bool,
    /// Whether the model's dropout applies.
    pub dropout: bool,
    /// The scale of cosine similarities in the embedding losses.
    pub scale: f32,
    /// Save a checkpoint every this many steps (and always at the end).
    pub save_steps: Option<u64>,
}

impl Default for Settings {
    /// sentence-transformers' defaults: learning rate 2e-5, 10% warm-up, weight decay 0.01,
    /// gradient norm 1, one epoch, batches of at most 32 examples.
    fn default() -> Self {
        Settings {
            epochs: 1,
            lr: 2e-5,
            warmup_ratio: 0.1,
            adamw: AdamW::default(),
            max_grad_norm: 1.0,
            batch_tokens: 16384,
            batch_size: 32,
            seed: 42,
            shuffle: true,
            dropout: true,
            scale: loss::SIMILARITY_SCALE,
            save_steps: None,
        }
    }
}

/// One optimizer step's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The batch's loss before the step.
    pub loss: f32,
    /// The learning rate the step used.
    pub lr: f64,
    /// The gradients' joint norm before clipping.
    pub grad_norm: f64,
    /// The batch's tokens.
    pub tokens: usize,
}

/// An evaluation's figures: the metric's name and value, as many as the task has.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Eval {
    /// `(name, value)` pairs: `spearman` for scored pairs; `accuracy` (top-1 retrieval) for
    /// anchor-positive pairs; `accuracy` and `macro_f1` for classifiers.
    pub metrics: Vec<(String, f64)>,
}

impl std::fmt::Display for Eval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.metrics.iter().map(|(k, v)| format!("{k} {v:.4}")).collect();
        f.write_str(&parts.join(", "))
    }
}

/// What [`Trainer::fit`] reports as it goes.
#[derive(Clone, Debug)]
pub enum Progress {
    /// Training starts: the steps in all, and the step it starts from (non-zero on resuming).
    Start {
        /// Steps in all.
        steps: u64,
        /// The first step to run.
        from: u64,
        /// The loss being minimised.
        loss: &'static str,
    },
    /// A step is done.
    Step {
        /// Its epoch, from 1.
        epoch: usize,
        /// Steps done.
        step: u64,
        /// Steps in all.
        steps: u64,
        /// This step's figures.
        figures: Step,
        /// The mean loss of this epoch's steps so far.
        mean_loss: f64,
    },
    /// An evaluation, before training (`step` 0) or after an epoch.
    Eval {
        /// Steps done.
        step: u64,
        /// Its figures.
        eval: Eval,
    },
    /// A checkpoint was written.
    Saved(PathBuf),
}

/// The result of [`Trainer::fit`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// Steps run in all (across resumes).
    pub steps: u64,
    /// Each step's loss, in order (this run's and the resumed run's).
    pub losses: Vec<f32>,
    /// The evaluation before training, if there was evaluation data.
    pub before: Option<Eval>,
    /// The evaluation after each epoch.
    pub evals: Vec<Eval>,
    /// Tokens this run trained on (each step's examples, special tokens included).
    pub tokens: usize,
    /// Wall seconds of this run's steps and evaluations (model loading and export aside).
    pub seconds: f64,
    /// `tokens / seconds`.
    pub tokens_per_second: f64,
}

/// A job: what `switchyard train` asks for.
#[derive(Clone, Debug)]
pub struct Job {
    /// The checkpoint to start from.
    pub model: PathBuf,
    /// What to train it for.
    pub task: Task,
    /// The training records (JSON lines).
    pub data: PathBuf,
    /// Evaluation records of the same kind, if any.
    pub eval: Option<PathBuf>,
    /// Where the trained model, its checkpoints and its report go.
    pub out: PathBuf,
    /// The labels of a head to create, for a checkpoint without one.
    pub labels: Option<Vec<String>>,
    /// Truncate inputs at this many tokens instead of the model's maximum.
    pub max_len: Option<usize>,
    /// Continue from the latest checkpoint in `out`.
    pub resume: bool,
    /// The settings.
    pub settings: Settings,
}

/// What a checkpoint records beside the model: where training stood.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct TrainerState {
    /// Steps done.
    step: u64,
    /// The epoch to continue in, from 0.
    epoch: usize,
    /// The batch of that epoch to continue at.
    batch: usize,
    /// Steps in all.
    steps: u64,
    settings: Settings,
    task: Task,
    /// How many training records there were.
    records: usize,
    report: TrainReport,
}

/// Optimizer steps for one model on one device.
pub struct Trainer<B: BurnBackend> {
    graded: Graded<B>,
    kind: Kind,
    settings: Settings,
    adam: AdamState<B>,
    decay: Vec<bool>,
    schedule: Schedule,
    buf: BatchBuf,
}

impl<B: BurnBackend> Trainer<B> {
    /// A trainer of `graded` on data of `kind`, for `steps` steps in all (which the learning
    /// rate's schedule spans).
    pub fn new(graded: Graded<B>, kind: Kind, settings: Settings, steps: u64) -> Self {
        let shapes: Vec<Vec<usize>> = graded.param_info().iter().map(|p| p.shape.clone()).collect();
        let warmup = (settings.warmup_ratio * steps as f64).ceil() as u64;
        Trainer {
            adam: AdamState::new(shapes.len()),
            decay: optim::decays(&shapes),
            schedule: Schedule { base: settings.lr, warmup, total: steps },
            graded,
            kind,
            settings,
            buf: BatchBuf::new(),
        }
    }

    /// The model being trained.
    pub fn graded(&self) -> &Graded<B> {
        &self.graded
    }

    /// Steps done.
    pub fn steps_done(&self) -> u64 {
        self.adam.step
    }

    /// The loss of `examples` with a tape, and the pass to back-propagate it through.
    pub fn loss(
        &mut self,
        examples: &[&Example],
        dropout: bool,
    ) -> Result<(Pass<B>, FloatTensor<Ad<B>>)> {
        data::fill(&mut self.buf, examples)?;
        let pass = self.graded.forward(&self.buf.batch(), dropout, Vec::new())?;
        let out = pass.outputs.first().cloned().flatten().ok_or_else(|| {
            Error::Config(
                "the batch gives no rows to learn from (no labelled word survived truncation)"
                    .into(),
            )
        })?;
        let loss = batch_loss::<Ad<B>>(self.kind, out, examples, self.settings.scale)?;
        Ok((pass, loss))
    }

    /// One optimizer step on `examples` (one batch): forward with dropout as the settings say,
    /// the loss, backward, clipping, AdamW at this step's learning rate.
    pub fn step(&mut self, examples: &[&Example]) -> Result<Step> {
        let _span = tracing::debug_span!("step", step = self.adam.step).entered();
        let step = self.adam.step;
        if self.settings.dropout {
            // Each step's masks from a seed of its own, so a resumed run draws the same ones.
            // The generator is the backend's, shared by its process.
            let seed = self.settings.seed.wrapping_add(step.wrapping_mul(0x9e37_79b9));
            B::seed(self.graded.device(), seed);
        }
        let (pass, loss) = self.loss(examples, self.settings.dropout)?;
        let value = loss::scalar::<Ad<B>>(loss.clone())?;
        if !value.is_finite() {
            return Err(Error::Diverged(format!("the loss is {value} at step {}", step + 1)));
        }
        let mut grads = pass.backward(loss).params;
        let grad_norm = optim::clip_grad_norm::<B>(&mut grads, self.settings.max_grad_norm)?;
        let lr = self.schedule.lr(step);
        let adamw = self.settings.adamw;
        adamw.step::<B>(&mut self.adam, self.graded.params_mut(), grads, &self.decay, lr)?;
        let tokens = examples.iter().map(|e| e.tokens()).sum();
        Ok(Step { loss: value, lr, grad_norm, tokens })
    }

    /// The task's metrics on `data`, without a tape or dropout.
    pub fn evaluate(&mut self, data: &Data) -> Result<Eval> {
        let _span = tracing::info_span!("evaluate", examples = data.examples.len()).entered();
        let order: Vec<usize> = (0..data.examples.len()).collect();
        let batches =
            data::pack(&order, data, self.settings.batch_tokens, self.settings.batch_size);
        let mut rows: Vec<Vec<f32>> = Vec::new();
        let mut width = 0;
        for batch in &batches {
            let examples: Vec<&Example> = batch.iter().map(|&i| &data.examples[i]).collect();
            data::fill(&mut self.buf, &examples)?;
            let out = self.graded.infer(&self.buf.batch(), Vec::new())?;
            if let Some(t) = out.into_iter().next().flatten() {
                width = switchyard_burn::generic::dims::<B>(&t)[1];
                rows.push(read_f32::<B>(t)?);
            } else {
                rows.push(Vec::new());
            }
        }
        let mut metrics = Vec::new();
        match data.kind {
            Kind::Scored | Kind::Triplets => {
                // Per batch, rows are every example's first text, then every second, ...
                let mut firsts = Vec::new();
                let mut seconds = Vec::new();
                let mut scores = Vec::new();
                for (batch, r) in batches.iter().zip(&rows) {
                    let n = batch.len();
                    firsts.extend_from_slice(&r[..n * width]);
                    seconds.extend_from_slice(&r[n * width..2 * n * width]);
                    for &i in batch {
                        if let Example::Scored(_, _, s) = data.examples[i] {
                            scores.push(s);
                        }
                    }
                }
                let unit = |v: &mut Vec<f32>| {
                    for r in v.chunks_exact_mut(width) {
                        let n = r.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                        r.iter_mut().for_each(|x| *x /= n);
                    }
                };
                unit(&mut firsts);
                unit(&mut seconds);
                let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
                if data.kind == Kind::Scored {
                    let cos: Vec<f32> = firsts
                        .chunks_exact(width)
                        .zip(seconds.chunks_exact(width))
                        .map(|(a, b)| dot(a, b))
                        .collect();
                    let rho = metrics::spearman(&cos, &scores).unwrap_or(0.0);
                    metrics.push(("spearman".to_owned(), rho));
                } else {
                    // Top-1 retrieval: is each anchor's own positive the closest of all
                    // positives?
                    let positives: Vec<&[f32]> = seconds.chunks_exact(width).collect();
                    let hits = firsts
                        .chunks_exact(width)
                        .enumerate()
                        .filter(|(i, a)| {
                            let best = positives
                                .iter()
                                .enumerate()
                                .max_by(|x, y| dot(a, x.1).total_cmp(&dot(a, y.1)))
                                .map(|(j, _)| j);
                            best == Some(*i)
                        })
                        .count();
                    metrics
                        .push(("accuracy".to_owned(), hits as f64 / positives.len().max(1) as f64));
                }
            }
            Kind::Classes | Kind::Words => {
                let mut predicted = Vec::new();
                let mut gold = Vec::new();
                for (batch, r) in batches.iter().zip(&rows) {
                    predicted.extend(metrics::argmax_rows(r, width));
                    for &i in batch {
                        match &data.examples[i] {
                            Example::Class(_, c) => gold.push(*c),
                            Example::Words(_, marks) => gold.extend(marks.iter().map(|&(_, l)| l)),
                            _ => {}
                        }
                    }
                }
                metrics.push(("accuracy".to_owned(), metrics::accuracy(&predicted, &gold)));
                metrics.push(("macro_f1".to_owned(), metrics::macro_f1(&predicted, &gold)));
            }
            Kind::Targets => {
                let mut predicted = Vec::new();
                let mut gold = Vec::new();
                for (batch, r) in batches.iter().zip(&rows) {
                    predicted.extend(r.iter().map(|&x| usize::from(x > 0.0)));
                    for &i in batch {
                        if let Example::Target(_, t) = data.examples[i] {
                            gold.push(usize::from(t >= 0.5));
                        }
                    }
                }
                metrics.push(("accuracy".to_owned(), metrics::accuracy(&predicted, &gold)));
                metrics.push(("macro_f1".to_owned(), metrics::macro_f1(&predicted, &gold)));
            }
        }
        Ok(Eval { metrics })
    }

    /// The parameters on the host, in [`Graded::params`]' order.
    pub fn host_params(&self) -> Result<Vec<Vec<f32>>> {
        self.graded.params().iter().map(|p| Ok(read_f32::<B>(p.clone())?)).collect()
    }

    /// Writes AdamW's state to `path` (`m.NAME` and `v.NAME` per parameter).
    fn save_optimizer(&self, path: &Path) -> Result<()> {
        let mut tensors = Vec::new();
        for (i, w) in self.graded.param_info().iter().enumerate() {
            for (tag, slot) in [("m", &self.adam.m[i]), ("v", &self.adam.v[i])] {
                if let Some(t) = slot {
                    let values = read_f32::<B>(t.clone())?;
                    tensors.push(Tensor::f32(
                        format!("{tag}.{}", w.name),
                        w.shape.clone(),
                        &values,
                    ));
                }
            }
        }
        export::write_safetensors(path, &tensors)
    }

    /// Reads AdamW's state written by [`Trainer::save_optimizer`], at `step` steps done.
    fn load_optimizer(&mut self, path: &Path, step: u64) -> Result<()> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
            Error::Config(format!("{}: not a safetensors file: {e}", path.display()))
        })?;
        let device = self.graded.device().clone();
        for (i, w) in self.graded.param_info().iter().enumerate() {
            for (tag, slot) in [("m", &mut self.adam.m[i]), ("v", &mut self.adam.v[i])] {
                let Ok(view) = st.tensor(&format!("{tag}.{}", w.name)) else { continue };
                let t = HostTensor::new(switchyard_core::DType::F32, view.shape(), view.data())?;
                let mut v = Vec::new();
                t.extend_f32(&mut v);
                *slot = Some(floats::<B>(v, &w.shape, &device));
            }
        }
        self.adam.step = step;
        Ok(())
    }
}

/// The loss of one batch's output rows for data of `kind`.
fn batch_loss<B: BurnBackend>(
    kind: Kind,
    out: FloatTensor<B>,
    examples: &[&Example],
    scale: f32,
) -> Result<FloatTensor<B>> {
    let n = examples.len();
    let rows = |a: usize, b: usize| loss::take_rows::<B>(&out, a, b);
    match kind {
        Kind::Triplets => {
            let k = examples.first().map_or(2, |e| e.sequences().len());
            loss::multiple_negatives_ranking::<B>(rows(0, n), rows(n, k * n), scale)
        }
        Kind::Scored => {
            let scores: Vec<f32> = examples
                .iter()
                .map(|e| if let Example::Scored(_, _, s) = e { *s } else { 0.0 })
                .collect();
            loss::cosent::<B>(rows(0, n), rows(n, 2 * n), &scores, scale)
        }
        Kind::Classes => {
            let labels: Vec<usize> = examples
                .iter()
                .map(|e| if let Example::Class(_, c) = e { *c } else { 0 })
                .collect();
            loss::cross_entropy::<B>(out, &labels)
        }
        Kind::Targets => {
            let targets: Vec<f32> = examples
                .iter()
                .map(|e| if let Example::Target(_, t) = e { *t } else { 0.0 })
                .collect();
            loss::bce_with_logits::<B>(out, &targets)
        }
        Kind::Words => {
            let labels: Vec<usize> = examples
                .iter()
                .flat_map(|e| match e {
                    Example::Words(_, marks) => marks.iter().map(|&(_, l)| l).collect(),
                    _ => Vec::new(),
                })
                .collect();
            loss::cross_entropy::<B>(out, &labels)
        }
    }
}

/// Which checkpoint names `out` holds: `checkpoint-N` folders with a finished state, by step.
fn checkpoints(out: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(out) else { return Vec::new() };
    let mut found: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step = name.strip_prefix("checkpoint-")?.parse().ok()?;
            e.path().join("trainer_state.json").is_file().then(|| (step, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// A job made ready to run: its model, data and batches, and where a resumed run stands.
struct Prepared {
    /// The model training starts from (a checkpoint's, when resuming).
    model: Model,
    /// Where it was read from.
    dir: PathBuf,
    train: Data,
    eval: Option<Data>,
    /// Per epoch, its batches of example indices.
    epochs: Vec<Vec<Vec<usize>>>,
    /// Steps in all.
    steps: u64,
    /// The checkpoint resumed from, and its state.
    resume: Option<(PathBuf, TrainerState)>,
}

impl Prepared {
    /// Checks the settings, finds the checkpoint to resume from, prepares the model (a new head
    /// from the labels), reads the records and packs every epoch's batches.
    fn new(job: &Job) -> Result<Prepared> {
        let s = &job.settings;
        if s.epochs == 0 || s.batch_size == 0 || s.batch_tokens == 0 {
            return Err(Error::Config(
                "epochs, the batch size and the batch's tokens must be at least 1".into(),
            ));
        }
        let rate_ok = s.lr.is_finite() && s.lr > 0.0;
        if !rate_ok || !(0.0..1.0).contains(&s.warmup_ratio) {
            return Err(Error::Config(format!(
                "a learning rate of {} and a warm-up ratio of {}: the rate must be above 0, the \
                 ratio in [0, 1)",
                s.lr, s.warmup_ratio
            )));
        }
        std::fs::create_dir_all(&job.out).map_err(|e| Error::io(&job.out, e))?;
        let resume = if job.resume { Some(latest_checkpoint(&job.out)?) } else { None };
        let dir = match &resume {
            Some((dir, _)) => dir.clone(),
            None => prepare(job)?,
        };
        let mut model = Model::load(&dir)?;
        if let Some(n) = job.max_len {
            model.set_max_len(n)?;
        }
        let task = read_task(job.task, model.task())?;
        let reader = Reader { tokenizer: model.tokenizer(), task, labels: model.task().labels() };
        let train = reader.read(&job.data)?;
        let eval = job.eval.as_deref().map(|p| reader.read(p)).transpose()?;
        if let Some(e) = &eval
            && e.kind != train.kind
        {
            return Err(Error::Config(format!(
                "the evaluation records are for {}, the training records for {}",
                e.kind.loss(),
                train.kind.loss()
            )));
        }
        let epochs: Vec<Vec<Vec<usize>>> = (0..s.epochs)
            .map(|e| {
                let order = if s.shuffle {
                    data::shuffled(train.examples.len(), s.seed.wrapping_add(e as u64))
                } else {
                    (0..train.examples.len()).collect()
                };
                data::pack(&order, &train, s.batch_tokens, s.batch_size)
            })
            .collect();
        let steps: u64 = epochs.iter().map(|e| e.len() as u64).sum();
        if let Some((dir, st)) = &resume
            && (st.steps != steps
                || st.records != train.examples.len()
                || st.task != job.task
                || &st.settings != s)
        {
            return Err(Error::Config(format!(
                "--resume: the checkpoint {} was made with other data or settings ({} records, \
                 {} steps); resume with the same ones",
                dir.display(),
                st.records,
                st.steps
            )));
        }
        Ok(Prepared { model, dir, train, eval, epochs, steps, resume })
    }
}

/// The latest checkpoint in `out` and its state; an error if there is none.
fn latest_checkpoint(out: &Path) -> Result<(PathBuf, TrainerState)> {
    let (_, dir) = checkpoints(out).pop().ok_or_else(|| {
        Error::Config(format!(
            "--resume: {} holds no checkpoint (checkpoint-N/ with trainer_state.json)",
            out.display()
        ))
    })?;
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let state = serde_json::from_str(&text)
        .map_err(|e| Error::Config(format!("{}: not a trainer state: {e}", path.display())))?;
    Ok((dir, state))
}

/// How `task`'s records are read for a model of `model`'s task; an error if it cannot learn it.
fn read_task(task: Task, model: &ModelTask) -> Result<ReadTask> {
    match (task, model) {
        (Task::Embed, ModelTask::Embed(_)) => Ok(ReadTask::Embed),
        (Task::Classify, ModelTask::Classify { .. }) => Ok(ReadTask::Classify),
        (Task::Tokens, ModelTask::ClassifyTokens { .. }) => Ok(ReadTask::Tokens),
        (task, m) => {
            let name = match task {
                Task::Embed => "embed",
                Task::Classify => "classify",
                Task::Tokens => "tokens",
            };
            let hint = match task {
                Task::Embed => "",
                _ => "; --labels NAME,NAME... gives a model without a classifier a new one",
            };
            Err(Error::Config(format!("--task {name} cannot train {}{hint}", m.describe())))
        }
    }
}

impl<B: BurnBackend> Trainer<B> {
    /// Runs `job` on the Burn backend `B` on `device` (a Switchyard backend of `caps`):
    /// prepares the model (creating its head from `job.labels` if it has none), reads the
    /// data, trains for the epochs asked, evaluating after each, saving checkpoints, and writes
    /// the trained model to `job.out` as a Hugging Face directory with `training.json`.
    pub fn fit(
        device: B::Device,
        caps: Caps,
        job: &Job,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<TrainReport> {
        let started = std::time::Instant::now();
        let p = Prepared::new(job)?;
        let s = &job.settings;
        let graded = Graded::<B>::of_model(device, caps, &p.model)?;
        let mut trainer = Trainer::new(graded, p.train.kind, s.clone(), p.steps);
        let (mut report, (first_epoch, first_batch)) = match &p.resume {
            Some((dir, st)) => {
                trainer.load_optimizer(&dir.join("optimizer.safetensors"), st.step)?;
                (st.report.clone(), (st.epoch, st.batch))
            }
            None => (TrainReport::default(), (0, 0)),
        };
        let (steps, kind) = (p.steps, p.train.kind);
        progress(&Progress::Start { steps, from: trainer.steps_done(), loss: kind.loss() });
        if let Some(e) = &p.eval
            && report.before.is_none()
        {
            let before = trainer.evaluate(e)?;
            progress(&Progress::Eval { step: 0, eval: before.clone() });
            report.before = Some(before);
        }
        let mut tokens = 0usize;
        let run_start = std::time::Instant::now();
        for (epoch, batches) in p.epochs.iter().enumerate().skip(first_epoch) {
            let _span = tracing::info_span!("epoch", epoch = epoch + 1).entered();
            let (mut sum, mut count) = (0.0f64, 0usize);
            let from = if epoch == first_epoch { first_batch } else { 0 };
            let mut save_after_eval = false;
            for (b, batch) in batches.iter().enumerate().skip(from) {
                let examples: Vec<&Example> = batch.iter().map(|&i| &p.train.examples[i]).collect();
                let figures = trainer.step(&examples)?;
                tokens += figures.tokens;
                sum += f64::from(figures.loss);
                count += 1;
                report.losses.push(figures.loss);
                let step = trainer.steps_done();
                let mean_loss = sum / count as f64;
                progress(&Progress::Step { epoch: epoch + 1, step, steps, figures, mean_loss });
                // A checkpoint due at an epoch's last step waits for the epoch's evaluation.
                let due = s.save_steps.is_some_and(|n| n > 0 && step % n == 0);
                if due && b + 1 < batches.len() {
                    report.steps = step;
                    progress(&Progress::Saved(trainer.checkpoint(
                        &p,
                        job,
                        (epoch, b + 1),
                        &report,
                    )?));
                }
                save_after_eval = due && b + 1 == batches.len();
            }
            if let Some(e) = &p.eval {
                let after = trainer.evaluate(e)?;
                progress(&Progress::Eval { step: trainer.steps_done(), eval: after.clone() });
                report.evals.push(after);
            }
            // The last epoch's end is the export itself.
            if save_after_eval && epoch + 1 < p.epochs.len() {
                report.steps = trainer.steps_done();
                progress(&Progress::Saved(trainer.checkpoint(&p, job, (epoch + 1, 0), &report)?));
            }
        }
        report.steps = trainer.steps_done();
        report.tokens = tokens;
        report.seconds = run_start.elapsed().as_secs_f64();
        report.tokens_per_second = tokens as f64 / report.seconds.max(1e-9);
        trainer.export(&p.model, &job.out)?;
        // The head made from labels lives on in the export and the checkpoints.
        let initial = job.out.join("initial");
        if p.dir == initial {
            std::fs::remove_dir_all(&initial).map_err(|e| Error::io(&initial, e))?;
        }
        let path = job.out.join("training.json");
        let text = serde_json::to_string_pretty(&report).expect("a report serialises");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        tracing::info!(seconds = started.elapsed().as_secs_f64(), "trained");
        Ok(report)
    }

    /// Writes the model with the current parameters to `dir` as a Hugging Face directory.
    pub fn export(&self, model: &Model, dir: &Path) -> Result<()> {
        let _span = tracing::info_span!("export", dir = %dir.display()).entered();
        let info = self.graded.param_info();
        let values = self.host_params()?;
        let mut tensors: Vec<Tensor<'_>> = info
            .iter()
            .zip(&values)
            .map(|(p, v)| Tensor::f32(p.name.clone(), p.shape.clone(), v))
            .collect();
        let trained = |n: &str| info.iter().any(|p| p.name == n);
        tensors.extend(export::kept(model.checkpoint(), &trained, &|n| n.to_owned()));
        export::copy_files(model.checkpoint().dir(), dir, None, true)?;
        export::write_model(dir, tensors)
    }

    /// Writes `out/checkpoint-STEP/`: the model, AdamW's state and where training stands (to
    /// continue `at` a batch of an epoch, both from 0), through a temporary folder renamed into
    /// place.
    fn checkpoint(
        &self,
        p: &Prepared,
        job: &Job,
        (epoch, batch): (usize, usize),
        report: &TrainReport,
    ) -> Result<PathBuf> {
        let step = self.steps_done();
        let dir = job.out.join(format!("checkpoint-{step}"));
        let tmp = export::temp(&dir);
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        self.export(&p.model, &tmp)?;
        self.save_optimizer(&tmp.join("optimizer.safetensors"))?;
        let state = TrainerState {
            step,
            epoch,
            batch,
            steps: p.steps,
            settings: job.settings.clone(),
            task: job.task,
            records: p.train.examples.len(),
            report: report.clone(),
        };
        let path = tmp.join("trainer_state.json");
        let text = serde_json::to_string_pretty(&state).expect("a state serialises");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        std::fs::rename(&tmp, &dir).map_err(|e| Error::io(&dir, e))?;
        Ok(dir)
    }
}

/// The checkpoint directory training starts from: `job.model` itself, or, when `job.labels`
/// asks for a head it lacks, `job.out/initial/`: the same encoder under the class's prefix,
/// the new head's tensors drawn as transformers draws them, and a `config.json` naming the
/// class and the labels (without sentence-transformers' files, which would make it an
/// embedder again).
fn prepare(job: &Job) -> Result<PathBuf> {
    let Some(labels) = &job.labels else { return Ok(job.model.clone()) };
    let kind = match job.task {
        Task::Classify => NewHeadKind::Sequence,
        Task::Tokens => NewHeadKind::Tokens,
        Task::Embed => {
            return Err(Error::Config(
                "--labels names a classifier's labels; an embedding model has none".into(),
            ));
        }
    };
    if labels.is_empty() || labels.iter().any(String::is_empty) {
        return Err(Error::Config("--labels takes one or more names, separated by commas".into()));
    }
    if let Some(dup) = labels.iter().enumerate().find(|(i, l)| labels[..*i].contains(l)) {
        return Err(Error::Config(format!("--labels names `{}` twice", dup.1)));
    }
    let model = Model::load(&job.model)?;
    match model.task() {
        ModelTask::Embed(_) => {}
        ModelTask::Classify { labels: have } | ModelTask::ClassifyTokens { labels: have } => {
            if have == labels {
                return Ok(job.model.clone());
            }
            return Err(Error::Config(format!(
                "the model is {} with the labels {}; --labels must name those or be left out",
                model.task().describe(),
                have.join(", ")
            )));
        }
        ModelTask::Sparse => {
            return Err(Error::Config("a SPLADE model cannot be given a classifier's head".into()));
        }
    }
    let ck = model.checkpoint();
    let config = ck.config();
    let head = heads::new_head(model.config(), config, kind, labels.len(), &|n| {
        ck.has(n) || ck.has(n.split_once('.').map_or(n, |p| p.1))
    })?;
    // The encoder's tensors, under the class's prefix (a bare encoder has none).
    let bases = ["bert.", "roberta.", "distilbert.", "model.", head.prefix];
    let rename = |n: &str| {
        if bases.iter().any(|b| n.starts_with(b)) {
            n.to_owned()
        } else {
            format!("{}{n}", head.prefix)
        }
    };
    // A sentence-transformers module's weights (a Dense module's) stay behind with its files.
    let module = |n: &str| switchyard_models::st::module_tensor(n).is_some();
    let mut tensors = export::kept(ck, &module, &rename);
    let mut rng = Gauss::new(job.settings.seed);
    for (name, shape, init) in &head.tensors {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = match init {
            Init::Normal(std) => (0..n).map(|_| rng.next() * std).collect(),
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
        };
        tensors.push(Tensor::f32(name.clone(), shape.clone(), &values));
    }
    let mut config = config.clone();
    config["architectures"] = serde_json::json!([head.architecture]);
    config["id2label"] =
        labels.iter().enumerate().map(|(i, l)| (i.to_string(), serde_json::json!(l))).collect();
    config["label2id"] =
        labels.iter().enumerate().map(|(i, l)| (l.clone(), serde_json::json!(i))).collect();
    let dir = job.out.join("initial");
    export::copy_files(ck.dir(), &dir, Some(&config), false)?;
    export::write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    Ok(dir)
}

/// Standard normal numbers from a seed (Box-Muller on SplitMix64).
struct Gauss {
    state: u64,
    spare: Option<f32>,
}

impl Gauss {
    fn new(seed: u64) -> Self {
        Gauss { state: seed, spare: None }
    }

    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn next(&mut self) -> f32 {
        if let Some(x) = self.spare.take() {
            return x;
        }
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        self.spare = Some((r * s) as f32);
        (r * c) as f32
    }
}
