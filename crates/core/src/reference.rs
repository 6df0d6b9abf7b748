//! The reference backend: every op interpreted in f64, written to be obviously right.
//!
//! It is the oracle the other backends are tested against, so clarity wins over speed: plain
//! loops, one op at a time, each following the numerics documented on [`Op`]. It still keeps the
//! [`Backend`] contract: `lower` lays out one arena per bucket with [`Layout`], `state`
//! allocates it, and `run` allocates nothing. Each op computes into a scratch buffer and is then copied to its place in
//! the arena, so ops that [`Layout`] runs in place need no special care.

use std::sync::Arc;

use crate::{
    Backend, Batch, Bucket, Caps, DeviceKind, Graph, HostTensor, Layout, Op, Outputs, PoolMode,
    PositionBias, Result, Val, W,
};

/// The f64 reference interpreter.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

/// Weights converted to f64, one row-major vector per tensor.
#[derive(Debug)]
pub struct RefWeights {
    tensors: Vec<Vec<f64>>,
}

/// A graph lowered for one bucket: the weights it reads and its arena's layout.
#[derive(Debug)]
pub struct RefPlan {
    weights: Arc<RefWeights>,
    graph: Graph,
    bucket: Bucket,
    layout: Layout,
    /// Elements of the widest value of the bucket: the size of a run state's `tmp`.
    widest: usize,
}

/// What one run writes: the arena and scratch buffers.
#[derive(Debug)]
pub struct RefState {
    arena: Vec<f64>,
    /// Where an op writes before its result is copied into the arena: the widest value.
    tmp: Vec<f64>,
    /// Attention scores of one query: one per token of the bucket.
    scores: Vec<f64>,
}

const F64: usize = size_of::<f64>();

impl Backend for Reference {
    type Weights = Arc<RefWeights>;
    type Plan = RefPlan;
    type State = RefState;

    fn caps(&self) -> Caps {
        // It computes in f64, reading and writing f32; f32 is what it stands for.
        Caps::new("reference", "host CPU, f64", DeviceKind::Cpu)
    }

    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<Self::Weights> {
        graph.check_weights(tensors)?;
        let tensors = tensors.iter().map(|t| t.iter_f64().collect()).collect();
        Ok(Arc::new(RefWeights { tensors }))
    }

    fn lower(&self, w: &Self::Weights, graph: &Graph, bucket: Bucket) -> Result<Self::Plan> {
        graph.check_lowerable(w.tensors.len())?;
        let layout = Layout::plan(graph, bucket, F64);
        let widest = graph.vals.iter().map(|s| bucket.rows(s.rows) * s.width).max().unwrap_or(0);
        Ok(RefPlan { weights: Arc::clone(w), graph: graph.clone(), bucket, layout, widest })
    }

    fn state(&self, plan: &RefPlan) -> Result<RefState> {
        Ok(RefState {
            arena: vec![0.0; plan.layout.total / F64],
            tmp: vec![0.0; plan.widest],
            scores: vec![0.0; plan.bucket.tokens],
        })
    }

