//! Gradients through the lowering, op by op and for whole encoders, against central finite
//! differences of the f64 reference interpreter, on burn-flex and burn-ndarray under
//! burn-autodiff.
//!
//! Each case is a small graph whose inputs are embedding tables looked up by the token ids
//! 0, 1, 2, ... (so a table's rows are the op's input rows), with random weights, and the loss
//! `L = sum over outputs of out * R` for fixed random `R`. The finite differences run in f64 with
//! a step of `1e-5 * max(1, |w|)`: their own error (about `h^2 |L'''|`, and `1e-16 / h` from
//! rounding) is below 1e-8, so what is compared is the f32 gradient alone. Tolerance:
//! `|ad - fd| <= 1e-3 * (|fd| + rms)`, with `rms` the root mean square of that weight's
//! finite-difference gradient: f32 forward and backward passes through a few ops lose a few
//! parts in a million, a wrong gradient is off by its own size.

use burn_backend::Backend as BurnBackend;
use burn_backend::ops::FloatTensorOps;
use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{
    Act, BatchBuf, Caps, DeviceKind, Gate, Graph, GraphBuilder, HostTensor, Op, PoolMode,
    PositionBias, Reference, RelativeBias, Shape, Val,
};
use switchyard_train::Graded;

/// The most elements of one weight checked (a random sample beyond that).
const SAMPLE: usize = 48;

/// A batch of sequences of `lens` whose ids count up from 0 across the batch, with `markers`
/// per sequence, and (with `types`) token types 0 in each sequence's first half, 1 after.
fn counting_batch(lens: &[usize], markers: &[&[u32]], types: bool) -> BatchBuf {
    let mut buf = BatchBuf::new();
    let mut next = 0u32;
    for (s, &len) in lens.iter().enumerate() {
        let ids: Vec<u32> = (next..next + len as u32).collect();
        let types: Vec<u32> = (0..len).map(|i| u32::from(types && i >= len / 2)).collect();
        buf.push(&ids, Some(&types), markers.get(s).copied().unwrap_or(&[])).unwrap();
        next += len as u32;
    }
    buf
}

/// `L = sum_o sum(out_o * R_o)` in f64 from the reference, for `weights`.
fn reference_loss(g: &Graph, weights: &[Vec<f64>], buf: &BatchBuf, r: &[Vec<f64>]) -> f64 {
    let outs = Reference::eval_f64(g, weights.to_vec(), &buf.batch()).unwrap();
    outs.iter().zip(r).map(|(o, r)| o.iter().zip(r).map(|(a, b)| a * b).sum::<f64>()).sum()
}

