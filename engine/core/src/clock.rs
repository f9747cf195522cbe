//! Wall-clock time as the loop records it: Unix milliseconds, and RFC 3339
//! for the protocol's deadlines.
//!
//! The loop reads the time only through a [`Clock`] (set in
//! `EngineConfig::clock`), and waits only with tokio's timers. The default
//! clock is the system's; [`TokioClock`] follows tokio's clock instead, so
//! a test on paused time (`tokio::time::pause`) runs backoffs and
//! deadlines of minutes in no time, and in a fixed order.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the engine reads the time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's clock: what an engine uses unless told otherwise.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        now_ms()
    }
}

/// Unix milliseconds that advance with tokio's clock: from the system time
/// when it was made, plus what tokio's `Instant` has advanced since, which
/// on paused time is what the test advanced it by (or what tokio skipped
/// to wake the next timer).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base_ms: u64,
    base: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading the system time now, then following tokio's.
    pub fn new() -> Self {
        Self { base_ms: now_ms(), base: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base_ms.saturating_add(elapsed)
    }
}

/// Milliseconds since the Unix epoch, by the system's clock.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `ms` (Unix milliseconds) as an RFC 3339 UTC timestamp with milliseconds.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Seconds as a duration; negative or non-finite values are zero.
pub fn secs(seconds: f64) -> Duration {
    if seconds.is_finite() && seconds > 0.0 { Duration::from_secs_f64(seconds.min(1e9)) } else { Duration::ZERO }
}

/// Seconds as milliseconds, rounded up so a backoff is never shortened.
pub fn secs_to_ms(seconds: f64) -> u64 {
    u64::try_from(secs(seconds).as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn bad_seconds_are_zero() {
        assert_eq!(secs(-1.0), Duration::ZERO);
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs_to_ms(0.25), 250);
    }
}
