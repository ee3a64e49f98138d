//! Which CPU a thread runs on, for the few places where two threads must truly run at once.
//!
//! On a guest whose idle vCPUs halt, the kernel may put a woken or new thread on the vCPU of
//! the thread that woke or started it (Firecracker guests' `kernel.sched_vcpu_pack`): the
//! two then take turns on one vCPU while the other idles, until the kernel moves one. Where
//! a big request splits its work between two threads (its servers array read from both
//! ends, its decision's passes), the caller is held on its CPU and the other thread moved
//! off it ([`Apart`], `engine::busy`). Elsewhere than Linux nothing is placed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a caller waits for the other thread to be placed before it goes on anyway.
const PLACED_WITHIN: Duration = Duration::from_millis(2);

/// This thread held on the CPU it runs on until dropped, then let run where it could before.
pub(crate) struct HeldHere {
    cpu: i32,
    before: CpuSet,
}

impl HeldHere {
    /// `None` where the CPU or the affinity cannot be told or set.
    pub(crate) fn new() -> Option<HeldHere> {
        let (cpu, before) = (current_cpu()?, affinity()?);
        set_affinity(&only(cpu)).then_some(HeldHere { cpu, before })
    }

    pub(crate) fn cpu(&self) -> i32 {
        self.cpu
    }

    /// Where this thread could run before it was held (a thread it starts meanwhile
    /// inherits only the CPU it is held on).
    pub(crate) fn before(&self) -> &CpuSet {
        &self.before
    }
}

impl Drop for HeldHere {
    fn drop(&mut self) {
        set_affinity(&self.before);
    }
}

/// Moves this thread onto the CPUs of `allowed` but `cpu`: whether it now runs elsewhere
/// than `cpu` (false when that leaves no CPU, or the move is refused).
pub(crate) fn move_off(allowed: &CpuSet, cpu: i32) -> bool {
    let mut others = *allowed;
    clear_cpu(&mut others, cpu);
    cpu_count(&others) > 0 && set_affinity(&others) && current_cpu().is_some_and(|now| now != cpu)
}

/// A thread about to hand work to another one it starts: held on its CPU, it waits
/// ([`Apart::wait`]) for the other to move off it ([`Apart::move_off`], the other's first
/// step), so that both run from the start.
pub(crate) struct Apart {
    held: Option<HeldHere>,
    caller: Thread,
    placed: AtomicBool,
}

impl Apart {
    pub(crate) fn new() -> Apart {
        Apart { held: HeldHere::new(), caller: std::thread::current(), placed: AtomicBool::new(false) }
    }

    /// On the other thread: off the caller's CPU, onto the others the caller could use (for
    /// good: the thread is the caller's to end), then the caller is told.
    pub(crate) fn move_off(&self) {
        if let Some(held) = &self.held {
            move_off(held.before(), held.cpu());
        }
        self.placed.store(true, Ordering::Release);
        self.caller.unpark();
    }

    /// On the caller: parked until the other thread is placed, for [`PLACED_WITHIN`] at most.
    pub(crate) fn wait(&self) {
        if self.held.is_some() {
            park_until(|| self.placed.load(Ordering::Acquire));
        }
    }
}

/// Parks this thread until `placed` holds (the thread placing itself unparks it), for
/// [`PLACED_WITHIN`] at most: whether it held.
pub(crate) fn park_until(placed: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + PLACED_WITHIN;
    while !placed() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::park_timeout(left);
    }
    true
}

#[cfg(target_os = "linux")]
pub(crate) type CpuSet = libc::cpu_set_t;
#[cfg(not(target_os = "linux"))]
pub(crate) type CpuSet = ();

/// The CPU this thread runs on.
#[cfg(target_os = "linux")]
pub(crate) fn current_cpu() -> Option<i32> {
    // SAFETY: no arguments; it returns the CPU or -1.
    let cpu = unsafe { libc::sched_getcpu() };
    (cpu >= 0).then_some(cpu)
}