/// Checks every weight's gradient (a sample of its elements) on the Burn backend `B`.
fn check_on<B: BurnBackend>(device: B::Device, what: &str, g: &Graph, buf: &BatchBuf, seed: u64) {
    let weights = testkit::random_weights(g, seed);
    let tensors: Vec<HostTensor<'_>> = weights.tensors();
    let host: Vec<Vec<f64>> = tensors.iter().map(|t| t.iter_f64().collect()).collect();
    // R: one random value per output element.
    let outs = Reference::eval_f64(g, host.clone(), &buf.batch()).unwrap();
    let mut rng = Rng::new(seed ^ 0xabcd);
    let r: Vec<Vec<f64>> =
        outs.iter().map(|o| o.iter().map(|_| f64::from(rng.unit())).collect()).collect();

    let caps = Caps::new("test", "autodiff", DeviceKind::Cpu);
    let graded = Graded::<B>::new(device.clone(), caps, g.clone(), &tensors).unwrap();
    let pass = graded.forward(&buf.batch(), false, Vec::new()).unwrap();
    let mut loss = None;
    for (o, r) in pass.outputs.iter().zip(&r) {
        let Some(o) = o else { continue };
        let dims = switchyard_burn::generic::dims::<switchyard_train::Ad<B>>(o);
        let rt = switchyard_burn::floats::<switchyard_train::Ad<B>>(
            r.iter().map(|&x| x as f32).collect(),
            &dims,
            &device,
        );
        let term = <switchyard_train::Ad<B>>::float_sum(<switchyard_train::Ad<B>>::float_mul(
            o.clone(),
            rt,
        ));
        loss = Some(match loss {
            Some(l) => <switchyard_train::Ad<B>>::float_add(l, term),
            None => term,
        });
    }
    let grads = pass.backward(loss.expect("an output")).params;

    for (wi, spec) in g.weights.iter().enumerate() {
        let ad = match &grads[wi] {
            Some(t) => switchyard_burn::read_f32::<B>(t.clone()).unwrap(),
            None => vec![0.0; host[wi].len()],
        };
        let n = host[wi].len();
        let idx: Vec<usize> = if n <= SAMPLE {
            (0..n).collect()
        } else {
            (0..SAMPLE).map(|_| rng.below(n)).collect()
        };
        let fd: Vec<f64> = idx
            .iter()
            .map(|&j| {
                let h = 1e-5 * host[wi][j].abs().max(1.0);
                let mut w = host.clone();
                w[wi][j] += h;
                let up = reference_loss(g, &w, buf, &r);
                w[wi][j] -= 2.0 * h;
                let down = reference_loss(g, &w, buf, &r);
                (up - down) / (2.0 * h)
            })
            .collect();
        let rms = (fd.iter().map(|x| x * x).sum::<f64>() / fd.len().max(1) as f64).sqrt();
        for (&j, &want) in idx.iter().zip(&fd) {
            let got = f64::from(ad[j]);
            let tol = 1e-3 * (want.abs() + rms) + 1e-7;
            assert!(
                (got - want).abs() <= tol,
                "{what}: weight `{}` element {j}: autodiff {got}, finite differences {want} \
                 (tolerance {tol:.2e})",
                spec.name
            );
        }
    }
}

fn check(what: &str, g: &Graph, buf: &BatchBuf) {
    check_on::<burn_flex::Flex>(burn_flex::FlexDevice, what, g, buf, 1);
    #[allow(deprecated)]
    check_on::<burn_ndarray::NdArray>(burn_ndarray::NdArrayDevice::Cpu, what, g, buf, 2);
}

/// A graph under construction whose input rows come from embedding tables of `rows` rows.
struct Case {
    g: GraphBuilder,
    rows: usize,
    inputs: usize,
}

impl Case {
    fn new(rows: usize) -> Self {
        Case { g: GraphBuilder::new(), rows, inputs: 0 }
    }

    /// Token rows `width` wide, from a table of their own.
    fn input(&mut self, width: usize) -> Val {
        self.inputs += 1;
        let table = self.g.weight(format!("input{}", self.inputs), &[self.rows, width]);
        self.g.op(Shape::tokens(width), |out| Op::Embed { table, scale: 1.0, out })
    }

    fn finish(mut self, y: Val) -> Graph {
        self.g.output("y", y);
        self.g.finish().unwrap()
    }
}

const LENS: [usize; 3] = [3, 5, 2];

fn tokens() -> usize {
    LENS.iter().sum()
}

