//! Tokenizing as a server needs it: truncation from either side or refused, special tokens
//! marked, decoding, and running inputs tokenized outside the runner.

mod common;

use common::tiny;
use switchyard_core::{Buckets, Reference};
use switchyard_models::{Error, Marking, Model, Read, Runner, Truncation};

/// A text of `words` words ending in "food", far past the tiny models' 64 positions.
fn long_text(words: usize) -> String {
    "the ".repeat(words) + "food"
}

#[test]
fn truncation_keeps_either_end_or_refuses_with_the_length() {
    let model = Model::load(&tiny("bert")).unwrap();
    let t = model.tokenizer();
    let max = t.max_len();
    let text = long_text(200);
    let whole = t.encode_with(&text, None, Truncation::Right, true);
    let right = whole.unwrap();
    let left = t.encode_with(&text, None, Truncation::Left, true).unwrap();
    assert_eq!((right.ids.len(), left.ids.len()), (max, max));
    let food = t.encode("food").unwrap().ids[1];
    assert_eq!((right.ids[max - 2], left.ids[max - 2]), (t.encode("the").unwrap().ids[1], food));
    // Both keep their special tokens at the ends, and the text's last token survives on the left.
    assert!(right.special[0] && right.special[max - 1] && left.special[0] && left.special[max - 1]);
    let untruncated = t.encode_with(&text, None, Truncation::Right, false).unwrap();
    assert!(untruncated.special.iter().all(|s| !s), "no special tokens were asked for");
    match t.encode_with(&text, None, Truncation::Refuse, true) {
        Err(Error::TooLong { tokens, max: m }) => assert!(tokens > max && m == max, "{tokens}"),
        other => panic!("an over-long input was not refused: {other:?}"),
    }
    // A short input is the same whichever way truncation goes.
    let short = t.encode_with("a short one", None, Truncation::Refuse, true).unwrap();
    assert_eq!(short, t.encode("a short one").unwrap());
    // And the right-truncating default was not changed by making the others.
    assert_eq!(t.encode(&text).unwrap(), right);
}

#[test]
fn decoding_gives_the_text_back() {
    let model = Model::load(&tiny("bert")).unwrap();
    let t = model.tokenizer();
    let text = "the man is eating food";
    let bare = t.encode_with(text, None, Truncation::Right, false).unwrap();
    assert_eq!(t.decode(&bare.ids, true).unwrap(), text);
    let e = t.encode(text).unwrap();
    assert_eq!(t.decode(&e.ids, false).unwrap(), format!("[CLS] {text} [SEP]"));
}

#[test]
fn inputs_tokenized_outside_run_as_the_runner_would() {
    let texts = ["the man is eating food", "cats sat", &long_text(100)];
    let embed = |m| Runner::new(Model::load(&tiny(m)).unwrap(), Reference, Buckets::default());
    let mut r = embed("bert").unwrap();
    let want = r.embed(&texts, |_| {}).unwrap();
    let inputs = texts.iter().map(|t| (r.model().tokenizer().encode(t).unwrap(), Vec::new()));
    let got = r.run_encoded(&inputs.collect::<Vec<_>>(), Read::Head).unwrap();
    assert_eq!(got, want.into_iter().map(|v| vec![v]).collect::<Vec<_>>());

    // A token classifier gives one row per marked token.
    let mut r = embed("bert-token-classifier").unwrap();
    let want = r.classify_tokens(&texts[..2], Marking::FirstSubToken, |_| {}).unwrap();
    let inputs = texts[..2].iter().map(|t| {
        let e = r.model().tokenizer().encode(t).unwrap();
        let marks = e.word_starts();
        (e, marks)
    });
    let got = r.run_encoded(&inputs.collect::<Vec<_>>(), Read::Head).unwrap();
    let want: Vec<Vec<Vec<f32>>> =
        want.into_iter().map(|w| w.into_iter().map(|t| t.logits).collect()).collect();
    assert_eq!(got, want);
}

#[test]
fn an_embedders_token_states_pool_to_its_embedding() {
    let texts = ["the man is eating food", "cats sat"];
    let mut r =
        Runner::new(Model::load(&tiny("bert")).unwrap(), Reference, Buckets::default()).unwrap();
    let want = r.embed(&texts, |_| {}).unwrap();
    let inputs: Vec<_> =
        texts.iter().map(|t| (r.model().tokenizer().encode(t).unwrap(), Vec::new())).collect();
    let states = r.run_encoded(&inputs, Read::Tokens).unwrap();
    for ((rows, (e, _)), want) in states.iter().zip(&inputs).zip(&want) {
        // One row per token, special tokens included; their mean is the (mean-pooled) embedding.
        assert_eq!(rows.len(), e.ids.len());
        let mean: Vec<f32> = (0..want.len())
            .map(|j| rows.iter().map(|r| r[j]).sum::<f32>() / rows.len() as f32)
            .collect();
        let worst = mean.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst <= 1e-5, "{worst}");
    }
    let mut c =
        Runner::new(Model::load(&tiny("bert-classifier")).unwrap(), Reference, Buckets::default())
            .unwrap();
    let input = (c.model().tokenizer().encode("x").unwrap(), Vec::new());
    let e = c.run_encoded([&input], Read::Tokens).unwrap_err().to_string();
    assert!(e.contains("embedding model"), "{e}");
}
