//! Fuzz targets for what Switchyard parses and checks: bucket tables, ragged batches,
//! `config.json` (of each family), safetensors checkpoints and their shard indexes, tokenizer
//! input (short and long), the CLI's input files, and what a remote server's guard reads from
//! the network (request heads and WebSocket frames).
//!
//! Each target mutates valid seeds (the tiny checkpoints the model tests use, a bucket table, a
//! real batch) with a deterministic generator, so a failure is reproduced by its seed and case
//! number, on stable Rust and without a fuzzing engine. A case passes when the code under test
//! returns, `Ok` or an error, without panicking and with what it accepted being consistent (a
//! bucket that parses is valid; a batch that passes `Batch::check` runs). `cargo xtask fuzz
//! --cases N` runs every target N times; the test suite runs a short pass.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{
    BatchBuf, Bucket, Buckets, Executor, LaneId, Limits, MAX_BUCKET_ROWS, Outputs, Reference,
};
use switchyard_models::{EncoderConfig, Model};

/// What a target saw: inputs accepted and inputs refused with an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Inputs the code under test accepted.
    pub accepted: usize,
    /// Inputs it refused with an error.
    pub refused: usize,
}

impl Tally {
    fn count(&mut self, ok: bool) {
        if ok {
            self.accepted += 1;
        } else {
            self.refused += 1;
        }
    }
}

/// Values that break parsers more often than random bytes do.
pub const INTERESTING: [&str; 18] = [
    "0",
    "-1",
    "1",
    "255",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "1e309",
    "-0.0",
    "NaN",
    "null",
    "[]",
    "{}",
    "\"\"",
    "\u{feff}",
    "../",
    "/",
];