#[test]
fn embeddings_add_and_norms() {
    let n = tokens();
    let mut c = Case::new(n);
    let x = c.input(6);
    let pos = c.g.weight("pos", &[9, 6]);
    let p = c.g.op(Shape::tokens(6), |out| Op::PosEmbed { table: pos, offset: 2, out });
    let ty = c.g.weight("types", &[2, 6]);
    let t = c.g.op(Shape::tokens(6), |out| Op::TypeEmbed { table: ty, out });
    let s = c.g.op(Shape::tokens(6), |out| Op::Add { a: x, b: p, out });
    let s = c.g.op(Shape::tokens(6), |out| Op::Add { a: s, b: t, out });
    let gamma = c.g.weight("ln.weight", &[6]);
    let beta = c.g.weight("ln.bias", &[6]);
    let y = c.g.op(Shape::tokens(6), |out| Op::LayerNorm {
        x: s,
        gamma,
        beta: Some(beta),
        eps: 1e-5,
        out,
    });
    let g2 = c.g.weight("ln2.weight", &[6]);
    let y = c.g.op(Shape::tokens(6), |out| Op::LayerNorm {
        x: y,
        gamma: g2,
        beta: None,
        eps: 1e-5,
        out,
    });
    let g3 = c.g.weight("rms.weight", &[6]);
    let y = c.g.op(Shape::tokens(6), |out| Op::RmsNorm {
        x: y,
        gamma: g3,
        eps: 1e-6,
        group: None,
        unit_offset: false,
        out,
    });
    let y = c.g.op(Shape::tokens(6), |out| Op::L2Norm { x: y, eps: 1e-12, out });
    check("embeddings, add, norms", &c.finish(y), &counting_batch(&LENS, &[], true));
}

#[test]
fn scaled_embeddings_and_norms_per_head() {
    // Gemma's parts: a word embedding scaled, and an RMS norm of each 3 columns alone, its
    // scale 1 + gamma.
    let mut c = Case::new(tokens());
    let table = c.g.weight("words", &[tokens(), 6]);
    let x = c.g.op(Shape::tokens(6), |out| Op::Embed { table, scale: 2.5, out });
    let gamma = c.g.weight("rms.weight", &[3]);
    let (group, unit_offset) = (Some(3), true);
    let y = c.g.op(Shape::tokens(6), |out| Op::RmsNorm {
        x,
        gamma,
        eps: 1e-6,
        group,
        unit_offset,
        out,
    });
    check("scaled embedding, norm per head", &c.finish(y), &counting_batch(&LENS, &[], false));
}

#[test]
fn linear_with_each_epilogue() {
    for act in Act::ALL {
        for (bias, residual) in [(true, true), (false, false)] {
            let mut c = Case::new(tokens());
            let x = c.input(5);
            let r = c.input(4);
            let w = c.g.weight("w", &[4, 5]);
            let b = bias.then(|| c.g.weight("b", &[4]));
            let y = c.g.op(Shape::tokens(4), |out| Op::Linear {
                x,
                weight: w,
                bias: b,
                act,
                residual: residual.then_some(r),
                out,
            });
            let what = format!("linear, {act:?}, bias {bias}, residual {residual}");
            check(&what, &c.finish(y), &counting_batch(&LENS, &[], false));
        }
    }
}

#[test]
fn gated_units_products_slices_activations_and_rotary() {
    for (act, gate) in
        [(Act::Gelu, Gate::First), (Act::Silu, Gate::First), (Act::Gelu, Gate::Second)]
    {
        let mut c = Case::new(tokens());
        let x = c.input(8);
        let y = c.g.op(Shape::tokens(4), |out| Op::Glu { x, act, gate, out });
        check(&format!("glu {act:?} {gate:?}"), &c.finish(y), &counting_batch(&LENS, &[], false));
    }
    let mut c = Case::new(tokens());
    let (a, b) = (c.input(6), c.input(6));
    let y = c.g.op(Shape::tokens(6), |out| Op::Mul { a, b, out });
    check("product", &c.finish(y), &counting_batch(&LENS, &[], false));

    let mut c = Case::new(tokens());
    let x = c.input(8);
    let y = c.g.op(Shape::tokens(3), |out| Op::Slice { x, start: 4, out });
    let y = c.g.op(Shape::tokens(3), |out| Op::Activation { x: y, act: Act::Tanh, out });
    check("slice, activation", &c.finish(y), &counting_batch(&LENS, &[], false));

    let mut c = Case::new(tokens());
    let x = c.input(8);
    let y = c.g.op(Shape::tokens(8), |out| Op::Rope {
        x,
        heads: 2,
        head_dim: 4,
        theta: 100.0,
        position_scale: 0.75,
        out,
    });
    check("rope", &c.finish(y), &counting_batch(&LENS, &[], false));
}

