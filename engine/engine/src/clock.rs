//! Wall-clock time as the loop records it: Unix milliseconds, and RFC 3339
//! for the protocol's deadlines.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
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
