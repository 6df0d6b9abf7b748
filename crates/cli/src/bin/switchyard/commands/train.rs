//! `switchyard train` and `switchyard explain`: fine-tuning, and integrated gradients.

use std::io::{IsTerminal, Write};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use switchyard::training::{Eval, Job, Progress, Settings, Task as TrainTask};
use switchyard::{DType, DTypeChoice, Question, Task};

use super::{device, json_line, say_source};
use crate::args::{ExplainArgs, TaskArg, TrainArgs};

/// Refuses a dtype other than f32, which is all training computes in yet (`auto` means f32
/// here, on every device).
fn f32_only(dtype: DTypeChoice) -> Result<()> {
    if !matches!(dtype, DTypeChoice::Auto | DTypeChoice::Exact(DType::F32)) {
        bail!(
            "training and explaining compute in f32; --dtype {dtype} is not supported for them yet"
        );
    }
    Ok(())
}

/// The final line `train` prints.
#[derive(Serialize)]
struct Summary<'a> {
    out: &'a std::path::Path,
    steps: u64,
    first_loss: Option<f32>,
    last_loss: Option<f32>,
    before: Option<&'a Eval>,
    after: Option<&'a Eval>,
    tokens_per_second: f64,
}

/// Trains as the flags say, showing progress on stderr, and prints a summary line.
pub fn run(a: &TrainArgs) -> Result<()> {
    f32_only(a.dtype.into())?;
    let device = device(a.device.as_deref())?;
    say_source(&a.model);
    let model = switchyard::resolve(&a.model)?;
    let defaults = Settings::default();
    let settings = Settings {
        epochs: a.epochs,
        lr: a.lr,
        warmup_ratio: a.warmup_ratio,
        adamw: switchyard::training::optim::AdamW {
            weight_decay: a.weight_decay,
            ..defaults.adamw
        },
        max_grad_norm: a.max_grad_norm,
        batch_tokens: a.batch_tokens,
        batch_size: a.batch_size,
        seed: a.seed,
        shuffle: !a.no_shuffle,
        dropout: !a.no_dropout,
        save_steps: a.save_steps,
        ..defaults
    };
    let job = Job {
        model,
        task: match a.task {
            TaskArg::Embed => TrainTask::Embed,
            TaskArg::Classify => TrainTask::Classify,
            TaskArg::Tokens => TrainTask::Tokens,
        },
        data: a.data.clone(),
        eval: a.eval.clone(),
        out: a.out.clone(),
        labels: a.labels.clone(),
        max_len: a.max_len,
        resume: a.resume,
        settings,
    };
    let mut shown = Shown::new();
    let report = switchyard::train(&job, &device, a.threads, &mut |p| shown.show(p))
        .with_context(|| format!("training {} on {device}", switchyard::describe(&a.model)))?;
    shown.finish();
    let summary = Summary {
        out: &a.out,
        steps: report.steps,
        first_loss: report.losses.first().copied(),
        last_loss: report.losses.last().copied(),
        before: report.before.as_ref(),
        after: report.evals.last(),
        tokens_per_second: report.tokens_per_second,
    };
    println!("{}", json_line(&summary)?);
    Ok(())
}

/// Training's progress on stderr: a bar redrawn in place on a terminal, else a line every
/// twentieth of the run; evaluations and checkpoints on lines of their own.
struct Shown {
    terminal: bool,
    steps: u64,
    every: u64,
    open: bool,
}

impl Shown {
    fn new() -> Self {
        Shown { terminal: std::io::stderr().is_terminal(), steps: 0, every: 1, open: false }
    }

    fn line(&mut self, text: &str) {
        if self.open {
            eprintln!();
            self.open = false;
        }
        eprintln!("{text}");
    }

