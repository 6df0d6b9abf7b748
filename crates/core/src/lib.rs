//! switchyard-core: the vocabulary every Switchyard crate shares.
//!
//! - [`Graph`]: a model's forward pass as ops over 2-D values whose rows are tokens, sequences or
//!   markers, never a fixed batch size;
//! - [`Bucket`] and [`Buckets`]: the padded shapes plans are built for, per stage;
//! - [`Batch`]: ragged sequences end to end, validated once by [`Batch::check`];
//! - [`Outputs`]: the named matrices a run produces;
//! - [`Backend`]: the trait every device implements, and [`Executor`], generic over it;
//! - [`layout`]: one arena per bucket, shared by values whose lifetimes do not overlap;
//! - [`reference`](mod@reference): an f64 interpreter, the oracle for every other backend;
//! - `testkit` (feature `testkit`): random weights and small encoders for the tests of every
//!   crate.

mod backend;
mod batch;
mod bucket;
mod caps;
mod dtype;
mod error;
mod executor;
pub mod graph;
pub mod layout;
mod outputs;
pub mod reference;
mod rope;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use backend::Backend;
pub use batch::{Batch, BatchBuf};
pub use bucket::{Bucket, Buckets, DEFAULT_BUCKETS, DEFAULT_STAGE, MAX_BUCKET_ROWS};
pub use caps::{Caps, DeviceKind};
pub use dtype::{DType, DTypeChoice, HostTensor};
pub use error::{Error, Result};
pub use executor::{Executor, LaneId, Memory, Scratch};
pub use graph::{
    Act, Disentangled, Dropout, Gate, Graph, GraphBuilder, Limits, Op, Output, PoolMode,
    PositionBias, Reach, RelativeBias, Rows, Shape, Val, W, WeightSpec,
};
pub use layout::Layout;
pub use outputs::{Mat, Outputs};
pub use reference::Reference;
pub use rope::{rope_angle, rope_tables};