/// Whole, windowed and causal, with a key-value head for each query head and with one shared
/// by both (whose gradient sums the two heads').
#[test]
fn attention_whole_windowed_causal_and_on_shared_heads() {
    let cases = [
        (None, false, 2),
        (Some(1), false, 2),
        (None, true, 2),
        (None, false, 1),
        (Some(1), true, 1),
    ];
    for (window, causal, kv_heads) in cases {
        let mut c = Case::new(tokens());
        let (q, k, v) = (c.input(8), c.input(4 * kv_heads), c.input(4 * kv_heads));
        let y = c.g.op(Shape::tokens(8), |out| Op::Attention {
            q,
            k,
            v,
            heads: 2,
            kv_heads,
            head_dim: 4,
            scale: 0.5,
            window,
            causal,
            position_bias: None,
            out,
        });
        check(
            &format!("attention, window {window:?}, causal {causal}, {kv_heads} key-value heads"),
            &c.finish(y),
            &counting_batch(&LENS, &[], false),
        );
    }
}

/// A relative position bias of 8 buckets up to distance 4: keys up to 4 positions from their
/// query (sequences of up to 5 tokens) reach every bucket on both sides, each bucket's
/// gradient the sum over the scores that share it.
#[test]
fn attention_with_a_relative_position_bias() {
    for per_seq in [false, true] {
        let mut c = Case::new(tokens());
        let (q, k, v) = (c.input(8), c.input(8), c.input(8));
        let q = match per_seq {
            true => c.g.op(Shape::seqs(8), |out| Op::Pool { x: q, mode: PoolMode::Cls, out }),
            false => q,
        };
        let table = c.g.weight("position_bias", &[8, 2]);
        let position_bias =
            Some(PositionBias::Relative(RelativeBias { table, buckets: 8, max_distance: 4 }));
        let y = c.g.op(c.g.shape(q), |out| Op::Attention {
            q,
            k,
            v,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            scale: 0.5,
            window: None,
            causal: false,
            position_bias,
            out,
        });
        let what = format!("attention with a position bias, a query per sequence {per_seq}");
        check(&what, &c.finish(y), &counting_batch(&LENS, &[], false));
    }
}

#[test]
fn each_pooling_and_marker_gathers() {
    for mode in [PoolMode::Cls, PoolMode::Last, PoolMode::Mean, PoolMode::Max] {
        let mut c = Case::new(tokens());
        let x = c.input(5);
        let y = c.g.op(Shape::seqs(5), |out| Op::Pool { x, mode, out });
        check(&format!("pool {mode:?}"), &c.finish(y), &counting_batch(&LENS, &[], false));
    }
    let mut c = Case::new(tokens());
    let x = c.input(5);
    let y = c.g.op(Shape::markers(5), |out| Op::Gather { x, out });
    let markers: [&[u32]; 3] = [&[0, 2], &[], &[1]];
    check("gather", &c.finish(y), &counting_batch(&LENS, &markers, false));
}

#[test]
fn whole_encoders() {
    let spec = EncoderSpec { vocab: 30, width: 8, heads: 2, ffn: 12, layers: 2, max_pos: 16 };
    let mut rng = Rng::new(5);
    let mut buf = BatchBuf::new();
    for (what, g) in [
        ("bert-like encoder", testkit::bert_like(spec)),
        ("modernbert-like encoder", testkit::modernbert_like(spec)),
    ] {
        buf.clear();
        for len in [4, 7, 2] {
            testkit::push_random_seq(&mut buf, &mut rng, len, spec.vocab, g.limits().types > 1);
        }
        check(what, &g, &buf);
    }
}
