//! Ragged batches: sequences end to end with cumulative offsets, and no padding anywhere.

use crate::{Error, Limits, Result};

/// A ragged batch of sequences, borrowed.
///
/// Sequence `s` owns tokens `cu[s] .. cu[s + 1]` of `ids` and `types`, and markers
/// `mcu[s] .. mcu[s + 1]` of `markers`; a marker is a token position relative to the start of its
/// own sequence. `cu` and `mcu` both have one entry more than there are sequences, start at 0 and
/// end at the totals (the varlen FlashAttention convention).
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    /// Token ids of every sequence, end to end.
    pub ids: &'a [u32],
    /// Token type (segment) ids, one per token.
    pub types: &'a [u32],
    /// Cumulative token starts: `seqs + 1` entries, `0` first, `ids.len()` last.
    pub cu: &'a [u32],
    /// Marker positions, each relative to the start of its sequence.
    pub markers: &'a [u32],
    /// Cumulative marker starts: `seqs + 1` entries, `0` first, `markers.len()` last.
    pub mcu: &'a [u32],
}

impl Batch<'_> {
    /// Total tokens.
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }

    /// Number of sequences.
    pub fn seqs(&self) -> usize {
        self.cu.len().saturating_sub(1)
    }

    /// Total markers.
    pub fn markers(&self) -> usize {
        self.markers.len()
    }

    /// Its tokens, sequences and markers, as a bucket that holds it exactly.
    pub fn sizes(&self) -> crate::Bucket {
        crate::Bucket::new(self.tokens(), self.seqs(), self.markers())
    }

    /// Rows of the given kind this batch has.
    pub fn rows(&self, rows: crate::Rows) -> usize {
        match rows {
            crate::Rows::Tokens => self.tokens(),
            crate::Rows::Seqs => self.seqs(),
            crate::Rows::Markers => self.markers(),
        }
    }

    /// The token range of sequence `s`.
    pub fn seq(&self, s: usize) -> std::ops::Range<usize> {
        self.cu[s] as usize..self.cu[s + 1] as usize
    }

    /// The marker range of sequence `s`.
    pub fn seq_markers(&self, s: usize) -> std::ops::Range<usize> {
        self.mcu[s] as usize..self.mcu[s + 1] as usize
    }

    /// Validates the batch against a graph's limits, naming the first problem found.
    ///
    /// After this succeeds a backend may index without checks: offsets are in range and
    /// non-decreasing, no sequence is empty, ids and types are within the vocabularies, no
    /// sequence is longer than the position table allows, and every marker lies inside its
    /// sequence. Allocates only to build an error.
    pub fn check(&self, limits: &Limits) -> Result<()> {
        let bad = |msg: String| Err(Error::BadBatch(msg));
        if self.cu.is_empty() {
            return bad("`cu` is empty; it needs one entry per sequence plus a final total".into());
        }
        if self.mcu.len() != self.cu.len() {
            return bad(format!(
                "`mcu` has {} entries but `cu` has {}; both need one per sequence plus one",
                self.mcu.len(),
                self.cu.len()
            ));
        }
        if self.types.len() != self.ids.len() {
            return bad(format!(
                "{} token types for {} token ids; give one type per token",
                self.types.len(),
                self.ids.len()
            ));
        }
        for (name, offs, total) in
            [("cu", self.cu, self.ids.len()), ("mcu", self.mcu, self.markers.len())]
        {
            if offs[0] != 0 {
                return bad(format!("`{name}` starts at {}, expected 0", offs[0]));
            }
            let last = offs[offs.len() - 1] as usize;
            if last != total {
                return bad(format!("`{name}` ends at {last}, expected the total {total}"));
            }
        }
        for s in 0..self.seqs() {
            let (a, b) = (self.cu[s], self.cu[s + 1]);
            if b < a {
                return bad(format!("`cu` decreases at sequence {s}: {a} then {b}"));
            }
            if b == a {
                return bad(format!("sequence {s} is empty; every sequence needs a token"));
            }
            if b - a > limits.max_len {
                return bad(format!(
                    "sequence {s} has {} tokens; the model takes at most {}",
                    b - a,
                    limits.max_len
                ));
            }
            let (ma, mb) = (self.mcu[s], self.mcu[s + 1]);
            if mb < ma {
                return bad(format!("`mcu` decreases at sequence {s}: {ma} then {mb}"));
            }
            if mb as usize > self.markers.len() {
                return bad(format!(
                    "`mcu` points past the {} markers at sequence {s}",
                    self.markers.len()
                ));
            }
            for m in ma..mb {
                let p = self.markers[m as usize];
                if p >= b - a {
                    return bad(format!(
                        "marker {m} at position {p} is past the end of sequence {s} ({} tokens)",
                        b - a
                    ));
                }
            }
        }
        if let Some(t) = self.ids.iter().position(|&id| id >= limits.vocab) {
            return bad(format!(
                "token {t} has id {}, past the vocabulary of {}",
                self.ids[t], limits.vocab
            ));
        }
        if let Some(t) = self.types.iter().position(|&ty| ty >= limits.types) {
            return bad(format!(
                "token {t} has type {}, but the model has {} token type(s)",
                self.types[t], limits.types
            ));
        }
        Ok(())
    }

    /// This batch padded to `sizes` (tokens, sequences and markers): its own sequences first,
    /// as they are, then padding sequences of token 0 holding the tokens and markers left, each
    /// at least one token long and within `limits`' longest. What a backend runs where a padded
    /// batch is faster (or a device graph recorded at `sizes` replays), leaving the padding's
    /// rows, which come after the batch's own, out of its outputs. [`Error::BadBatch`] where it
    /// cannot be: the batch not one `limits` take ([`Batch::check`]), larger than `sizes` in
    /// some way, or too few tokens left for a padding sequence each (or too many for them all).
    pub fn padded(&self, sizes: crate::Bucket, limits: &Limits) -> Result<BatchBuf> {
        self.check(limits)?;
        let (t, s, m) = (self.tokens(), self.seqs(), self.markers());
        let refuse = |why: &str| {
            Err(Error::BadBatch(format!(
                "a batch of {t} tokens in {s} sequences with {m} markers does not pad to {} \
                 tokens in {} sequences with {} markers: {why}",
                sizes.tokens, sizes.seqs, sizes.markers
            )))
        };
        if !sizes.holds(t, s, m) {
            return refuse("it is larger");
        }
        let (seqs, tokens, markers) = (sizes.seqs - s, sizes.tokens - t, sizes.markers - m);
        let longest = limits.max_len as usize;
        if seqs == 0 && (tokens, markers) != (0, 0) {
            return refuse("no sequence is left for the padding");
        }
        if tokens < seqs || tokens > seqs.saturating_mul(longest) {
            return refuse("the tokens left do not make its padding sequences");
        }
        let mut buf = BatchBuf::new();
        for q in 0..s {
            let rows = self.seq(q);
            let types = &self.types[rows.clone()];
            buf.push(&self.ids[rows], Some(types), &self.markers[self.seq_markers(q)])?;
        }
        let zeros = vec![0u32; tokens.div_ceil(seqs.max(1))];
        let first_markers = vec![0u32; markers];
        for q in 0..seqs {
            // The tokens left shared out, the first `tokens % seqs` sequences one longer.
            let len = tokens / seqs + usize::from(q < tokens % seqs);
            let marks = if q == 0 { &first_markers[..] } else { &[] };
            buf.push(&zeros[..len], None, marks)?;
        }
        Ok(buf)
    }
}