    fn show(&mut self, p: &Progress) {
        match p {
            Progress::Start { steps, from, loss } => {
                self.steps = *steps;
                self.every = (steps / 20).max(1);
                let resumed =
                    if *from > 0 { format!(", resuming after step {from}") } else { String::new() };
                self.line(&format!("training: {steps} steps, {loss}{resumed}"));
            }
            Progress::Step { epoch, step, steps, figures, mean_loss } => {
                let text = format!(
                    "epoch {epoch} step {step}/{steps}  loss {:.4} (epoch mean {mean_loss:.4})  lr {:.2e}",
                    figures.loss, figures.lr
                );
                if self.terminal {
                    let width = 24;
                    let filled = (*step as usize * width / (*steps).max(1) as usize).min(width);
                    eprint!("\r[{}{}] {text}", "#".repeat(filled), " ".repeat(width - filled));
                    self.open = true;
                } else if step % self.every == 0 || step == steps {
                    eprintln!("{text}");
                }
            }
            Progress::Eval { step, eval } => {
                let when = if *step == 0 {
                    "before training".to_owned()
                } else {
                    format!("at step {step}")
                };
                self.line(&format!("eval {when}: {eval}"));
            }
            Progress::Saved(dir) => self.line(&format!("saved {}", dir.display())),
        }
    }

    fn finish(&mut self) {
        if self.open {
            eprintln!();
        }
    }
}

/// One explained token, as printed.
#[derive(Serialize)]
struct TokenLine<'a> {
    token: &'a str,
    start: usize,
    end: usize,
    special: bool,
    /// For a pair: 0 for the query's tokens, 1 for the document's.
    #[serde(skip_serializing_if = "Option::is_none")]
    segment: Option<u32>,
    attribution: f32,
}

/// One explained word, as printed.
#[derive(Serialize)]
struct WordLine<'a> {
    word: &'a str,
    start: usize,
    end: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    segment: Option<u32>,
    attribution: f32,
}

/// One input's attributions, as printed: a text, or a cross-encoder's pair.
#[derive(Serialize)]
struct InputLine<'a> {
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    text_pair: Option<&'a str>,
    tokens: Vec<TokenLine<'a>>,
    words: Vec<WordLine<'a>>,
}

/// An explanation, as printed.
#[derive(Serialize)]
struct Line<'a> {
    target: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'a str>,
    value: f32,
    baseline: f32,
    error: f32,
    steps: usize,
    inputs: Vec<InputLine<'a>>,
}

/// The texts of each input of a question: one text, a pair (as one input), or two texts.
fn texts_of(q: &Question) -> Vec<(&str, Option<&str>)> {
    match q {
        Question::Label { text, .. } => vec![(text, None)],
        Question::Score { query, document, .. } => vec![(query, Some(document))],
        Question::Similarity { a, b, .. } => vec![(a, None), (b, None)],
    }
}

