//! [`Positions`]: each distinct element offset of a layout once, for checks that read
//! every byte a tensor holds (`bool` imports) at the cost of its memory, not its shape.

use crate::error::{Error, Result};

/// The distinct element offsets of a layout with non-negative strides (as `plan`
/// produces them), visited in increasing order of memory, each once, in time and memory
/// that follow the smaller of the element count and the span, however many indices
/// reach an offset.
///
/// Axes of extent 1 and axes with stride 0 contribute one position. The other axes,
/// sorted by stride, are merged into arithmetic progressions where one continues
/// another without gaps (its stride a multiple of the progression's, at most one
/// progression long: contiguous axes, and sliding windows such as NumPy's
/// `as_strided` makes). When the progressions do not overlap each other (each stride
/// exceeds the reach of all smaller ones: every layout NumPy, PyTorch and ndarray make,
/// and every broadcast and window of them) their combinations are enumerated, each
/// offset once. Otherwise (windows whose strides do not divide each other, such as
/// byte strides `(2, 3)`) the reachable offsets are collected first: when there are few
/// combinations for the span, as a sorted list of them (O(count log count)); else in a
/// bitset of the span (`span / 8` bytes), built progression by progression with shifted
/// unions (O(span / 64) words per doubling), and read back in order.
#[derive(Debug)]
pub(crate) struct Positions {
    progressions: Vec<Progression>,
}

/// Offsets `0, stride, ..., (extent - 1) * stride`, made of one or more axes.
#[derive(Debug)]
struct Progression {
    stride: usize,
    extent: usize,
    /// `(axis, step, extent)`: the axes merged here, each `step` progression strides
    /// per index, in increasing order of `step`.
    axes: Vec<(usize, usize, usize)>,
}

impl Positions {
    pub(crate) fn new(dim: &[usize], strides: &[usize]) -> Self {
        let mut axes: Vec<(usize, usize, usize)> = dim
            .iter()
            .zip(strides)
            .enumerate()
            .filter(|&(_, (&extent, &stride))| extent > 1 && stride > 0)
            .map(|(axis, (&extent, &stride))| (stride, axis, extent))
            .collect();
        axes.sort_unstable();
        let mut progressions: Vec<Progression> = Vec::new();
        for (stride, axis, extent) in axes {
            if let Some(last) = progressions.last_mut() {
                let step = stride / last.stride;
                if stride % last.stride == 0 && step <= last.extent {
                    // The union of `extent` copies shifted by `step` leaves no gap.
                    // Fits: it is at most the span, which `plan` bounded.
                    last.extent += (extent - 1) * step;
                    last.axes.push((axis, step, extent));
                    continue;
                }
            }
            progressions.push(Progression {
                stride,
                extent,
                axes: vec![(axis, 1, extent)],
            });
        }
        Self { progressions }
    }

    /// Whether the offsets fill the span without a gap: every element between the
    /// lowest and the highest one the layout reaches belongs to the tensor.
    ///
    /// Exact: a progression of stride 1 covers `0..extent`, and a larger stride extends
    /// such a range without a gap exactly when `new` merges it; two progressions left
    /// apart always leave the offset after the first one's end unreached.
    #[cfg(any(feature = "burn", test))]
    pub(crate) fn is_dense(&self) -> bool {
        match self.progressions.as_slice() {
            [] => true,
            [only] => only.stride == 1,
            _ => false,
        }
    }

    /// Whether no offset is reached by two combinations of progressions (each stride
    /// exceeds the reach of all smaller ones), so that enumerating the combinations
    /// visits each offset once.
    fn disjoint(&self) -> bool {
        let mut reach = 0usize;
        for prog in &self.progressions {
            if prog.stride <= reach {
                return false;
            }
            // Fits: at most the span, which `plan` bounded.
            reach += (prog.extent - 1) * prog.stride;
        }
        true
    }

