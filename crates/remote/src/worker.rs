//! One thread per connection that makes every call to the server, each waited for at most the
//! connection's timeout.
//!
//! burn-remote's calls block their thread while the server answers, and a server that stops
//! answering would block them for good. Running them on a thread of their own lets the caller
//! stop waiting after the timeout: the connection is then marked broken and dropped, and its
//! thread is left to end when the operating system gives up on the socket. One thread also
//! keeps every op of a connection on one Burn stream, in the order it was issued.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use switchyard_core::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs jobs in order, and whether its connection has failed.
#[derive(Debug)]
pub(crate) struct Worker {
    jobs: mpsc::Sender<Job>,
    broken: AtomicBool,
    /// What the errors call the connection (`remote:HOST:PORT`).
    name: String,
    timeout: Duration,
}

impl Worker {
    /// Starts the thread.
    pub(crate) fn start(name: String, timeout: Duration) -> Result<Worker> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(format!("switchyard {name}"))
            .spawn(move || rx.into_iter().for_each(|job| job()))
            .map_err(|e| Error::Device(format!("cannot start a thread for {name}: {e}")))?;
        Ok(Worker { jobs, broken: AtomicBool::new(false), name, timeout })
    }

    /// Whether a call has failed or timed out: the connection is not to be used again.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Marks the connection broken.
    pub(crate) fn break_off(&self) {
        self.broken.store(true, Ordering::Release);
    }

    /// Runs `job` on the thread and waits for it at most the timeout. A panic in the job, or no
    /// answer in time, breaks the connection and is an [`Error::Device`] saying `what` failed.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        what: &str,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        let sent = self.jobs.send(Box::new(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(job)));
        }));
        let failed = |why: String| {
            self.break_off();
            Error::Device(format!("{} failed to {what}: {why}", self.name))
        };
        if sent.is_err() {
            return Err(failed("its connection thread has stopped".into()));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(failed(panic_message(panic.as_ref()))),
            Err(RecvTimeoutError::Timeout) => Err(failed(format!(
                "no answer within {:?} (the timeout; set SWITCHYARD_REMOTE_TIMEOUT to change it)",
                self.timeout
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                Err(failed("its connection thread has stopped".into()))
            }
        }
    }
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "it panicked".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn worker(timeout_ms: u64) -> Worker {
        Worker::start("remote:test:1".into(), Duration::from_millis(timeout_ms)).unwrap()
    }

    #[test]
    fn a_call_returns_its_value_and_keeps_the_connection() {
        let w = worker(5000);
        assert_eq!(w.call("add", || 2 + 3).unwrap(), 5);
        assert!(!w.is_broken());
    }

    #[test]
    fn a_call_that_outlives_the_timeout_is_an_error_in_bounded_time() {
        let w = worker(100);
        let start = Instant::now();
        let e = w.call("wait", || std::thread::sleep(Duration::from_secs(5))).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
        let msg = e.to_string();
        assert!(msg.contains("remote:test:1 failed to wait: no answer within 100ms"), "{msg}");
        assert!(w.is_broken());
    }

    #[test]
    fn a_panic_is_an_error_that_breaks_the_connection() {
        let w = worker(5000);
        let e = w.call("read", || -> u8 { panic!("socket closed") }).unwrap_err();
        assert!(
            matches!(&e, Error::Device(m) if m.contains("failed to read: socket closed")),
            "{e}"
        );
        assert!(w.is_broken());
    }

    #[test]
    fn jobs_run_in_order_on_one_thread() {
        let w = worker(5000);
        let first = w.call("id", || std::thread::current().id()).unwrap();
        let second = w.call("id", || std::thread::current().id()).unwrap();
        assert_eq!(first, second);
        assert_ne!(first, std::thread::current().id());
    }
}
