//! What ops see during a run: the graph, the batch, and index tensors built on first use.

use std::any::Any;
use std::cell::{OnceCell, RefCell};
use std::sync::{Arc, Mutex, PoisonError};

use burn_backend::Backend as BurnBackend;
use burn_backend::tensor::IntTensor;
use switchyard_core::{Batch, Graph, Val};

use crate::convert::ints;

/// What a run's ops need to know: the graph, and the batch on the host and on the device.
///
/// Index tensors are uploaded lazily, once per run, and only if some op reads them.
pub struct RunCx<'a, B: BurnBackend> {
    /// The graph being run.
    pub graph: &'a Graph,
    /// The checked batch.
    pub batch: &'a Batch<'a>,
    /// The device the plan runs on.
    pub device: &'a B::Device,
    ids: OnceCell<IntTensor<B>>,
    types: OnceCell<IntTensor<B>>,
    positions: OnceCell<IntTensor<B>>,
    segments: OnceCell<IntTensor<B>>,
    firsts: OnceCell<IntTensor<B>>,
    lasts: OnceCell<IntTensor<B>>,
    markers: OnceCell<IntTensor<B>>,
    fed: Vec<Val>,
    dropout: bool,
    memos: RefCell<Vec<(&'static str, Box<dyn Any + Send>)>>,
}

impl<'a, B: BurnBackend> RunCx<'a, B> {
    /// The context for running `graph` on `batch` on `device`.
    pub fn new(graph: &'a Graph, batch: &'a Batch<'a>, device: &'a B::Device) -> Self {
        RunCx {
            graph,
            batch,
            device,
            ids: OnceCell::new(),
            types: OnceCell::new(),
            positions: OnceCell::new(),
            segments: OnceCell::new(),
            firsts: OnceCell::new(),
            lasts: OnceCell::new(),
            markers: OnceCell::new(),
            fed: Vec::new(),
            dropout: false,
            memos: RefCell::new(Vec::new()),
        }
    }

    /// This context for a forward pass ([`crate::Forward`]) that is given the values `fed`
    /// rather than computing them, and applies the graph's dropout where `dropout`.
    pub fn for_forward(mut self, fed: Vec<Val>, dropout: bool) -> Self {
        self.fed = fed;
        self.dropout = dropout;
        self
    }

    /// Whether the run drops some of `v`'s values (training's dropout): then the op that writes
    /// `v` runs Burn's generic way, and a kernel must not leave work on its inputs to it.
    pub fn drops(&self, v: Val) -> bool {
        self.dropout && self.graph.dropout_at(v) > 0.0
    }

    /// Whether the run is given `v` rather than computing it: a kernel must not leave work on
    /// `v` to the op that reads it, which would get the given value.
    pub fn is_fed(&self, v: Val) -> bool {
        self.fed.contains(&v)
    }

    /// Whether the run is given some values or applies dropout.
    pub(crate) fn feeds_or_drops(&self) -> bool {
        !self.fed.is_empty() || self.dropout
    }

    /// What `make` gives, made once per run under `key` and cloned after: for a backend's
    /// kernels, what they would otherwise build again for every op of the run (tables of the
    /// batch on the device). A value of another type under the same key is made anew.
    pub fn memo<T: Clone + Send + 'static>(
        &self,
        key: &'static str,
        make: impl FnOnce() -> T,
    ) -> T {
        if let Some(v) = self.memoed(key) {
            return v;
        }
        let v = make();
        let mut memos = self.memos.borrow_mut();
        memos.retain(|(k, _)| *k != key);
        memos.push((key, Box::new(v.clone())));
        v
    }

    /// [`RunCx::memo`] for each `n` under one `key`: what `make` gives, made once per run for
    /// each `n` (a table's offset, say) and cloned after.
    pub fn memo_for<T: Clone + Send + 'static>(
        &self,
        key: &'static str,
        n: usize,
        make: impl FnOnce() -> T,
    ) -> T {
        let made = self.memo(key, Arc::<Mutex<Vec<(usize, T)>>>::default);
        let mut made = made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, v)) = made.iter().find(|(m, _)| *m == n) {
            return v.clone();
        }
        let v = make();
        made.push((n, v.clone()));
        v
    }

    /// The value made under `key` by [`RunCx::memo`] so far, if one of type `T` was.
    pub fn memoed<T: Clone + Send + 'static>(&self, key: &'static str) -> Option<T> {
        let memos = self.memos.borrow();
        let (_, v) = memos.iter().find(|(k, _)| *k == key)?;
        let v: &(dyn Any + Send) = v.as_ref();
        v.downcast_ref::<T>().cloned()
    }

    /// Whether the run put the batch's token ids or types on the device as index tensors
    /// ([`RunCx::ids`], [`RunCx::types`]).
    pub fn uploaded_ids_or_types(&self) -> bool {
        self.ids.get().is_some() || self.types.get().is_some()
    }

    fn cached(
        &self,
        cell: &OnceCell<IntTensor<B>>,
        make: impl FnOnce() -> Vec<i64>,
    ) -> IntTensor<B> {
        cell.get_or_init(|| ints::<B>(make(), self.device)).clone()
    }

    /// Token ids, `[tokens]`.
    pub fn ids(&self) -> IntTensor<B> {
        self.cached(&self.ids, || self.batch.ids.iter().map(|&i| i64::from(i)).collect())
    }

    /// Token types, `[tokens]`.
    pub fn types(&self) -> IntTensor<B> {
        self.cached(&self.types, || self.batch.types.iter().map(|&i| i64::from(i)).collect())
    }

    /// Each token's position within its sequence, `[tokens]`.
    pub fn positions(&self) -> IntTensor<B> {
        self.cached(&self.positions, || self.host_positions(0))
    }

    /// Each token's position within its sequence plus `offset`, `[tokens]`: made once a run for
    /// each offset.
    pub fn positions_from(&self, offset: usize) -> IntTensor<B> {
        if offset == 0 {
            return self.positions();
        }
        self.memo_for("burn: positions from an offset", offset, || {
            ints::<B>(self.host_positions(offset), self.device)
        })
    }

    /// Each token's position within its sequence plus `offset`, on the host.
    pub fn host_positions(&self, offset: usize) -> Vec<i64> {
        let b = self.batch;
        (0..b.seqs())
            .flat_map(|s| b.seq(s).map(move |t| (t - b.cu[s] as usize + offset) as i64))
            .collect()
    }

    /// Each token's sequence index, `[tokens]`.
    pub fn segments(&self) -> IntTensor<B> {
        let b = self.batch;
        self.cached(&self.segments, || {
            (0..b.seqs()).flat_map(|s| b.seq(s).map(move |_| s as i64)).collect()
        })
    }

    /// Each sequence's first token row, `[seqs]`.
    pub fn firsts(&self) -> IntTensor<B> {
        let b = self.batch;
        self.cached(&self.firsts, || (0..b.seqs()).map(|s| i64::from(b.cu[s])).collect())
    }

    /// Each sequence's last token row, `[seqs]`.
    pub fn lasts(&self) -> IntTensor<B> {
        let b = self.batch;
        self.cached(&self.lasts, || (0..b.seqs()).map(|s| i64::from(b.cu[s + 1]) - 1).collect())
    }

    /// Each marker's token row, `[markers]`.
    pub fn markers(&self) -> IntTensor<B> {
        let b = self.batch;
        self.cached(&self.markers, || {
            (0..b.seqs())
                .flat_map(|s| {
                    b.markers[b.seq_markers(s)].iter().map(move |&p| i64::from(b.cu[s] + p))
                })
                .collect()
        })
    }
}