    /// The first offset, in increasing order, for which `found` holds, as one index (per
    /// axis of the layout, along its non-negative strides) that reaches it. `span` is
    /// the layout's span in elements (every offset is below it).
    ///
    /// # Errors
    ///
    /// [`Error::AllocationFailed`] when the bitset of an overlapping layout (`span / 8`
    /// bytes) cannot be allocated.
    pub(crate) fn find(
        &self,
        ndim: usize,
        span: usize,
        mut found: impl FnMut(usize) -> bool,
    ) -> Result<Option<Vec<usize>>> {
        if self.disjoint() {
            return Ok(self
                .enumerate(&mut found)
                .map(|at| self.index_of(ndim, &at)));
        }
        // Overlapping: the distinct offsets, sorted, from whichever costs less, the
        // combinations (few elements over a large span, such as windows far apart) or a
        // bitset of the span (many elements over a small one).
        let combinations = self
            .progressions
            .iter()
            .fold(1usize, |n, p| n.saturating_mul(p.extent));
        if combinations.saturating_mul(64) <= span {
            let mut offsets = Vec::new();
            offsets
                .try_reserve_exact(combinations)
                .map_err(|_| Error::AllocationFailed {
                    bytes: combinations.saturating_mul(size_of::<usize>()),
                })?;
            self.enumerate(&mut |offset| {
                offsets.push(offset);
                false
            });
            offsets.sort_unstable();
            offsets.dedup();
            let Some(&target) = offsets.iter().find(|&&offset| found(offset)) else {
                return Ok(None);
            };
            return Ok(self
                .enumerate(&mut |offset| offset == target)
                .map(|at| self.index_of(ndim, &at)));
        }
        let reachable = Bitset::reachable(&self.progressions, span)?;
        let Some(offset) = reachable.ones().find(|&offset| found(offset)) else {
            return Ok(None);
        };
        Ok(Some(self.index_of(ndim, &self.positions_of(offset, span)?)))
    }

    /// Enumerates the combinations of progressions in memory order (the smallest stride
    /// fastest) until `found` holds; returns the position in each progression.
    fn enumerate(&self, found: &mut impl FnMut(usize) -> bool) -> Option<Vec<usize>> {
        let progs = &self.progressions;
        let mut at = vec![0usize; progs.len()];
        let mut offset = 0usize;
        loop {
            if found(offset) {
                return Some(at);
            }
            let mut k = 0;
            loop {
                let prog = progs.get(k)?;
                if at[k] + 1 < prog.extent {
                    at[k] += 1;
                    offset += prog.stride;
                    break;
                }
                offset -= (prog.extent - 1) * prog.stride;
                at[k] = 0;
                k += 1;
            }
        }
    }

    /// A position in each progression whose offsets add up to `offset`, a reachable
    /// offset: from the largest progression down, the offsets the smaller ones reach
    /// are marked again and a position whose remainder they reach is taken (the error
    /// path of an overlapping layout only).
    fn positions_of(&self, offset: usize, span: usize) -> Result<Vec<usize>> {
        let progs = &self.progressions;
        let mut at = vec![0usize; progs.len()];
        let mut rest = offset;
        for k in (0..progs.len()).rev() {
            let below = Bitset::reachable(&progs[..k], span)?;
            let prog = &progs[k];
            let steps = (rest / prog.stride).min(prog.extent - 1);
            // One exists, since `rest` is reachable with the first `k + 1` progressions.
            if let Some(i) = (0..=steps).find(|&i| below.contains(rest - i * prog.stride)) {
                at[k] = i;
                rest -= i * prog.stride;
            }
        }
        Ok(at)
    }

    /// An index of the layout reaching position `at[k]` of every progression.
    fn index_of(&self, ndim: usize, at: &[usize]) -> Vec<usize> {
        let mut index = vec![0; ndim];
        for (prog, &position) in self.progressions.iter().zip(at) {
            // Largest step first: each takes as much as it can, and what is left is
            // always reachable by the smaller ones (they cover it without gaps).
            let mut rest = position;
            for &(axis, step, extent) in prog.axes.iter().rev() {
                let i = (rest / step).min(extent - 1);
                index[axis] = i;
                rest -= i * step;
            }
        }
        index
    }
}