/// Applies one to four random edits to `bytes`: a byte flipped, inserted or removed, a range
/// removed or repeated, or an [`INTERESTING`] value put in.
pub fn mutate(r: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..=r.below(4) {
        let at = r.below(bytes.len() + 1);
        match r.below(6) {
            0 if at < bytes.len() => bytes[at] ^= 1 << r.below(8),
            1 => bytes.insert(at, r.next_u64() as u8),
            2 if at < bytes.len() => {
                bytes.remove(at);
            }
            3 => {
                let end = (at + r.below(16)).min(bytes.len());
                bytes.drain(at..end);
            }
            4 => {
                let end = (at + r.below(16)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
            _ => {
                let v = INTERESTING[r.below(INTERESTING.len())].as_bytes();
                bytes.splice(at..at, v.iter().copied());
            }
        }
    }
}

/// Runs `case` for case numbers `0..cases`, naming the seed, case and input (which the case
/// writes into its second argument before using it) of any that panics.
fn each(
    target: &str,
    seed: u64,
    cases: usize,
    mut case: impl FnMut(&mut Rng, &mut String) -> bool,
) -> Tally {
    let mut tally = Tally::default();
    for n in 0..cases {
        let mut r = Rng::new(seed ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut input = String::new();
        let outcome = catch_unwind(AssertUnwindSafe(|| case(&mut r, &mut input)));
        match outcome {
            Ok(ok) => tally.count(ok),
            Err(_) => panic!("{target}: seed {seed} case {n} panicked (input: {input})"),
        }
    }
    tally
}

/// The tiny checkpoints of the model tests.
pub fn tiny(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny").join(arch)
}

/// A shortened, printable view of bytes, for reports.
fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    format!("{text:?}")
}

/// Bucket tables and single buckets: whatever parses is a valid, ordered table.
pub fn buckets(seed: u64, cases: usize) -> Tally {
    let table = b"default 256 8 256\ndefault 2048 64 2048 # big\nsmall 16 1 0\n".to_vec();
    each("buckets", seed, cases, |r, shown| {
        let mut text = table.clone();
        mutate(r, &mut text);
        *shown = show(&text);
        let text = String::from_utf8_lossy(&text).into_owned();
        let table = text.parse::<Buckets>();
        if let Ok(t) = &table {
            for stage in t.stages() {
                for b in t.stage(stage) {
                    assert!(b.check().is_ok() && b.tokens <= MAX_BUCKET_ROWS, "{b} parsed");
                }
            }
        }
        let one = text.lines().next().unwrap_or("").replace(' ', ",");
        if let Ok(b) = one.parse::<Bucket>() {
            assert!(b.check().is_ok(), "{b} parsed");
        }
        table.is_ok()
    })
}

/// Ragged batches with their arrays edited: whatever `Batch::check` accepts runs on the
/// reference backend, and the rest is refused by `run` itself, never a panic.
pub fn batches(seed: u64, cases: usize) -> Tally {
    let spec = EncoderSpec { vocab: 50, width: 8, heads: 2, ffn: 12, layers: 1, max_pos: 24 };
    let graph = testkit::bert_like(spec);
    let weights = testkit::random_weights(&graph, 1);
    let buckets = Buckets::single("b", &[Bucket::new(64, 8, 64)]).expect("a valid bucket");
    let mut ex = Executor::new(Reference, &weights.tensors(), graph.clone(), "b", buckets)
        .expect("the graph uploads");
    let mut out = Outputs::new();
    each("batches", seed, cases, |r, shown| {
        let mut buf = BatchBuf::new();
        for _ in 0..1 + r.below(4) {
            let len = 1 + r.below(12);
            testkit::push_random_seq(&mut buf, r, len, spec.vocab, true);
        }
        let b = buf.batch();
        let mut arrays =
            [b.ids.to_vec(), b.types.to_vec(), b.cu.to_vec(), b.markers.to_vec(), b.mcu.to_vec()];
        for _ in 0..r.below(3) {
            let a = &mut arrays[r.below(5)];
            match r.below(4) {
                0 if !a.is_empty() => {
                    let i = r.below(a.len());
                    a[i] = [0, 1, 23, 24, 49, 50, u32::MAX][r.below(7)];
                }
                1 => a.push(r.below(64) as u32),
                2 => {
                    a.pop();
                }
                _ => a.clear(),
            }
        }
        let [ids, types, cu, markers, mcu] = &arrays;
        let batch = switchyard_core::Batch { ids, types, cu, markers, mcu };
        *shown = format!("{batch:?}");
        let checked = batch.check(&graph.limits()).is_ok();
        let ran = ex.run(LaneId::MAIN, &batch, &mut out).is_ok();
        // What passes the check fits this bucket here (at most 4 x 24 tokens is not, so a
        // refusal by the bucket is allowed), and what fails it is refused by run.
        assert!(checked || !ran, "a batch that fails Batch::check ran");
        if checked && batch.tokens() <= 64 && batch.seqs() <= 8 && batch.markers() <= 64 {
            assert!(ran, "a batch that passed Batch::check and fits the bucket failed to run");
        }
        checked
    })
}

/// The tiny checkpoints whose `config.json` the config target edits: one of each way of reading
/// a config (BERT's, RoBERTa's offset positions, MPNet's buckets, ModernBERT's layer types, T5's
/// feed-forward, DeBERTa's relative tables, NomicBERT's, GTE's (with and without its NTK
/// scaling) and Jina v3's rotary settings, Gemma's shared heads and layer kinds, Qwen3's).
pub const CONFIG_SEEDS: [&str; 12] = [
    "bert",
    "roberta",
    "mpnet",
    "modernbert",
    "t5",
    "deberta",
    "nomic",
    "gte",
    "gte-ntk",
    "jina",
    "gemma",
    "qwen3",
];

/// `config.json` of one of [`CONFIG_SEEDS`] edited as text: parsed, read as an encoder's sizes,
/// and loaded beside that checkpoint's weights.
pub fn configs(seed: u64, cases: usize) -> Tally {
    let seeds: Vec<(&str, Vec<u8>, Scratch)> = CONFIG_SEEDS
        .iter()
        .map(|name| {
            let dir = tiny(name);
            let text = std::fs::read(dir.join("config.json")).expect("a tiny config.json");
            (*name, text, Scratch::new(&format!("configs-{name}"), &dir))
        })
        .collect();
    each("configs", seed, cases, |r, shown| {
        let (name, text, scratch) = &seeds[r.below(seeds.len())];
        let mut bytes = text.clone();
        mutate(r, &mut bytes);
        *shown = format!("{name}: {}", show(&bytes));
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            return false;
        };
        if let Ok(c) = EncoderConfig::from_json(&v) {
            let _ = c.head_dim();
        }
        std::fs::write(scratch.0.join("config.json"), &bytes).expect("a scratch file");
        Model::load(&scratch.0).is_ok()
    })
}

/// The tiny BERT's `model.safetensors` edited in its header and first bytes: loaded, and if
/// it loads, every tensor read.
pub fn checkpoints(seed: u64, cases: usize) -> Tally {
    let dir = tiny("bert");
    let weights = std::fs::read(dir.join("model.safetensors")).expect("the tiny BERT's weights");
    let scratch = Scratch::new("checkpoints", &dir);
    each("checkpoints", seed, cases, |r, shown| {
        // Edits within the 8-byte length and the JSON header, where parsing happens.
        let header = 8 + u64::from_le_bytes(weights[..8].try_into().expect("8 bytes")) as usize;
        let mut head = weights[..header.min(weights.len())].to_vec();
        mutate(r, &mut head);
        *shown = show(&head);
        let mut bytes = head;
        bytes.extend_from_slice(&weights[header.min(weights.len())..]);
        std::fs::write(scratch.0.join("model.safetensors"), &bytes).expect("a scratch file");
        Model::load(&scratch.0).and_then(|m| m.tensors().map(|t| t.len())).is_ok()
    })
}

/// The tiny BERT as a sharded checkpoint (its weights in one shard, which
/// `model.safetensors.index.json` names for every tensor), the index edited: loaded, and if it
/// loads, every tensor read. Edits reach the file names (the loader keeps shards inside the
/// model's directory) and the tensor names as well as the JSON.
pub fn shard_indexes(seed: u64, cases: usize) -> Tally {
    let dir = tiny("bert");
    let scratch = Scratch::new("shard-indexes", &dir);
    let shard = "model-00001-of-00001.safetensors";
    std::fs::rename(scratch.0.join("model.safetensors"), scratch.0.join(shard))
        .expect("a scratch file");
    let weights = std::fs::read(scratch.0.join(shard)).expect("the tiny BERT's weights");
    let header = 8 + u64::from_le_bytes(weights[..8].try_into().expect("8 bytes")) as usize;
    let meta: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&weights[8..header]).expect("a safetensors header");
    let map: serde_json::Map<String, serde_json::Value> = meta
        .keys()
        .filter(|k| *k != "__metadata__")
        .map(|k| (k.clone(), serde_json::Value::from(shard)))
        .collect();
    let index =
        serde_json::json!({ "metadata": { "total_size": weights.len() }, "weight_map": map });
    let index = serde_json::to_vec_pretty(&index).expect("an index");
    let path = scratch.0.join("model.safetensors.index.json");
    std::fs::write(&path, &index).expect("a scratch file");
    assert!(Model::load(&scratch.0).is_ok(), "the unedited sharded checkpoint loads");
    each("shard_indexes", seed, cases, |r, shown| {
        let mut bytes = index.clone();
        mutate(r, &mut bytes);
        *shown = show(&bytes);
        std::fs::write(&path, &bytes).expect("a scratch file");
        Model::load(&scratch.0).and_then(|m| m.tensors().map(|t| t.len())).is_ok()
    })
}

