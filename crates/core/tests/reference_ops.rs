//! Every op of the reference backend on inputs small enough to check on paper.
//!
//! Outputs are f32, so values are compared within 1e-6 (a few f32 ulps at these magnitudes).

use switchyard_core::{
    Act, Backend, BatchBuf, Bucket, DType, Gate, GraphBuilder, HostTensor, Mat, Op, Outputs,
    PoolMode, Reference, Shape, Val, W,
};

/// A one-op-at-a-time test: inputs are embedding tables looked up by token ids 0, 1, 2, ...
struct Case {
    g: GraphBuilder,
    data: Vec<Vec<f32>>,
}

impl Case {
    fn new() -> Self {
        Case { g: GraphBuilder::new(), data: Vec::new() }
    }

    fn weight(&mut self, shape: &[usize], data: &[f32]) -> W {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        self.data.push(data.to_vec());
        self.g.weight(format!("w{}", self.data.len()), shape)
    }

    /// Token rows: row `t` is `rows[t]`, read through an embedding of token id `t`.
    fn input(&mut self, rows: &[&[f32]]) -> Val {
        let width = rows[0].len();
        let flat: Vec<f32> = rows.concat();
        let table = self.weight(&[rows.len(), width], &flat);
        self.g.op(Shape::tokens(width), |out| Op::Embed { table, scale: 1.0, out })
    }

