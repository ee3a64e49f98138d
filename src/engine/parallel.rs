//! Looking at many servers on every core.
//!
//! With thousands of candidates a plugin's time goes to fetching each server's data from
//! memory, one server after another; splitting the candidates over the cores divides that
//! time. The parts go to threads kept for them (one per core besides the caller's); below
//! [`PARALLEL_FROM`] candidates handing a part over costs more than it saves, so small
//! requests (CNAPI's usual tens of servers) stay on the calling thread. Within a whole
//! decision ([`deciding`]) the parts go to helpers kept polling on the other cores instead
//! (`super::busy`), when free. Results keep the candidates' order, so the answer is the same
//! either way.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::engine::ServerId;

/// The fewest candidates per core worth a thread of their own.
pub const PARALLEL_FROM: usize = 1024;

fn cores() -> usize {
    crate::cores().unwrap_or(1)
}

thread_local! {
    static ONE_CORE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every pass over the servers on the calling thread: for a caller whose
/// runs are one at a time while the other cores serve other work (inventory mode's
/// decisions), where handing parts over costs more, and waits longer, than it saves.
pub fn on_one_core<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ONE_CORE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(ONE_CORE.with(|c| c.replace(true)));
    f()
}

/// `f` of each candidate, in the candidates' order.
pub fn map_servers<T: Send>(ids: &[ServerId], f: impl Fn(ServerId) -> T + Sync) -> Vec<T> {
    let parts = map_parts(ids, |part| part.iter().map(|&id| f(id)).collect::<Vec<T>>());
    let mut parts = parts.into_iter();
    let mut out = parts.next().unwrap_or_default();
    for part in parts {
        out.extend(part);
    }
    out
}

/// Runs `decide`, a decision over `candidates` servers; when its passes will be split over
/// the cores, with the helpers kept polling for their parts throughout (see `busy`).
pub fn deciding<R>(candidates: usize, decide: impl FnOnce() -> R) -> R {
    if parts_for(candidates) > 1 {
        super::busy::with_busy_helpers(decide)
    } else {
        decide()
    }
}

/// How many parts a pass over `candidates` is split into (1: it stays on the calling thread).
fn parts_for(candidates: usize) -> usize {
    if ONE_CORE.with(Cell::get) {
        1
    } else {
        cores().min(candidates / PARALLEL_FROM).max(1)
    }
}

/// Threads kept for the passes, one per core besides the caller's: a thread started per
/// pass cost 40-70 µs, and a request of thousands of servers makes about thirty passes.
fn pass_threads() -> Option<&'static rayon_core::ThreadPool> {
    static POOL: OnceLock<Option<rayon_core::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let helpers = cores().saturating_sub(1);
        (helpers > 0)
            .then(|| {
                rayon_core::ThreadPoolBuilder::new()
                    .num_threads(helpers)
                    .thread_name(|i| format!("dapi-pass-{i}"))
                    .build()
                    .ok()
            })
            .flatten()
    })
    .as_ref()
}

/// `f` of consecutive parts of the candidates (one per core when there are many, else
/// one), in order. The caller reads the first part itself.
pub fn map_parts<'i, T: Send>(ids: &'i [ServerId], f: impl Fn(&'i [ServerId]) -> T + Sync) -> Vec<T> {
    let threads = parts_for(ids.len());
    let pool = match pass_threads() {
        Some(pool) if threads > 1 => pool,
        _ => return vec![f(ids)],
    };
    let per_thread = ids.len().div_ceil(threads);
    let f = &f;
    let calls: Vec<_> = ids.chunks(per_thread).map(|part| move || f(part)).collect();
    let calls: Vec<&(dyn Fn() -> T + Sync)> = calls.iter().map(|call| call as &(dyn Fn() -> T + Sync)).collect();
    if let Some(outs) = super::busy::run_parts(&calls) {
        return outs;
    }
    let mut parts = ids.chunks(per_thread);
    let mine = parts.next().unwrap_or_default();
    let mut outs: Vec<Option<T>> = (0..threads).map(|_| None).collect();
    if let Some((first, rest)) = outs.split_first_mut() {
        // A panic in a part reaches the caller once every part has ended.
        pool.in_place_scope(|scope| {
            for (slot, part) in rest.iter_mut().zip(parts) {
                scope.spawn(move |_| *slot = Some(f(part)));
            }
            *first = Some(f(mine));
        });
    }
    debug_assert!(outs.iter().all(Option::is_some), "every part ran");
    outs.into_iter().flatten().collect()
}

/// The candidates `check` passes (`None`), and the others with what `check` said of them,
/// both in the candidates' order. Each core sifts its own part: a verdict kept per
/// candidate (80 bytes for a filter's) would be written and read again for every pass.
pub fn sift<M: Send>(
    ids: &[ServerId],
    check: impl Fn(ServerId) -> Option<M> + Sync,
) -> (Vec<ServerId>, Vec<(ServerId, M)>) {
    let parts = map_parts(ids, |part| {
        let mut kept = Vec::with_capacity(part.len());
        let mut removed = Vec::new();
        for &id in part {
            match check(id) {
                None => kept.push(id),
                Some(why) => removed.push((id, why)),
            }
        }
        (kept, removed)
    });
    let mut parts = parts.into_iter();
    let (mut kept, mut removed) = parts.next().unwrap_or_default();
    for (part_kept, part_removed) in parts {
        kept.extend(part_kept);
        removed.extend(part_removed);
    }
    (kept, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_candidates_give_the_same_answer_in_the_same_order() {
        for n in [0, 1, 5, PARALLEL_FROM - 1, PARALLEL_FROM * 2 + 7, PARALLEL_FROM * 5] {
            let ids: Vec<ServerId> = (0..n).rev().collect();
            assert_eq!(map_servers(&ids, |id| id * 3), ids.iter().map(|id| id * 3).collect::<Vec<_>>());
            let (kept, removed) = sift(&ids, |id| (id % 3 == 0).then(|| format!("{id} is a multiple of 3")));
            assert_eq!(kept, ids.iter().copied().filter(|id| id % 3 != 0).collect::<Vec<_>>());
            let expected: Vec<_> =
                ids.iter().filter(|&&id| id % 3 == 0).map(|&id| (id, format!("{id} is a multiple of 3"))).collect();
            assert_eq!(removed, expected);
        }
    }

    #[test]
    fn a_panic_on_another_core_reaches_the_caller() {
        let ids: Vec<ServerId> = (0..PARALLEL_FROM * 4).collect();
        let last = *ids.last().unwrap_or(&0);
        let caught = std::panic::catch_unwind(|| map_servers(&ids, |id| assert_ne!(id, last, "a bug")));
        assert!(caught.is_err());
    }
}
