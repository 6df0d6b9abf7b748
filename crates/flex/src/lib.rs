//! switchyard-flex: the default backend, on the host CPU.
//!
//! In f32 it runs its own engine ([`native`]): the GEMM with weights packed once at upload and
//! the bias, activation and residual fused into it, ragged attention over every sequence and
//! head of a batch in one parallel loop, and the row ops, all writing into one arena per run,
//! multiversioned for AVX-512 or AVX2 (chosen at run time), on one thread pool of
//! `SWITCHYARD_THREADS` threads (default: every core). A warm run allocates nothing.
//!
//! In int8 the same engine runs its linear layers on int8 weights and activations, summing in
//! i32 (with AVX-512 VNNI, AVX-VNNI, plain AVX2 or SSSE3 on x86-64, the int8 matrix multiply or
//! the dot product on aarch64, whichever the CPU has): weights a quarter the
//! size, the GEMM faster, results within a few percent of f32 (see the conformance tolerance).
//!
//! In bf16 the same engine runs its linear layers on bf16 weights and activations, summing their
//! exact products in f32 (on AMX's tile registers where the CPU and OS have them; else with
//! AVX-512 BF16 where the CPU has it, twice the f32 GEMM's arithmetic on AMD; with AVX2,
//! widened to f32 in registers, at f32's speed; elsewhere portable code, slower than f32):
//! weights half the size, every other op in f32, as PyTorch's CPU autocast runs a model in
//! bf16.
//!
//! In f16 ([`Backend::with_dtype`]) it runs the generic Burn lowering on burn-flex, which stores
//! and computes in f16; burn-flex is also what `switchyard remote-serve` hosts as flex
//! ([`burn_flex()`]).

mod buf;
pub mod kernels;
pub mod native;
mod pool;

use std::sync::Arc;

use burn_flex::{Flex, FlexDevice};
use switchyard_burn::{Burn, BurnPlan, BurnState, BurnWeights, Generic};
use switchyard_core::{Backend, Batch, Bucket, Caps, DType, Graph, HostTensor, Outputs, Result};

use crate::kernels::attention::Products;
use crate::kernels::{Isa, Isa8, Isa16};
use crate::native::{NativePlan, NativeState, NativeWeights, Precision};
pub use crate::pool::{THREADS_ENV, threads_from_env};

/// The generic Burn lowering on burn-flex: flex's engine in f16, and what remote serving
/// hosts.
pub type BurnFlex = Burn<Flex, Generic>;

/// The most tokens a batch holds where flex's bf16 or int8 linear layers run on AMX (its
/// [`Caps::batch_tokens`]). There the GEMMs are fast enough that reading the activations between
/// ops takes much of a pass, and a batch of 1024 MiniLM tokens (1.5 MB a value) stays in an Intel
/// Xeon's 2 MB L2: on the equal-length corpus, passes 15% (bf16) and 20% (int8) shorter than in
/// batches of 16384, f32 and AVX-512 unchanged or faster (docs/benchmarks.md). Elsewhere (AMD Zen
/// 4, AVX-512 alone) batches of 1024 ran 3% to 9% slower, so only AMX asks for them.
pub const AMX_BATCH_TOKENS: usize = 1024;

/// The flex backend: its own engine in f32, bf16 and int8, burn-flex's in f16, on its thread
/// pool.
#[derive(Debug)]
pub struct FlexBackend {
    caps: Caps,
    engine: Engine,
    pool: Arc<rayon::ThreadPool>,
    isa: Isa,
    isa8: Isa8,
    isa16: Isa16,
}

/// Which engine runs: flex's own (f32, bf16 or int8 linear layers), or burn-flex's (f16).
#[derive(Debug)]
enum Engine {
    Native(Linears),
    Half(BurnFlex),
}

/// What the native engine's linear layers compute in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Linears {
    F32,
    Bf16,
    Int8,
}

/// Weights of the flex backend, in the form of the engine that uploaded them.
#[derive(Debug)]
pub enum FlexWeights {
    /// The native engine's.
    Native(Arc<NativeWeights>),
    /// burn-flex's.
    Half(BurnWeights<Flex>),
}