/// A set of offsets below a span, one bit each.
struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    /// The offsets below `span` that sums of one multiple of each progression reach.
    fn reachable(progressions: &[Progression], span: usize) -> Result<Self> {
        let len = span.div_ceil(64).max(1);
        let mut words = Vec::new();
        words
            .try_reserve_exact(len)
            .map_err(|_| Error::AllocationFailed { bytes: len * 8 })?;
        words.resize(len, 0);
        words[0] = 1;
        let mut set = Self { words };
        for prog in progressions {
            set.spread(prog.stride, prog.extent);
        }
        Ok(set)
    }

    /// The union of `extent` copies of the set, shifted by `0, stride, ...,
    /// (extent - 1) * stride`, by doubling: O(log extent) shifted unions.
    fn spread(&mut self, stride: usize, extent: usize) {
        let mut copies = 1;
        while copies < extent {
            let more = copies.min(extent - copies);
            // Copies `0..copies` and `more..more + copies` make `0..copies + more`.
            self.or_shifted(more * stride);
            copies += more;
        }
    }

    /// `self |= self << shift`, dropping what falls past the end (nothing reachable
    /// does: every reachable offset is below the span).
    fn or_shifted(&mut self, shift: usize) {
        let (word_shift, bit_shift) = (shift / 64, shift % 64);
        let words = &mut self.words;
        // From the top down: each word reads only words below it, not yet changed.
        for i in (word_shift..words.len()).rev() {
            let source = i - word_shift;
            let mut bits = words[source] << bit_shift;
            if bit_shift > 0 && source > 0 {
                bits |= words[source - 1] >> (64 - bit_shift);
            }
            words[i] |= bits;
        }
    }

    fn contains(&self, offset: usize) -> bool {
        self.words
            .get(offset / 64)
            .is_some_and(|word| word >> (offset % 64) & 1 == 1)
    }

    /// The offsets in the set, in increasing order.
    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            core::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                Some(i * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every offset reachable through `dim` and `strides`, with how many indices reach it.
    fn brute_force(dim: &[usize], strides: &[usize]) -> std::collections::BTreeMap<usize, usize> {
        let mut counts = std::collections::BTreeMap::new();
        let count: usize = dim.iter().product();
        for flat in 0..count {
            let mut rest = flat;
            let mut offset = 0;
            for (&d, &s) in dim.iter().zip(strides).rev() {
                offset += (rest % d) * s;
                rest /= d;
            }
            *counts.entry(offset).or_insert(0) += 1;
        }
        counts
    }

    fn offset_of(index: &[usize], strides: &[usize]) -> usize {
        index.iter().zip(strides).map(|(i, s)| i * s).sum()
    }

    /// The span of a non-empty layout: its highest offset, plus one.
    fn span_of(dim: &[usize], strides: &[usize]) -> usize {
        dim.iter()
            .zip(strides)
            .map(|(d, s)| (d - 1) * s)
            .sum::<usize>()
            + 1
    }

    /// The offsets `find` visits, in order.
    fn visits(dim: &[usize], strides: &[usize]) -> Vec<usize> {
        let mut seen = Vec::new();
        let none = Positions::new(dim, strides)
            .find(dim.len(), span_of(dim, strides), |offset| {
                seen.push(offset);
                false
            })
            .unwrap();
        assert!(none.is_none());
        seen
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 2000 },
            failure_persistence: None,
            ..Default::default()
        })]

        /// `find` visits every reachable offset once, in increasing order, whatever the
        /// layout (overlapping windows too); `find` names an index that reaches the
        /// offset it found; `is_dense` says whether the offsets leave a gap.
        #[test]
        fn positions_visit_every_offset_once(
            axes in proptest::collection::vec((1usize..5, 0usize..7), 0..5),
            pick in 0usize..1000,
        ) {
            let dim: Vec<usize> = axes.iter().map(|a| a.0).collect();
            let strides: Vec<usize> = axes.iter().map(|a| a.1).collect();
            let expected = brute_force(&dim, &strides);
            let seen = visits(&dim, &strides);
            proptest::prop_assert_eq!(&seen, &expected.keys().copied().collect::<Vec<_>>());
            let span = span_of(&dim, &strides);
            let positions = Positions::new(&dim, &strides);
            proptest::prop_assert_eq!(positions.is_dense(), expected.len() == span);
            // `find` stops at the offset asked for, with an index that reaches it.
            let target = seen[pick % seen.len()];
            let index = positions
                .find(dim.len(), span, |offset| offset == target)
                .unwrap()
                .unwrap();
            proptest::prop_assert_eq!(index.len(), dim.len());
            proptest::prop_assert!(index.iter().zip(&dim).all(|(i, d)| i < d));
            proptest::prop_assert_eq!(offset_of(&index, &strides), target);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 500 },
            failure_persistence: None,
            ..Default::default()
        })]

        /// Few elements over a large span (the sorted list of offsets, not the bitset):
        /// every reachable offset once, in order.
        #[test]
        fn sparse_positions_visit_every_offset_once(
            axes in proptest::collection::vec((1usize..4, 0usize..5000), 0..4),
        ) {
            let dim: Vec<usize> = axes.iter().map(|a| a.0).collect();
            let strides: Vec<usize> = axes.iter().map(|a| a.1).collect();
            let expected = brute_force(&dim, &strides);
            proptest::prop_assert_eq!(visits(&dim, &strides), expected.keys().copied().collect::<Vec<_>>());
        }
    }

    #[test]
    fn positions_of_broadcast_and_windows() {
        let count = |dim: &[usize], strides: &[usize]| visits(dim, strides).len();
        // 2^40 elements over one byte; one axis broadcast; a window of 2^20 x 2^20.
        assert_eq!(count(&[1 << 40], &[0]), 1);
        assert_eq!(count(&[1 << 30, 3], &[0, 1]), 3);
        let n = if cfg!(miri) { 1 << 8 } else { 1 << 20 };
        assert_eq!(count(&[n, n], &[1, 1]), 2 * n - 1);
        // Interleaved but disjoint, and C order.
        assert_eq!(count(&[2, 3], &[1, 2]), 6);
        assert_eq!(count(&[4, 5, 6], &[30, 6, 1]), 120);
    }

    /// Overlapping windows whose strides do not divide each other: every offset of the
    /// span once, in increasing order, in time that follows the span (the bitset), not
    /// the element count (2^40 here).
    #[test]
    fn overlapping_windows_cost_their_span() {
        let n = if cfg!(miri) { 1 << 6 } else { 1 << 20 };
        let dim = [n, n];
        let strides = [2, 3];
        let seen = visits(&dim, &strides);
        let span = span_of(&dim, &strides);
        assert_eq!(
            seen.len(),
            span - 2,
            "every offset but 1 and span - 2 is reachable"
        );
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert!(!Positions::new(&dim, &strides).is_dense());
        // The index found for the highest offset reaches it.
        let last = *seen.last().unwrap();
        let index = Positions::new(&dim, &strides)
            .find(2, span, |offset| offset == last)
            .unwrap()
            .unwrap();
        assert_eq!(offset_of(&index, &strides), last);
    }

    /// Few elements far apart (windows of a huge sparse mapping): their offsets are
    /// sorted, no bitset of the span is made.
    #[test]
    fn few_elements_over_a_huge_span_cost_their_count() {
        let (dim, strides) = ([3, 2], [1 << 40, (1 << 40) + 1]);
        let seen = visits(&dim, &strides);
        assert_eq!(seen.len(), 6);
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        let last = *seen.last().unwrap();
        let index = Positions::new(&dim, &strides)
            .find(2, span_of(&dim, &strides), |offset| offset == last)
            .unwrap()
            .unwrap();
        assert_eq!(offset_of(&index, &strides), last);
    }

    #[test]
    fn density() {
        let dense = |dim: &[usize], strides: &[usize]| Positions::new(dim, strides).is_dense();
        assert!(dense(&[3, 4], &[4, 1]), "C order");
        assert!(dense(&[3, 4], &[1, 3]), "F order");
        assert!(dense(&[3, 4], &[0, 1]), "broadcast rows");
        assert!(dense(&[5, 3], &[1, 1]), "a sliding window");
        assert!(dense(&[1], &[7]), "one element");
        assert!(!dense(&[3, 2], &[4, 1]), "two columns of four");
        assert!(!dense(&[3], &[2]), "every other element");
    }
}
