//! [`Graded`]: a graph whose weights are parameters, run through the one lowering on a Burn
//! backend wrapped in burn-autodiff, so that its outputs carry what backward needs.

use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend as BurnBackend};
use switchyard_burn::{Burn, BurnWeights, Forward, Generic, floats};
use switchyard_core::{Backend, Batch, Caps, Graph, HostTensor, Val};

use crate::{Ad, Result};

/// A graph and its weights as trainable parameters on the Burn backend `B`.
///
/// The parameters live on `B` itself; each forward pass wraps them as leaves of a new
/// burn-autodiff tape ([`Pass`]), so a step's tape is dropped with its pass and an optimizer
/// updates plain tensors. The backend's own kernels stand down: the generic lowering (Burn's
/// primitive ops, each with its backward) runs every op.
pub struct Graded<B: BurnBackend> {
    graph: Graph,
    params: Vec<FloatTensor<B>>,
    taped: Burn<Ad<B>, Generic>,
    plain: Burn<B, Generic>,
    device: B::Device,
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
    /// `graph` on `device` (which a Switchyard backend of `caps` runs on), its parameters
    /// uploaded from `tensors` (one per graph weight, in its order) as f32.
    pub fn new(
        device: B::Device,
        caps: Caps,
        graph: Graph,
        tensors: &[HostTensor<'_>],
    ) -> Result<Self> {
        let _span =
            tracing::info_span!("upload", backend = %caps.backend, training = true).entered();
        graph.validate()?;
        graph.check_weights(tensors)?;
        let params = tensors
            .iter()
            .map(|t| {
                let mut v = Vec::with_capacity(t.numel());
                t.extend_f32(&mut v);
                floats::<B>(v, t.shape, &device)
            })
            .collect();
        let caps = Caps { dtype: switchyard_core::DType::F32, ..caps };
        Ok(Graded {
            graph,
            params,
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

    /// The parameters, one per graph weight, each in its checkpoint shape.
    pub fn params(&self) -> &[FloatTensor<B>] {
        &self.params
    }

    /// The parameters, for an optimizer to update in place.
    pub fn params_mut(&mut self) -> &mut [FloatTensor<B>] {
        &mut self.params
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
        let outputs = run(&self.taped, &self.graph, leaves.clone(), batch, &how)?;
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
        run(&self.plain, &self.graph, self.params.clone(), batch, &how)
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
