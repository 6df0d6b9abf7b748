//! Checking a graph once, so backends can trust it: indices, definitions, widths, weights.

use super::{Graph, Op, PositionBias, Rows, Shape, Val, W};
use crate::{Error, Result};

impl Graph {
    /// Checks the graph: every index in range, every value defined once and before use, and
    /// every width and weight shape consistent. The error names the op and what it expected.
    pub fn validate(&self) -> Result<()> {
        let mut defined = vec![false; self.vals.len()];
        for (i, op) in self.ops.iter().enumerate() {
            let fail = |msg: String| Error::Graph(format!("op {i} ({}): {msg}", op.name()));
            for v in op.inputs().into_iter().flatten() {
                if v.idx() >= self.vals.len() {
                    return Err(fail(format!("reads value {} of {}", v.0, self.vals.len())));
                }
                if !defined[v.idx()] {
                    return Err(fail(format!("reads value {} before any op defines it", v.0)));
                }
            }
            for w in op.weights().into_iter().flatten() {
                if w.idx() >= self.weights.len() {
                    return Err(fail(format!("uses weight {} of {}", w.0, self.weights.len())));
                }
            }
            let out = op.out();
            if out.idx() >= self.vals.len() {
                return Err(fail(format!("writes value {} of {}", out.0, self.vals.len())));
            }
            if std::mem::replace(&mut defined[out.idx()], true) {
                return Err(fail(format!("writes value {}, which an earlier op defined", out.0)));
            }
            self.check_op(op).map_err(fail)?;
        }
        if let Some(v) = defined.iter().position(|d| !d) {
            return Err(Error::Graph(format!("value {v} is never defined by any op")));
        }
        for (i, d) in self.dropout.iter().enumerate() {
            if d.val.idx() >= self.vals.len() {
                return Err(Error::Graph(format!("dropout {i} names value {}", d.val.0)));
            }
            if !(d.p > 0.0 && d.p < 1.0) {
                return Err(Error::Graph(format!(
                    "dropout at value {}: the probability {} is not in (0, 1)",
                    d.val.0, d.p
                )));
            }
            if self.dropout[..i].iter().any(|e| e.val == d.val) {
                return Err(Error::Graph(format!("value {} has dropout twice", d.val.0)));
            }
        }
        if self.outputs.is_empty() {
            return Err(Error::Graph("the graph has no outputs".into()));
        }
        for (i, o) in self.outputs.iter().enumerate() {
            if o.val.idx() >= self.vals.len() {
                return Err(Error::Graph(format!("output `{}` names value {}", o.name, o.val.0)));
            }
            if self.outputs[..i].iter().any(|p| p.name == o.name) {
                return Err(Error::Graph(format!("output name `{}` appears twice", o.name)));
            }
        }
        Ok(())
    }