/// A plan of the flex backend.
#[derive(Debug)]
pub enum FlexPlan {
    /// The native engine's.
    Native(NativePlan),
    /// burn-flex's.
    Half(BurnPlan<Flex>),
}

/// A run state of the flex backend.
#[derive(Debug)]
pub enum FlexState {
    /// The native engine's.
    Native(NativeState),
    /// burn-flex's.
    Half(BurnState<Flex>),
}

/// How many flex devices this machine has: one, the host CPU.
pub fn devices() -> usize {
    1
}

/// The flex backend as the table of backends opens it: on `SWITCHYARD_THREADS` threads (default:
/// every core); an error if that variable is not a positive number.
pub fn open() -> Result<FlexBackend> {
    with_threads(threads_from_env()?)
}

/// The flex backend on every core (ignoring `SWITCHYARD_THREADS`, which [`open`] reads).
///
/// # Panics
/// If the system cannot start a thread per core.
pub fn flex() -> FlexBackend {
    with_threads(None).expect("the system starts a thread per core")
}

/// The flex backend on `threads` threads (`None`: every core); an error if the system cannot
/// start them. Backends of the same thread count share one pool.
pub fn with_threads(threads: Option<usize>) -> Result<FlexBackend> {
    let pool = pool::shared(threads)?;
    let isa = Isa::detect();
    let mut dtypes = switchyard_burn::float_dtypes::<Flex>(&FlexDevice);
    dtypes.push(DType::I8);
    let (isa8, isa16) = (Isa8::detect(), Isa16::detect());
    let caps = native::caps(pool.current_num_threads(), isa, isa8, isa16).with_dtypes(dtypes);
    let engine = Engine::Native(Linears::F32);
    Ok(FlexBackend { caps, engine, pool, isa, isa8, isa16 })
}

/// burn-flex, the Burn backend on the CPU: what `switchyard remote-serve` hosts for flex.
pub fn burn_flex() -> BurnFlex {
    let caps = Caps::new("flex", "host CPU, burn-flex", switchyard_core::DeviceKind::Cpu)
        .with_threads(rayon::current_num_threads())
        .with_dtypes(switchyard_burn::float_dtypes::<Flex>(&FlexDevice));
    Burn::new(FlexDevice, Generic, caps)
}

/// What the flex backend can do on this machine (on every core, in f32).
pub fn caps() -> Caps {
    flex().caps()
}

impl FlexBackend {
    /// The instruction set its kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// This backend using `isa`'s kernels instead (one this CPU has: see
    /// [`Isa::available`]), for tests and benchmarks.
    pub fn with_isa(self, isa: Isa) -> Result<FlexBackend> {
        if !Isa::available().contains(&isa) {
            return Err(switchyard_core::Error::Unsupported(format!(
                "this CPU cannot run flex's {isa:?} kernels"
            )));
        }
        let (isa8, isa16) = (self.isa8, self.isa16);
        Ok(self.on(isa, isa8, isa16))
    }

    /// The instruction set of its int8 GEMM.
    pub fn isa8(&self) -> Isa8 {
        self.isa8
    }

    /// This backend using `isa8`'s int8 GEMM instead (one this CPU has: see
    /// [`Isa8::available`]), for tests and benchmarks.
    pub fn with_isa8(self, isa8: Isa8) -> Result<FlexBackend> {
        if !Isa8::available().contains(&isa8) {
            return Err(switchyard_core::Error::Unsupported(format!(
                "this CPU cannot run flex's {isa8:?} int8 kernels"
            )));
        }
        let (isa, isa16) = (self.isa, self.isa16);
        Ok(self.on(isa, isa8, isa16))
    }

    /// The instruction set of its bf16 GEMM.
    pub fn isa16(&self) -> Isa16 {
        self.isa16
    }

    /// This backend using `isa16`'s bf16 GEMM instead (one this CPU has: see
    /// [`Isa16::available`]), for tests and benchmarks.
    pub fn with_isa16(self, isa16: Isa16) -> Result<FlexBackend> {
        if !Isa16::available().contains(&isa16) {
            return Err(switchyard_core::Error::Unsupported(format!(
                "this CPU cannot run flex's {isa16:?} bf16 kernels"
            )));
        }
        let (isa, isa8) = (self.isa, self.isa8);
        Ok(self.on(isa, isa8, isa16))
    }