    fn run(
        &self,
        plan: &RefPlan,
        state: &mut RefState,
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()> {
        plan.bucket.admit(batch)?;
        eval_ops(plan, state, batch);
        let cx = Ctx { plan, arena: &state.arena, batch };
        for (m, o) in out.prepare(&plan.graph, batch).iter_mut().zip(&plan.graph.outputs) {
            for (d, s) in m.data.iter_mut().zip(cx.val(o.val)) {
                *d = *s as f32;
            }
        }
        Ok(())
    }

    fn weight_bytes(&self, w: &Self::Weights) -> usize {
        w.tensors.iter().map(|t| t.len() * F64).sum()
    }

    fn state_bytes(&self, s: &RefState) -> usize {
        (s.arena.len() + s.tmp.len() + s.scores.len()) * F64
    }
}

impl Reference {
    /// Runs `graph` on `batch` with its weights given in f64 (row-major, in the graph's order)
    /// and returns each output's rows in f64, in the graph's output order: for checks finer
    /// than f32 allows, such as finite-difference gradients.
    pub fn eval_f64(
        graph: &Graph,
        weights: Vec<Vec<f64>>,
        batch: &Batch<'_>,
    ) -> Result<Vec<Vec<f64>>> {
        graph.check_lowerable(weights.len())?;
        for (i, (w, spec)) in weights.iter().zip(&graph.weights).enumerate() {
            let want: usize = spec.shape.iter().product();
            if w.len() != want {
                return Err(crate::Error::Format(format!(
                    "weight {i} `{}` has {} values, expected {want}",
                    spec.name,
                    w.len()
                )));
            }
        }
        batch.check(&graph.limits())?;
        let bucket = batch.sizes();
        let plan = Reference.lower(&Arc::new(RefWeights { tensors: weights }), graph, bucket)?;
        let mut state = Reference.state(&plan)?;
        eval_ops(&plan, &mut state, batch);
        let cx = Ctx { plan: &plan, arena: &state.arena, batch };
        Ok(graph.outputs.iter().map(|o| cx.val(o.val).to_vec()).collect())
    }
}

/// Evaluates every op of `plan` on `batch` into the state's arena.
fn eval_ops(plan: &RefPlan, state: &mut RefState, batch: &Batch<'_>) {
    for op in &plan.graph.ops {
        let o = op.out();
        let n = batch.rows(plan.graph.shape(o).rows) * plan.graph.shape(o).width;
        let cx = Ctx { plan, arena: &state.arena, batch };
        cx.eval(op, &mut state.tmp[..n], &mut state.scores);
        let start = plan.layout.offsets[o.idx()] / F64;
        state.arena[start..start + n].copy_from_slice(&state.tmp[..n]);
    }
}

/// What an op reads while it runs: the plan, the run's arena, and the batch.
struct Ctx<'a> {
    plan: &'a RefPlan,
    arena: &'a [f64],
    batch: &'a Batch<'a>,
}

