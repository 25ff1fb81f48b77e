//! Deleting what a store keeps past its time, in the background, in batches: one [`Sweeper`] for
//! the inbox's completed keys and the command history's expired ones.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::StoreError;

/// How often, at most, a sweeper deletes expired rows.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How many expired rows one sweep statement deletes.
pub(crate) const SWEEP_BATCH: u32 = 500;

/// When a sweeper last swept, and whether a sweep runs now.
#[derive(Debug, Default)]
pub(crate) struct Sweeper {
    last: Mutex<Option<Instant>>,
    running: AtomicBool,
}

impl Sweeper {
    /// Runs `sweep` (which deletes up to [`SWEEP_BATCH`] rows and answers how many it deleted) in
    /// a task of its own until a batch comes back short, at most once a [`SWEEP_INTERVAL`] and
    /// never twice at once. `what` names the rows in the warning a failure logs.
    pub(crate) fn when_due<F, Fut>(self: &Arc<Self>, what: &'static str, sweep: F)
    where
        F: Fn(u32) -> Fut + Send + 'static,
        Fut: Future<Output = Result<u64, StoreError>> + Send,
    {
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if last.is_some_and(|last| now.duration_since(last) < SWEEP_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let running = Running(self.clone());
        tokio::spawn(async move {
            // However the sweep ends (done, failed, panicked, dropped with its runtime), the
            // next one may start: a flag left set would stop sweeping for good.
            let _running = running;
            loop {
                match sweep(SWEEP_BATCH).await {
                    Ok(deleted) if deleted >= u64::from(SWEEP_BATCH) => continue,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(error = %error, "could not delete expired {what}; tried again later");
                        break;
                    }
                }
            }
        });
    }
}

/// A sweep under way: it lets the next one start when dropped.
struct Running(Arc<Sweeper>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_sweep_that_panicked_does_not_stop_the_next() {
        let sweeper = Arc::new(Sweeper::default());
        sweeper.when_due("keys", |_| async {
            if SWEEP_BATCH > 0 {
                panic!("a sweep that panics");
            }
            Ok(0)
        });
        // The panicking task runs and ends.
        tokio::time::sleep(Duration::from_millis(1)).await;
        tokio::time::advance(SWEEP_INTERVAL).await;
        let swept = Arc::new(AtomicU32::new(0));
        let counted = swept.clone();
        sweeper.when_due("keys", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(0) }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(swept.load(Ordering::SeqCst), 1, "the next sweep ran");
    }
}
