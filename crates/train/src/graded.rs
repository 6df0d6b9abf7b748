//! [`Graded`]: a graph whose weights are parameters, run through the one lowering on a Burn
//! backend wrapped in burn-autodiff, so that its outputs carry what backward needs.

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend as BurnBackend, Shape};
use switchyard_burn::{Burn, BurnWeights, Forward, Generic, floats};
use switchyard_core::{Backend, Batch, Caps, Graph, HostTensor, Val, W};
use switchyard_models::{Derived, Model};

use crate::{Ad, Error, Result};

/// A graph and its weights as trainable parameters on the Burn backend `B`.
///
/// The parameters live on `B` itself; each forward pass wraps them as leaves of a new
/// burn-autodiff tape ([`Pass`]), so a step's tape is dropped with its pass and an optimizer
/// updates plain tensors. The backend's own kernels stand down: the generic lowering (Burn's
/// primitive ops, each with its backward) runs every op.
///
/// Most graph weights are parameters themselves. A weight a model derives from stored tensors
/// when it loads (DeBERTa's position tables, [`Model::derived`]) is not: each pass computes it
/// from parameters on the tape, so its gradient reaches the tensors it is made of, which are
/// parameters (graph weights or not) and are what an export writes.
pub struct Graded<B: BurnBackend> {
    graph: Graph,
    params: Vec<FloatTensor<B>>,
    info: Vec<Param>,
    /// Per graph weight, where its value comes from.
    sources: Vec<Source>,
    taped: Burn<Ad<B>, Generic>,
    plain: Burn<B, Generic>,
    device: B::Device,
}

/// A parameter's name (the checkpoint's) and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its checkpoint name.
    pub name: String,
    /// Its dimensions.
    pub shape: Vec<usize>,
}

/// Where a graph weight's value comes from on each pass.
enum Source {
    /// The parameter at this index.
    Param(usize),
    /// Computed from parameters (indices) as a [`Derived`] weight says.
    Derived {
        input: usize,
        norm: Option<(usize, Option<usize>, f32)>,
        proj: usize,
        bias: Option<usize>,
        dropout: f32,
        mask: usize,
    },
}

/// One forward pass with gradients: the graph's outputs, and the leaves they came from.
pub struct Pass<B: BurnBackend> {
    /// The graph's outputs in its order (`None` for one with no rows in the batch).
    pub outputs: Vec<Option<FloatTensor<Ad<B>>>>,
    leaves: Vec<FloatTensor<Ad<B>>>,
    fed: Vec<FloatTensor<Ad<B>>>,
}

impl<B: BurnBackend> Pass<B> {
    /// Back-propagates `loss` (a one-element tensor computed from [`Pass::outputs`]): the
    /// gradient of every parameter, in the graph's weight order, and of every fed value, in
    /// the order they were fed (`None` where the loss does not depend on it).
    pub fn backward(self, loss: FloatTensor<Ad<B>>) -> Grads<B> {
        let grads = <Ad<B> as AutodiffBackend>::backward(loss);
        let of = |t: &FloatTensor<Ad<B>>| <Ad<B> as AutodiffBackend>::grad(t, &grads);
        Grads {
            params: self.leaves.iter().map(of).collect(),
            fed: self.fed.iter().map(of).collect(),
        }
    }
}

/// What [`Pass::backward`] gives.
pub struct Grads<B: BurnBackend> {
    /// Per parameter, in the graph's weight order.
    pub params: Vec<Option<FloatTensor<B>>>,
    /// Per fed value, in the order fed.
    pub fed: Vec<Option<FloatTensor<B>>>,
}