impl Ctx<'_> {
    /// The rows the batch has of a value, row-major.
    fn val(&self, v: Val) -> &[f64] {
        let s = self.plan.graph.shape(v);
        let start = self.plan.layout.offsets[v.idx()] / F64;
        &self.arena[start..start + self.batch.rows(s.rows) * s.width]
    }

    fn w(&self, w: W) -> &[f64] {
        &self.plan.weights.tensors[w.idx()]
    }

    fn width(&self, v: Val) -> usize {
        self.plan.graph.shape(v).width
    }

    /// Position of token `t` within its sequence, for each token, visited in order.
    fn positions(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.batch.seqs()).flat_map(|s| {
            let r = self.batch.seq(s);
            let start = r.start;
            r.map(move |t| (t, t - start))
        })
    }

    /// Evaluates `op` into `y` (exactly the output's rows), using `scores` as scratch.
    fn eval(&self, op: &Op, y: &mut [f64], scores: &mut [f64]) {
        let b = self.batch;
        match *op {
            Op::Embed { table, scale, out } => {
                gather_rows(y, self.w(table), self.width(out), b.ids.iter().map(|&i| i as usize));
                for v in y.iter_mut() {
                    *v *= f64::from(scale);
                }
            }
            Op::TypeEmbed { table, out } => {
                gather_rows(y, self.w(table), self.width(out), b.types.iter().map(|&i| i as usize));
            }
            Op::PosEmbed { table, offset, out } => {
                let idx = self.positions().map(|(_, p)| offset + p);
                gather_rows(y, self.w(table), self.width(out), idx);
            }
            Op::Add { a, b: c, .. } => {
                for ((y, a), c) in y.iter_mut().zip(self.val(a)).zip(self.val(c)) {
                    *y = a + c;
                }
            }
            Op::Mul { a, b: c, .. } => {
                for ((y, a), c) in y.iter_mut().zip(self.val(a)).zip(self.val(c)) {
                    *y = a * c;
                }
            }
            Op::LayerNorm { x, gamma, beta, eps, .. } => {
                let (g, w) = (self.w(gamma), self.width(x));
                for (yr, xr) in y.chunks_exact_mut(w).zip(self.val(x).chunks_exact(w)) {
                    let mean = xr.iter().sum::<f64>() / w as f64;
                    let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / w as f64;
                    let inv = 1.0 / (var + f64::from(eps)).sqrt();
                    for (j, (yv, xv)) in yr.iter_mut().zip(xr).enumerate() {
                        *yv = (xv - mean) * inv * g[j] + beta.map_or(0.0, |bt| self.w(bt)[j]);
                    }
                }
            }
            Op::RmsNorm { x, gamma, eps, group, unit_offset, .. } => {
                let (g, w) = (self.w(gamma), group.unwrap_or(self.width(x)));
                let offset = if unit_offset { 1.0 } else { 0.0 };
                for (yr, xr) in y.chunks_exact_mut(w).zip(self.val(x).chunks_exact(w)) {
                    let ms = xr.iter().map(|v| v * v).sum::<f64>() / w as f64;
                    let inv = 1.0 / (ms + f64::from(eps)).sqrt();
                    for ((yv, xv), gv) in yr.iter_mut().zip(xr).zip(g) {
                        *yv = xv * inv * (offset + gv);
                    }
                }
            }
            Op::Linear { x, weight, bias, act, residual, out } => {
                let (k, n) = (self.width(x), self.width(out));
                let wt = self.w(weight);
                for (r, (yr, xr)) in
                    y.chunks_exact_mut(n).zip(self.val(x).chunks_exact(k)).enumerate()
                {
                    for (o, yv) in yr.iter_mut().enumerate() {
                        let dot: f64 =
                            xr.iter().zip(&wt[o * k..(o + 1) * k]).map(|(a, b)| a * b).sum();
                        let pre = dot + bias.map_or(0.0, |bs| self.w(bs)[o]);
                        *yv = act.apply(pre) + residual.map_or(0.0, |res| self.val(res)[r * n + o]);
                    }
                }
            }
            Op::Glu { x, act, gate, out } => {
                let h = self.width(out);
                for (yr, xr) in y.chunks_exact_mut(h).zip(self.val(x).chunks_exact(2 * h)) {
                    let (g, v) = gate.starts(h);
                    for ((yv, &g), &v) in yr.iter_mut().zip(&xr[g..g + h]).zip(&xr[v..v + h]) {
                        *yv = act.apply(g) * v;
                    }
                }
            }
            Op::Slice { x, start, out } => {
                let (w, n) = (self.width(x), self.width(out));
                for (yr, xr) in y.chunks_exact_mut(n).zip(self.val(x).chunks_exact(w)) {
                    yr.copy_from_slice(&xr[start..start + n]);
                }
            }
            Op::Rope { x, heads, head_dim, theta, position_scale, .. } => {
                let (xs, w, half) = (self.val(x), heads * head_dim, head_dim / 2);
                for (t, p) in self.positions() {
                    for h in 0..heads {
                        let base = t * w + h * head_dim;
                        for i in 0..half {
                            let angle = crate::rope_angle(p, i, head_dim, theta, position_scale);
                            let (sin, cos) = angle.sin_cos();
                            let (x1, x2) = (xs[base + i], xs[base + half + i]);
                            y[base + i] = x1 * cos - x2 * sin;
                            y[base + half + i] = x2 * cos + x1 * sin;
                        }
                    }
                }
            }
            Op::Attention {
                q,
                k,
                v,
                heads,
                kv_heads,
                head_dim,
                scale,
                window,
                causal,
                position_bias,
                ..
            } => {
                let reach = crate::Reach::of(window, causal);
                let relative =
                    position_bias.and_then(PositionBias::relative).map(|b| (b, self.w(b.table)));
                let disentangled = position_bias.and_then(PositionBias::disentangled);
                let table = |t: Option<W>| t.map(|t| self.w(t));
                let (pos_keys, pos_queries) =
                    disentangled.map_or((None, None), |d| (table(d.keys), table(d.queries)));
                let (qs, ks, vs) = (self.val(q), self.val(k), self.val(v));
                // Query (and output) width; key and value width; query heads a key-value head.
                let (w, kw, group) = (heads * head_dim, kv_heads * head_dim, heads / kv_heads);
                let per_seq = self.plan.graph.shape(q).rows == crate::Rows::Seqs;
                for s in 0..b.seqs() {
                    let seq = b.seq(s);
                    // Each query token, and the row of `q` and `out` that holds it.
                    let queries = if per_seq { seq.start..seq.start + 1 } else { seq.clone() };
                    for i in queries {
                        let r = if per_seq { s } else { i };
                        let (lo, hi) = reach.keys(i - seq.start, seq.len());
                        let keys = seq.start + lo..seq.start + hi;
                        for h in 0..heads {
                            let col = h * head_dim..(h + 1) * head_dim;
                            let kv = h / group;
                            let kcol = kv * head_dim..(kv + 1) * head_dim;
                            let qi = &qs[r * w..][col.clone()];
                            let sc = &mut scores[..keys.len()];
                            for (sv, j) in sc.iter_mut().zip(keys.clone()) {
                                let kj = &ks[j * kw..][kcol.clone()];
                                let dot = |a: &[f64], b: &[f64]| {
                                    a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>()
                                };
                                let mut content = dot(qi, kj);
                                if let Some(d) = disentangled {
                                    // Positions within the sequence: of the query, of the key.
                                    let (pi, pj) = (i - seq.start, j - seq.start);
                                    let at = d.row(pj as i64 - pi as i64) * w;
                                    if let Some(t) = pos_keys {
                                        content += dot(qi, &t[at..][col.clone()]);
                                    }
                                    if let Some(t) = pos_queries {
                                        content += dot(kj, &t[at..][col.clone()]);
                                    }
                                }
                                *sv = f64::from(scale) * content;
                                if let Some((b, table)) = &relative {
                                    *sv += table[b.bucket(j as i64 - i as i64) * heads + h];
                                }
                            }
                            let max = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                            sc.iter_mut().for_each(|sv| *sv = (*sv - max).exp());
                            let sum: f64 = sc.iter().sum();
                            let yi = &mut y[r * w..][col.clone()];
                            yi.fill(0.0);
                            for (a, j) in sc.iter().zip(keys.clone()) {
                                for (yv, vv) in yi.iter_mut().zip(&vs[j * kw..][kcol.clone()]) {
                                    *yv += a / sum * vv;
                                }
                            }
                        }
                    }
                }
            }
            Op::Activation { x, act, .. } => {
                for (yv, xv) in y.iter_mut().zip(self.val(x)) {
                    *yv = act.apply(*xv);
                }
            }
            Op::Pool { x, mode, .. } => {
                let (xs, w) = (self.val(x), self.width(x));
                for (s, yr) in y.chunks_exact_mut(w).enumerate() {
                    let r = b.seq(s);
                    let rows = || xs[r.start * w..r.end * w].chunks_exact(w);
                    match mode {
                        PoolMode::Cls => yr.copy_from_slice(&xs[r.start * w..][..w]),
                        PoolMode::Last => yr.copy_from_slice(&xs[(r.end - 1) * w..][..w]),
                        PoolMode::Mean | PoolMode::Sum => {
                            yr.fill(0.0);
                            rows().for_each(|xr| yr.iter_mut().zip(xr).for_each(|(a, v)| *a += v));
                            if mode == PoolMode::Mean {
                                yr.iter_mut().for_each(|a| *a /= r.len() as f64);
                            }
                        }
                        PoolMode::Max => {
                            yr.fill(f64::NEG_INFINITY);
                            rows().for_each(|xr| {
                                yr.iter_mut().zip(xr).for_each(|(a, v)| *a = a.max(*v))
                            });
                        }
                    }
                }
            }
            Op::Gather { x, .. } => {
                let w = self.width(x);
                let rows = (0..b.seqs()).flat_map(|s| {
                    let start = b.cu[s] as usize;
                    b.markers[b.seq_markers(s)].iter().map(move |&p| start + p as usize)
                });
                gather_rows(y, self.val(x), w, rows);
            }
            Op::L2Norm { x, eps, .. } => {
                let w = self.width(x);
                for (yr, xr) in y.chunks_exact_mut(w).zip(self.val(x).chunks_exact(w)) {
                    let norm = xr.iter().map(|v| v * v).sum::<f64>().sqrt().max(f64::from(eps));
                    yr.iter_mut().zip(xr).for_each(|(yv, xv)| *yv = xv / norm);
                }
            }
        }
    }
}

/// Copies row `idx[r]` of `table` (rows of `w` values) to row `r` of `y`.
fn gather_rows(y: &mut [f64], table: &[f64], w: usize, idx: impl Iterator<Item = usize>) {
    for (yr, i) in y.chunks_exact_mut(w.max(1)).zip(idx) {
        yr.copy_from_slice(&table[i * w..(i + 1) * w]);
    }
}
