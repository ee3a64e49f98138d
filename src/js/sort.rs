//! `Array.prototype.sort(comparator)` as the engine the conformance cases were recorded with
//! (Node 20's V8) performs it: TimSort over the items, where `cmp(a, b) < 0` puts `a` before
//! `b` and a NaN result counts as 0 ("equal").
//!
//! For a consistent comparator this is just a stable sort. It is reproduced step by step
//! because the original's comparators are not always consistent: `weight × (a − b)` over
//! unreserved values is NaN when a value is missing, which makes such a server "equal" to
//! everything while the others still compare, and then the exact sequence of comparisons
//! decides the order (and hence the scores). Never panics, whatever the comparator returns.

/// After this many consecutive wins of one side, a merge switches to galloping.
const MIN_GALLOP: usize = 7;

/// Sorts `items` in place as the JS engine would with comparator `cmp`.
pub fn js_sort_by<T: Copy>(items: &mut [T], cmp: impl FnMut(&T, &T) -> f64) {
    let n = items.len();
    if n < 2 {
        return;
    }
    let mut sorter = TimSort { a: items, cmp, min_gallop: MIN_GALLOP, runs: Vec::new() };
    sorter.sort();
}

/// `items.sort((a, b) => weight * (key(a) - key(b)))` as the JS engine performs it.
///
/// When every key is finite and the weight cannot shrink a difference to zero (|weight| ≥ 1,
/// infinite, zero or NaN), the comparator is consistent, and TimSort yields the one stable
/// order: keys and positions packed into integers and sorted as such give the same result
/// faster. Otherwise the engine's exact sequence of comparisons is replayed.
pub fn js_sort_by_scaled<T: Copy>(items: &mut [T], key: impl Fn(&T) -> f64, weight: f64) {
    if !items.iter().all(|x| key(x).is_finite()) {
        js_sort_by(items, |a, b| weight * (key(a) - key(b)));
        return;
    }
    if weight.is_nan() || weight == 0.0 {
        // Every comparison is NaN or zero: "equal", so the order stays.
        return;
    }
    if weight.abs() < 1.0 {
        js_sort_by(items, |a, b| weight * (key(a) - key(b)));
        return;
    }
    let bits: Vec<u64> = items.iter().map(|x| order_bits(key(x), weight > 0.0)).collect();
    // Lists often come sorted by the same key already, one way or the other (a scorer after
    // a filter that sorted): a stable sort leaves the first as it is and turns the second
    // around tie group by tie group.
    if bits.windows(2).all(|w| w[0] <= w[1]) {
        return;
    }
    if bits.windows(2).all(|w| w[0] >= w[1]) {
        let mut sorted = Vec::with_capacity(items.len());
        let mut end = items.len();
        while end > 0 {
            let start = bits[..end].iter().rposition(|&b| b != bits[end - 1]).map_or(0, |i| i + 1);
            sorted.extend_from_slice(&items[start..end]);
            end = start;
        }
        items.copy_from_slice(&sorted);
        return;
    }
    let sorted: Vec<T> = sorted_positions(&bits).map(|p| items[p]).collect();
    items.copy_from_slice(&sorted);
}

/// The positions of `bits` in their ascending order, ties in position order (as a stable
/// sort keeps them).
///
/// Short lists: each key packed with its position into one integer, sorted as such. Longer
/// ones (a datacenter's servers): a least-significant-byte-first radix sort, stable, so ties
/// stay in position order. It makes one pass per byte in which the keys differ (at most
/// eight), each a read and a scatter of the list, where a comparison sort of thousands of
/// keys compares each ~12 times.
fn sorted_positions(bits: &[u64]) -> impl Iterator<Item = usize> {
    let radix = bits.len() >= RADIX_FROM && u32::try_from(bits.len()).is_ok();
    let (packed, positions) = if radix {
        (Vec::new(), radix_sorted_positions(bits))
    } else {
        let mut packed: Vec<u128> =
            bits.iter().enumerate().map(|(position, &b)| (u128::from(b) << 64) | position as u128).collect();
        packed.sort_unstable();
        (packed, Vec::new())
    };
    packed.into_iter().map(|p| p as u64 as usize).chain(positions.into_iter().map(|p| p as usize))
}

/// From this length on, [`sorted_positions`] sorts by radix: for short lists its 8 × 256
/// counters outweigh the comparisons saved (a guess, not measured; the servers' lists it is
/// for hold thousands).
const RADIX_FROM: usize = 128;