    /// This backend as a CPU whose best int8 GEMM is `isa8`'s runs (one this CPU has): with the
    /// f32 and bf16 kernels such a CPU has too (AVX2's beside AVX-VNNI or plain AVX2; portable
    /// code beside SSSE3, NEON's dot product or portable int8; portable f32 and this CPU's bf16
    /// beside NEON's int8 matrix multiply; this CPU's own beside AVX-512 VNNI), for tests and
    /// benchmarks.
    pub fn as_cpu_of(self, isa8: Isa8) -> Result<FlexBackend> {
        let (isa, isa16) = match isa8 {
            Isa8::AmxInt8 => (self.isa, self.isa16),
            // Such a CPU (an AMD Zen 4, an Intel Ice Lake) has no AMX for bf16 either.
            Isa8::Avx512Vnni if self.isa16 == Isa16::AmxBf16 => (self.isa, Isa16::Avx512Bf16),
            Isa8::Avx512Vnni => (self.isa, self.isa16),
            Isa8::AvxVnni | Isa8::Avx2 => (Isa::Avx2, Isa16::Avx2),
            // Every CPU with the int8 matrix multiply (Armv8.6) has the bf16 extension too.
            Isa8::NeonI8mm => (Isa::Portable, self.isa16),
            Isa8::Ssse3 | Isa8::NeonDot | Isa8::Portable => (Isa::Portable, Isa16::Portable),
        };
        self.with_isa(isa)?.with_isa8(isa8)?.with_isa16(isa16)
    }

    /// This backend with these instruction sets, its caps naming them.
    fn on(self, isa: Isa, isa8: Isa8, isa16: Isa16) -> FlexBackend {
        let caps = Caps { device: native::device(isa, isa8, isa16), ..self.caps };
        FlexBackend { caps, isa, isa8, isa16, ..self }.hinted()
    }

    /// This backend, its caps asking for batches of at most [`AMX_BATCH_TOKENS`] where its
    /// linear layers run on AMX, and for the largest batches elsewhere.
    fn hinted(self) -> FlexBackend {
        let amx = match self.engine {
            Engine::Native(Linears::Bf16) => self.isa16 == Isa16::AmxBf16,
            Engine::Native(Linears::Int8) => self.isa8 == Isa8::AmxInt8,
            _ => false,
        };
        let caps = Caps { batch_tokens: amx.then_some(AMX_BATCH_TOKENS), ..self.caps };
        FlexBackend { caps, ..self }
    }

    fn precision(&self, linears: Linears) -> Precision {
        match linears {
            Linears::F32 => Precision::F32,
            Linears::Bf16 => Precision::Bf16(self.isa16),
            Linears::Int8 => Precision::Int8(self.isa8),
        }
    }

    /// What attention multiplies in: where the bf16 GEMM runs on AMX or AVX-512 BF16 (either
    /// detected on this CPU with AVX-512 BF16), bf16 products on the same, in bf16 and in int8;
    /// f32 otherwise.
    fn products(&self, linears: Linears) -> Products {
        let bf16 = match self.isa16 {
            Isa16::AmxBf16 => Products::AmxBf16,
            Isa16::Avx512Bf16 => Products::Bf16,
            _ => return Products::F32,
        };
        match linears {
            Linears::Bf16 | Linears::Int8 => bf16,
            Linears::F32 => Products::F32,
        }
    }
}

/// Training (and anything else that needs a Burn backend) runs on burn-flex, on this backend's
/// thread pool.
impl switchyard_burn::OnBurn for FlexBackend {
    fn on_burn<V: switchyard_burn::BurnVisitor>(&self, work: V) -> V::Out {
        let caps = Caps { dtype: DType::F32, ..self.caps.clone() };
        self.pool.install(|| work.visit::<Flex>(FlexDevice, caps))
    }
}

