//! Helpers kept running through a big decision, so that its parallel passes are parallel.
//!
//! A decision over thousands of servers makes about twenty passes split over the cores
//! ([`super::parallel::map_parts`]), each a few hundred µs. Handing a part to a sleeping
//! thread means waking it, and on a guest whose idle vCPUs halt the kernel may put a woken
//! thread on the waker's own vCPU (Firecracker guests' `kernel.sched_vcpu_pack`): the
//! helper then runs only once the caller waits for it, after its own part. Measured at 5,000
//! servers: 93% of the hand-offs ran on the caller's vCPU, and a pass took as long as its
//! two parts one after the other (255 µs for 250 µs of work).
//!
//! So for the length of a big decision ([`with_busy_helpers`]) each helper is woken once,
//! moved off the decision's CPU (`crate::placement`: its affinity set to the other CPUs, the
//! decision's thread held on its own), and polls for parts instead of sleeping; a pass hands its parts over
//! through a slot per helper and polls for their end. A pass then takes ~150 µs rather than
//! 255. One decision at a time has the helpers; another one running meanwhile uses the
//! ordinary pass threads. The polling yields the CPU every few µs, so that a thread with
//! work to do on that CPU is not kept from it.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;

use crate::placement::{affinity, current_cpu, move_off, park_until, set_affinity, CpuSet, HeldHere};

/// Polls between two yields of the CPU while waiting for work or for a part to end.
const POLLS_PER_YIELD: u32 = 256;

/// A part handed to a helper: the work, and whether it has ended (and how).
struct Job<'a> {
    run: &'a (dyn Fn() + Sync),
    done: AtomicBool,
    panicked: AtomicBool,
}

/// One helper's side. Each decision that has the helpers has a number of its own, so that
/// a helper still leaving one decision is not taken to be ready for the next.
struct Slot {
    /// The decision that wants this helper polling (0: none).
    wanted: AtomicU64,
    /// The decision this helper polls for, off the decision's CPU.
    ready: AtomicU64,
    /// The decision this helper could not keep off the decision's CPU, and so left alone.
    declined: AtomicU64,
    /// The CPU the decision's thread is held on.
    caller_cpu: AtomicI32,
    /// The part to run: a `Job` on the stack of the pass that polls for its end.
    job: AtomicPtr<Job<'static>>,
    /// The decision's thread, woken when the helper is ready (or has declined).
    caller: Mutex<Option<Thread>>,
}

struct Helpers {
    slots: &'static [Slot],
    threads: Vec<Thread>,
    /// Held by the one decision that has the helpers.
    taken: Mutex<()>,
}

thread_local! {
    /// The helpers, while this thread runs a decision that has them.
    static HELD: Cell<Option<&'static Helpers>> = const { Cell::new(None) };
}

fn helpers() -> Option<&'static Helpers> {
    static HELPERS: OnceLock<Option<Helpers>> = OnceLock::new();
    HELPERS.get_or_init(start).as_ref()
}

/// One helper per core besides the caller's; none where there is one core, or where
/// threads cannot be placed (not Linux).
fn start() -> Option<Helpers> {
    let count = crate::cores().unwrap_or(1).saturating_sub(1);
    // Where the helpers may run: where the thread that starts them may (a decision's, not
    // yet held on its CPU).
    let allowed = affinity()?;
    if count == 0 || current_cpu().is_none() {
        return None;
    }
    // The slots live as long as the process: the helpers read them for good.
    let slots: &'static [Slot] = Vec::leak(
        (0..count)
            .map(|_| Slot {
                wanted: AtomicU64::new(0),
                ready: AtomicU64::new(0),
                declined: AtomicU64::new(0),
                caller_cpu: AtomicI32::new(-1),
                job: AtomicPtr::new(std::ptr::null_mut()),
                caller: Mutex::new(None),
            })
            .collect(),
    );
    let mut threads = Vec::with_capacity(count);
    for (i, slot) in slots.iter().enumerate() {
        let spawned = std::thread::Builder::new().name(format!("dapi-busy-{i}")).spawn(move || serve(slot, allowed));
        threads.push(spawned.ok()?.thread().clone());
    }
    Some(Helpers { slots, threads, taken: Mutex::new(()) })
}

