//! AdamW, its learning-rate schedule and gradient clipping, as PyTorch and transformers define
//! them (`torch.optim.AdamW`, `get_linear_schedule_with_warmup`, `clip_grad_norm_`).

use burn_backend::Backend as BurnBackend;
use burn_backend::tensor::FloatTensor;
use serde::{Deserialize, Serialize};

use crate::loss::scalar;
use crate::{Error, Result};

/// AdamW's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamW {
    /// The coefficients of the running averages of the gradient and of its square.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay, applied to the parameters [`decays`] selects.
    pub weight_decay: f64,
}

impl Default for AdamW {
    /// transformers' defaults, with sentence-transformers' weight decay of 0.01.
    fn default() -> Self {
        AdamW { betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.01 }
    }
}

/// Which parameters weight decay applies to: all but biases and normalisation weights (the
/// one-dimensional ones), as transformers' Trainer decides.
pub fn decays(shapes: &[Vec<usize>]) -> Vec<bool> {
    shapes.iter().map(|s| s.len() > 1).collect()
}

/// AdamW's state: the step count and the two running averages of each parameter.
pub struct AdamState<B: BurnBackend> {
    /// Steps taken.
    pub step: u64,
    /// Per parameter: the running average of its gradient (`None` before its first gradient).
    pub m: Vec<Option<FloatTensor<B>>>,
    /// Per parameter: the running average of its gradient's square.
    pub v: Vec<Option<FloatTensor<B>>>,
}

impl<B: BurnBackend> AdamState<B> {
    /// A fresh state for `n` parameters.
    pub fn new(n: usize) -> Self {
        AdamState { step: 0, m: vec![None; n], v: vec![None; n] }
    }
}

impl AdamW {
    /// One step at learning rate `lr`: each parameter with a gradient is decayed (where `decay`
    /// says) and moved; one without is left as it is, as PyTorch skips it.
    pub fn step<B: BurnBackend>(
        &self,
        state: &mut AdamState<B>,
        params: &mut [FloatTensor<B>],
        grads: Vec<Option<FloatTensor<B>>>,
        decay: &[bool],
        lr: f64,
    ) -> Result<()> {
        if grads.len() != params.len()
            || decay.len() != params.len()
            || state.m.len() != params.len()
        {
            return Err(Error::Config(format!(
                "AdamW over {} parameters got {} gradients and {} decay flags",
                params.len(),
                grads.len(),
                decay.len()
            )));
        }
        state.step += 1;
        let t = state.step as i32;
        let (b1, b2) = self.betas;
        let step_size = lr / (1.0 - b1.powi(t));
        let bias2_sqrt = (1.0 - b2.powi(t)).sqrt();
        for (i, g) in grads.into_iter().enumerate() {
            let Some(g) = g else { continue };
            let mut p = params[i].clone();
            if decay[i] && self.weight_decay != 0.0 {
                p = B::float_mul_scalar(p, (1.0 - lr * self.weight_decay).into());
            }
            let m = match state.m[i].take() {
                Some(m) => B::float_add(
                    B::float_mul_scalar(m, b1.into()),
                    B::float_mul_scalar(g.clone(), (1.0 - b1).into()),
                ),
                None => B::float_mul_scalar(g.clone(), (1.0 - b1).into()),
            };
            let g2 = B::float_mul_scalar(B::float_mul(g.clone(), g), (1.0 - b2).into());
            let v = match state.v[i].take() {
                Some(v) => B::float_add(B::float_mul_scalar(v, b2.into()), g2),
                None => g2,
            };
            let denom = B::float_add_scalar(
                B::float_div_scalar(B::float_sqrt(v.clone()), bias2_sqrt.into()),
                self.eps.into(),
            );
            let update = B::float_mul_scalar(B::float_div(m.clone(), denom), step_size.into());
            params[i] = B::float_sub(p, update);
            state.m[i] = Some(m);
            state.v[i] = Some(v);
        }
        Ok(())
    }
}

/// A linear warm-up from 0 to the base rate over `warmup` steps, then a linear decay to 0 at
/// step `total` (transformers' `get_linear_schedule_with_warmup`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The peak learning rate.
    pub base: f64,
    /// Steps of warm-up.
    pub warmup: u64,
    /// Steps in all.
    pub total: u64,
}

impl Schedule {
    /// The learning rate of step `step` (counted from 0): 0 at the very first step when there
    /// is a warm-up, as in transformers.
    pub fn lr(&self, step: u64) -> f64 {
        let factor = if step < self.warmup {
            step as f64 / self.warmup.max(1) as f64
        } else {
            (self.total.saturating_sub(step) as f64
                / self.total.saturating_sub(self.warmup).max(1) as f64)
                .max(0.0)
        };
        self.base * factor
    }
}

/// Scales `grads` so that their joint L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`, whose coefficient is `max_norm / (norm + 1e-6)`); returns the norm before
/// clipping.
pub fn clip_grad_norm<B: BurnBackend>(
    grads: &mut [Option<FloatTensor<B>>],
    max_norm: f64,
) -> Result<f64> {
    let mut total: Option<FloatTensor<B>> = None;
    for g in grads.iter().flatten() {
        let sq = B::float_sum(B::float_mul(g.clone(), g.clone()));
        total = Some(match total {
            Some(t) => B::float_add(t, sq),
            None => sq,
        });
    }
    let Some(total) = total else { return Ok(0.0) };
    let norm = f64::from(scalar::<B>(total)?).sqrt();
    if !norm.is_finite() {
        return Err(Error::Diverged(format!("the gradients' norm is {norm}")));
    }
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        for g in grads.iter_mut() {
            if let Some(t) = g.take() {
                *g = Some(B::float_mul_scalar(t, coef.into()));
            }
        }
    }
    Ok(norm)
}
