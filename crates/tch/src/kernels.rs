//! The one op where LibTorch needs more than the generic lowering.

use burn_tch::LibTorch;
use switchyard_burn::generic::{MaskMeaning, attention_masked};
use switchyard_burn::{Bound, Inputs, Kernels, Outcome, RunCx};
use switchyard_core::Op;

/// burn-tch 0.22.1 hands Burn's attention mask (`true` excludes a key) to PyTorch's
/// `scaled_dot_product_attention` unconverted, where `true` includes it: sliding-window
/// attention would attend to exactly the wrong keys. These kernels build the mask the way
/// PyTorch reads it; every other op runs the generic lowering. (With a position bias burn-tch
/// runs Burn's own attention, which reads the mask as Burn documents it: the generic path's.)
#[derive(Clone, Copy, Debug, Default)]
pub struct TchKernels;

impl Kernels<LibTorch> for TchKernels {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<LibTorch>,
        _w: &Bound<LibTorch>,
        cx: &RunCx<'_, LibTorch>,
    ) -> Outcome<LibTorch> {
        match (op, ins) {
            (
                &Op::Attention {
                    heads,
                    head_dim,
                    scale,
                    window: Some(window),
                    position_bias: None,
                    ..
                },
                [Some(q), Some(k), Some(v)],
            ) => Outcome::Done(attention_masked::<LibTorch>(
                q,
                k,
                v,
                heads,
                head_dim,
                scale,
                Some(window),
                None,
                MaskMeaning::TrueIncludes,
                cx,
            )),
            (_, ins) => Outcome::Declined(ins),
        }
    }
}
