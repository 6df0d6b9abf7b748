//! The scratch memory of a run's kernels: one set per thread of the pool, allocated with the
//! run state for the largest work its plan holds, so a warm run allocates nothing.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::buf::AlignedBuf;

/// One thread's scratch.
#[derive(Default, Debug)]
pub struct Scratch {
    /// A GEMM task's output tile.
    pub(crate) ctile: AlignedBuf,
    /// Attention: one head's keys, transposed.
    pub(crate) keys: AlignedBuf,
    /// Attention: a block of queries' scores.
    pub(crate) scores: AlignedBuf,
    /// Disentangled attention: a task's keys transposed in f32 and a block's products by
    /// distance.
    pub(crate) disentangled: AlignedBuf,
}

/// How much scratch a plan's kernels need at most, per thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScratchSize {
    /// Values of a GEMM output tile.
    pub ctile: usize,
    /// Values of transposed attention keys.
    pub keys: usize,
    /// Values of attention scores.
    pub scores: usize,
    /// Values of disentangled attention's transposed keys and products by distance.
    pub disentangled: usize,
    /// Values of an op's buffer for all its threads: disentangled attention's tables laid out
    /// by distance.
    pub tables: usize,
}

impl ScratchSize {
    /// The larger of two sizes, field by field.
    pub fn max(self, o: ScratchSize) -> ScratchSize {
        ScratchSize {
            ctile: self.ctile.max(o.ctile),
            keys: self.keys.max(o.keys),
            scores: self.scores.max(o.scores),
            disentangled: self.disentangled.max(o.disentangled),
            tables: self.tables.max(o.tables),
        }
    }
}

/// Scratch for every thread of a pool, each thread using the slot of its index in the pool, and
/// one buffer an op lays out for all its threads to read.
#[derive(Debug)]
pub struct Scratches {
    slots: Vec<Mutex<Scratch>>,
    op_wide: Mutex<AlignedBuf>,
}

impl Scratches {
    /// Scratch of `size` for `threads` threads.
    pub fn new(threads: usize, size: ScratchSize) -> Scratches {
        let slot = || {
            Mutex::new(Scratch {
                ctile: AlignedBuf::zeros(size.ctile),
                keys: AlignedBuf::zeros(size.keys),
                scores: AlignedBuf::zeros(size.scores),
                disentangled: AlignedBuf::zeros(size.disentangled),
            })
        };
        Scratches {
            slots: std::iter::repeat_with(slot).take(threads.max(1)).collect(),
            op_wide: Mutex::new(AlignedBuf::zeros(size.tables)),
        }
    }

    /// Scratch for the threads of the current rayon pool, grown by the kernels as they need.
    pub fn for_current_pool() -> Scratches {
        Scratches::new(rayon::current_num_threads(), ScratchSize::default())
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let per =
            |s: &Scratch| s.ctile.len() + s.keys.len() + s.scores.len() + s.disentangled.len();
        let slots: usize =
            self.slots.iter().map(|m| per(&m.lock().unwrap_or_else(PoisonError::into_inner))).sum();
        (slots + self.op_wide().len()) * size_of::<f32>()
    }

    /// The buffer an op lays out for all its threads, held until the guard drops.
    pub(crate) fn op_wide(&self) -> MutexGuard<'_, AlignedBuf> {
        self.op_wide.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` with the scratch of the calling thread's slot (its index in its rayon pool):
    /// never contended while each thread of the pool works on one task at a time.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Scratch) -> R) -> R {
        let i = rayon::current_thread_index().unwrap_or(0) % self.slots.len();
        f(&mut self.slots[i].lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A pointer that crosses into the tasks of a parallel loop; each use says why its accesses
/// do not race.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendPtr(pub(crate) *mut f32);

impl SendPtr {
    /// The address. (A method, so that a closure using it captures the whole `SendPtr`, which
    /// crosses threads, not the raw pointer inside, which does not.)
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: a `SendPtr` is only an address; every dereference is an `unsafe` block whose caller
// guarantees that the tasks touch disjoint memory, or only read.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}
