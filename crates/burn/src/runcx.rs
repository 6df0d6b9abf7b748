//! What ops see during a run: the graph, the batch, and index tensors built on first use.

use std::any::Any;
use std::cell::{Cell, RefCell};

use burn_backend::Backend as BurnBackend;
use burn_backend::tensor::IntTensor;
use switchyard_core::{Batch, Bucket, Graph, Val};

use crate::convert::ints;

/// Host values of a table of the batch, made from a batch ([`RunCx::table`]).
type Remake = Box<dyn Fn(&Batch<'_>) -> Vec<i64> + Send>;

/// A table of the batch on the device: what its upload made, and how to make its values again
/// from another batch.
struct Table {
    key: &'static str,
    n: usize,
    value: Box<dyn Any + Send>,
    len: usize,
    remake: Remake,
}

/// A table of the run's batch, as [`RunCx::for_each_table`] shows it.
pub struct TableRef<'t> {
    /// The key it was made under.
    pub key: &'static str,
    /// What its upload made (a device tensor or buffer).
    pub value: &'t dyn Any,
    /// How many values it holds.
    pub len: usize,
}

/// What a run's ops need to know: the graph, and the batch on the host and on the device.
///
/// Index tensors are uploaded lazily, once per run, and only if some op reads them. Everything
/// an op takes from the batch's contents (its ids, lengths, markers) is either such a table,
/// which [`RunCx::for_each_table`] can remake for another batch, or read through
/// [`RunCx::batch`], which marks the run as one whose launches depend on the batch itself.
pub struct RunCx<'a, B: BurnBackend> {
    /// The graph being run.
    pub graph: &'a Graph,
    /// The device the plan runs on.
    pub device: &'a B::Device,
    batch: &'a Batch<'a>,
    read: Cell<bool>,
    tables: RefCell<Vec<Table>>,
    fed: Vec<Val>,
    dropout: bool,
    memos: RefCell<Vec<(&'static str, Box<dyn Any + Send>)>>,
}

// Keys of the tables this crate makes.
const IDS: &str = "burn: token ids";
const TYPES: &str = "burn: token types";
const POSITIONS: &str = "burn: positions";
const SEGMENTS: &str = "burn: segments";
const FIRSTS: &str = "burn: first rows";
const LASTS: &str = "burn: last rows";
const MARKERS: &str = "burn: marker rows";

impl<'a, B: BurnBackend> RunCx<'a, B> {
    /// The context for running `graph` on `batch` on `device`.
    pub fn new(graph: &'a Graph, batch: &'a Batch<'a>, device: &'a B::Device) -> Self {
        RunCx {
            graph,
            device,
            batch,
            read: Cell::new(false),
            tables: RefCell::new(Vec::new()),
            fed: Vec::new(),
            dropout: false,
            memos: RefCell::new(Vec::new()),
        }
    }

    /// The checked batch, for an op whose launches depend on its contents (its lengths, ids or
    /// markers) beyond the tables it reads: marks the run as one ([`RunCx::read_batch`]).
    pub fn batch(&self) -> &'a Batch<'a> {
        self.read.set(true);
        self.batch
    }

    /// The batch's sizes (tokens, sequences, markers), which an op may read freely: a batch of
    /// the same sizes has the same.
    pub fn sizes(&self) -> Bucket {
        self.batch.sizes()
    }

    /// Whether some op read the batch's contents outside its tables ([`RunCx::batch`]): then what
    /// the run launched may depend on the batch itself, not only on its sizes and tables.
    pub fn read_batch(&self) -> bool {
        self.read.get()
    }

    /// The batch, for this crate's reads of its sizes and for what a run hands back.
    pub(crate) fn batch_unread(&self) -> &'a Batch<'a> {
        self.batch
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
    /// kernels, what they would otherwise work out again for every op of the run. A value of
    /// another type under the same key is made anew. Tables of the batch go through
    /// [`RunCx::table`].
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

    /// The value made under `key` by [`RunCx::memo`] so far, if one of type `T` was.
    fn memoed<T: Clone + Send + 'static>(&self, key: &'static str) -> Option<T> {
        let memos = self.memos.borrow();
        let (_, v) = memos.iter().find(|(k, _)| *k == key)?;
        let v: &(dyn Any + Send) = v.as_ref();
        v.downcast_ref::<T>().cloned()
    }

