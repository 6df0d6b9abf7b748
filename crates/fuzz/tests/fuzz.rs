//! Every fuzz target, a short pass: `SWITCHYARD_FUZZ_CASES` cases each (default 300), from
//! `SWITCHYARD_FUZZ_SEED` (default 1). `cargo xtask fuzz --cases N` runs a long one.

// A fuzz run reports what it saw.
#![allow(clippy::print_stderr)]

use switchyard_fuzz::{
    Tally, batches, buckets, checkpoints, cli_inputs, configs, guard_frames, guard_requests,
    long_tokenizer_inputs, peak_memory_kib, shard_indexes, tokenizer_inputs,
};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `target` and reports its tally; both outcomes must occur, or the mutations reach
/// nothing worth testing.
fn run(name: &str, target: fn(u64, usize) -> Tally) {
    let cases = setting("SWITCHYARD_FUZZ_CASES", 300) as usize;
    let seed = setting("SWITCHYARD_FUZZ_SEED", 1);
    let start = std::time::Instant::now();
    let t = target(seed, cases);
    eprintln!(
        "fuzz {name}: {cases} cases from seed {seed}: {} accepted, {} refused, no panic, {:.1?}, peak memory {} KiB",
        t.accepted,
        t.refused,
        start.elapsed(),
        peak_memory_kib().map_or_else(|| "unknown".into(), |k| k.to_string())
    );
    assert_eq!(t.accepted + t.refused, cases);
    if cases >= 100 {
        assert!(t.accepted > 0 && t.refused > 0, "{name}: {t:?}: the mutations test one side only");
    }
}

#[test]
fn bucket_tables() {
    run("buckets", buckets);
}

#[test]
fn ragged_batches() {
    run("batches", batches);
}

#[test]
fn config_files() {
    run("configs", configs);
}

#[test]
fn safetensors_headers() {
    run("checkpoints", checkpoints);
}

#[test]
fn shard_index_files() {
    run("shard_indexes", shard_indexes);
}

#[test]
fn tokenizer_input() {
    run("tokenizer", tokenizer_inputs);
}

#[test]
fn long_tokenizer_input() {
    run("long_tokenizer", long_tokenizer_inputs);
}

#[test]
fn cli_input_files() {
    run("cli_inputs", cli_inputs);
}

#[test]
fn remote_guard_requests() {
    run("guard_requests", guard_requests);
}

#[test]
fn remote_guard_frames() {
    run("guard_frames", guard_frames);
}