/// Builds [`Batch`]es, keeping its memory from one batch to the next.
#[derive(Clone, Debug)]
pub struct BatchBuf {
    ids: Vec<u32>,
    types: Vec<u32>,
    cu: Vec<u32>,
    markers: Vec<u32>,
    mcu: Vec<u32>,
}

impl Default for BatchBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuf {
    /// An empty buffer (a batch of no sequences).
    pub fn new() -> Self {
        BatchBuf {
            ids: Vec::new(),
            types: Vec::new(),
            cu: vec![0],
            markers: Vec::new(),
            mcu: vec![0],
        }
    }

    /// Empties the buffer, keeping its capacity.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.types.clear();
        self.markers.clear();
        self.cu.truncate(1);
        self.mcu.truncate(1);
    }

    /// Appends a sequence with token types `types` (all zero if `None`) and `markers`
    /// (positions relative to this sequence). Consistency is checked by [`Batch::check`].
    pub fn push(&mut self, ids: &[u32], types: Option<&[u32]>, markers: &[u32]) -> Result<()> {
        let overflow = || Error::BadBatch("the batch holds more than 2^32 tokens".into());
        match types {
            Some(t) => self.types.extend_from_slice(t),
            None => self.types.resize(self.types.len() + ids.len(), 0),
        }
        self.ids.extend_from_slice(ids);
        self.markers.extend_from_slice(markers);
        self.cu.push(u32::try_from(self.ids.len()).map_err(|_| overflow())?);
        self.mcu.push(u32::try_from(self.markers.len()).map_err(|_| overflow())?);
        Ok(())
    }

    /// Number of sequences pushed.
    pub fn seqs(&self) -> usize {
        self.cu.len() - 1
    }

    /// Number of tokens pushed.
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }

    /// An owned copy of `batch`, as it is (unchecked), for handing to another thread.
    pub fn copy_of(batch: &Batch<'_>) -> Self {
        BatchBuf {
            ids: batch.ids.to_vec(),
            types: batch.types.to_vec(),
            cu: batch.cu.to_vec(),
            markers: batch.markers.to_vec(),
            mcu: batch.mcu.to_vec(),
        }
    }

    /// The batch built so far.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            ids: &self.ids,
            types: &self.types,
            cu: &self.cu,
            markers: &self.markers,
            mcu: &self.mcu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { vocab: 100, types: 2, max_len: 8 };

    fn bad(b: Batch<'_>) -> String {
        match b.check(&LIMITS) {
            Err(Error::BadBatch(m)) => m,
            other => panic!("expected a bad batch, got {other:?}"),
        }
    }

    #[test]
    fn buf_builds_a_valid_batch_and_reuses_memory() {
        let mut buf = BatchBuf::new();
        buf.push(&[1, 2, 3], None, &[0, 2]).unwrap();
        buf.push(&[4], Some(&[1]), &[]).unwrap();
        let b = buf.batch();
        b.check(&LIMITS).unwrap();
        assert_eq!((b.tokens(), b.seqs(), b.markers()), (4, 2, 2));
        assert_eq!(b.cu, [0, 3, 4]);
        assert_eq!(b.mcu, [0, 2, 2]);
        assert_eq!(b.types, [0, 0, 0, 1]);
        assert_eq!(b.seq(1), 3..4);
        assert_eq!(b.seq_markers(0), 0..2);

        let cap = buf.ids.capacity();
        let ptr = buf.ids.as_ptr();
        buf.clear();
        assert_eq!(buf.seqs(), 0);
        buf.push(&[7, 8], None, &[]).unwrap();
        assert_eq!(buf.ids.as_ptr(), ptr, "clear keeps the allocation");
        assert_eq!(buf.ids.capacity(), cap);
        assert_eq!(buf.batch().cu, [0, 2]);
    }

    #[test]
    fn copy_of_keeps_every_field() {
        let b = Batch {
            ids: &[5, 6, 7],
            types: &[0, 1, 1],
            cu: &[0, 1, 3],
            markers: &[0],
            mcu: &[0, 0, 1],
        };
        let copy = BatchBuf::copy_of(&b);
        let c = copy.batch();
        assert_eq!(
            (c.ids, c.types, c.cu, c.markers, c.mcu),
            (b.ids, b.types, b.cu, b.markers, b.mcu)
        );
    }

    #[test]
    fn its_sizes_are_a_bucket_that_holds_it_exactly() {
        let mut buf = BatchBuf::new();
        buf.push(&[1, 2, 3], None, &[0, 2]).unwrap();
        buf.push(&[4], None, &[]).unwrap();
        assert_eq!(buf.batch().sizes(), crate::Bucket::new(4, 2, 2));
        assert_eq!(BatchBuf::new().batch().sizes(), crate::Bucket::new(0, 0, 0));
    }

    #[test]
    fn empty_batch_is_valid() {
        BatchBuf::new().batch().check(&LIMITS).unwrap();
    }

    #[test]
    fn rejects_every_inconsistency() {
        let ok = Batch {
            ids: &[1, 2, 3],
            types: &[0, 0, 1],
            cu: &[0, 2, 3],
            markers: &[1],
            mcu: &[0, 1, 1],
        };
        ok.check(&LIMITS).unwrap();
        let cases: [(Batch<'_>, &str); 13] = [
            (Batch { cu: &[], mcu: &[], ..ok }, "`cu` is empty"),
            (Batch { cu: &[1, 2, 3], ..ok }, "`cu` starts at 1"),
            (Batch { cu: &[0, 2, 2], ..ok }, "`cu` ends at 2, expected the total 3"),
            (Batch { cu: &[0, 4, 3], ..ok }, "`cu` decreases at sequence 1"),
            (Batch { cu: &[0, 0, 3], ..ok }, "sequence 0 is empty"),
            (Batch { mcu: &[0, 1], ..ok }, "`mcu` has 2 entries but `cu` has 3"),
            (Batch { mcu: &[1, 1, 1], ..ok }, "`mcu` starts at 1"),
            (Batch { mcu: &[0, 1, 0], ..ok }, "`mcu` ends at 0"),
            (Batch { markers: &[2], ..ok }, "marker 0 at position 2 is past the end of sequence 0"),
            (Batch { ids: &[1, 100, 3], ..ok }, "token 1 has id 100, past the vocabulary of 100"),
            (Batch { types: &[0, 2, 0], ..ok }, "token 1 has type 2"),
            (Batch { types: &[0, 0], ..ok }, "2 token types for 3 token ids"),
            (
                Batch { ids: &[1; 9], types: &[0; 9], cu: &[0, 9], markers: &[], mcu: &[0, 0] },
                "sequence 0 has 9 tokens; the model takes at most 8",
            ),
        ];
        for (b, want) in cases {
            let msg = bad(b);
            assert!(msg.contains(want), "expected `{want}` in `{msg}`");
        }
        // A decreasing marker offset that still ends at the total.
        let b = Batch { markers: &[0, 0], mcu: &[0, 2, 1, 2], cu: &[0, 1, 2, 3], ..ok };
        assert!(bad(b).contains("`mcu` decreases at sequence 1"));
        // An offset past the markers, before the decrease that brings it back to the total.
        let b = Batch { markers: &[0], mcu: &[0, 3, 1], ..ok };
        assert!(bad(b).contains("`mcu` points past the 1 markers at sequence 0"));
    }

    fn seqs_of(seqs: &[(&[u32], &[u32])]) -> BatchBuf {
        let mut buf = BatchBuf::new();
        for &(ids, markers) in seqs {
            let types: Vec<u32> = ids.iter().map(|i| i % 2).collect();
            buf.push(ids, Some(&types), markers).expect("a sequence");
        }
        buf
    }

    /// The batch's own sequences come first, as they were; then padding sequences of token 0,
    /// the tokens left shared out (the first ones one longer) and the markers left on the first.
    #[test]
    fn a_batch_is_padded_by_sequences_after_its_own() {
        let own = seqs_of(&[(&[3, 4, 5], &[2]), (&[6, 7], &[])]);
        let buf = own.batch().padded(crate::Bucket::new(12, 4, 3), &LIMITS).expect("pads");
        let b = buf.batch();
        b.check(&LIMITS).expect("a valid batch");
        assert_eq!(b.ids, [3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b.types, [1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b.cu, [0, 3, 5, 9, 12]);
        assert_eq!((b.markers, b.mcu), (&[2, 0, 0][..], &[0, 1, 1, 3, 3][..]));
        let full = own.batch().padded(crate::Bucket::new(5, 2, 1), &LIMITS).expect("no padding");
        assert_eq!(full.batch().cu, own.batch().cu);
    }

    #[test]
    fn a_batch_that_cannot_be_padded_is_refused() {
        let own = seqs_of(&[(&[3, 4, 5], &[2]), (&[6, 7], &[])]);
        for (sizes, why) in [
            (crate::Bucket::new(4, 4, 3), "larger"),
            (crate::Bucket::new(12, 1, 3), "larger"),
            (crate::Bucket::new(6, 2, 1), "no sequence is left"),
            (crate::Bucket::new(5, 2, 2), "no sequence is left"),
            (crate::Bucket::new(7, 5, 1), "do not make"),
            // Two padding sequences of at most 8 tokens hold 16.
            (crate::Bucket::new(22, 4, 1), "do not make"),
        ] {
            let e = own.batch().padded(sizes, &LIMITS).expect_err("refused");
            assert!(matches!(&e, Error::BadBatch(m) if m.contains(why)), "{sizes}: {e}");
        }
        assert!(
            own.batch().padded(crate::Bucket::new(21, 4, 1), &LIMITS).is_ok(),
            "16 tokens left"
        );
    }

    /// A malformed batch is an error, not a panic on its offsets.
    #[test]
    fn a_malformed_batch_is_refused_before_it_is_read() {
        let own = seqs_of(&[(&[3, 4, 5], &[2]), (&[6, 7], &[])]);
        let cu = [0u32, 4, 3];
        let bad = Batch { cu: &cu, ..own.batch() };
        let e = bad.padded(crate::Bucket::new(12, 4, 3), &LIMITS).expect_err("refused");
        assert!(matches!(&e, Error::BadBatch(m) if m.contains("cu")), "{e}");
        let e = seqs_of(&[(&[100], &[])]).batch().padded(crate::Bucket::new(12, 4, 3), &LIMITS);
        assert!(matches!(e, Err(Error::BadBatch(_))), "an id past the vocabulary");
    }
}
