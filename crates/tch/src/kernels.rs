//! The one op where LibTorch needs more than the generic lowering, and one run at a time on
//! the CPU.

use std::sync::{Mutex, MutexGuard, PoisonError};

use burn_tch::LibTorch;
use switchyard_burn::generic::{MaskMeaning, attention_masked};
use switchyard_burn::{Bound, Inputs, Kernels, Outcome, RunCx};
use switchyard_core::{Op, Reach};

/// burn-tch 0.22.1 hands Burn's attention mask (`true` excludes a key) to PyTorch's
/// `scaled_dot_product_attention` unconverted, where `true` includes it: sliding-window
/// attention would attend to exactly the wrong keys. These kernels build the mask the way
/// PyTorch reads it; every other op runs the generic lowering. (With a position bias burn-tch
/// runs Burn's own attention, which reads the mask as Burn documents it: the generic path's.)
///
/// On the CPU ([`TchKernels::cpu`]) uploads, lowerings and runs of every `tch:cpu` model in the
/// process take turns ([`Kernels::exclusive`]). With runs overlapping, LibTorch 2.9's results
/// were at times off by up to 1.2e-4 of the value, against under 1e-6 when runs did not
/// overlap (docs/backends.md, *tch*; the cause inside LibTorch is not known). Each LibTorch op
/// already spreads over every core, so overlapping runs gained little.
#[derive(Clone, Copy, Debug)]
pub struct TchKernels {
    /// Whether calls take turns: on the CPU.
    turns: bool,
}

/// The turns `tch:cpu` models take, process-wide.
static CPU_TURNS: Mutex<()> = Mutex::new(());

impl TchKernels {
    /// The kernels for `tch:cpu`: calls take turns.
    pub fn cpu() -> TchKernels {
        TchKernels { turns: true }
    }

    /// The kernels for `tch:cuda:N`: calls may overlap.
    pub fn cuda() -> TchKernels {
        TchKernels { turns: false }
    }
}

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
                    kv_heads,
                    head_dim,
                    scale,
                    window,
                    causal,
                    position_bias: None,
                    ..
                },
                [Some(q), Some(k), Some(v)],
            ) if !Reach::of(window, causal).is_whole() => {
                Outcome::Done(attention_masked::<LibTorch>(
                    q,
                    k,
                    v,
                    heads,
                    kv_heads,
                    head_dim,
                    scale,
                    Reach::of(window, causal),
                    None,
                    MaskMeaning::TrueIncludes,
                    cx,
                ))
            }
            (_, ins) => Outcome::Declined(ins),
        }
    }

    fn exclusive(&self) -> Option<MutexGuard<'static, ()>> {
        // A run that panicked left LibTorch as every run leaves it: the turn passes on.
        self.turns.then(|| CPU_TURNS.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