    /// Runs with sequences of the given lengths (ids 0, 1, 2, ... across the whole batch),
    /// token types and markers per sequence; returns the output `y`.
    fn run_with(
        mut self,
        y: Val,
        lens: &[usize],
        types: Option<&[u32]>,
        markers: &[&[u32]],
    ) -> Mat {
        self.g.output("y", y);
        let graph = self.g.finish().unwrap();
        let bytes: Vec<Vec<u8>> =
            self.data.iter().map(|d| d.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
        let tensors: Vec<HostTensor<'_>> = graph
            .weights
            .iter()
            .zip(&bytes)
            .map(|(w, b)| HostTensor::new(DType::F32, &w.shape, b).unwrap())
            .collect();
        let mut buf = BatchBuf::new();
        let mut next = 0u32;
        for (s, &len) in lens.iter().enumerate() {
            let ids: Vec<u32> = (next..next + len as u32).collect();
            let ty = types.map(|t| &t[next as usize..next as usize + len]);
            buf.push(&ids, ty, markers.get(s).copied().unwrap_or(&[])).unwrap();
            next += len as u32;
        }
        let batch = buf.batch();
        batch.check(&graph.limits()).unwrap();
        let r = Reference;
        let w = r.upload(&tensors, &graph).unwrap();
        let plan = r.lower(&w, &graph, Bucket::new(16, 4, 16)).unwrap();
        let mut state = r.state(&plan).unwrap();
        let mut out = Outputs::new();
        r.run(&plan, &mut state, &batch, &mut out).unwrap();
        out.get("y").unwrap().clone()
    }

    fn run(self, y: Val, lens: &[usize]) -> Mat {
        self.run_with(y, lens, None, &[])
    }
}

#[track_caller]
fn close(m: &Mat, want: &[&[f32]]) {
    assert_eq!(m.rows, want.len(), "rows");
    for (r, w) in m.iter_rows().zip(want) {
        assert_eq!(r.len(), w.len(), "width");
        for (a, b) in r.iter().zip(*w) {
            assert!((a - b).abs() <= 1e-6, "got {:?}, want {want:?}", m.data);
        }
    }
}

#[test]
fn embed_looks_up_token_ids() {
    let mut c = Case::new();
    let x = c.input(&[&[1.0, 2.0], &[3.0, 4.0], &[5.0, 6.0]]);
    close(&c.run(x, &[2, 1]), &[&[1.0, 2.0], &[3.0, 4.0], &[5.0, 6.0]]);
}

#[test]
fn embed_scales_the_rows_it_looks_up() {
    let mut c = Case::new();
    let table = c.weight(&[2, 2], &[1.0, -2.0, 3.0, 4.0]);
    let _ids = c.input(&[&[0.0], &[0.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::Embed { table, scale: 0.5, out });
    // The batch holds ids 0 and 1.
    close(&c.run(y, &[2]), &[&[0.5, -1.0], &[1.5, 2.0]]);
}

#[test]
fn type_embed_looks_up_token_types() {
    let mut c = Case::new();
    let table = c.weight(&[2, 1], &[10.0, 20.0]);
    let _ids = c.input(&[&[0.0], &[0.0], &[0.0]]);
    let y = c.g.op(Shape::tokens(1), |out| Op::TypeEmbed { table, out });
    close(&c.run_with(y, &[3], Some(&[0, 1, 1]), &[]), &[&[10.0], &[20.0], &[20.0]]);
}

#[test]
fn positions_count_from_each_sequence_start_plus_offset() {
    let mut c = Case::new();
    let table = c.weight(&[6, 1], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let _ids = c.input(&[&[0.0f32][..]; 5]);
    let y = c.g.op(Shape::tokens(1), |out| Op::PosEmbed { table, offset: 2, out });
    close(&c.run(y, &[2, 1, 2]), &[&[2.0], &[3.0], &[2.0], &[2.0], &[3.0]]);
}

#[test]
fn add_is_element_wise() {
    let mut c = Case::new();
    let a = c.input(&[&[1.0, 2.0]]);
    let b = c.input(&[&[3.0, -4.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::Add { a, b, out });
    close(&c.run(y, &[1]), &[&[4.0, -2.0]]);
}

#[test]
fn layer_norm_uses_biased_variance() {
    let mut c = Case::new();
    let x = c.input(&[&[1.0, 2.0, 3.0]]);
    let gamma = c.weight(&[3], &[1.0, 2.0, 1.0]);
    let beta = c.weight(&[3], &[0.0, 0.0, 1.0]);
    let y = c.g.op(Shape::tokens(3), |out| Op::LayerNorm {
        x,
        gamma,
        beta: Some(beta),
        eps: 1e-12,
        out,
    });
    // mean 2, variance 2/3: (x - 2) / sqrt(2/3) = -1.2247449, 0, 1.2247449.
    close(&c.run(y, &[1]), &[&[-1.224_744_9, 0.0, 2.224_744_9]]);
}

#[test]
fn layer_norm_without_beta_and_eps_dominating() {
    let mut c = Case::new();
    let x = c.input(&[&[1.0, 3.0]]);
    let gamma = c.weight(&[2], &[1.0, 1.0]);
    // variance 1, eps 3: (x - 2) / 2.
    let y = c.g.op(Shape::tokens(2), |out| Op::LayerNorm { x, gamma, beta: None, eps: 3.0, out });
    close(&c.run(y, &[1]), &[&[-0.5, 0.5]]);
}

/// Scales 1 and 2, stored as they are or, with a unit offset, as 0 and 1 (Gemma's).
#[test]
fn rms_norm_divides_by_root_mean_square_and_scales_by_gamma_or_one_plus_gamma() {
    for (scales, unit_offset) in [([1.0, 2.0], false), ([0.0, 1.0], true)] {
        let mut c = Case::new();
        let x = c.input(&[&[3.0, 4.0]]);
        let gamma = c.weight(&[2], &scales);
        let y = c.g.op(Shape::tokens(2), |out| Op::RmsNorm {
            x,
            gamma,
            eps: 1e-12,
            group: None,
            unit_offset,
            out,
        });
        // mean square 12.5, root 3.5355339.
        close(&c.run(y, &[1]), &[&[0.848_528_1, 2.262_741_7]]);
    }
}

#[test]
fn rms_norm_in_groups_normalises_each_group_alone() {
    let mut c = Case::new();
    let x = c.input(&[&[3.0, 4.0, 1.0, 1.0]]);
    let gamma = c.weight(&[2], &[1.0, 2.0]);
    let (group, unit_offset) = (Some(2), false);
    let y = c.g.op(Shape::tokens(4), |out| Op::RmsNorm {
        x,
        gamma,
        eps: 1e-12,
        group,
        unit_offset,
        out,
    });
    // [3, 4] as above; [1, 1] has mean square 1.
    close(&c.run(y, &[1]), &[&[0.848_528_1, 2.262_741_7, 1.0, 2.0]]);
}

#[test]
fn linear_applies_bias_then_activation_then_residual() {
    let mut c = Case::new();
    let x = c.input(&[&[1.0, 2.0]]);
    let r = c.input(&[&[10.0, 10.0, 10.0]]);
    let weight = c.weight(&[3, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let bias = c.weight(&[3], &[0.0, 0.0, -4.0]);
    let y = c.g.op(Shape::tokens(3), |out| Op::Linear {
        x,
        weight,
        bias: Some(bias),
        act: Act::Relu,
        residual: Some(r),
        out,
    });
    // x.W^T = [1, 2, 3]; + bias = [1, 2, -1]; relu = [1, 2, 0]; + 10.
    close(&c.run(y, &[1]), &[&[11.0, 12.0, 10.0]]);
}

#[test]
fn linear_works_on_sequence_rows() {
    let mut c = Case::new();
    let x = c.input(&[&[1.0], &[3.0], &[5.0]]);
    let p = c.g.op(Shape::seqs(1), |out| Op::Pool { x, mode: PoolMode::Mean, out });
    let weight = c.weight(&[2, 1], &[1.0, -1.0]);
    let y = c.g.op(Shape::seqs(2), |out| Op::Linear {
        x: p,
        weight,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    });
    close(&c.run(y, &[2, 1]), &[&[2.0, -2.0], &[5.0, -5.0]]);
}

#[test]
fn glu_gates_the_second_half_with_the_first() {
    let mut c = Case::new();
    let x = c.input(&[&[-1.0, 2.0, 3.0, 4.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::Glu { x, act: Act::Relu, gate: Gate::First, out });
    close(&c.run(y, &[1]), &[&[0.0, 8.0]]);
    let mut c = Case::new();
    let x = c.input(&[&[-1.0, 2.0, 3.0, 4.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::Glu { x, act: Act::Relu, gate: Gate::Second, out });
    close(&c.run(y, &[1]), &[&[-3.0, 8.0]]);
}

#[test]
fn slice_takes_columns() {
    let mut c = Case::new();
    let x = c.input(&[&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::Slice { x, start: 1, out });
    close(&c.run(y, &[2]), &[&[2.0, 3.0], &[6.0, 7.0]]);
}

#[test]
fn rope_rotates_halves_by_position_within_each_sequence() {
    let mut c = Case::new();
    // Two heads of two columns; theta only matters for i > 0, so with head_dim 2 the angle is p.
    let x = c.input(&[&[1.0, 0.0, 0.0, 2.0], &[1.0, 0.0, 0.0, 2.0], &[1.0, 0.0, 0.0, 2.0]]);
    let y = c.g.op(Shape::tokens(4), |out| Op::Rope {
        x,
        heads: 2,
        head_dim: 2,
        theta: 1e4,
        position_scale: 1.0,
        out,
    });
    let (s, co) = 1f32.sin_cos();
    // Token 1 is at position 1: [1, 0] -> [cos 1, sin 1]; [0, 2] -> [-2 sin 1, 2 cos 1].
    // Token 2 starts a new sequence: position 0, unchanged.
    close(
        &c.run(y, &[2, 1]),
        &[&[1.0, 0.0, 0.0, 2.0], &[co, s, -2.0 * s, 2.0 * co], &[1.0, 0.0, 0.0, 2.0]],
    );
}

#[test]
fn rope_frequency_falls_with_the_column_and_scales_with_the_position_scale() {
    // One head of four columns, theta 100: column pair 0 turns by p, pair 1 by p / 10; scaled
    // positions by half of that.
    for (position_scale, a1, a2) in [(1.0, 1f32, 0.1f32), (0.5, 0.5, 0.05)] {
        let mut c = Case::new();
        let x = c.input(&[&[0.0; 4], &[1.0, 1.0, 0.0, 0.0]]);
        let y = c.g.op(Shape::tokens(4), |out| Op::Rope {
            x,
            heads: 1,
            head_dim: 4,
            theta: 100.0,
            position_scale,
            out,
        });
        let ((s1, c1), (s2, c2)) = (a1.sin_cos(), a2.sin_cos());
        close(&c.run(y, &[2]), &[&[0.0; 4], &[c1, c2, s1, s2]]);
    }
}

/// One head of one column over three tokens whose keys score 0, ln 3 and 50 against every
/// query, with values 4, 8 and 100.
fn three_tokens(c: &mut Case, causal: bool) -> Val {
    let q = c.input(&[&[1.0], &[1.0], &[1.0]]);
    let k = c.input(&[&[0.0], &[3f32.ln()], &[50.0]]);
    let v = c.input(&[&[4.0], &[8.0], &[100.0]]);
    c.g.op(Shape::tokens(1), |out| Op::Attention {
        q,
        k,
        v,
        heads: 1,
        kv_heads: 1,
        head_dim: 1,
        scale: 1.0,
        window: None,
        causal,
        position_bias: None,
        out,
    })
}

#[test]
fn attention_softmaxes_within_each_sequence_only() {
    let mut c = Case::new();
    let y = three_tokens(&mut c, false);
    // Scores [0, ln 3] give weights [1/4, 3/4]: 1 + 6 = 7. The third token is alone.
    close(&c.run(y, &[2, 1]), &[&[7.0], &[7.0], &[100.0]]);
}

#[test]
fn causal_attention_sees_no_key_after_the_query() {
    let mut c = Case::new();
    let y = three_tokens(&mut c, true);
    // One sequence: the first token sees its own key alone (4), the second the first two (7,
    // as above), the third all three, its own score 50 outweighing the rest (100). Without
    // the mask the first two would also see that key.
    close(&c.run(y, &[3]), &[&[4.0], &[7.0], &[100.0]]);
}

#[test]
fn attention_heads_are_independent_and_scaled() {
    let mut c = Case::new();
    let q = c.input(&[&[1.0, 0.0], &[1.0, 0.0]]);
    let k = c.input(&[&[0.0, 0.0], &[2f32.ln(), 9.0]]);
    let v = c.input(&[&[3.0, 1.0], &[6.0, 5.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::Attention {
        q,
        k,
        v,
        heads: 2,
        kv_heads: 2,
        head_dim: 1,
        scale: 2.0,
        window: None,
        causal: false,
        position_bias: None,
        out,
    });
    // Head 0: scores 2 * [0, ln 2] -> weights [1/5, 4/5] -> 0.6 + 4.8 = 5.4.
    // Head 1: queries are 0, so uniform weights -> 3.
    close(&c.run(y, &[2]), &[&[5.4, 3.0], &[5.4, 3.0]]);
}

#[test]
fn sliding_window_limits_the_keys() {
    // Equal scores: each token averages the values within `window` of it, in its sequence.
    let cases: [(usize, &[&[f32]]); 2] =
        [(1, &[&[1.5], &[7.0 / 3.0], &[3.0], &[8.0]]), (0, &[&[1.0], &[2.0], &[4.0], &[8.0]])];
    for (window, want) in cases {
        let mut c = Case::new();
        let z = c.input(&[&[0.0f32][..]; 4]);
        let v = c.input(&[&[1.0], &[2.0], &[4.0], &[8.0]]);
        let y = c.g.op(Shape::tokens(1), |out| Op::Attention {
            q: z,
            k: z,
            v,
            heads: 1,
            kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window: Some(window),
            causal: false,
            position_bias: None,
            out,
        });
        close(&c.run(y, &[3, 1]), want);
    }
}

#[test]
fn sequence_queries_attend_as_each_first_token() {
    // Equal scores: each sequence's first token averages the values it sees. Sequences of 3
    // and 1 tokens; the second sequence's first token is token 3.
    let cases: [(Option<usize>, &[&[f32]]); 3] = [
        (None, &[&[7.0 / 3.0], &[8.0]]),
        (Some(1), &[&[1.5], &[8.0]]),
        (Some(0), &[&[1.0], &[8.0]]),
    ];
    for (window, want) in cases {
        let mut c = Case::new();
        let z = c.input(&[&[0.0f32][..]; 4]);
        let v = c.input(&[&[1.0], &[2.0], &[4.0], &[8.0]]);
        let q = c.g.op(Shape::seqs(1), |out| Op::Pool { x: z, mode: PoolMode::Cls, out });
        let y = c.g.op(Shape::seqs(1), |out| Op::Attention {
            q,
            k: z,
            v,
            heads: 1,
            kv_heads: 1,
            head_dim: 1,
            scale: 1.0,
            window,
            causal: false,
            position_bias: None,
            out,
        });
        close(&c.run(y, &[3, 1]), want);
    }
    // Unequal scores: each sequence's row is its first token's row of token attention.
    let rows: &[&[f32]] = &[&[1.0, -2.0], &[0.5, 3.0], &[-1.0, 1.0], &[2.0, 0.25], &[0.0, 1.5]];
    let attend = |per_seq: bool| {
        let mut c = Case::new();
        let x = c.input(rows);
        let q = if per_seq {
            c.g.op(Shape::seqs(2), |out| Op::Pool { x, mode: PoolMode::Cls, out })
        } else {
            x
        };
        let y = c.g.op(c.g.shape(q), |out| Op::Attention {
            q,
            k: x,
            v: x,
            heads: 2,
            kv_heads: 2,
            head_dim: 1,
            scale: 0.7,
            window: None,
            causal: false,
            position_bias: None,
            out,
        });
        c.run(y, &[3, 2])
    };
    let (tokens, seqs) = (attend(false), attend(true));
    close(&seqs, &[tokens.row(0), tokens.row(3)]);
}

#[test]
fn activation_applies_element_wise() {
    let mut c = Case::new();
    let x = c.input(&[&[-1.0, 0.0, 1.0]]);
    let y = c.g.op(Shape::tokens(3), |out| Op::Activation { x, act: Act::Gelu, out });
    close(&c.run(y, &[1]), &[&[-0.158_655_25, 0.0, 0.841_344_7]]);
}

#[test]
fn pooling_modes() {
    let rows: &[&[f32]] = &[&[1.0, 5.0], &[3.0, 2.0], &[7.0, 7.0]];
    let cases: [(PoolMode, &[&[f32]]); 4] = [
        (PoolMode::Cls, &[&[1.0, 5.0], &[7.0, 7.0]]),
        (PoolMode::Last, &[&[3.0, 2.0], &[7.0, 7.0]]),
        (PoolMode::Mean, &[&[2.0, 3.5], &[7.0, 7.0]]),
        (PoolMode::Max, &[&[3.0, 5.0], &[7.0, 7.0]]),
    ];
    for (mode, want) in cases {
        let mut c = Case::new();
        let x = c.input(rows);
        let y = c.g.op(Shape::seqs(2), |out| Op::Pool { x, mode, out });
        close(&c.run(y, &[2, 1]), want);
    }
}

#[test]
fn max_pool_of_negative_values() {
    let mut c = Case::new();
    let x = c.input(&[&[-3.0], &[-2.0]]);
    let y = c.g.op(Shape::seqs(1), |out| Op::Pool { x, mode: PoolMode::Max, out });
    close(&c.run(y, &[2]), &[&[-2.0]]);
}

#[test]
fn gather_reads_markers_relative_to_their_sequence() {
    let mut c = Case::new();
    let x = c.input(&[&[0.0], &[1.0], &[2.0], &[3.0], &[4.0]]);
    let y = c.g.op(Shape::markers(1), |out| Op::Gather { x, out });
    let m = c.run_with(y, &[2, 1, 2], None, &[&[1], &[], &[0, 1]]);
    close(&m, &[&[1.0], &[3.0], &[4.0]]);
}

#[test]
fn gather_with_no_markers_is_empty() {
    let mut c = Case::new();
    let x = c.input(&[&[0.0], &[1.0]]);
    let y = c.g.op(Shape::markers(1), |out| Op::Gather { x, out });
    close(&c.run(y, &[2]), &[]);
}

#[test]
fn l2_norm_divides_by_the_norm_or_eps() {
    let mut c = Case::new();
    let x = c.input(&[&[3.0, 4.0], &[0.0, 0.0]]);
    let y = c.g.op(Shape::tokens(2), |out| Op::L2Norm { x, eps: 1e-12, out });
    close(&c.run(y, &[1, 1]), &[&[0.6, 0.8], &[0.0, 0.0]]);
}