/// Runs `decide` with the helpers polling for its passes' parts, when they are free and
/// come up in time; otherwise `decide` runs as it would without them.
pub fn with_busy_helpers<R>(decide: impl FnOnce() -> R) -> R {
    if HELD.with(Cell::get).is_some() {
        return decide();
    }
    let Some(helpers) = helpers() else { return decide() };
    let Ok(_taken) = helpers.taken.try_lock() else { return decide() };
    // Held on its CPU, this thread cannot be moved onto a helper's.
    let Some(held) = HeldHere::new() else { return decide() };
    let cpu = held.cpu();
    static DECISIONS: AtomicU64 = AtomicU64::new(0);
    let decision = DECISIONS.fetch_add(1, Ordering::Relaxed) + 1;

    /// Lets the helpers go (each stops polling once its slot wants another decision or
    /// none), then this thread's placement (`HeldHere`), also when the decision panics.
    struct Release {
        helpers: &'static Helpers,
        _held: HeldHere,
    }
    impl Drop for Release {
        fn drop(&mut self) {
            HELD.with(|held| held.set(None));
            for slot in self.helpers.slots {
                slot.wanted.store(0, Ordering::Release);
            }
        }
    }
    let release = Release { helpers, _held: held };
    for (slot, thread) in helpers.slots.iter().zip(&helpers.threads) {
        *slot.caller.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
        slot.caller_cpu.store(cpu, Ordering::Relaxed);
        slot.wanted.store(decision, Ordering::Release);
        thread.unpark();
    }
    // Parked, this thread lets a helper woken onto its CPU run and move away.
    let ready = |slot: &Slot| slot.ready.load(Ordering::Acquire) == decision;
    let answered = |slot: &Slot| ready(slot) || slot.declined.load(Ordering::Acquire) == decision;
    if !park_until(|| helpers.slots.iter().all(answered)) || !helpers.slots.iter().all(ready) {
        drop(release);
        return decide();
    }
    HELD.with(|held| held.set(Some(helpers)));
    let decided = decide();
    drop(release);
    decided
}

/// The `parts` run at once, the first on this thread and each other one on a polling
/// helper, in order; `None` (nothing run) unless this thread's decision has the helpers,
/// enough of them.
pub fn run_parts<T: Send>(parts: &[&(dyn Fn() -> T + Sync)]) -> Option<Vec<T>> {
    let helpers = HELD.with(Cell::get)?;
    let (mine, others) = parts.split_first()?;
    if others.len() > helpers.slots.len() {
        return None;
    }
    let outs: Vec<Mutex<Option<T>>> = others.iter().map(|_| Mutex::new(None)).collect();
    let works: Vec<_> = others
        .iter()
        .zip(&outs)
        .map(|(part, out)| {
            move || {
                let value = part();
                *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
            }
        })
        .collect();
    let jobs: Vec<Job<'_>> = works
        .iter()
        .map(|work| Job { run: work, done: AtomicBool::new(false), panicked: AtomicBool::new(false) })
        .collect();
    /// Polls for the end of every job handed over before the frame they live in goes, also
    /// when this thread's own part panics.
    struct AwaitAll<'j, 'a>(&'j [Job<'a>]);
    impl Drop for AwaitAll<'_, '_> {
        fn drop(&mut self) {
            for job in self.0 {
                poll_until(|| job.done.load(Ordering::Acquire));
            }
        }
    }
    let awaited = AwaitAll(&jobs);
    for (job, slot) in jobs.iter().zip(helpers.slots) {
        // The helper reads the job only until it sets `done`, and `AwaitAll` keeps this
        // frame (the job and all it borrows) until then: the lifetime is only erased.
        let job: *const Job<'_> = job;
        slot.job.store(job as *mut Job<'static>, Ordering::Release);
    }
    let first = mine();
    drop(awaited);
    if jobs.iter().any(|job| job.panicked.load(Ordering::Relaxed)) {
        panic!("a part of a pass over the servers panicked");
    }
    let mut values = Vec::with_capacity(parts.len());
    values.push(first);
    for out in outs {
        values.push(out.into_inner().unwrap_or_else(|e| e.into_inner())?);
    }
    Some(values)
}

/// A helper's life: parked until a decision wants it, then off the decision's CPU and
/// polling for parts until the decision lets go.
fn serve(slot: &'static Slot, allowed: CpuSet) {
    loop {
        let decision = loop {
            match slot.wanted.load(Ordering::Acquire) {
                0 => std::thread::park(),
                decision => break decision,
            }
        };
        // Refused, or nowhere else to go: polling beside the decision would only slow it.
        let moved = move_off(&allowed, slot.caller_cpu.load(Ordering::Relaxed));
        if moved {
            slot.ready.store(decision, Ordering::Release);
        } else {
            slot.declined.store(decision, Ordering::Release);
        }
        if let Some(caller) = slot.caller.lock().unwrap_or_else(|e| e.into_inner()).take() {
            caller.unpark();
        }
        if moved {
            poll_until(|| {
                let job = slot.job.swap(std::ptr::null_mut(), Ordering::Acquire);
                if !job.is_null() {
                    // SAFETY: the pass that stored the job polls for `done` before its
                    // frame, which holds the job, goes (`run_parts`).
                    let job = unsafe { &*job };
                    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| (job.run)()));
                    #[cfg(test)]
                    tests::RUN_ON_HELPERS.fetch_add(1, Ordering::Relaxed);
                    job.panicked.store(ran.is_err(), Ordering::Relaxed);
                    job.done.store(true, Ordering::Release);
                }
                slot.wanted.load(Ordering::Acquire) != decision
            });
        }
        set_affinity(&allowed);
    }
}