/// Random text, valid seeds edited and arbitrary code points, through the tiny BERT's
/// tokenizer, alone and in pairs: never more than the maximum length, and the ids checked as a
/// batch against the model's limits or a smaller vocabulary (as a mismatched checkpoint's would
/// be, were loading not to refuse it), which the check must refuse exactly when an id is past
/// it.
pub fn tokenizer_inputs(seed: u64, cases: usize) -> Tally {
    let model = Model::load(&tiny("bert")).expect("the tiny BERT");
    let (tok, limits) = (model.tokenizer(), model.graph().limits());
    let seeds = ["A man is eating food.", "naïve café — 東京 🚆", "", "   ", "[CLS] [SEP] [PAD]"];
    each("tokenizer", seed, cases, |r, shown| {
        let text = if r.below(2) == 0 {
            let mut bytes = seeds[r.below(seeds.len())].as_bytes().to_vec();
            mutate(r, &mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            (0..r.below(64)).filter_map(|_| char::from_u32(r.below(0x11_0000) as u32)).collect()
        };
        *shown = format!("{text:?}");
        let (one, pair) = (tok.encode(&text), tok.encode_pair(&text, seeds[0]));
        let mut fits = one.is_ok() && pair.is_ok();
        // The model's own vocabulary (every id the tokenizer gives fits it, as loading
        // checked), or a smaller one, which the batch check must hold the ids against.
        let limits = match r.below(2) {
            0 => limits,
            _ => Limits { vocab: r.below(limits.vocab as usize + 1) as u32, ..limits },
        };
        for e in [&one, &pair].into_iter().flatten() {
            assert!(e.ids.len() <= tok.max_len(), "{} tokens", e.ids.len());
            let mut buf = BatchBuf::new();
            let pushed = buf.push(&e.ids, Some(&e.types), &[]).is_ok();
            let checked = pushed && buf.batch().check(&limits).is_ok();
            let vocab = limits.vocab;
            assert_eq!(checked, e.ids.iter().all(|&i| i < vocab), "the check of {:?}", e.ids);
            fits &= checked;
        }
        fits
    })
}

/// Long texts (up to 24 KB, past the first prefix of 4096 bytes that `Tokenizer` takes of a
/// long text) from edited seeds and arbitrary code points, a third of them without spaces,
/// through the tiny BERT's tokenizer, alone and as a pair's document: every token, offset, word
/// and type the same as the `tokenizers` crate's whole-text answer on the same file, and a text
/// refused for being too long exactly when its whole encoding is.
pub fn long_tokenizer_inputs(seed: u64, cases: usize) -> Tally {
    use switchyard_models::Truncation;
    let model = Model::load(&tiny("bert")).expect("the tiny BERT");
    let tok = model.tokenizer();
    let file = tiny("bert").join("tokenizer.json");
    let mut whole = tokenizers::Tokenizer::from_file(&file).expect("the tiny BERT's tokenizer");
    whole.with_padding(None);
    let untruncated = whole.clone();
    let params = tokenizers::TruncationParams { max_length: tok.max_len(), ..Default::default() };
    whole.with_truncation(Some(params)).expect("a truncation");
    let seeds = [
        "A man is eating food.",
        "naïve café — 東京 🚆",
        "   ",
        "[CLS] [SEP] [PAD]",
        "x1",
        "съешь же ещё",
        "中文字符，测试。",
        "?!...",
    ];
    let same = |got: &switchyard_models::Encoded, want: &tokenizers::Encoding| {
        got.ids == want.get_ids()
            && got.types == want.get_type_ids()
            && got.offsets == want.get_offsets()
            && got.words == want.get_word_ids()
    };
    each("long_tokenizer", seed, cases, |r, shown| {
        // A third short enough to fit, a third about the first prefix's length, a third long.
        let want_len = match r.below(3) {
            0 => r.below(200),
            1 => 3500 + r.below(1500),
            _ => r.below(24_000),
        };
        // Half the time a long run of spaces first, a few hundred bytes short of the first
        // prefix's 4096, so that the prefix ends near the last token the model keeps (a
        // prefix cut inside a word would then change the tokens kept).
        let spaces = if r.below(2) == 0 { 3600 + r.below(500) } else { 0 };
        // A third of the texts have no spaces after that: BERT's cuts after punctuation and
        // ideographs are then the only ones.
        let joined = r.below(3) == 0;
        let mut text = " ".repeat(spaces);
        while text.len() < want_len {
            if r.below(8) == 0 {
                text.extend(
                    (0..r.below(8)).filter_map(|_| char::from_u32(r.below(0x11_0000) as u32)),
                );
            } else {
                let mut bytes = seeds[r.below(seeds.len())].as_bytes().to_vec();
                if r.below(2) == 0 {
                    mutate(r, &mut bytes);
                }
                text.push_str(&String::from_utf8_lossy(&bytes));
            }
            // Mostly a space; sometimes a long run of them.
            match r.below(8) {
                _ if joined => {}
                0 => {}
                1 | 2 => text.push_str(&" ".repeat(r.below(200))),
                _ => text.push(' '),
            }
        }
        *shown = format!("{} bytes: {:?}", text.len(), &text[..text.floor_char_boundary(200)]);
        // A quarter of the queries are long too (the end of the text, up to 3000 bytes), so that
        // both members of a pair may be longer than it keeps; `tokenizers`' whole answer pairs
        // every overflowing piece of each, so they stay short of the text's length.
        let query = if r.below(4) == 0 {
            &text[text.ceil_char_boundary(text.len().saturating_sub(r.below(3000)))..]
        } else {
            seeds[r.below(seeds.len())]
        };
        let one = tok.encode(&text).expect("a text tokenizes");
        assert!(same(&one, &whole.encode(text.as_str(), true).expect("whole")), "alone");
        let pair = tok.encode_pair(query, &text).expect("a pair tokenizes");
        assert!(same(&pair, &whole.encode((query, text.as_str()), true).expect("whole")), "paired");
        let too_long =
            untruncated.encode(text.as_str(), true).expect("whole").len() > tok.max_len();
        let refused = tok.encode_with(&text, None, Truncation::Refuse, true).is_err();
        assert_eq!(refused, too_long, "refused");
        !refused
    })
}

/// Input files for the CLI's reader (`switchyard::input`), valid JSON lines and plain text
/// edited, in each format: read to the end or refused with an error naming the line; what is
/// read holds no input over the per-input limit, and in plain text no blank line.
pub fn cli_inputs(seed: u64, cases: usize) -> Tally {
    use switchyard::input::{Format, Inputs, MAX_INPUT_BYTES};
    let seeds: [&[u8]; 5] = [
        b"{\"text\": \"A man is eating food.\", \"id\": 1}\n{\"text\": \"b\"}\n",
        b"plain line\r\n\n{not json}\nlast",
        "\u{feff}{\"text\": \"na\u{ef}ve caf\u{e9}\"}\n\n".as_bytes(),
        b"\n\n   \n",
        b"{\"text\": 3}\n",
    ];
    let formats = [Format::Auto, Format::Jsonl, Format::Text];
    each("cli_inputs", seed, cases, |r, shown| {
        let mut bytes = seeds[r.below(seeds.len())].to_vec();
        for _ in 0..r.below(4) {
            mutate(r, &mut bytes);
        }
        let format = formats[r.below(formats.len())];
        *shown = format!("{format:?} {}", show(&bytes));
        let reader = Box::new(std::io::Cursor::new(bytes));
        match Inputs::lines("fuzz".into(), reader, format).all() {
            Ok(texts) => {
                assert!(
                    texts.iter().all(|t| t.len() <= MAX_INPUT_BYTES),
                    "an input over the limit"
                );
                if format == Format::Text {
                    assert!(texts.iter().all(|t| !t.trim().is_empty()), "a blank line as an input");
                }
                true
            }
            Err(e) => {
                assert!(e.to_string().contains("line "), "an error that names no line: {e}");
                false
            }
        }
    })
}

/// The request heads a remote server's guard reads: a head that passes is complete, within
/// the size limit, and passes on its own.
pub fn guard_requests(seed: u64, cases: usize) -> Tally {
    use switchyard_remote::guard::{MAX_HEAD, Request, request};
    let seeds: [&[u8]; 3] = [
        b"GET /session HTTP/1.1\r\nHost: 127.0.0.1:7878\r\nConnection: Upgrade\r\n\
          Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n\x82\x80",
        b"GET /data HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
        b"GET /session HTTP/1.1\nupgrade: WebSocket\n\n",
    ];
    each("guard_requests", seed, cases, |r, shown| {
        let mut bytes = seeds[r.below(seeds.len())].to_vec();
        for _ in 0..r.below(4) {
            mutate(r, &mut bytes);
        }
        *shown = show(&bytes);
        match request(&bytes) {
            Request::Session { len } => {
                assert!(len <= bytes.len() && len <= MAX_HEAD, "a head of {len} bytes");
                assert_eq!(request(&bytes[..len]), Request::Session { len }, "the head alone");
                true
            }
            Request::Partial => {
                assert!(bytes.len() < MAX_HEAD, "{} bytes still partial", bytes.len());
                false
            }
            Request::Refused(_) => false,
        }
    })
}

/// The frames a session sends through the guard: whatever the read sizes, every byte is
/// either forwarded or the stream is cut, and the same messages end, or the same violation
/// cuts it, as when it is read whole.
pub fn guard_frames(seed: u64, cases: usize) -> Tally {
    use switchyard_remote::guard::Frames;
    /// A masked client frame.
    fn frame(fin: bool, opcode: u8, len: usize) -> Vec<u8> {
        let mut f = vec![u8::from(fin) << 7 | opcode];
        match len {
            0..=125 => f.push(0x80 | len as u8),
            126..=65535 => f.extend_from_slice(&[0x80 | 126, (len >> 8) as u8, len as u8]),
            _ => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&[0x5a; 4]);
        f.resize(f.len() + len, 0xa5);
        f
    }
    /// Feeds `bytes` in pieces whose sizes `sizes` picks: the message ends seen, or the error.
    fn read(limit: u64, bytes: &[u8], mut sizes: impl FnMut() -> usize) -> Result<usize, String> {
        let mut frames = Frames::new(limit);
        let (mut at, mut ends) = (0, 0);
        while at < bytes.len() {
            let piece = &bytes[at..at.saturating_add(sizes()).min(bytes.len())];
            let fed = frames.feed(piece).map_err(|v| v.to_string())?;
            assert!(fed.consumed <= piece.len(), "forwarded more than it was given");
            assert!(fed.consumed > 0 || piece.is_empty(), "no progress");
            ends += usize::from(fed.message_ended);
            at += fed.consumed;
        }
        Ok(ends)
    }
    each("guard_frames", seed, cases, |r, shown| {
        let mut bytes = Vec::new();
        for _ in 0..=r.below(5) {
            let len = [0, 5, 125, 126, 300, 65536, 70000][r.below(7)];
            let (fin, opcode) =
                [(true, 2), (false, 2), (true, 0), (true, 9), (true, 8)][r.below(5)];
            // Control frames carry at most 125 bytes.
            let len = if opcode >= 8 { len.min(125) } else { len };
            bytes.extend(frame(fin, opcode, len));
        }
        for _ in 0..r.below(3) {
            mutate(r, &mut bytes);
        }
        let limit = [64, 1024, 1 << 20][r.below(3)];
        *shown = format!("limit {limit}, {}", show(&bytes));
        let whole = read(limit, &bytes, || usize::MAX);
        let step = 1 + r.below(300);
        let pieces = read(limit, &bytes, || step);
        assert_eq!(whole, pieces, "the read size changed the outcome (pieces of {step})");
        whole.is_ok()
    })
}

/// A scratch copy of a tiny checkpoint directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, from: &Path) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("switchyard-fuzz-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            std::fs::copy(from.join(f), dir.join(f)).expect("a copy of the tiny checkpoint");
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The largest this process's memory has been, in KiB, where the system says (Linux).
pub fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
