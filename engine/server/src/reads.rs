//! Reads whose work grows with what they return: run off the runtime's
//! worker threads, stopped when their client goes away, and, for the
//! listings that look at sessions they may not return, held to a rate per
//! tenant.
//!
//! A page of a session's decisions, or a listing filtered by status or
//! agent, decodes and encodes up to tens of MiB. Done on a worker thread,
//! it holds up every connection that thread serves (`/healthz`
//! included); done in a future that never yields, it cannot even be
//! dropped when its client disconnects. [`blocking`] runs such work on a
//! blocking thread instead, with a [`Stop`] that turns on when the
//! request's future is dropped (hyper drops it when the connection
//! closes); the work checks it between pieces and gives up.
//!
//! A listing filtered by `status` or `agent` looks at up to
//! [`MAX_SCAN`](crate::sessions::MAX_SCAN) sessions for one page, however
//! few match. [`Scans`] keeps each tenant's bucket of sessions it may
//! look at (`max_listing_scan_per_sec`, refilled evenly, holding one
//! second's worth); a listing is refused with 429 while the bucket is
//! empty, and what it looked at is taken from the bucket when it is done.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::http::StatusCode;

use crate::error::ApiError;

/// Whether the request a read works for is gone: checked by the read
/// between pieces of its work.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// Whether the read should give up.
    pub fn stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err` once the read should give up: its client went away, and
    /// nobody reads what it would answer.
    pub fn check(&self) -> Result<(), ApiError> {
        if self.stopped() { Err(gone()) } else { Ok(()) }
    }

    fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a read answers when its client went away (never sent: there is
/// nobody to send it to).
fn gone() -> ApiError {
    ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", "the client went away before the read ended")
}

/// Turns its [`Stop`] on when dropped: when the request's future is.
struct StopOnDrop(Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Runs `work` on a blocking thread and waits for its answer; when this
/// future is dropped (the client went away), `work`'s [`Stop`] turns on.
/// `work` reads the store through `runtime` (`runtime.block_on(…)`: store
/// reads are futures, and may wait on the network).
pub async fn blocking<T, F>(work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&tokio::runtime::Handle, &Stop) -> Result<T, ApiError> + Send + 'static,
{
    let stop = Stop::default();
    let _stop_on_drop = StopOnDrop(stop.clone());
    let runtime = tokio::runtime::Handle::current();
    match tokio::task::spawn_blocking(move || work(&runtime, &stop)).await {
        Ok(answer) => answer,
        Err(e) => Err(ApiError::internal(&e)),
    }
}

/// Encodes `value` as JSON, giving up as soon as `stop` turns on.
pub fn to_json(value: &impl serde::Serialize, stop: &Stop) -> Result<Vec<u8>, ApiError> {
    /// Refuses to take more bytes once the read is stopped: encoding
    /// ends with that error at its next write.
    struct Stoppable<'a> {
        out: Vec<u8>,
        stop: &'a Stop,
    }
    impl io::Write for Stoppable<'_> {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if self.stop.stopped() {
                return Err(io::Error::other("the client went away"));
            }
            self.out.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut writer = Stoppable { out: Vec::new(), stop };
    match serde_json::to_writer(&mut writer, value) {
        Ok(()) => Ok(writer.out),
        Err(_) if stop.stopped() => Err(gone()),
        Err(e) => Err(ApiError::internal(&e)),
    }
}

/// Each tenant's bucket of sessions its filtered listings may look at:
/// see the [module docs](self).
#[derive(Debug, Default)]
pub struct Scans {
    /// Sessions left to look at (below zero after a listing looked at
    /// more than was left), and when that was counted.
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl Scans {
    /// Refuses a listing of `tenant` while its bucket of `per_sec` is
    /// empty (429, naming when it has room again).
    pub fn admit(&self, tenant: &str, per_sec: u32) -> Result<(), ApiError> {
        let rate = f64::from(per_sec);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let (left, at) = buckets.entry(tenant.to_owned()).or_insert((rate, now));
        *left = (*left + now.duration_since(*at).as_secs_f64() * rate).min(rate);
        *at = now;
        if *left >= 1.0 {
            return Ok(());
        }
        let wait = if rate > 0.0 { ((1.0 - *left) / rate).ceil().max(1.0) } else { f64::INFINITY };
        let when = if wait.is_finite() { format!("; try again in {wait:.0} s") } else { String::new() };
        tracing::warn!(
            tenant,
            per_sec,
            "a listing was refused: the tenant's listings looked at their share of sessions"
        );
        Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "limit_exceeded",
            format!(
                "listings filtered by status or agent may look at {per_sec} sessions a second \
                 (max_listing_scan_per_sec), and the tenant's looked at that many{when}"
            ),
        ))
    }

    /// Takes the `looked_at` sessions a listing of `tenant` looked at
    /// from its bucket.
    pub fn spent(&self, tenant: &str, looked_at: usize) {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((left, _)) = buckets.get_mut(tenant) {
            *left -= looked_at as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refuses_once_spent_and_refills_over_time() {
        let scans = Scans::default();
        scans.admit("t", 1000).unwrap();
        scans.spent("t", 10_000);
        let refused = scans.admit("t", 1000).unwrap_err();
        assert_eq!((refused.status, refused.code), (StatusCode::TOO_MANY_REQUESTS, "limit_exceeded"));
        assert!(refused.message.contains("max_listing_scan_per_sec"), "{}", refused.message);
        assert!(refused.message.contains("try again in 10 s"), "{}", refused.message);
        // Another tenant's bucket is its own.
        scans.admit("u", 1000).unwrap();
        // Refilled: an hour later it is full again, and no fuller.
        scans.buckets.lock().unwrap().get_mut("t").unwrap().1 -= std::time::Duration::from_secs(3600);
        scans.admit("t", 1000).unwrap();
        assert!(scans.buckets.lock().unwrap()["t"].0 <= 1000.0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_the_request_stops_its_read() {
        let (started, was_started) = tokio::sync::oneshot::channel();
        let (ended, was_ended) = std::sync::mpsc::channel();
        let read = tokio::spawn(blocking(move |_, stop| {
            let _ = started.send(());
            // A read at work (rows, not a wait), looking at its stop as it
            // goes.
            while !stop.stopped() {
                std::hint::spin_loop();
            }
            let _ = ended.send(());
            stop.check()
        }));
        was_started.await.unwrap();
        read.abort();
        was_ended.recv_timeout(std::time::Duration::from_secs(5)).expect("the read stopped");
    }

    #[test]
    fn encoding_gives_up_once_stopped() {
        let stop = Stop::default();
        assert_eq!(to_json(&[1, 2], &stop).unwrap(), b"[1,2]");
        stop.stop();
        assert_eq!(to_json(&[1, 2], &stop).unwrap_err().code, "request_timeout");
    }
}