/// Explains each input as the model's task and the flags say, one line each.
pub fn explain(a: &ExplainArgs) -> Result<()> {
    f32_only(a.model.dtype)?;
    let texts = a.input.read()?;
    let device = device(a.model.device.as_deref())?;
    say_source(&a.model.model);
    let dir = switchyard::resolve(&a.model.model)?;
    let model = switchyard::Model::load(&dir)
        .with_context(|| format!("loading {}", switchyard::describe(&a.model.model)))?;
    let one_label = matches!(model.task(), Task::Classify { labels } if labels.len() == 1);
    if a.label.is_some() && (one_label || !matches!(model.task(), Task::Classify { .. })) {
        bail!("--label is for a sequence classifier with two or more labels");
    }
    // The prompt `similarity`, `classify` or `rerank` would put before each text (a
    // cross-encoder's query), held fixed as the special tokens are.
    let prompt = model.prompts().text(a.prompt.choice())?.to_owned();
    let similarity = |a: &str, b: &str| Question::Similarity {
        a: a.to_owned(),
        b: b.to_owned(),
        prompt: prompt.clone(),
    };
    let questions: Vec<Question> = match (model.task(), &a.query) {
        (Task::Classify { .. }, Some(q)) if one_label => texts
            .iter()
            .map(|d| Question::Score {
                query: q.clone(),
                document: d.clone(),
                prompt: prompt.clone(),
            })
            .collect(),
        (Task::Classify { .. }, None) if one_label => {
            bail!("a cross-encoder scores pairs: give --query and the documents")
        }
        (Task::Classify { .. }, None) => texts
            .iter()
            .map(|t| Question::Label {
                text: t.clone(),
                label: a.label.clone(),
                prompt: prompt.clone(),
            })
            .collect(),
        (Task::Embed(_), Some(q)) => texts.iter().map(|t| similarity(q, t)).collect(),
        (Task::Embed(_), None) if texts.len() == 2 => vec![similarity(&texts[0], &texts[1])],
        (Task::Embed(_), None) => bail!(
            "an embedding model's similarity is of two texts: give exactly two, or --query and \
             the texts to compare with it"
        ),
        (task, _) => bail!(
            "explain attributes a classifier's label, a cross-encoder's score or an embedding \
             model's similarity (--query is for the last two); this model is {}",
            task.describe()
        ),
    };
    let mut out = std::io::stdout().lock();
    for q in &questions {
        let e = switchyard::explain(&model, &device, a.model.threads, q, a.steps)?;
        let words = e.explanation.words();
        let inputs = texts_of(q)
            .into_iter()
            .zip(&e.explanation.inputs)
            .zip(&words)
            .map(|(((text, pair), tokens), words)| {
                // A word's span indexes the text of its segment.
                let of = |segment: u32| if segment == 0 { text } else { pair.unwrap_or(text) };
                let seg = |segment: u32| pair.map(|_| segment);
                InputLine {
                    text,
                    text_pair: pair,
                    tokens: tokens
                        .iter()
                        .map(|t| TokenLine {
                            token: &t.token,
                            start: t.span.0,
                            end: t.span.1,
                            special: t.special,
                            segment: seg(t.segment),
                            attribution: t.attribution,
                        })
                        .collect(),
                    words: words
                        .iter()
                        .map(|w| WordLine {
                            word: of(w.segment).get(w.span.0..w.span.1).unwrap_or(""),
                            start: w.span.0,
                            end: w.span.1,
                            segment: seg(w.segment),
                            attribution: w.attribution,
                        })
                        .collect(),
                }
            })
            .collect();
        let line = Line {
            target: &e.target,
            label: e.label.as_deref(),
            value: e.explanation.value,
            baseline: e.explanation.baseline,
            error: e.explanation.error,
            steps: e.explanation.steps,
            inputs,
        };
        if a.readable {
            writeln!(out, "{}", readable(&line, a.top))?;
        } else {
            writeln!(out, "{}", json_line(&line)?)?;
        }
    }
    Ok(())
}

/// One readable line: the output, then each input with its `top` strongest words marked
/// `[word +0.123]` (a pair's two texts split by `||`).
fn readable(line: &Line<'_>, top: usize) -> String {
    let mut s = format!("{} {:.4} (baseline {:.4})", line.target, line.value, line.baseline);
    for input in &line.inputs {
        let mut order: Vec<usize> = (0..input.words.len()).collect();
        order.sort_by(|&i, &j| {
            input.words[j].attribution.abs().total_cmp(&input.words[i].attribution.abs())
        });
        let strong: Vec<usize> = order.into_iter().take(top).collect();
        s.push_str(" |");
        let mut segment = None;
        for (i, w) in input.words.iter().enumerate() {
            if segment.is_some() && segment != w.segment {
                s.push_str(" ||");
            }
            segment = w.segment;
            if strong.contains(&i) {
                s.push_str(&format!(" [{} {:+.3}]", w.word, w.attribution));
            } else {
                s.push(' ');
                s.push_str(w.word);
            }
        }
    }
    s
}
