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

/// The pool of `threads` threads (`None`: one per core), made on first use; an error if the
/// system cannot start them.
pub(crate) fn shared(threads: Option<usize>) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());
    let n = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
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
    fn backends_of_one_thread_count_share_a_pool() {
        let (a, b) = (shared(Some(3)).unwrap(), shared(Some(3)).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.current_num_threads(), 3);
        assert!(!Arc::ptr_eq(&a, &shared(Some(2)).unwrap()));
    }
}