    /// A table of the batch on the device, made once per run for each `n` under `key`: the
    /// values `values` gives for the run's batch, put on the device by `upload`. `values` must
    /// depend on nothing but the batch it is given (and what it captured), so that
    /// [`RunCx::for_each_table`] can make the table's values for another batch. A value of
    /// another type under the same key and `n` is made anew.
    pub fn table<T: Clone + Send + 'static>(
        &self,
        key: &'static str,
        n: usize,
        values: impl Fn(&Batch<'_>) -> Vec<i64> + Send + 'static,
        upload: impl FnOnce(Vec<i64>) -> T,
    ) -> T {
        let mine = |t: &Table| t.key == key && t.n == n;
        if let Some(t) = self.tables.borrow().iter().find(|t| mine(t))
            && let Some(v) = t.value.downcast_ref::<T>()
        {
            return v.clone();
        }
        let host = values(self.batch);
        let len = host.len();
        let v = upload(host);
        let mut tables = self.tables.borrow_mut();
        tables.retain(|t| !mine(t));
        let (value, remake) = (Box::new(v.clone()), Box::new(values));
        tables.push(Table { key, n, value, len, remake });
        v
    }

    /// Calls `f` with each table of the batch made so far ([`RunCx::table`]) and its values for
    /// `batch`: what the same table of a run of `batch` would hold.
    pub fn for_each_table(&self, batch: &Batch<'_>, mut f: impl FnMut(TableRef<'_>, Vec<i64>)) {
        for t in self.tables.borrow().iter() {
            let at = TableRef { key: t.key, value: t.value.as_ref(), len: t.len };
            f(at, (t.remake)(batch));
        }
    }

    /// An index table of the batch made by [`RunCx::table`] as a tensor of the backend's ints.
    fn ints(
        &self,
        key: &'static str,
        values: impl Fn(&Batch<'_>) -> Vec<i64> + Send + 'static,
    ) -> IntTensor<B> {
        self.table(key, 0, values, |v| ints::<B>(v, self.device))
    }

    /// Token ids, `[tokens]`.
    pub fn ids(&self) -> IntTensor<B> {
        self.ints(IDS, |b| b.ids.iter().map(|&i| i64::from(i)).collect())
    }

    /// Token types, `[tokens]`.
    pub fn types(&self) -> IntTensor<B> {
        self.ints(TYPES, |b| b.types.iter().map(|&i| i64::from(i)).collect())
    }

    /// Each token's position within its sequence, `[tokens]`.
    pub fn positions(&self) -> IntTensor<B> {
        self.positions_from(0)
    }

    /// Each token's position within its sequence plus `offset`, `[tokens]`: made once a run for
    /// each offset.
    pub fn positions_from(&self, offset: usize) -> IntTensor<B> {
        let values = move |b: &Batch<'_>| positions_in(b, offset);
        self.table(POSITIONS, offset, values, |v| ints::<B>(v, self.device))
    }

    /// Each token's sequence index, `[tokens]`.
    pub fn segments(&self) -> IntTensor<B> {
        self.ints(SEGMENTS, |b| {
            (0..b.seqs()).flat_map(|s| b.seq(s).map(move |_| s as i64)).collect()
        })
    }

    /// Each sequence's first token row, `[seqs]`.
    pub fn firsts(&self) -> IntTensor<B> {
        self.ints(FIRSTS, |b| (0..b.seqs()).map(|s| i64::from(b.cu[s])).collect())
    }

    /// Each sequence's last token row, `[seqs]`.
    pub fn lasts(&self) -> IntTensor<B> {
        self.ints(LASTS, |b| (0..b.seqs()).map(|s| i64::from(b.cu[s + 1]) - 1).collect())
    }

    /// Each marker's token row, `[markers]`.
    pub fn markers(&self) -> IntTensor<B> {
        self.ints(MARKERS, |b| {
            (0..b.seqs())
                .flat_map(|s| {
                    b.markers[b.seq_markers(s)].iter().map(move |&p| i64::from(b.cu[s] + p))
                })
                .collect()
        })
    }
}

/// Each token's position within its sequence of `batch`, plus `offset`.
pub fn positions_in(batch: &Batch<'_>, offset: usize) -> Vec<i64> {
    (0..batch.seqs())
        .flat_map(|s| batch.seq(s).map(move |t| (t - batch.cu[s] as usize + offset) as i64))
        .collect()
}