impl<B: BurnBackend> Graded<B> {
    /// `graph` on `device` (which a Switchyard backend of `caps` runs on), every weight a
    /// parameter uploaded from `tensors` (one per graph weight, in its order) as f32.
    pub fn new(
        device: B::Device,
        caps: Caps,
        graph: Graph,
        tensors: &[HostTensor<'_>],
    ) -> Result<Self> {
        Self::with_derived(device, caps, graph, tensors, &[], &|name| {
            Err(Error::Config(format!("`{name}` is no graph weight")))
        })
    }

    /// `model`'s graph on `device`: its weights as parameters, but those it derives at load,
    /// which each pass computes from the stored tensors they are made of.
    pub fn of_model(device: B::Device, caps: Caps, model: &Model) -> Result<Self> {
        let ck = model.checkpoint();
        let stored = |name: &str| Ok(ck.tensor(name)?);
        let graph = model.graph().clone();
        Self::with_derived(device, caps, graph, &model.tensors()?, model.derived(), &stored)
    }

    /// `graph` on `device`, its weights from `tensors` (one per graph weight), those `derived`
    /// names computed on each pass; a tensor a derivation reads that is no graph weight comes
    /// from `stored`.
    fn with_derived<'t>(
        device: B::Device,
        caps: Caps,
        graph: Graph,
        tensors: &[HostTensor<'t>],
        derived: &[Derived],
        stored: &dyn Fn(&str) -> Result<HostTensor<'t>>,
    ) -> Result<Self> {
        let _span =
            tracing::info_span!("upload", backend = %caps.backend, training = true).entered();
        graph.validate()?;
        graph.check_weights(tensors)?;
        let is_derived = |name: &str| derived.iter().any(|d| d.name == name);
        let mut host: Vec<(Param, HostTensor<'t>)> = Vec::new();
        let mut sources: Vec<Option<Source>> = Vec::new();
        for (w, t) in graph.weights.iter().zip(tensors) {
            sources.push(match is_derived(&w.name) {
                true => None,
                false => {
                    host.push((Param { name: w.name.clone(), shape: w.shape.clone() }, *t));
                    Some(Source::Param(host.len() - 1))
                }
            });
        }
        let mut param = |name: &str| -> Result<usize> {
            if let Some(i) = host.iter().position(|(p, _)| p.name == name) {
                return Ok(i);
            }
            if is_derived(name) {
                return Err(Error::Config(format!(
                    "a derived weight is made of `{name}`, itself derived"
                )));
            }
            let t = stored(name)?;
            host.push((Param { name: name.to_owned(), shape: t.shape.to_vec() }, t));
            Ok(host.len() - 1)
        };
        for d in derived {
            let Some(w) = graph.weights.iter().position(|w| w.name == d.name) else {
                return Err(Error::Config(format!("the derived `{}` is no graph weight", d.name)));
            };
            let norm = match &d.norm {
                Some(n) => {
                    Some((param(&n.gamma)?, n.beta.as_deref().map(&mut param).transpose()?, n.eps))
                }
                None => None,
            };
            sources[w] = Some(Source::Derived {
                input: param(&d.input)?,
                norm,
                proj: param(&d.proj)?,
                bias: d.bias.as_deref().map(&mut param).transpose()?,
                dropout: d.dropout,
                mask: d.mask,
            });
        }
        let sources = sources.into_iter().map(|s| s.expect("every weight has a source")).collect();
        let (info, params) = host
            .into_iter()
            .map(|(p, t)| {
                let mut v = Vec::with_capacity(t.numel());
                t.extend_f32(&mut v);
                let values = floats::<B>(v, &p.shape, &device);
                (p, values)
            })
            .unzip();
        let caps = Caps { dtype: switchyard_core::DType::F32, ..caps };
        Ok(Graded {
            graph,
            params,
            info,
            sources,
            taped: Burn::new(device.clone(), Generic, caps.clone()),
            plain: Burn::new(device.clone(), Generic, caps),
            device,
        })
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The device.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The parameters: the graph's weights in its order, but those derived from others, then
    /// the tensors derived weights are made of that are no graph weights.
    pub fn params(&self) -> &[FloatTensor<B>] {
        &self.params
    }

    /// The parameters, for an optimizer to update in place.
    pub fn params_mut(&mut self) -> &mut [FloatTensor<B>] {
        &mut self.params
    }

    /// Each parameter's name and shape, in [`Graded::params`]' order.
    pub fn param_info(&self) -> &[Param] {
        &self.info
    }

    /// The parameter that is the graph weight `w`, if it is one (not derived).
    pub fn param_of(&self, w: W) -> Option<&FloatTensor<B>> {
        match self.sources.get(w.idx())? {
            Source::Param(i) => self.params.get(*i),
            Source::Derived { .. } => None,
        }
    }

    /// Runs the graph on `batch` with a tape: dropout as the graph marks it when `dropout` is
    /// set, and each `(value, tensor)` of `feed` given instead of computed (its tensor becomes a
    /// leaf whose gradient [`Pass::backward`] returns).
    pub fn forward(
        &self,
        batch: &Batch<'_>,
        dropout: bool,
        feed: Vec<(Val, FloatTensor<B>)>,
    ) -> Result<Pass<B>> {
        let track = |t: FloatTensor<B>| {
            Ad::<B>::float_set_require_grad(<Ad<B> as AutodiffBackend>::from_inner(t), true)
        };
        let leaves: Vec<_> = self.params.iter().cloned().map(track).collect();
        let feed: Vec<_> = feed.into_iter().map(|(v, t)| (v, track(t))).collect();
        let fed = feed.iter().map(|(_, t)| t.clone()).collect();
        let how = Forward { feed, dropout };
        let weights = self.weights::<Ad<B>>(&leaves, dropout);
        let outputs = run(&self.taped, &self.graph, weights, batch, &how)?;
        Ok(Pass { outputs, leaves, fed })
    }

    /// Runs the graph on `batch` without a tape or dropout, with the values of `feed` given
    /// instead of computed: for evaluation.
    pub fn infer(
        &self,
        batch: &Batch<'_>,
        feed: Vec<(Val, FloatTensor<B>)>,
    ) -> Result<Vec<Option<FloatTensor<B>>>> {
        let how = Forward { feed, dropout: false };
        run(&self.plain, &self.graph, self.weights::<B>(&self.params, false), batch, &how)
    }

    /// The graph's weights, in its order, from `params` (on `C`, `B` with or without a tape):
    /// each parameter as it is, each derived weight computed, its input dropped out as the
    /// model says when `dropout` is set.
    fn weights<C: BurnBackend<Device = B::Device>>(
        &self,
        params: &[FloatTensor<C>],
        dropout: bool,
    ) -> Vec<FloatTensor<C>> {
        // The rows each derived weight projects, per dropout mask.
        let mut rows: Vec<(usize, FloatTensor<C>)> = Vec::new();
        let mut out = Vec::with_capacity(self.sources.len());
        for s in &self.sources {
            let (input, norm, proj, bias, p, mask) = match *s {
                Source::Param(i) => {
                    out.push(params[i].clone());
                    continue;
                }
                Source::Derived { input, norm, proj, bias, dropout, mask } => {
                    (input, norm, proj, bias, dropout, mask)
                }
            };
            let x = match rows.iter().find(|(m, _)| *m == mask) {
                Some((_, x)) => x.clone(),
                None => {
                    let mut x = params[input].clone();
                    if let Some((gamma, beta, eps)) = norm {
                        let beta = beta.map(|b| params[b].clone());
                        x = C::layer_norm(x, params[gamma].clone(), beta, f64::from(eps));
                    }
                    if dropout && p > 0.0 {
                        x = switchyard_burn::generic::dropout::<C>(x, p, &self.device);
                    }
                    rows.push((mask, x.clone()));
                    x
                }
            };
            let mut y = C::float_matmul(x, C::float_transpose(params[proj].clone()));
            if let Some(b) = bias {
                let n = self.info[b].shape.iter().product();
                y = C::float_add(y, C::float_reshape(params[b].clone(), Shape::from(vec![1, n])));
            }
            out.push(y);
        }
        out
    }
}

/// Lowers `graph` for exactly `batch`'s shape over `params` and runs it.
fn run<B: BurnBackend>(
    burn: &Burn<B, Generic>,
    graph: &Graph,
    params: Vec<FloatTensor<B>>,
    batch: &Batch<'_>,
    how: &Forward<B>,
) -> Result<Vec<Option<FloatTensor<B>>>> {
    let bucket = batch.sizes();
    batch.check(&graph.limits())?;
    let plan = burn.lower(&BurnWeights::from_tensors(params), graph, bucket)?;
    let mut state = burn.state(&plan)?;
    Ok(burn.forward(&plan, &mut state, batch, how)?)
}