    /// Checks one op's shapes; the message omits the op, which the caller adds.
    fn check_op(&self, op: &Op) -> Result<(), String> {
        let sh = |v: Val| self.vals[v.idx()];
        let wshape = |w: W| self.weights[w.idx()].shape.as_slice();
        let want_w = |w: W, want: &[usize]| -> Result<(), String> {
            let spec = &self.weights[w.idx()];
            if spec.shape == want {
                Ok(())
            } else {
                Err(format!(
                    "weight {} `{}` has shape {:?}, expected {want:?}",
                    w.0, spec.name, spec.shape
                ))
            }
        };
        let same = |what: &str, a: Val, b: Val| -> Result<(), String> {
            if sh(a) == sh(b) {
                Ok(())
            } else {
                Err(format!("{what}: value {} is {} but value {} is {}", a.0, sh(a), b.0, sh(b)))
            }
        };
        let rows = |v: Val, want: Rows| -> Result<(), String> {
            if sh(v).rows == want {
                Ok(())
            } else {
                Err(format!("value {} is {}, expected {} rows", v.0, sh(v), want.name()))
            }
        };
        let positive = |what: &str, eps: f32| -> Result<(), String> {
            if eps.is_finite() && eps > 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be positive and finite, got {eps}"))
            }
        };
        match *op {
            Op::Embed { table, out, .. } | Op::TypeEmbed { table, out } => {
                rows(out, Rows::Tokens)?;
                if let Op::Embed { scale, .. } = *op
                    && !scale.is_finite()
                {
                    return Err(format!("scale must be finite, got {scale}"));
                }
                let t = wshape(table);
                if t.len() != 2 || t[1] != sh(out).width || t[0] == 0 {
                    return Err(format!(
                        "weight {} `{}` has shape {t:?}, expected [rows > 0, {}]",
                        table.0,
                        self.weights[table.idx()].name,
                        sh(out).width
                    ));
                }
            }
            Op::PosEmbed { table, offset, out } => {
                rows(out, Rows::Tokens)?;
                let t = wshape(table);
                if t.len() != 2 || t[1] != sh(out).width || t[0] <= offset {
                    return Err(format!(
                        "weight {} `{}` has shape {t:?}, expected [rows > {offset}, {}]",
                        table.0,
                        self.weights[table.idx()].name,
                        sh(out).width
                    ));
                }
            }
            Op::Add { a, b, out } => {
                same("addends differ", a, b)?;
                same("output differs from input", a, out)?;
            }
            Op::Mul { a, b, out } => {
                same("factors differ", a, b)?;
                same("output differs from input", a, out)?;
            }
            Op::LayerNorm { x, gamma, beta, eps, out } => {
                same("output differs from input", x, out)?;
                positive("eps", eps)?;
                want_w(gamma, &[sh(x).width])?;
                if let Some(b) = beta {
                    want_w(b, &[sh(x).width])?;
                }
            }
            Op::RmsNorm { x, gamma, eps, group, unit_offset: _, out } => {
                same("output differs from input", x, out)?;
                positive("eps", eps)?;
                let width = sh(x).width;
                let n = group.unwrap_or(width);
                if n == 0 || !width.is_multiple_of(n) {
                    return Err(format!("groups of {n} columns do not divide width {width}"));
                }
                want_w(gamma, &[n])?;
            }
            Op::Linear { x, weight, bias, act: _, residual, out } => {
                rows(out, sh(x).rows)?;
                want_w(weight, &[sh(out).width, sh(x).width])?;
                if let Some(b) = bias {
                    want_w(b, &[sh(out).width])?;
                }
                if let Some(r) = residual {
                    same("residual differs from output", r, out)?;
                }
            }
            Op::Glu { x, act: _, gate: _, out } => {
                rows(out, sh(x).rows)?;
                if sh(x).width != 2 * sh(out).width {
                    return Err(format!(
                        "input is {} wide, expected twice the output width {}",
                        sh(x).width,
                        sh(out).width
                    ));
                }
            }
            Op::Slice { x, start, out } => {
                rows(out, sh(x).rows)?;
                if start.checked_add(sh(out).width).is_none_or(|end| end > sh(x).width) {
                    return Err(format!(
                        "columns {start}..{}+{} exceed the input's width {}",
                        start,
                        sh(out).width,
                        sh(x).width
                    ));
                }
            }
            Op::Rope { x, heads, head_dim, theta, position_scale, out } => {
                rows(x, Rows::Tokens)?;
                same("output differs from input", x, out)?;
                heads_fit(sh(x).width, heads, head_dim)?;
                if head_dim % 2 != 0 {
                    return Err(format!("head_dim {head_dim} must be even"));
                }
                positive("theta", theta)?;
                positive("position_scale", position_scale)?;
            }
            Op::Attention {
                q,
                k,
                v,
                heads,
                kv_heads,
                head_dim,
                scale,
                window: _,
                causal: _,
                position_bias,
                out,
            } => {
                if sh(q).rows == Rows::Markers {
                    return Err(format!("queries are {}, expected tokens or seqs rows", sh(q)));
                }
                heads_fit(sh(q).width, heads, head_dim)?;
                rows(k, Rows::Tokens)?;
                same("values differ from keys", k, v)?;
                if kv_heads == 0 || heads % kv_heads != 0 {
                    return Err(format!(
                        "{kv_heads} key-value heads do not divide {heads} query heads"
                    ));
                }
                heads_fit(sh(k).width, kv_heads, head_dim)?;
                same("output differs from queries", q, out)?;
                if !scale.is_finite() {
                    return Err(format!("scale must be finite, got {scale}"));
                }
                match position_bias {
                    Some(PositionBias::Relative(b)) => {
                        if b.buckets < 4 || b.buckets % 2 != 0 || b.max_distance <= b.buckets / 4 {
                            return Err(format!(
                                "relative position bias: {} buckets up to distance {}; expected \
                                 an even count of at least 4, and a distance past a quarter of it",
                                b.buckets, b.max_distance
                            ));
                        }
                        want_w(b.table, &[b.buckets, heads])?;
                    }
                    Some(PositionBias::Disentangled(_)) if kv_heads != heads => {
                        return Err(format!(
                            "disentangled attention with {kv_heads} key-value heads for {heads} \
                             query heads is not supported; it takes one key-value head a query \
                             head"
                        ));
                    }
                    Some(PositionBias::Disentangled(d)) => {
                        let logarithmic = d.buckets >= 2 && d.max_distance > d.buckets / 2 + 1;
                        if d.span == 0 || !(d.buckets == 0 || logarithmic) {
                            return Err(format!(
                                "disentangled attention: {} relative positions a side, {} \
                                 buckets up to distance {}; expected at least one position, and \
                                 no buckets or at least 2 reaching past half of them",
                                d.span, d.buckets, d.max_distance
                            ));
                        }
                        if d.keys.is_none() && d.queries.is_none() {
                            return Err("disentangled attention with neither term".to_owned());
                        }
                        for t in [d.keys, d.queries].into_iter().flatten() {
                            want_w(t, &[2 * d.span, heads * head_dim])?;
                        }
                    }
                    None => {}
                }
            }
            Op::Activation { x, act: _, out } => same("output differs from input", x, out)?,
            Op::Pool { x, mode: _, out } => {
                rows(x, Rows::Tokens)?;
                rows(out, Rows::Seqs)?;
                same_width(sh(x), sh(out))?;
            }
            Op::Gather { x, out } => {
                rows(x, Rows::Tokens)?;
                rows(out, Rows::Markers)?;
                same_width(sh(x), sh(out))?;
            }
            Op::L2Norm { x, eps, out } => {
                same("output differs from input", x, out)?;
                positive("eps", eps)?;
            }
        }
        Ok(())
    }
}

