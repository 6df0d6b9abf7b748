//! `switchyard-bench weights`: a checkpoint directory rewritten with its floating-point weights
//! in f16 or f32, so that a benchmark's model travels to another machine at half its size (f16)
//! and is restored there (f32) for every engine to load alike.

use std::path::Path;

use safetensors::Dtype;
use switchyard_core::DType;
use switchyard_models::Checkpoint;
use switchyard_train::export::{Tensor, copy_files, write_safetensors};

/// `weights --dtype f16|f32 FROM TO`: [`rewrite`] from the command line.
pub fn run(args: &[String]) {
    let usage = "usage: switchyard-bench weights --dtype f16|f32 FROM_DIR TO_DIR";
    let (dtype, from, to) = match args {
        [flag, d, from, to] if flag == "--dtype" => (d.as_str(), from, to),
        _ => panic!("{usage}"),
    };
    let want = match dtype {
        "f16" => DType::F16,
        "f32" => DType::F32,
        d => panic!("--dtype {d}: expected f16 or f32 ({usage})"),
    };
    let n = rewrite(Path::new(from), Path::new(to), want).unwrap_or_else(|e| panic!("{e}"));
    println!("weights: {n} tensors in {dtype} in {to}/model.safetensors");
}

/// The checkpoint at `from` written to `to` (its `model.safetensors`, the tokenizer and every
/// sentence-transformers file), each F32, F16 or BF16 tensor stored as `want` (f16 rounds to
/// nearest; f32 is exact from any of them), every other tensor as it was: how many tensors.
pub fn rewrite(from: &Path, to: &Path, want: DType) -> Result<usize, String> {
    let ck = Checkpoint::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let mut tensors = Vec::new();
    for name in ck.names() {
        let (raw, shape, bytes) = ck.raw(name).expect("a name the checkpoint listed");
        let shape = shape.to_vec();
        if !matches!(raw, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            tensors.push(Tensor { name: name.to_owned(), shape, bytes: bytes.into(), dtype: raw });
            continue;
        }
        let mut values = Vec::new();
        ck.tensor(name).map_err(|e| e.to_string())?.extend_f32(&mut values);
        tensors.push(converted(name, shape, &values, want));
    }
    copy_files(from, to, None, true).map_err(|e| format!("{}: {e}", to.display()))?;
    write_safetensors(&to.join("model.safetensors"), &tensors).map_err(|e| e.to_string())?;
    Ok(tensors.len())
}

/// `values` as a tensor of `dtype` (f16 or f32).
fn converted(name: &str, shape: Vec<usize>, values: &[f32], dtype: DType) -> Tensor<'static> {
    match dtype {
        DType::F16 => {
            let bytes: Vec<u8> =
                values.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
            Tensor { name: name.to_owned(), shape, bytes: bytes.into(), dtype: Dtype::F16 }
        }
        _ => Tensor::f32(name, shape, values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_models::Model;

    #[test]
    fn f16_and_back_rounds_each_weight_once_and_keeps_the_model_loadable() {
        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny/bert");
        let tmp = std::env::temp_dir().join(format!("switchyard-weights-{}", std::process::id()));
        let (half_dir, full_dir) = (tmp.join("f16"), tmp.join("f32"));
        let n = rewrite(&tiny, &half_dir, DType::F16).unwrap();
        assert_eq!(rewrite(&half_dir, &full_dir, DType::F32).unwrap(), n);
        let [orig, half, full] =
            [&tiny, &half_dir, &full_dir].map(|d| Checkpoint::open(d).unwrap());
        assert_eq!(orig.names(), full.names());
        let mut rounded_some = false;
        for name in orig.names() {
            let values = |ck: &Checkpoint| {
                let mut v = Vec::new();
                ck.tensor(name).unwrap().extend_f32(&mut v);
                v
            };
            assert_eq!(half.raw(name).unwrap().0, Dtype::F16, "{name}");
            assert_eq!(full.raw(name).unwrap().0, Dtype::F32, "{name}");
            let rounded: Vec<f32> =
                values(&orig).iter().map(|&x| half::f16::from_f32(x).to_f32()).collect();
            assert_eq!(values(&full), rounded, "{name}");
            rounded_some |= values(&orig) != rounded;
        }
        assert!(rounded_some, "the fixture's weights were all f16 already: nothing was tested");
        for dir in [&half_dir, &full_dir] {
            Model::load(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
