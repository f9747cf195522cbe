//! The time a decision keeps a thread busy: its guest code and every host
//! call it makes, not its waits.
//!
//! Counting epoch ticks inside wasm (the epoch callback runs only when
//! guest code checks the epoch) would miss the host's work on the guest's
//! behalf: a guest calling `wasi:random` for 60 MB at a time spends nearly
//! all its time in the host, between two checks. So the meter times the
//! decision's future itself: every poll, start to end, is time spent on
//! the decision, whichever side of the boundary it ran on; while the future
//! waits (an outgoing request, a sleep) it is not polled and nothing is
//! counted. The epoch callback, which runs inside a poll, reads the total
//! so far including the poll in progress, and stops the guest at its
//! limit.
//!
//! A poll is timed by the monotonic clock, not the thread's CPU clock: the
//! thread's clock costs a system call on each read, the monotonic clock
//! does not, and the two differ only while the thread is preempted, which
//! makes the limit (seconds, by default) stricter by a scheduler's slice.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The busy time of one decision; cheap to clone, all clones share it.
#[derive(Debug, Clone)]
pub(crate) struct CpuMeter(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// The meter's zero, which the other fields count from.
    origin: Instant,
    /// Nanoseconds of polls that ended.
    total: AtomicU64,
    /// When the poll in progress began (nanoseconds since `origin`, plus
    /// one), or zero while none is.
    polling_since: AtomicU64,
}

impl CpuMeter {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Shared { origin: Instant::now(), total: AtomicU64::new(0), polling_since: AtomicU64::new(0) }))
    }

    fn now(&self) -> u64 {
        u64::try_from(self.0.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Busy time so far, the poll in progress included.
    pub(crate) fn used(&self) -> Duration {
        let mut nanos = self.0.total.load(Ordering::Relaxed);
        let since = self.0.polling_since.load(Ordering::Relaxed);
        if since > 0 {
            nanos = nanos.saturating_add(self.now().saturating_sub(since - 1));
        }
        Duration::from_nanos(nanos)
    }

    /// `future`, with each of its polls counted by this meter.
    pub(crate) fn meter<F: Future>(&self, future: F) -> Metered<F> {
        Metered { future, meter: self.clone() }
    }
}

pin_project_lite::pin_project! {
    /// A future whose polls a [`CpuMeter`] counts.
    pub(crate) struct Metered<F> {
        #[pin]
        future: F,
        meter: CpuMeter,
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let shared = &this.meter.0;
        let start = this.meter.now();
        shared.polling_since.store(start + 1, Ordering::Relaxed);
        let poll = this.future.poll(cx);
        let end = this.meter.now();
        shared.polling_since.store(0, Ordering::Relaxed);
        shared.total.fetch_add(end.saturating_sub(start), Ordering::Relaxed);
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn polls_are_counted_and_waits_are_not() {
        let meter = CpuMeter::new();
        let seen_inside = meter
            .meter(async {
                let busy = Instant::now();
                while busy.elapsed() < Duration::from_millis(30) {}
                let inside = meter.used();
                // The wait the meter must not count.
                tokio::time::sleep(Duration::from_millis(300)).await;
                inside
            })
            .await;
        assert!(seen_inside >= Duration::from_millis(30), "the poll in progress counts: {seen_inside:?}");
        let used = meter.used();
        assert!(used >= Duration::from_millis(30), "{used:?}");
        assert!(used < Duration::from_millis(250), "the sleep is not counted: {used:?}");
    }
}
