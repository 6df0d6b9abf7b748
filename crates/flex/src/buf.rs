//! Buffers of f32 aligned to a cache line, for the arena, packed weights and scratch.

/// One cache line of f32.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; LINE]);

/// f32 per cache line.
pub(crate) const LINE: usize = 16;

/// A zeroed buffer of f32 whose start is aligned to 64 bytes.
#[derive(Clone, Default)]
pub(crate) struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} f32)", self.len)
    }
}

impl AlignedBuf {
    /// `len` zeros.
    pub(crate) fn zeros(len: usize) -> AlignedBuf {
        AlignedBuf { lines: vec![Line([0.0; LINE]); len.div_ceil(LINE)], len }
    }

    /// Makes room for at least `len` values (zeroed when new); allocates only to grow.
    pub(crate) fn ensure(&mut self, len: usize) {
        if len > self.len {
            self.lines.resize(len.div_ceil(LINE), Line([0.0; LINE]));
            self.len = len;
        }
    }

    /// The number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The values.
    pub(crate) fn as_slice(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` over `[f32; LINE]`, so the lines are `lines.len() * LINE`
        // contiguous, initialised f32, of which the first `len` are ours.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }

    /// The values, mutably.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_grow_only_when_asked() {
        let mut b = AlignedBuf::zeros(5);
        assert_eq!(b.as_slice(), [0.0; 5]);
        assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
        b.as_mut_slice()[4] = 3.0;
        let p = b.as_slice().as_ptr();
        b.ensure(10);
        assert_eq!((b.len(), b.as_slice()[4]), (10, 3.0), "ensure keeps the values");
        assert_eq!(b.as_slice().as_ptr(), p, "10 values fit the line that 5 took");
        b.ensure(3);
        assert_eq!(b.len(), 10, "ensure never shrinks");
    }
}
