//! [`Positions`]: each distinct element offset of a layout once, for checks that read
//! every byte a tensor holds (`bool` imports) at the cost of its memory, not its shape.

/// The distinct element offsets of a layout with non-negative strides (as [`plan`]
/// produces them): each offset is visited once however many indices reach it, so that
/// a check of every byte of a broadcast tensor costs what its memory holds, not what
/// its shape says.
///
/// Axes of extent 1 and axes with stride 0 contribute one position. The other axes,
/// sorted by stride, are merged into arithmetic progressions where one continues
/// another without gaps (its stride a multiple of the progression's, at most one
/// progression long: contiguous axes, and sliding windows such as NumPy's
/// `as_strided` makes). When the progressions do not overlap each other (each stride
/// exceeds the reach of all smaller ones: every layout NumPy, PyTorch and ndarray make,
/// and every broadcast and window of them) each offset is visited exactly once;
/// otherwise some offsets are visited more than once, never more often than the
/// tensor's index combinations reach them.
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

    /// The first visited offset for which `found` holds, as one index (per axis of the
    /// layout, along its non-negative strides) that reaches it.
    pub(crate) fn find(
        &self,
        ndim: usize,
        mut found: impl FnMut(usize) -> bool,
    ) -> Option<Vec<usize>> {
        let progs = &self.progressions;
        let mut at = vec![0usize; progs.len()];
        let mut offset = 0usize;
        loop {
            if found(offset) {
                return Some(self.index_of(ndim, &at));
            }
            // The next combination, the smallest stride fastest (memory order).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::check_no_overlap;

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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 2000 },
            failure_persistence: None,
            ..Default::default()
        })]

        /// `Positions` visits every reachable offset, each once when the layout does not
        /// overlap itself, and `find` names an index that reaches the offset it found.
        #[test]
        fn positions_visit_every_offset(
            axes in proptest::collection::vec((1usize..5, 0usize..7), 0..5),
            pick in 0usize..1000,
        ) {
            let dim: Vec<usize> = axes.iter().map(|a| a.0).collect();
            let strides: Vec<usize> = axes.iter().map(|a| a.1).collect();
            let expected = brute_force(&dim, &strides);
            let positions = Positions::new(&dim, &strides);
            let mut seen = std::collections::BTreeMap::new();
            let none = positions.find(dim.len(), |offset| {
                *seen.entry(offset).or_insert(0usize) += 1;
                false
            });
            proptest::prop_assert!(none.is_none());
            proptest::prop_assert_eq!(
                seen.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>()
            );
            // Never more visits than indices reach an offset; exactly one when no two
            // indices with distinct positions along non-broadcast axes collide.
            for (offset, &visits) in &seen {
                proptest::prop_assert!(visits <= expected[offset]);
            }
            let reduced: Vec<usize> = dim
                .iter()
                .zip(&strides)
                .map(|(&d, &s)| if s == 0 { 1 } else { d })
                .collect();
            if check_no_overlap(&reduced, &strides).is_ok() {
                proptest::prop_assert!(seen.values().all(|&v| v == 1));
            }
            // `find` stops at the offset asked for, with an index that reaches it.
            let keys: Vec<usize> = expected.keys().copied().collect();
            let target = keys[pick % keys.len()];
            let index = positions.find(dim.len(), |offset| offset == target).unwrap();
            proptest::prop_assert_eq!(index.len(), dim.len());
            proptest::prop_assert!(index.iter().zip(&dim).all(|(i, d)| i < d));
            proptest::prop_assert_eq!(offset_of(&index, &strides), target);
        }
    }

    #[test]
    fn positions_of_broadcast_and_windows() {
        let count = |dim: &[usize], strides: &[usize]| {
            let mut n = 0;
            Positions::new(dim, strides).find(dim.len(), |_| {
                n += 1;
                false
            });
            n
        };
        // 2^40 elements over one byte; one axis broadcast; a window of 2^20 x 2^20.
        assert_eq!(count(&[1 << 40], &[0]), 1);
        assert_eq!(count(&[1 << 30, 3], &[0, 1]), 3);
        let n = if cfg!(miri) { 1 << 8 } else { 1 << 20 };
        assert_eq!(count(&[n, n], &[1, 1]), 2 * n - 1);
        // Interleaved but disjoint, and C order.
        assert_eq!(count(&[2, 3], &[1, 2]), 6);
        assert_eq!(count(&[4, 5, 6], &[30, 6, 1]), 120);
    }
}