/// Polls `done` until it holds, yielding the CPU every [`POLLS_PER_YIELD`] polls.
fn poll_until(mut done: impl FnMut() -> bool) {
    let mut polls = 0u32;
    while !done() {
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(POLLS_PER_YIELD) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parallel::{deciding, map_servers, sift, PARALLEL_FROM};
    use super::*;
    use crate::engine::ServerId;
    use crate::placement::cpu_in;

    /// Parts run on a busy helper since the tests began.
    pub(super) static RUN_ON_HELPERS: AtomicU64 = AtomicU64::new(0);

    fn many() -> Vec<ServerId> {
        (0..PARALLEL_FROM * 4 + 13).rev().collect()
    }

    #[test]
    fn passes_in_a_busy_decision_give_what_they_give_without_helpers() {
        let ids = many();
        let plain = (map_servers(&ids, |id| id * 7), sift(&ids, |id| (id % 5 == 0).then_some(id)));
        for _ in 0..20 {
            let busy =
                deciding(ids.len(), || (map_servers(&ids, |id| id * 7), sift(&ids, |id| (id % 5 == 0).then_some(id))));
            assert_eq!(busy, plain);
        }
    }

    #[test]
    fn a_big_decision_has_the_helpers_where_there_are_cores_and_its_thread_is_placed_back() {
        let ids = many();
        let before = affinity().map(|set| (0..1024).filter(|&cpu| cpu_in(&set, cpu)).collect::<Vec<_>>());
        // Other tests' decisions may hold the helpers for a while: a few hundred tries.
        for _ in 0..500 {
            let ran = RUN_ON_HELPERS.load(Ordering::Relaxed);
            deciding(ids.len(), || map_servers(&ids, |id| id));
            if RUN_ON_HELPERS.load(Ordering::Relaxed) > ran {
                break;
            }
        }
        let after = affinity().map(|set| (0..1024).filter(|&cpu| cpu_in(&set, cpu)).collect::<Vec<_>>());
        assert_eq!(after, before);
        let helped = RUN_ON_HELPERS.load(Ordering::Relaxed) > 0;
        assert_eq!(helped, helpers().is_some(), "helpers exist on Linux with two cores or more, and are used");
        assert_eq!(helpers().is_some(), cfg!(target_os = "linux") && crate::cores().unwrap_or(1) >= 2);
    }

    #[test]
    fn a_panic_in_a_busy_decision_reaches_its_caller_and_leaves_the_helpers_usable() {
        let ids = many();
        let last = *ids.last().unwrap_or(&0);
        let first = ids[0];
        for bad in [last, first] {
            let caught =
                std::panic::catch_unwind(|| deciding(ids.len(), || map_servers(&ids, |id| assert_ne!(id, bad))));
            assert!(caught.is_err());
        }
        assert_eq!(
            deciding(ids.len(), || map_servers(&ids, |id| id + 1)),
            ids.iter().map(|id| id + 1).collect::<Vec<_>>()
        );
    }

    #[test]
    fn decisions_at_the_same_time_each_get_their_own_answers() {
        let ids = many();
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..4usize)
                .map(|k| {
                    let ids = &ids;
                    scope.spawn(move || {
                        let expected: Vec<ServerId> = ids.iter().map(|id| id * k).collect();
                        (0..25).all(|_| deciding(ids.len(), || map_servers(ids, |id| id * k)) == expected)
                    })
                })
                .collect();
            for run in runs {
                assert_eq!(run.join().ok(), Some(true));
            }
        });
    }

    #[test]
    fn a_decision_within_a_decision_runs_as_one() {
        let ids = many();
        let nested = deciding(ids.len(), || deciding(ids.len(), || map_servers(&ids, |id| id % 3)));
        assert_eq!(nested, ids.iter().map(|id| id % 3).collect::<Vec<_>>());
    }
}