/// The radix sort of [`sorted_positions`], for lists of fewer than 2^32: positions only
/// are moved (the keys read through them), so its two buffers are small.
fn radix_sorted_positions(bits: &[u64]) -> Vec<u32> {
    let mut counts = [[0u32; 256]; 8];
    for &b in bits {
        for (byte, count) in counts.iter_mut().enumerate() {
            count[(b >> (byte * 8)) as usize & 0xff] += 1;
        }
    }
    let mut from: Vec<u32> = (0..).take(bits.len()).collect();
    let mut to = vec![0u32; bits.len()];
    for (byte, count) in counts.iter().enumerate() {
        if count.iter().any(|&c| c as usize == bits.len()) {
            continue; // every key has the same value here
        }
        let mut start = [0u32; 256];
        let mut sum = 0;
        for (start, &count) in start.iter_mut().zip(count) {
            *start = sum;
            sum += count;
        }
        for &position in &from {
            let digit = (bits[position as usize] >> (byte * 8)) as usize & 0xff;
            to[start[digit] as usize] = position;
            start[digit] += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    from
}

/// The last order [`js_sort_ids_by_scaled`] gave, kept by a caller that sorts nearly the
/// same list again and again: the servers whose key and relative place did not change are
/// already in order, and only the others need placing.
#[derive(Debug, Default, Clone)]
pub struct KeptOrder {
    order: Vec<usize>,
    /// Each id's packed key in that order, `None` for ids not in it.
    bits: Vec<Option<u64>>,
    /// Each id's place in `order` and in the list it was sorted from (ties go by the
    /// latter), for [`KeptOrder::holds`].
    place: Vec<usize>,
    position: Vec<usize>,
    /// The list the order was sorted from.
    input: Vec<usize>,
    /// The direction of the packed keys.
    ascending: bool,
    /// Whether the last sort given this order went through it (a sort of an inconsistent
    /// comparator replays the engine's comparisons and keeps nothing).
    current: bool,
}

/// Buffers a sort through a [`KeptOrder`] works in, handed from one sort to the next on the
/// same thread: a replica's allocations sort lists of thousands again and again, and
/// buffers of as many sizes made and freed each time filled its heap with free blocks for
/// malloc to walk. Per thread rather than per order: a replica keeps dozens of orders.
#[derive(Default)]
struct Spare {
    keys: Vec<u64>,
    position: Vec<usize>,
    placed: Vec<bool>,
    order: Vec<usize>,
}

thread_local! {
    static SPARE: std::cell::Cell<Spare> = std::cell::Cell::new(Spare::default());
}

impl KeptOrder {
    /// Sorts `ids` (`keys` in its order) by taking the servers whose key changed out of the
    /// kept order and putting each back at its place, when `ids` is the list this order was
    /// sorted from but for where those servers stand in it (the others keep their relative
    /// places, so their order still holds); `false` (nothing done) otherwise, or when too
    /// many changed for that to pay.
    fn resort_moved(&mut self, ids: &mut Vec<usize>, keys: &[f64]) -> bool {
        let ascending = self.ascending;
        if ids.len() != self.input.len() || ids.iter().any(|&id| self.bits.get(id).is_none_or(Option::is_none)) {
            return false;
        }
        let moved: Vec<(usize, u64)> = ids
            .iter()
            .zip(keys)
            .map(|(&id, &key)| (id, order_bits(key, ascending)))
            .filter(|&(id, bits)| self.bits[id] != Some(bits))
            .collect();
        if moved.len() > ids.len() / 8 {
            return false;
        }
        // A few moved: looked for in the list; more: marked.
        let marks: Vec<bool> = if moved.len() > 4 {
            let mut marks = vec![false; self.bits.len()];
            moved.iter().for_each(|m| marks[m.0] = true);
            marks
        } else {
            Vec::new()
        };
        let is_moved = |id: usize| if marks.is_empty() { moved.iter().any(|m| m.0 == id) } else { marks[id] };
        if self.input != *ids {
            let unmoved_before = self.input.iter().filter(|&&id| !is_moved(id));
            if !unmoved_before.eq(ids.iter().filter(|&&id| !is_moved(id))) {
                return false;
            }
            ids.iter().enumerate().for_each(|(p, &id)| self.position[id] = p);
            self.input.clone_from(ids);
        }
        if !moved.is_empty() {
            moved.iter().for_each(|&(id, bits)| self.bits[id] = Some(bits));
            let first = moved.iter().map(|m| self.place[m.0]).min().unwrap_or(0);
            self.order.retain(|&id| !is_moved(id));
            let (bits, position) = (&self.bits, &self.position);
            let rank = |id: usize| (bits[id], position[id]);
            let mut from = first;
            for &(id, _) in &moved {
                let at = self.order.partition_point(|&other| rank(other) < rank(id));
                self.order.insert(at, id);
                from = from.min(at);
            }
            for (at, &id) in self.order.iter().enumerate().skip(from) {
                self.place[id] = at;
            }
        }
        ids.clone_from(&self.order);
        true
    }

    /// Whether sorting the list last sorted through this order again, now that only the
    /// ids of `changed` have new keys (`(id, key)`), gives the same order: each changed id
    /// still falls between its neighbours. The changed ids' keys are taken into the order
    /// when it holds. `len` is the list's length (a list of one is always in order).
    pub fn holds(&mut self, len: usize, changed: &[(usize, f64)], weight: f64) -> bool {
        if len <= 1 {
            return true;
        }
        let consistent = !weight.is_nan() && weight.abs() >= 1.0 && changed.iter().all(|c| c.1.is_finite());
        if !consistent || !self.current || self.order.len() != len || self.ascending != (weight > 0.0) {
            return false;
        }
        let is_changed = |id: usize| changed.iter().any(|c| c.0 == id);
        for &(id, key) in changed {
            let Some(&at) = self.place.get(id).filter(|&&at| self.order.get(at) == Some(&id)) else {
                return false;
            };
            let rank = (order_bits(key, self.ascending), self.position[id]);
            let rank_of = |other: usize| self.bits[other].map(|b| (b, self.position[other]));
            let before = at.checked_sub(1).map(|i| self.order[i]);
            let after = self.order.get(at + 1).copied();
            let fits_before = before.is_none_or(|b| !is_changed(b) && rank_of(b).is_some_and(|r| r < rank));
            let fits_after = after.is_none_or(|a| !is_changed(a) && rank_of(a).is_some_and(|r| rank < r));
            if !(fits_before && fits_after) {
                return false;
            }
        }
        for &(id, key) in changed {
            self.bits[id] = Some(order_bits(key, self.ascending));
        }
        true
    }
}

/// `ids` (distinct) sorted as [`js_sort_by_scaled`] sorts them with `keys[i]` the key of
/// `ids[i]`; with `kept`, from the order it kept where that is still in order (the result is
/// the same either way: the one order by key then position).
pub fn js_sort_ids_by_scaled(ids: &mut Vec<usize>, keys: &[f64], weight: f64, kept: Option<&mut KeptOrder>) {
    let consistent = keys.iter().all(|k| k.is_finite()) && !weight.is_nan() && weight.abs() >= 1.0;
    let kept = kept.and_then(|kept| {
        let was_current = kept.current;
        kept.current = consistent && ids.len() > 1;
        kept.current.then_some((kept, was_current))
    });
    let Some((kept, was_current)) = kept else {
        let mut pairs: Vec<(usize, f64)> = ids.iter().copied().zip(keys.iter().copied()).collect();
        js_sort_by_scaled(&mut pairs, |p| p.1, weight);
        ids.iter_mut().zip(pairs).for_each(|(id, (sorted, _))| *id = sorted);
        return;
    };
    if was_current && kept.ascending == (weight > 0.0) && kept.resort_moved(ids, keys) {
        return;
    }
    let Spare { keys: mut bits, mut position, mut placed, mut order } = SPARE.take();
    bits.clear();
    bits.extend(keys.iter().map(|&k| order_bits(k, weight > 0.0)));
    let ids_end = ids.iter().max().map_or(0, |&m| m + 1);
    position.clear();
    position.resize(ids_end, usize::MAX);
    ids.iter().enumerate().for_each(|(p, &id)| position[id] = p);
    let rank = |id: usize| (bits[position[id]], position[id]);
    // The kept order's servers still here with the same key, in their kept order.
    placed.clear();
    placed.resize(ids_end, false);
    order.clear();
    for &id in &kept.order {
        let here = position.get(id).is_some_and(|&p| p != usize::MAX);
        if here && kept.bits.get(id).copied().flatten() == Some(bits[position[id]]) {
            order.push(id);
            placed[id] = true;
        }
    }
    let still_ordered = order.windows(2).all(|w| rank(w[0]) < rank(w[1]));
    let to_place = ids.len() - order.len();
    if still_ordered && to_place <= ids.len() / 8 {
        for &id in ids.iter() {
            if !placed[id] {
                let at = order.partition_point(|&other| rank(other) < rank(id));
                order.insert(at, id);
            }
        }
    } else {
        order.clear();
        order.extend(sorted_positions(&bits).map(|p| ids[p]));
    }
    kept.bits.clear();
    kept.bits.resize(ids_end, None);
    ids.iter().zip(&bits).for_each(|(&id, &b)| kept.bits[id] = Some(b));
    kept.place.resize(ids_end, usize::MAX);
    order.iter().enumerate().for_each(|(at, &id)| kept.place[id] = at);
    let last_position = std::mem::replace(&mut kept.position, position);
    kept.ascending = weight > 0.0;
    kept.order.clone_from(&order);
    kept.input.clone_from(ids);
    // The caller's list buffer is kept for the next sort's order.
    let list = std::mem::replace(ids, order);
    SPARE.set(Spare { keys: bits, position: last_position, placed, order: list });
}

/// A finite key as an integer in the same order (`-0` equal to `0`, as `a - b` finds them),
/// or in the reverse order.
fn order_bits(key: f64, ascending: bool) -> u64 {
    let bits = (key + 0.0).to_bits();
    let ordered = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    if ascending {
        ordered
    } else {
        !ordered
    }
}

/// How a merge ended: everything placed but what is left in the temporary copy, or one
/// element of the copied run left that belongs at the far end.
enum MergeEnd {
    Done,
    LastOfCopied,
}

struct TimSort<'a, T, F> {
    a: &'a mut [T],
    cmp: F,
    min_gallop: usize,
    /// Pending runs as (start, length), bottom of the stack first.
    runs: Vec<(usize, usize)>,
}

/// The comparator's verdict with NaN read as 0, as the language specifies.
fn order<T, F: FnMut(&T, &T) -> f64>(cmp: &mut F, x: &T, y: &T) -> f64 {
    let o = cmp(x, y);
    if o.is_nan() {
        0.0
    } else {
        o
    }
}

/// Where `key` goes in the sorted `run`, before any equal elements, searching outwards
/// from `hint` in growing steps and then by bisection.
fn gallop_left<T, F: FnMut(&T, &T) -> f64>(cmp: &mut F, key: &T, run: &[T], hint: usize) -> usize {
    let (len, hint) = (run.len() as isize, hint as isize);
    let at = |i: isize| &run[i as usize];
    let (mut last, mut ofs) = (0isize, 1isize);
    if order(cmp, at(hint), key) < 0.0 {
        let max = len - hint;
        while ofs < max {
            if order(cmp, at(hint + ofs), key) >= 0.0 {
                break;
            }
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        last += hint;
        ofs += hint;
    } else {
        let max = hint + 1;
        while ofs < max {
            if order(cmp, at(hint - ofs), key) < 0.0 {
                break;
            }
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        (last, ofs) = (hint - ofs, hint - last);
    }
    last += 1;
    while last < ofs {
        let m = last + (ofs - last) / 2;
        if order(cmp, at(m), key) < 0.0 {
            last = m + 1;
        } else {
            ofs = m;
        }
    }
    ofs as usize
}

/// Like [`gallop_left`], but after any elements equal to `key`.
fn gallop_right<T, F: FnMut(&T, &T) -> f64>(cmp: &mut F, key: &T, run: &[T], hint: usize) -> usize {
    let (len, hint) = (run.len() as isize, hint as isize);
    let at = |i: isize| &run[i as usize];
    let (mut last, mut ofs) = (0isize, 1isize);
    if order(cmp, key, at(hint)) < 0.0 {
        let max = hint + 1;
        while ofs < max {
            if order(cmp, key, at(hint - ofs)) >= 0.0 {
                break;
            }
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        (last, ofs) = (hint - ofs, hint - last);
    } else {
        let max = len - hint;
        while ofs < max {
            if order(cmp, key, at(hint + ofs)) < 0.0 {
                break;
            }
            last = ofs;
            ofs = ofs * 2 + 1;
        }
        ofs = ofs.min(max);
        last += hint;
        ofs += hint;
    }
    last += 1;
    while last < ofs {
        let m = last + (ofs - last) / 2;
        if order(cmp, key, at(m)) < 0.0 {
            ofs = m;
        } else {
            last = m + 1;
        }
    }
    ofs as usize
}

impl<T: Copy, F: FnMut(&T, &T) -> f64> TimSort<'_, T, F> {
    fn cmp(&mut self, x: &T, y: &T) -> f64 {
        order(&mut self.cmp, x, y)
    }

    fn sort(&mut self) {
        let n = self.a.len();
        let min_run = {
            // Short lists are one run; longer ones use runs of 32–64 so that the number of
            // runs is (close to) a power of two.
            let (mut m, mut carry) = (n, 0);
            while m >= 64 {
                carry |= m & 1;
                m >>= 1;
            }
            m + carry
        };
        let (mut low, mut remaining) = (0, n);
        while remaining != 0 {
            let mut run = self.natural_run(low, low + remaining);
            if run < min_run {
                let forced = min_run.min(remaining);
                self.insertion_sort(low, low + run, low + forced);
                run = forced;
            }
            self.runs.push((low, run));
            self.merge_collapse();
            low += run;
            remaining -= run;
        }
        while self.runs.len() > 1 {
            let mut i = self.runs.len() - 2;
            if i > 0 && self.runs[i - 1].1 < self.runs[i + 1].1 {
                i -= 1;
            }
            self.merge_at(i);
        }
    }

    /// Length of the run starting at `low` (within `..high`): non-descending, or strictly
    /// descending and then reversed in place.
    fn natural_run(&mut self, low: usize, high: usize) -> usize {
        if low + 1 == high {
            return 1;
        }
        let (x, y) = (self.a[low + 1], self.a[low]);
        let descending = self.cmp(&x, &y) < 0.0;
        let mut len = 2;
        while low + len < high {
            let (x, y) = (self.a[low + len], self.a[low + len - 1]);
            let o = self.cmp(&x, &y);
            if (descending && o >= 0.0) || (!descending && o < 0.0) {
                break;
            }
            len += 1;
        }
        if descending {
            self.a[low..low + len].reverse();
        }
        len
    }

    /// Binary insertion sort of `low..high`, where `low..start` is already sorted.
    fn insertion_sort(&mut self, low: usize, start: usize, high: usize) {
        let first = if start == low { start + 1 } else { start };
        for next in first..high {
            let pivot = self.a[next];
            let (mut left, mut right) = (low, next);
            while left < right {
                let mid = left + (right - left) / 2;
                let other = self.a[mid];
                if self.cmp(&pivot, &other) < 0.0 {
                    right = mid;
                } else {
                    left = mid + 1;
                }
            }
            self.a[left..=next].rotate_right(1);
        }
    }

    /// Merges runs while the pending-run lengths break TimSort's balance rules.
    fn merge_collapse(&mut self) {
        while self.runs.len() > 1 {
            let mut i = self.runs.len() - 2;
            let len = |runs: &[(usize, usize)], k: usize| runs[k].1;
            let balanced =
                |runs: &[(usize, usize)], k: usize| k < 2 || len(runs, k - 2) > len(runs, k - 1) + len(runs, k);
            if !balanced(&self.runs, i + 1) || !balanced(&self.runs, i) {
                if len(&self.runs, i - 1) < len(&self.runs, i + 1) {
                    i -= 1;
                }
                self.merge_at(i);
            } else if len(&self.runs, i) <= len(&self.runs, i + 1) {
                self.merge_at(i);
            } else {
                break;
            }
        }
    }

    /// Merges pending runs `i` and `i + 1`.
    fn merge_at(&mut self, i: usize) {
        let (mut base_a, mut len_a) = self.runs[i];
        let (base_b, mut len_b) = self.runs[i + 1];
        self.runs[i].1 = len_a + len_b;
        self.runs.remove(i + 1);

        // Elements of A already below B's first stay where they are; so do elements of B
        // above A's last.
        let key = self.a[base_b];
        let skip = gallop_right(&mut self.cmp, &key, &self.a[base_a..base_a + len_a], 0);
        base_a += skip;
        len_a -= skip;
        if len_a == 0 {
            return;
        }
        let key = self.a[base_a + len_a - 1];
        len_b = gallop_left(&mut self.cmp, &key, &self.a[base_b..base_b + len_b], len_b - 1);
        if len_b == 0 {
            return;
        }
        if len_a <= len_b {
            self.merge_low(base_a, len_a, base_b, len_b);
        } else {
            self.merge_high(base_a, len_a, base_b, len_b);
        }
    }

    /// Merges front to back, with run A (the shorter) copied aside.
    fn merge_low(&mut self, base_a: usize, mut len_a: usize, base_b: usize, mut len_b: usize) {
        let tmp: Vec<T> = self.a[base_a..base_a + len_a].to_vec();
        let (mut dest, mut ta, mut cb) = (base_a, 0, base_b);
        self.a[dest] = self.a[cb];
        dest += 1;
        cb += 1;
        len_b -= 1;
        let end = 'merge: {
            if len_b == 0 {
                break 'merge MergeEnd::Done;
            }
            if len_a == 1 {
                break 'merge MergeEnd::LastOfCopied;
            }
            let mut min_gallop = self.min_gallop;
            loop {
                let (mut wins_a, mut wins_b) = (0, 0);
                // One element at a time until a side keeps winning.
                loop {
                    let (b, a) = (self.a[cb], tmp[ta]);
                    if self.cmp(&b, &a) < 0.0 {
                        self.a[dest] = b;
                        dest += 1;
                        cb += 1;
                        wins_b += 1;
                        len_b -= 1;
                        wins_a = 0;
                        if len_b == 0 {
                            break 'merge MergeEnd::Done;
                        }
                        if wins_b >= min_gallop {
                            break;
                        }
                    } else {
                        self.a[dest] = a;
                        dest += 1;
                        ta += 1;
                        wins_a += 1;
                        len_a -= 1;
                        wins_b = 0;
                        if len_a == 1 {
                            break 'merge MergeEnd::LastOfCopied;
                        }
                        if wins_a >= min_gallop {
                            break;
                        }
                    }
                }
                // Galloping: move whole stretches while that pays off.
                min_gallop += 1;
                let mut first = true;
                while first || wins_a >= MIN_GALLOP || wins_b >= MIN_GALLOP {
                    first = false;
                    min_gallop = min_gallop.saturating_sub(1).max(1);
                    self.min_gallop = min_gallop;

                    let key = self.a[cb];
                    wins_a = gallop_right(&mut self.cmp, &key, &tmp[ta..ta + len_a], 0);
                    if wins_a > 0 {
                        self.a[dest..dest + wins_a].copy_from_slice(&tmp[ta..ta + wins_a]);
                        dest += wins_a;
                        ta += wins_a;
                        len_a -= wins_a;
                        if len_a == 1 {
                            break 'merge MergeEnd::LastOfCopied;
                        }
                        // Only an inconsistent comparator gets here.
                        if len_a == 0 {
                            break 'merge MergeEnd::Done;
                        }
                    }
                    self.a[dest] = self.a[cb];
                    dest += 1;
                    cb += 1;
                    len_b -= 1;
                    if len_b == 0 {
                        break 'merge MergeEnd::Done;
                    }

                    let key = tmp[ta];
                    wins_b = gallop_left(&mut self.cmp, &key, &self.a[cb..cb + len_b], 0);
                    if wins_b > 0 {
                        self.a.copy_within(cb..cb + wins_b, dest);
                        dest += wins_b;
                        cb += wins_b;
                        len_b -= wins_b;
                        if len_b == 0 {
                            break 'merge MergeEnd::Done;
                        }
                    }
                    self.a[dest] = tmp[ta];
                    dest += 1;
                    ta += 1;
                    len_a -= 1;
                    if len_a == 1 {
                        break 'merge MergeEnd::LastOfCopied;
                    }
                }
                min_gallop += 1;
                self.min_gallop = min_gallop;
            }
        };
        match end {
            MergeEnd::Done => {
                if len_a > 0 {
                    self.a[dest..dest + len_a].copy_from_slice(&tmp[ta..ta + len_a]);
                }
            }
            MergeEnd::LastOfCopied => {
                self.a.copy_within(cb..cb + len_b, dest);
                self.a[dest + len_b] = tmp[ta];
            }
        }
    }

    /// Merges back to front, with run B (the shorter) copied aside. Cursors may step one
    /// below the start of the list, hence the signed arithmetic.
    fn merge_high(&mut self, base_a: usize, mut len_a: usize, base_b: usize, mut len_b: usize) {
        let tmp: Vec<T> = self.a[base_b..base_b + len_b].to_vec();
        let idx = |i: isize| i as usize;
        let mut dest = (base_b + len_b - 1) as isize;
        let mut tb = len_b as isize - 1;
        let mut ca = (base_a + len_a - 1) as isize;
        self.a[idx(dest)] = self.a[idx(ca)];
        dest -= 1;
        ca -= 1;
        len_a -= 1;
        let end = 'merge: {
            if len_a == 0 {
                break 'merge MergeEnd::Done;
            }
            if len_b == 1 {
                break 'merge MergeEnd::LastOfCopied;
            }
            let mut min_gallop = self.min_gallop;
            loop {
                let (mut wins_a, mut wins_b) = (0, 0);
                loop {
                    let (b, a) = (tmp[idx(tb)], self.a[idx(ca)]);
                    if self.cmp(&b, &a) < 0.0 {
                        self.a[idx(dest)] = a;
                        dest -= 1;
                        ca -= 1;
                        wins_a += 1;
                        len_a -= 1;
                        wins_b = 0;
                        if len_a == 0 {
                            break 'merge MergeEnd::Done;
                        }
                        if wins_a >= min_gallop {
                            break;
                        }
                    } else {
                        self.a[idx(dest)] = b;
                        dest -= 1;
                        tb -= 1;
                        wins_b += 1;
                        len_b -= 1;
                        wins_a = 0;
                        if len_b == 1 {
                            break 'merge MergeEnd::LastOfCopied;
                        }
                        if wins_b >= min_gallop {
                            break;
                        }
                    }
                }
                min_gallop += 1;
                let mut first = true;
                while first || wins_a >= MIN_GALLOP || wins_b >= MIN_GALLOP {
                    first = false;
                    min_gallop = min_gallop.saturating_sub(1).max(1);
                    self.min_gallop = min_gallop;

                    let key = tmp[idx(tb)];
                    let k = gallop_right(&mut self.cmp, &key, &self.a[base_a..base_a + len_a], len_a - 1);
                    wins_a = len_a - k;
                    if wins_a > 0 {
                        dest -= wins_a as isize;
                        ca -= wins_a as isize;
                        self.a.copy_within(idx(ca + 1)..idx(ca + 1) + wins_a, idx(dest + 1));
                        len_a -= wins_a;
                        if len_a == 0 {
                            break 'merge MergeEnd::Done;
                        }
                    }
                    self.a[idx(dest)] = tmp[idx(tb)];
                    dest -= 1;
                    tb -= 1;
                    len_b -= 1;
                    if len_b == 1 {
                        break 'merge MergeEnd::LastOfCopied;
                    }

                    let key = self.a[idx(ca)];
                    let k = gallop_left(&mut self.cmp, &key, &tmp[..len_b], len_b - 1);
                    wins_b = len_b - k;
                    if wins_b > 0 {
                        dest -= wins_b as isize;
                        tb -= wins_b as isize;
                        let (to, from) = (idx(dest + 1), idx(tb + 1));
                        self.a[to..to + wins_b].copy_from_slice(&tmp[from..from + wins_b]);
                        len_b -= wins_b;
                        if len_b == 1 {
                            break 'merge MergeEnd::LastOfCopied;
                        }
                        // Only an inconsistent comparator gets here.
                        if len_b == 0 {
                            break 'merge MergeEnd::Done;
                        }
                    }
                    self.a[idx(dest)] = self.a[idx(ca)];
                    dest -= 1;
                    ca -= 1;
                    len_a -= 1;
                    if len_a == 0 {
                        break 'merge MergeEnd::Done;
                    }
                }
                min_gallop += 1;
                self.min_gallop = min_gallop;
            }
        };
        match end {
            MergeEnd::Done => {
                if len_b > 0 {
                    let to = idx(dest + 1 - len_b as isize);
                    self.a[to..to + len_b].copy_from_slice(&tmp[..len_b]);
                }
            }
            MergeEnd::LastOfCopied => {
                dest -= len_a as isize;
                ca -= len_a as isize;
                self.a.copy_within(idx(ca + 1)..idx(ca + 1) + len_a, idx(dest + 1));
                self.a[idx(dest)] = tmp[idx(tb)];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(v: &[f64]) -> String {
        let mut v = v.to_vec();
        js_sort_by(&mut v, |a, b| a - b);
        format!("{v:?}")
    }

    /// A small deterministic generator of test data.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn the_scaled_sort_agrees_with_the_engine() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15_u64);
        for round in 0..400 {
            let n = (next() % 300) as usize;
            let keys: Vec<(usize, f64)> = (0..n)
                .map(|i| {
                    let r = next();
                    let k = match r % 7 {
                        0 => -0.0,
                        1 => 0.0,
                        2 => (r % 5) as f64,
                        3 if round % 5 == 0 => f64::NAN,
                        4 if round % 7 == 0 => f64::INFINITY,
                        _ => (r % 100_000) as f64 / 8.0 - 3000.0,
                    };
                    (i, k)
                })
                .collect();
            // Also handed in sorted already, either way (ties in their input order).
            let mut keys = keys;
            match round % 3 {
                1 => keys.sort_by(|a, b| a.1.total_cmp(&b.1)),
                2 => keys.sort_by(|a, b| b.1.total_cmp(&a.1)),
                _ => {}
            }
            for weight in [1.0, -1.0, 2.0, -3.5, 0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5, -1e-300] {
                let mut expected = keys.clone();
                js_sort_by(&mut expected, |a, b| weight * (a.1 - b.1));
                let mut got = keys.clone();
                js_sort_by_scaled(&mut got, |k| k.1, weight);
                let ids = |v: &[(usize, f64)]| v.iter().map(|k| k.0).collect::<Vec<_>>();
                assert_eq!(ids(&got), ids(&expected), "weight {weight}, round {round}");
            }
        }
    }

    /// The radix sort orders as sorting the packed (key, position) pairs does, for keys that
    /// differ in every byte, in a few, or not at all.
    #[test]
    fn the_radix_sort_orders_as_the_packed_sort() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d_u64);
        for round in 0..60 {
            let n = RADIX_FROM + (next() % 3000) as usize;
            let bits: Vec<u64> = (0..n)
                .map(|_| match round % 4 {
                    0 => next(),
                    1 => order_bits((next() % 500_000) as f64, round % 8 == 1),
                    2 => (next() % 7) << 40,
                    _ => 42,
                })
                .collect();
            let mut packed: Vec<(u64, usize)> = bits.iter().copied().zip(0..).collect();
            packed.sort_unstable();
            let expected: Vec<u32> = packed.into_iter().map(|(_, p)| p as u32).collect();
            assert_eq!(radix_sorted_positions(&bits), expected, "round {round}");
        }
    }

    /// Sorting from a kept order gives what sorting afresh gives, whatever changed between
    /// two lists: keys, members, their order.
    #[test]
    fn a_kept_order_holds_only_when_sorting_again_gives_it() {
        let mut next = xorshift(0x5851_f42d_4c95_7f2d_u64);
        let (mut held, mut rounds) = (0, 0);
        for weight in [1.0, -1.0, 2.0, -3.0] {
            let mut kept = KeptOrder::default();
            let mut keys: Vec<f64> = (0..120).map(|_| (next() % 30) as f64).collect();
            let ids: Vec<usize> = (0..120).rev().collect();
            let list_keys = |keys: &[f64]| ids.iter().map(|&id| keys[id]).collect::<Vec<f64>>();
            let mut sorted = ids.clone();
            js_sort_ids_by_scaled(&mut sorted, &list_keys(&keys), weight, Some(&mut kept));
            for round in 0..400 {
                // One or two keys move a little (ties with their neighbours now and then).
                let moved: Vec<usize> = (0..1 + round % 2).map(|_| (next() % 120) as usize).collect();
                for &id in &moved {
                    keys[id] += (next() % 5) as f64 - 2.0;
                }
                let changed: Vec<(usize, f64)> = moved.iter().map(|&id| (id, keys[id])).collect();
                let mut afresh: Vec<(usize, f64)> = ids.iter().map(|&id| (id, keys[id])).collect();
                js_sort_by(&mut afresh, |a, b| weight * (a.1 - b.1));
                let afresh: Vec<usize> = afresh.iter().map(|p| p.0).collect();
                rounds += 1;
                if kept.holds(ids.len(), &changed, weight) {
                    held += 1;
                    assert_eq!(kept.order, afresh, "weight {weight}, round {round}: held but sorts otherwise");
                }
                let mut again = ids.clone();
                js_sort_ids_by_scaled(&mut again, &list_keys(&keys), weight, Some(&mut kept));
                assert_eq!(again, afresh, "weight {weight}, round {round}");
            }
        }
        // Both outcomes were seen.
        assert!(held > rounds / 10 && held < rounds, "held {held} of {rounds}");
    }

    #[test]
    fn a_kept_order_sorts_as_afresh() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d_u64);
        for weight in [1.0, -1.0, 3.0, 0.5, f64::NAN] {
            let mut kept = KeptOrder::default();
            let mut keys: Vec<f64> = (0..200).map(|_| (next() % 40) as f64).collect();
            let mut ids: Vec<usize> = (0..200).collect();
            for round in 0..300 {
                // One key moves most rounds; now and then the list is shuffled a little,
                // loses a member or gets one back, or a key is not finite.
                let id = (next() % 200) as usize;
                keys[id] = (next() % 40) as f64 - if round % 11 == 0 { 0.0 } else { 0.5 };
                match round % 7 {
                    3 => {
                        let (a, b) = ((next() % ids.len() as u64) as usize, (next() % ids.len() as u64) as usize);
                        ids.swap(a, b);
                    }
                    // The server whose key changed also moves in the list.
                    4 => {
                        if let Some(at) = ids.iter().position(|&i| i == id) {
                            ids.remove(at);
                            ids.insert((next() % (ids.len() as u64 + 1)) as usize, id);
                        }
                    }
                    5 if ids.len() > 150 => {
                        ids.remove((next() % ids.len() as u64) as usize);
                    }
                    6 => {
                        if let Some(missing) = (0..200).find(|i| !ids.contains(i)) {
                            ids.push(missing);
                        }
                    }
                    _ => {}
                }
                if round == 150 {
                    keys[7] = f64::INFINITY;
                }
                if round == 151 {
                    keys[7] = 1.0;
                }
                let list_keys: Vec<f64> = ids.iter().map(|&id| keys[id]).collect();
                let mut afresh: Vec<(usize, f64)> = ids.iter().copied().zip(list_keys.iter().copied()).collect();
                js_sort_by(&mut afresh, |a, b| weight * (a.1 - b.1));
                let mut got = ids.clone();
                js_sort_ids_by_scaled(&mut got, &list_keys, weight, Some(&mut kept));
                let want: Vec<usize> = afresh.iter().map(|p| p.0).collect();
                assert_eq!(got, want, "weight {weight}, round {round}");
            }
        }
    }

    #[test]
    fn stable_for_consistent_comparators() {
        let mut v = vec![(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e')];
        js_sort_by(&mut v, |a, b| f64::from(a.0 - b.0));
        assert_eq!(v, [(1, 'b'), (1, 'e'), (2, 'd'), (3, 'a'), (3, 'c')]);
        let mut v = vec![5, 4, 3, 2, 1];
        js_sort_by(&mut v, |a, b| f64::from(a - b));
        assert_eq!(v, [1, 2, 3, 4, 5]);
        // Long lists with many ties: runs, merges and galloping.
        for n in [63, 64, 65, 200, 1000] {
            let mut v: Vec<(i32, usize)> = (0..n).map(|i| (((i * 7919) % 13) as i32, i)).collect();
            let mut expected = v.clone();
            expected.sort_by_key(|p| p.0);
            js_sort_by(&mut v, |a, b| f64::from(a.0 - b.0));
            assert_eq!(v, expected, "n = {n}");
            let mut desc: Vec<i32> = (0..n as i32).rev().collect();
            js_sort_by(&mut desc, |a, b| f64::from(a - b));
            assert!(desc.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn nan_results_count_as_equal_like_node() {
        // Node 20 results of `sort((a, b) => a - b)`.
        let nan = f64::NAN;
        assert_eq!(sorted(&[1.0, nan, 0.0]), "[1.0, NaN, 0.0]");
        assert_eq!(sorted(&[3.0, 2.0, nan, 1.0, 5.0, 0.0]), "[0.0, 1.0, 2.0, 3.0, NaN, 5.0]");
        assert_eq!(sorted(&[5.0, nan, 4.0, 3.0, nan, 1.0, 9.0, 2.0]), "[5.0, NaN, 1.0, 2.0, 3.0, 4.0, NaN, 9.0]");
        let mut v = vec![2, 1, 3];
        js_sort_by(&mut v, |_, _| f64::NAN);
        assert_eq!(v, [2, 1, 3]);
    }

    #[test]
    fn nan_results_in_long_lists_like_node() {
        // 70 values i*37 mod 23, every 7th NaN, sorted in Node 20 by `a - b`: runs are
        // merged with galloping, and the NaNs end up where that leaves them.
        let input: Vec<f64> = (0..70).map(|i| if i % 7 == 0 { f64::NAN } else { f64::from((i * 37) % 23) }).collect();
        let expected = "[NaN, 0.0, 1.0, 2.0, 2.0, 3.0, 4.0, 5.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 10.0, 11.0, 11.0, \
                        13.0, 14.0, 14.0, 15.0, 15.0, 16.0, 19.0, NaN, 16.0, 17.0, 20.0, 20.0, 21.0, NaN, 22.0, NaN, \
                        19.0, NaN, NaN, 0.0, 0.0, 1.0, 3.0, 3.0, 4.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 9.0, 10.0, 11.0, \
                        12.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 17.0, 18.0, 18.0, 21.0, 22.0, NaN, NaN, 20.0, NaN, \
                        21.0, NaN, 22.0]";
        assert_eq!(sorted(&input), expected);
    }

    #[test]
    fn descending_numeric_comparator_with_nan_like_node() {
        // Orders Node 20 produces for `.sort((a, b) => b - a)`: a NaN comparison counts as
        // "equal", so NaNs stay where the run detection and insertion leave them.
        let nan = f64::NAN;
        let long = [
            11., 18., 19., nan, 8., 0., 6., 16., 6., 4., 17., 0., 8., 9., 17., 4., 1., 3., 9., 10., nan, 5., 15., nan,
            11., nan, 4., 10., 7., 18., 2.,
        ];
        let long_sorted = [
            "19", "18", "18", "17", "17", "11", "NaN", "16", "15", "11", "10", "10", "9", "9", "8", "8", "7", "6", "6",
            "5", "4", "4", "4", "3", "1", "0", "0", "NaN", "NaN", "NaN", "2",
        ];
        let cases: [(&[f64], &[&str]); 4] = [
            (&[3.0, f64::NAN, 1.0, 2.0], &["3", "NaN", "2", "1"]),
            (&[5.0, f64::NAN, 4.0, f64::NAN, 7.0, 1.0, 8.0], &["5", "NaN", "4", "NaN", "8", "7", "1"]),
            (&[f64::NAN, 5.0, f64::NAN, 4.0, 9.0, 1.0, 8.0], &["NaN", "5", "NaN", "9", "8", "4", "1"]),
            (&long, &long_sorted),
        ];
        for (input, expected) in cases {
            let mut v = input.to_vec();
            js_sort_by(&mut v, |a, b| b - a);
            let shown: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            assert_eq!(shown, expected);
        }
        let mut w = [1, 2, 3, 0, 5, 4];
        js_sort_by(&mut w, |a, b| f64::from(*a) - f64::from(*b));
        assert_eq!(w, [0, 1, 2, 3, 4, 5]);
    }
}