/// The CPUs this thread may run on.
#[cfg(target_os = "linux")]
pub(crate) fn affinity() -> Option<CpuSet> {
    // SAFETY: a zeroed `cpu_set_t` is an empty set, which the call fills.
    unsafe {
        let mut set: CpuSet = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<CpuSet>(), &mut set) == 0).then_some(set)
    }
}

/// Whether this thread now runs on `set` only (the kernel moves it at once if need be).
#[cfg(target_os = "linux")]
pub(crate) fn set_affinity(set: &CpuSet) -> bool {
    // SAFETY: `set` is a valid `cpu_set_t`; a refusal leaves the affinity as it was.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<CpuSet>(), set) == 0 }
}

#[cfg(target_os = "linux")]
fn only(cpu: i32) -> CpuSet {
    // SAFETY: as in `affinity`.
    let mut set: CpuSet = unsafe { std::mem::zeroed() };
    if cpu >= 0 && (cpu as usize) < libc::CPU_SETSIZE as usize {
        // SAFETY: `cpu` is within the set's size.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    }
    set
}

#[cfg(target_os = "linux")]
pub(crate) fn cpu_in(set: &CpuSet, cpu: i32) -> bool {
    // SAFETY: `cpu` is checked to be within the set's size.
    cpu >= 0 && (cpu as usize) < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu as usize, set) }
}

#[cfg(target_os = "linux")]
fn clear_cpu(set: &mut CpuSet, cpu: i32) {
    if cpu_in(set, cpu) {
        // SAFETY: `cpu_in` checked it is within the set's size.
        unsafe { libc::CPU_CLR(cpu as usize, set) };
    }
}

#[cfg(target_os = "linux")]
fn cpu_count(set: &CpuSet) -> i32 {
    // SAFETY: counts the bits of a valid set.
    unsafe { libc::CPU_COUNT(set) }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn current_cpu() -> Option<i32> {
    None
}
#[cfg(not(target_os = "linux"))]
pub(crate) fn affinity() -> Option<CpuSet> {
    None
}
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_affinity(_set: &CpuSet) -> bool {
    false
}
#[cfg(not(target_os = "linux"))]
fn only(_cpu: i32) -> CpuSet {}
#[cfg(not(target_os = "linux"))]
pub(crate) fn cpu_in(_set: &CpuSet, _cpu: i32) -> bool {
    false
}
#[cfg(not(target_os = "linux"))]
fn clear_cpu(_set: &mut CpuSet, _cpu: i32) {}
#[cfg(not(target_os = "linux"))]
fn cpu_count(_set: &CpuSet) -> i32 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus() -> Option<Vec<i32>> {
        affinity().map(|set| (0..1024).filter(|&cpu| cpu_in(&set, cpu)).collect())
    }

    #[test]
    fn a_thread_held_here_runs_where_it_could_again_once_let_go() {
        let before = cpus();
        {
            let held = HeldHere::new();
            assert_eq!(held.is_some(), cfg!(target_os = "linux"));
            if let Some(held) = &held {
                assert_eq!(cpus(), Some(vec![held.cpu()]));
                assert_eq!(current_cpu(), Some(held.cpu()));
            }
        }
        assert_eq!(cpus(), before);
    }

    #[test]
    fn the_other_thread_of_an_apart_pair_runs_off_the_callers_cpu_where_there_is_another() {
        // Asked before the caller is held (then it may run on one CPU only).
        let more_than_one = cpus().is_some_and(|cpus| cpus.len() > 1);
        let apart = Apart::new();
        let other_cpu = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                apart.move_off();
                current_cpu()
            });
            apart.wait();
            other.join().ok().flatten()
        });
        let held = apart.held.as_ref().map(HeldHere::cpu);
        assert_eq!(other_cpu.is_some() && other_cpu != held, held.is_some() && more_than_one, "{other_cpu:?} {held:?}");
    }
}