/// The error for data of one engine handed to the other.
fn crossed(what: &str) -> switchyard_core::Error {
    switchyard_core::Error::Device(format!(
        "{what} of flex in another dtype; upload again after choosing the dtype"
    ))
}

impl Backend for FlexBackend {
    type Weights = FlexWeights;
    type Plan = FlexPlan;
    type State = FlexState;

    fn caps(&self) -> Caps {
        self.caps.clone()
    }

    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<FlexWeights> {
        match &self.engine {
            Engine::Native(linears) => {
                let _span = tracing::info_span!("upload", backend = "flex").entered();
                let forms = (self.precision(*linears), self.products(*linears));
                let w = self.pool.install(|| native::upload(self.isa, forms, tensors, graph))?;
                Ok(FlexWeights::Native(Arc::new(w)))
            }
            Engine::Half(b) => Ok(FlexWeights::Half(b.upload(tensors, graph)?)),
        }
    }

    fn lower(&self, w: &FlexWeights, graph: &Graph, bucket: Bucket) -> Result<FlexPlan> {
        match (&self.engine, w) {
            (Engine::Native(_), FlexWeights::Native(w)) => {
                let _span = tracing::debug_span!("lower", backend = "flex", %bucket).entered();
                Ok(FlexPlan::Native(native::lower(w, graph, bucket)?))
            }
            (Engine::Half(b), FlexWeights::Half(w)) => {
                Ok(FlexPlan::Half(b.lower(w, graph, bucket)?))
            }
            _ => Err(crossed("weights")),
        }
    }

    fn state(&self, plan: &FlexPlan) -> Result<FlexState> {
        match (&self.engine, plan) {
            (Engine::Native(_), FlexPlan::Native(p)) => {
                Ok(FlexState::Native(native::state(self.isa, p, self.pool.current_num_threads())?))
            }
            (Engine::Half(b), FlexPlan::Half(p)) => Ok(FlexState::Half(b.state(p)?)),
            _ => Err(crossed("a plan")),
        }
    }

    fn run(
        &self,
        plan: &FlexPlan,
        state: &mut FlexState,
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()> {
        match (&self.engine, plan, state) {
            (Engine::Native(_), FlexPlan::Native(p), FlexState::Native(s)) => {
                let _span = tracing::trace_span!("run", backend = "flex", tokens = batch.tokens())
                    .entered();
                self.pool.install(|| native::run(self.isa, p, s, batch, out))
            }
            (Engine::Half(b), FlexPlan::Half(p), FlexState::Half(s)) => {
                self.pool.install(|| b.run(p, s, batch, out))
            }
            _ => Err(crossed("a plan or run state")),
        }
    }

    /// f32, bf16 and int8 run flex's own engine; f16 runs burn-flex's, which stores and
    /// computes in it.
    fn with_dtype(self, dtype: DType) -> Result<Self> {
        self.caps.check_dtype(dtype)?;
        let engine = match dtype {
            DType::F32 => Engine::Native(Linears::F32),
            DType::Bf16 => Engine::Native(Linears::Bf16),
            DType::I8 => Engine::Native(Linears::Int8),
            DType::F16 => Engine::Half(burn_flex().with_dtype(dtype)?),
        };
        Ok(FlexBackend { caps: Caps { dtype, ..self.caps }, engine, ..self }.hinted())
    }

    fn weight_bytes(&self, w: &FlexWeights) -> usize {
        match (&self.engine, w) {
            (Engine::Native(_), FlexWeights::Native(w)) => w.bytes(),
            (Engine::Half(b), FlexWeights::Half(w)) => b.weight_bytes(w),
            _ => 0,
        }
    }

    fn plan_bytes(&self, p: &FlexPlan) -> usize {
        match (&self.engine, p) {
            (Engine::Native(_), FlexPlan::Native(p)) => p.bytes(),
            (Engine::Half(b), FlexPlan::Half(p)) => b.plan_bytes(p),
            _ => 0,
        }
    }

    fn state_bytes(&self, s: &FlexState) -> usize {
        match s {
            FlexState::Native(s) => s.bytes(),
            FlexState::Half(_) => 0,
        }
    }
}
