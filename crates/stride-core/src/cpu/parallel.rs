//! The one door from the CPU kernels into rayon.
//!
//! Every parallel kernel splits its work into a few numbered tasks (about four per thread) and
//! hands them to [`run_tasks`], which takes the task as `&dyn Fn(usize)`. That is on purpose:
//! handed a generic closure, rayon's splitting machinery (`join`, jobs, latches, unwinding) is
//! compiled again for every kernel × dtype × op, and it was half of stride-core's LLVM IR
//! (4.5 M of 9 M lines, 2,600 copies of `join_context`) and of its build time. Behind one
//! `dyn` call it is compiled once. The indirect call happens once per task, next to a task's
//! ≥ [`PAR_GRAIN`](super::strided::PAR_GRAIN) elements of work: nothing.
//!
//! The generic helpers here ([`par_map`], [`run_tasks_with`]) only do bookkeeping around
//! [`run_tasks`]; results always come back in task order, so a parallel reduction merges its
//! parts in the same order on every run and every thread count.

use super::strided::SendPtr;
use rayon::prelude::*;

/// Calls `task(t)` once for every `t` in `0..tasks`: on rayon's pool when there are two tasks
/// or more and more than one thread, in order on this thread otherwise.
pub(crate) fn run_tasks(tasks: usize, task: &(dyn Fn(usize) + Sync)) {
    if tasks < 2 || rayon::current_num_threads() < 2 {
        (0..tasks).for_each(task);
    } else {
        (0..tasks).into_par_iter().for_each(task);
    }
}

/// Calls `f(start, end)` over `tasks` equal chunks of `0..n` (the last may be shorter; empty
/// ones are skipped), each chunk a task of [`run_tasks`]: the one place the kernels' "split
/// `n` lines/outputs/positions into a few tasks" arithmetic lives.
pub(crate) fn run_chunks(n: usize, tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let chunk = n.div_ceil(tasks.max(1)).max(1);
    run_tasks(n.div_ceil(chunk), &|t| {
        f(t * chunk, ((t + 1) * chunk).min(n))
    });
}

/// [`run_tasks`] where each task gets a scratch value (a staging buffer, an accumulator row):
/// `init` runs once per group of consecutive tasks, not once per task.
pub(crate) fn run_tasks_with<S>(
    tasks: usize,
    init: impl Fn() -> S + Sync,
    task: impl Fn(&mut S, usize) + Sync,
) {
    let groups = tasks.min(rayon::current_num_threads() * 8).max(1);
    let per = tasks.div_ceil(groups);
    run_tasks(groups, &|g| {
        let mut scratch = init();
        (g * per..((g + 1) * per).min(tasks)).for_each(|t| task(&mut scratch, t));
    });
}

/// Splits `0..n` into ranges for the pool, each of at least `grain` elements and at most four
/// per thread (one range when small or single-threaded).
pub(crate) fn split_ranges(n: usize, grain: usize) -> Vec<(usize, usize)> {
    if n == 0 {
        return vec![];
    }
    let threads = rayon::current_num_threads();
    let tasks = if threads < 2 {
        1
    } else {
        (n / grain.max(1)).clamp(1, threads * 4)
    };
    let chunk = n.div_ceil(tasks);
    (0..tasks)
        .map(|t| (t * chunk, ((t + 1) * chunk).min(n)))
        .filter(|(s, e)| s < e)
        .collect()
}

/// `f(start, end)` over each range, in parallel when there are several; the results in range
/// order.
pub(crate) fn par_map<R: Send>(
    ranges: &[(usize, usize)],
    f: impl Fn(usize, usize) -> R + Sync,
) -> Vec<R> {
    let n = ranges.len();
    let mut out: Vec<R> = Vec::with_capacity(n);
    let slots = SendPtr(out.as_mut_ptr());
    run_tasks(n, &|t| {
        let (s, e) = ranges[t];
        // SAFETY: slot t < n lies in the capacity and is written by task t alone
        unsafe { slots.get().add(t).write(f(s, e)) }
    });
    // SAFETY: run_tasks returned, so every task ran and every slot is written (a panicking task
    // unwinds through run_tasks before this line: the written results leak, nothing is read)
    unsafe { out.set_len(n) };
    out
}

/// [`par_map`] over `0..tasks`, one task each.
pub(crate) fn map_tasks<R: Send>(tasks: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let ranges: Vec<(usize, usize)> = (0..tasks).map(|t| (t, t + 1)).collect();
    par_map(&ranges, |t, _| f(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_task_runs_once_and_results_keep_their_order() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                for tasks in [0, 1, 2, 7, 64, 1000] {
                    let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                    run_tasks(tasks, &|t| {
                        hits[t].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));

                    let inits = AtomicUsize::new(0);
                    let seen: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                    run_tasks_with(
                        tasks,
                        || inits.fetch_add(1, Ordering::Relaxed),
                        |_, t| {
                            seen[t].fetch_add(1, Ordering::Relaxed);
                        },
                    );
                    assert!(seen.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                    assert!(inits.load(Ordering::Relaxed) <= threads * 8);

                    // every position of 0..n in exactly one chunk, whatever the task count
                    for n in [0, 1, 5, 9, 100] {
                        let covered: Vec<AtomicUsize> =
                            (0..n).map(|_| AtomicUsize::new(0)).collect();
                        run_chunks(n, tasks, &|s, e| {
                            assert!(s < e && e <= n);
                            (s..e).for_each(|i| {
                                covered[i].fetch_add(1, Ordering::Relaxed);
                            });
                        });
                        assert!(covered.iter().all(|c| c.load(Ordering::Relaxed) == 1));
                    }

                    assert_eq!(
                        map_tasks(tasks, |t| t * t),
                        (0..tasks).map(|t| t * t).collect::<Vec<_>>()
                    );
                    let n = tasks * 100;
                    let ranges = split_ranges(n, 10);
                    assert_eq!(ranges.iter().map(|(s, e)| e - s).sum::<usize>(), n);
                    assert_eq!(
                        par_map(&ranges, |s, _| s),
                        ranges.iter().map(|r| r.0).collect::<Vec<_>>()
                    );
                }
            });
        }
    }
}