fn heads_fit(width: usize, heads: usize, head_dim: usize) -> Result<(), String> {
    if heads == 0 || head_dim == 0 || heads.checked_mul(head_dim) != Some(width) {
        return Err(format!("{heads} heads of {head_dim} columns do not make width {width}"));
    }
    Ok(())
}

fn same_width(a: Shape, b: Shape) -> Result<(), String> {
    if a.width == b.width {
        Ok(())
    } else {
        Err(format!("input is {a} but output is {b}; widths must match"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::block;
    use super::super::{Act, Disentangled, Gate, GraphBuilder, Output, PoolMode, RelativeBias};
    use super::*;

    fn invalid(g: &Graph) -> String {
        match g.validate() {
            Err(Error::Graph(m)) => m,
            other => panic!("expected an invalid graph, got {other:?}"),
        }
    }

    #[test]
    fn validate_names_the_op_and_what_it_expected() {
        let base = block();
        let mut cases: Vec<(Graph, &str)> = Vec::new();

        let mut g = base.clone();
        g.weights[5].shape = vec![8, 7]; // `o` feeds op 7
        cases.push((g, "op 7 (Linear): weight 5 `o` has shape [8, 7], expected [8, 8]"));

        let mut g = base.clone();
        g.weights[2].shape = vec![9]; // LayerNorm gamma
        cases.push((g, "op 3 (LayerNorm): weight 2 `ln.g` has shape [9], expected [8]"));

        let mut g = base.clone();
        g.vals[1].width = 6; // PosEmbed output
        cases
            .push((g, "op 1 (PosEmbed): weight 1 `pos` has shape [16, 8], expected [rows > 2, 6]"));

        let mut g = base.clone();
        g.ops[2] = Op::Add { a: Val(0), b: Val(9), out: Val(2) };
        cases.push((g, "op 2 (Add): reads value 9 before any op defines it"));

        let mut g = base.clone();
        g.ops[4] = Op::Linear {
            x: Val(3),
            weight: W(42),
            bias: None,
            act: Act::Identity,
            residual: None,
            out: Val(4),
        };
        cases.push((g, "op 4 (Linear): uses weight 42 of 6"));

        let mut g = base.clone();
        g.ops[5] = Op::Rope {
            x: Val(4),
            heads: 3,
            head_dim: 4,
            theta: 1e4,
            position_scale: 1.0,
            out: Val(5),
        };
        cases.push((g, "op 5 (Rope): 3 heads of 4 columns do not make width 8"));

        let mut g = base.clone();
        g.ops[5] = Op::Rope {
            x: Val(4),
            heads: 8,
            head_dim: 1,
            theta: 1e4,
            position_scale: 1.0,
            out: Val(5),
        };
        cases.push((g, "op 5 (Rope): head_dim 1 must be even"));

        let mut g = base.clone();
        g.ops[5] = Op::Rope {
            x: Val(4),
            heads: 2,
            head_dim: 4,
            theta: 1e4,
            position_scale: 0.0,
            out: Val(5),
        };
        cases.push((g, "op 5 (Rope): position_scale must be positive"));

        let mut g = base.clone();
        g.ops[0] = Op::Embed { table: W(0), scale: f32::NAN, out: Val(0) };
        cases.push((g, "op 0 (Embed): scale must be finite, got NaN"));

        let mut g = base.clone();
        g.ops[3] = Op::RmsNorm {
            x: Val(2),
            gamma: W(2),
            eps: 1e-6,
            group: Some(3),
            unit_offset: false,
            out: Val(3),
        };
        cases.push((g, "op 3 (RmsNorm): groups of 3 columns do not divide width 8"));

        let mut g = base.clone();
        g.ops[3] = Op::LayerNorm { x: Val(2), gamma: W(2), beta: None, eps: 0.0, out: Val(3) };
        cases.push((g, "op 3 (LayerNorm): eps must be positive"));

        let mut g = base.clone();
        g.vals[8].rows = Rows::Tokens; // Pool output
        cases.push((g, "op 8 (Pool): value 8 is [tokens x 8], expected seqs rows"));

        let mut g = base.clone();
        g.ops[1] = Op::PosEmbed { table: W(1), offset: 0, out: Val(0) };
        cases.push((g, "op 1 (PosEmbed): writes value 0, which an earlier op defined"));

        let mut g = base.clone();
        g.ops.pop();
        cases.push((g, "value 9 is never defined by any op"));

        let mut g = base.clone();
        g.outputs.clear();
        cases.push((g, "the graph has no outputs"));

        let mut g = base.clone();
        g.outputs.push(Output { name: "embedding".into(), val: Val(8) });
        cases.push((g, "output name `embedding` appears twice"));

        let mut g = base.clone();
        g.ops[6] = Op::Attention {
            q: Val(5),
            k: Val(5),
            v: Val(8),
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            scale: 1.0,
            window: None,
            causal: false,
            position_bias: None,
            out: Val(6),
        };
        cases.push((g, "op 6 (Attention): reads value 8 before any op defines it"));

        let mut g = base.clone();
        g.dropout.push(super::super::Dropout { val: Val(12), p: 0.1 });
        cases.push((g, "dropout 0 names value 12"));

        for p in [0.0, 1.0, f32::NAN] {
            let mut g = base.clone();
            g.dropout.push(super::super::Dropout { val: Val(3), p });
            cases.push((g, "is not in (0, 1)"));
        }

        let mut g = base.clone();
        g.dropout.push(super::super::Dropout { val: Val(3), p: 0.1 });
        g.dropout.push(super::super::Dropout { val: Val(3), p: 0.2 });
        cases.push((g, "value 3 has dropout twice"));

        for (g, want) in cases {
            let msg = invalid(&g);
            assert!(msg.contains(want), "expected `{want}` in `{msg}`");
        }
    }

    /// A graph of one attention op whose queries are `x` pooled to `q_rows` rows (tokens: `x`
    /// itself), keys and values `x` in `kv_rows`, output in `out_rows`.
    fn attention_graph(q_rows: Rows, kv_rows: Rows, out_rows: Rows) -> Result<Graph> {
        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
        let pooled = |g: &mut GraphBuilder, rows: Rows| match rows {
            Rows::Tokens => x,
            Rows::Seqs => g.op(Shape::seqs(8), |out| Op::Pool { x, mode: PoolMode::Cls, out }),
            Rows::Markers => g.op(Shape::markers(8), |out| Op::Gather { x, out }),
        };
        let (q, kv) = (pooled(&mut g, q_rows), pooled(&mut g, kv_rows));
        let a = g.op(Shape { rows: out_rows, width: 8 }, |out| Op::Attention {
            q,
            k: kv,
            v: kv,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            scale: 0.5,
            window: None,
            causal: false,
            position_bias: None,
            out,
        });
        g.output("y", a);
        g.finish()
    }

    #[test]
    fn attention_takes_a_query_per_token_or_per_sequence_over_token_keys() {
        use Rows::{Markers, Seqs, Tokens};
        attention_graph(Tokens, Tokens, Tokens).unwrap();
        attention_graph(Seqs, Tokens, Seqs).unwrap();
        for (q, kv, out, want) in [
            (Markers, Tokens, Markers, "queries are [markers x 8], expected tokens or seqs rows"),
            (Seqs, Seqs, Seqs, "is [seqs x 8], expected tokens rows"),
            (Seqs, Tokens, Tokens, "output differs from queries"),
            (Tokens, Tokens, Seqs, "output differs from queries"),
        ] {
            let e = attention_graph(q, kv, out).unwrap_err().to_string();
            assert!(e.contains("(Attention)") && e.contains(want), "{q:?} {kv:?} {out:?}: {e}");
        }
    }

    #[test]
    fn a_position_bias_needs_a_table_of_its_buckets_by_heads_and_a_sound_bucketing() {
        let graph = |rows: usize, buckets: usize, max_distance: usize| {
            let mut g = GraphBuilder::new();
            let emb = g.weight("emb", &[4, 8]);
            let table = g.weight("bias", &[rows, 2]);
            let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
            let position_bias =
                Some(PositionBias::Relative(RelativeBias { table, buckets, max_distance }));
            let a = g.op(Shape::tokens(8), |out| Op::Attention {
                q: x,
                k: x,
                v: x,
                heads: 2,
                kv_heads: 2,
                head_dim: 4,
                scale: 0.5,
                window: None,
                causal: false,
                position_bias,
                out,
            });
            g.output("y", a);
            g.finish()
        };
        graph(32, 32, 128).unwrap();
        graph(4, 4, 2).unwrap();
        let err = |g: Result<Graph>| g.unwrap_err().to_string();
        let e = err(graph(16, 32, 128));
        assert!(e.contains("weight 1 `bias` has shape [16, 2], expected [32, 2]"), "{e}");
        for (buckets, max_distance) in [(31, 128), (2, 128), (32, 8)] {
            let e = err(graph(buckets, buckets, max_distance));
            assert!(e.contains("expected an even count of at least 4"), "{buckets}: {e}");
        }
    }

    #[test]
    fn disentangled_attention_needs_tables_of_two_spans_by_width_and_a_sound_bucketing() {
        let graph = |rows: usize, span: usize, buckets: usize, terms: (bool, bool)| {
            let mut g = GraphBuilder::new();
            let emb = g.weight("emb", &[4, 8]);
            let keys = terms.0.then(|| g.weight("keys", &[rows, 8]));
            let queries = terms.1.then(|| g.weight("queries", &[rows, 8]));
            let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
            let d = Disentangled { keys, queries, span, buckets, max_distance: 16 };
            let a = g.op(Shape::tokens(8), |out| Op::Attention {
                q: x,
                k: x,
                v: x,
                heads: 2,
                kv_heads: 2,
                head_dim: 4,
                scale: 0.5,
                window: None,
                causal: false,
                position_bias: Some(PositionBias::Disentangled(d)),
                out,
            });
            g.output("y", a);
            g.finish()
        };
        graph(8, 4, 8, (true, true)).unwrap();
        graph(8, 4, 0, (false, true)).unwrap();
        let err = |g: Result<Graph>| g.unwrap_err().to_string();
        let e = err(graph(6, 4, 8, (true, false)));
        assert!(e.contains("`keys` has shape [6, 8], expected [8, 8]"), "{e}");
        assert!(err(graph(8, 4, 8, (false, false))).contains("neither term"));
        for (span, buckets) in [(0, 8), (4, 1), (4, 32)] {
            let e = err(graph(2 * span, span, buckets, (true, true)));
            assert!(e.contains("expected at least one position"), "{span} {buckets}: {e}");
        }
    }

    #[test]
    fn shared_key_value_heads_divide_the_query_heads_and_make_the_key_width() {
        // Queries of 4 heads of 2 columns; keys and values `kv_width` columns of them.
        let graph = |kv_width: usize, kv_heads: usize, disentangled: bool| {
            let mut g = GraphBuilder::new();
            let emb = g.weight("emb", &[4, 8]);
            let table = g.weight("queries", &[8, 8]);
            let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
            let kv = g.op(Shape::tokens(kv_width), |out| Op::Slice { x, start: 0, out });
            let d = Disentangled {
                keys: None,
                queries: Some(table),
                span: 4,
                buckets: 0,
                max_distance: 0,
            };
            let a = g.op(Shape::tokens(8), |out| Op::Attention {
                q: x,
                k: kv,
                v: kv,
                heads: 4,
                kv_heads,
                head_dim: 2,
                scale: 0.5,
                window: None,
                causal: false,
                position_bias: disentangled.then_some(PositionBias::Disentangled(d)),
                out,
            });
            g.output("y", a);
            g.finish()
        };
        graph(2, 1, false).unwrap();
        graph(4, 2, false).unwrap();
        graph(8, 4, true).unwrap();
        let err = |g: Result<Graph>| g.unwrap_err().to_string();
        for (width, kv_heads, want) in [
            (6, 3, "3 key-value heads do not divide 4 query heads"),
            (0, 0, "0 key-value heads do not divide 4 query heads"),
            (8, 2, "2 heads of 2 columns do not make width 8"),
            (2, 2, "2 heads of 2 columns do not make width 2"),
        ] {
            let e = err(graph(width.max(1), kv_heads, false));
            assert!(e.contains("(Attention)") && e.contains(want), "{width} {kv_heads}: {e}");
        }
        let e = err(graph(4, 2, true));
        assert!(e.contains("disentangled attention with 2 key-value heads for 4"), "{e}");
    }

    #[test]
    fn shape_checks_cover_every_row_changing_op() {
        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 6]);
        let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, scale: 1.0, out });
        g.op(Shape::tokens(4), |out| Op::Glu { x, act: Act::Silu, gate: Gate::First, out });
        g.output("y", Val(1));
        assert!(g.clone().finish().unwrap_err().to_string().contains("twice the output width 4"));

        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 6]);
        let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, scale: 1.0, out });
        let y = g.op(Shape::tokens(4), |out| Op::Slice { x, start: 3, out });
        g.output("y", y);
        assert!(
            g.finish()
                .unwrap_err()
                .to_string()
                .contains("columns 3..3+4 exceed the input's width 6")
        );

        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 6]);
        let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, scale: 1.0, out });
        let y = g.op(Shape::markers(5), |out| Op::Gather { x, out });
        g.output("y", y);
        assert!(g.finish().unwrap_err().to_string().contains("widths must match"));
    }
}
