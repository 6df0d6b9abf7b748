//! [`map_ordered`]: a map over a slice on several threads, results in the slice's order (how a
//! [`crate::Runner`] tokenizes the texts of its next batches).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Fewest items worth a thread of their own: a text of the bench's mixed corpus tokenizes in
/// about 200 microseconds on average, a short one in tens, and a thread starts in tens.
const MIN_ITEMS_PER_THREAD: usize = 4;

/// `f` of each item, in order, on up to `threads` threads (the calling thread one of them),
/// each taking the next item not yet taken, so that long items do not hold up the rest.
pub(crate) fn map_ordered<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.min(items.len() / MIN_ITEMS_PER_THREAD).max(1);
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { return done };
            done.push((i, f(item)));
        }
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mine = work();
        let theirs = helpers.into_iter().flat_map(|h| match h.join() {
            Ok(done) => done,
            Err(panic) => std::panic::resume_unwind(panic),
        });
        for (i, r) in mine.into_iter().chain(theirs) {
            slots[i] = Some(r);
        }
    });
    slots.into_iter().map(|r| r.expect("every item was taken by one thread")).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;

    /// Records which thread ran each item, after a pause long enough that one thread cannot
    /// take every item before the others start.
    fn run(items: usize, threads: usize) -> (Vec<usize>, HashSet<ThreadId>) {
        let seen = Mutex::new(HashSet::new());
        let input: Vec<usize> = (0..items).collect();
        let out = map_ordered(&input, threads, |&i| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            seen.lock().unwrap().insert(std::thread::current().id());
            i * 10
        });
        (out, seen.into_inner().unwrap())
    }

    #[test]
    fn results_keep_the_order_of_the_items_on_every_thread_count() {
        for threads in [1, 2, 3, 8] {
            for items in [0, 1, 5, 17, 64] {
                let (out, _) = run(items, threads);
                assert_eq!(
                    out,
                    (0..items).map(|i| i * 10).collect::<Vec<_>>(),
                    "{threads} {items}"
                );
            }
        }
    }

    #[test]
    fn the_work_is_spread_over_the_threads_asked_for() {
        let (_, used) = run(64, 4);
        assert_eq!(used.len(), 4, "64 items of 2 ms each on 4 threads");
        assert!(used.contains(&std::thread::current().id()), "the caller works too");
        let (_, used) = run(64, 1);
        assert_eq!(used.len(), 1);
        let (_, used) = run(7, 8);
        assert_eq!(used.len(), 1, "fewer than two threads' worth of items stay on the caller");
    }

    #[test]
    fn a_panic_on_a_helper_thread_reaches_the_caller() {
        let items: Vec<usize> = (0..64).collect();
        let caller = std::thread::current().id();
        let r = std::panic::catch_unwind(|| {
            map_ordered(&items, 4, |&i| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                assert!(std::thread::current().id() == caller || i < 8, "item {i} on a helper");
                i
            })
        });
        assert!(r.is_err());
    }
}
