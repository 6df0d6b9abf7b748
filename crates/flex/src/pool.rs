//! flex's thread pools: one per thread count asked for in the process, shared by every backend
//! of that count, so that backends do not multiply threads.

use std::sync::{Arc, Mutex, PoisonError};

use switchyard_core::{Error, Result};

/// The environment variable that sets flex's threads (default: every core).
pub const THREADS_ENV: &str = "SWITCHYARD_THREADS";

/// The thread count `SWITCHYARD_THREADS` asks for: `None` if unset or blank, an error if it is
/// not a positive whole number.
pub fn threads_from_env() -> Result<Option<usize>> {
    parse_threads(std::env::var(THREADS_ENV).ok().as_deref())
}

fn parse_threads(value: Option<&str>) -> Result<Option<usize>> {
    match value.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(Error::Device(format!(
                "{THREADS_ENV}=`{v}`: expected a number of threads above zero"
            ))),
        },
    }
}

/// The most threads a pool may have on a machine of `cores` cores: four a core, and at least
/// 256. Threads beyond the cores only share them (a test may still want a few more threads
/// than its machine has); thousands take seconds to start and to wake, and each holds its
/// scratch, so a mistyped count fails instead of stalling.
pub(crate) fn max_threads(cores: usize) -> usize {
    cores.saturating_mul(4).max(256)
}

/// The pool of `threads` threads (`None`: one per core), made on first use; an error if that
/// is more than [`max_threads`] allows, or if the system cannot start them.
pub(crate) fn shared(threads: Option<usize>) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (n, most) = (threads.unwrap_or(cores), max_threads(cores));
    if n > most {
        return Err(Error::Device(format!(
            "flex: {n} threads asked for, on {cores} cores: at most {most} (threads beyond \
             the cores only share them)"
        )));
    }
    let mut pools = POOLS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, p)) = pools.iter().find(|(k, _)| *k == n) {
        return Ok(Arc::clone(p));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("switchyard-flex-{i}"))
        .build()
        .map(Arc::new)
        .map_err(|e| Error::Device(format!("flex cannot start {n} threads: {e}")))?;
    pools.push((n, Arc::clone(&pool)));
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_parse_and_nonsense_is_refused() {
        assert_eq!(parse_threads(None).unwrap(), None);
        assert_eq!(parse_threads(Some(" ")).unwrap(), None);
        assert_eq!(parse_threads(Some("4")).unwrap(), Some(4));
        for bad in ["0", "-2", "many", "1.5"] {
            let e = parse_threads(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("SWITCHYARD_THREADS") && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn a_thread_count_far_past_the_cores_is_refused() {
        assert_eq!(max_threads(2), 256);
        assert_eq!(max_threads(128), 512);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let too_many = max_threads(cores) + 1;
        let e = shared(Some(too_many)).unwrap_err().to_string();
        assert!(e.contains(&format!("{too_many} threads")) && e.contains("at most"), "{e}");
        assert!(shared(Some(100_000)).is_err());
    }

    #[test]
    fn backends_of_one_thread_count_share_a_pool() {
        let (a, b) = (shared(Some(3)).unwrap(), shared(Some(3)).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.current_num_threads(), 3);
        assert!(!Arc::ptr_eq(&a, &shared(Some(2)).unwrap()));
    }
}
