//! Helpers shared by the model tests: the committed fixtures and comparisons.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

/// The tiny checkpoint `name` made by `fixtures/make_fixtures.py`.
pub fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name)
}

/// The parsed `expected.json` of the tiny checkpoint `name`.
pub fn expected(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(tiny(name).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A JSON array of strings.
pub fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

/// A JSON array of numbers.
pub fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// A JSON array of arrays of numbers.
pub fn rows(v: &serde_json::Value) -> Vec<Vec<f64>> {
    v.as_array().unwrap().iter().map(numbers).collect()
}

/// The largest absolute difference between two rows of the same length.
pub fn worst(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "row lengths differ");
    got.iter().zip(want).map(|(x, y)| (f64::from(*x) - y).abs()).fold(0.0, f64::max)
}
