//! The operator's cap on retry policies.
//!
//! An agent chooses how its deliveries and calls are retried
//! (`RetryPolicy`), and a hostile one would choose a million retries an
//! hour apart, keeping its sessions (and what they hold) busy for days.
//! Whatever a policy says, the engine applies it through a [`RetryCap`]:
//! at most `max_retries` retries, no backoff longer than
//! `max_backoff_secs`, no try longer than `max_timeout_secs`, and no more
//! retries than fit in `max_total_secs` of backoff.

use subs_protocol::RetryPolicy;

/// The most any retry policy may ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryCap {
    /// Retries of one delivery or call.
    pub max_retries: u32,
    /// The longest wait before one retry, in seconds.
    pub max_backoff_secs: f64,
    /// The longest one try may take, in seconds.
    pub max_timeout_secs: f64,
    /// All the waits between the tries of one delivery or call, summed, in
    /// seconds.
    pub max_total_secs: f64,
}

impl Default for RetryCap {
    fn default() -> Self {
        Self { max_retries: 10, max_backoff_secs: 300.0, max_timeout_secs: 600.0, max_total_secs: 3600.0 }
    }
}

impl RetryCap {
    /// `policy` as the engine applies it.
    pub fn apply(&self, policy: &RetryPolicy) -> RetryPolicy {
        let backoff_max_secs = policy.backoff_max_secs.min(self.max_backoff_secs);
        let mut capped = RetryPolicy {
            timeout_secs: policy.timeout_secs.map(|t| t.min(self.max_timeout_secs)),
            max_retries: policy.max_retries.min(self.max_retries),
            backoff_base_secs: policy.backoff_base_secs.min(backoff_max_secs),
            backoff_max_secs,
        };
        // Fewer retries until their waits fit in the total.
        let mut waited = 0.0;
        for retry in 1..=capped.max_retries {
            waited += capped.backoff_secs(retry);
            if waited > self.max_total_secs {
                capped.max_retries = retry - 1;
                break;
            }
        }
        capped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_retries: u32, base: f64, max: f64, timeout: Option<f64>) -> RetryPolicy {
        RetryPolicy { timeout_secs: timeout, max_retries, backoff_base_secs: base, backoff_max_secs: max }
    }

    #[test]
    fn modest_policies_pass_unchanged() {
        let modest = policy(2, 0.5, 10.0, Some(30.0));
        assert_eq!(RetryCap::default().apply(&modest), modest);
    }

    #[test]
    fn a_hostile_policy_is_cut_to_the_cap() {
        let cap = RetryCap::default();
        let capped = cap.apply(&policy(1_000_000, 3600.0, 86_400.0, Some(1e9)));
        assert_eq!(capped.timeout_secs, Some(600.0));
        assert_eq!(capped.backoff_max_secs, 300.0);
        assert_eq!(capped.backoff_base_secs, 300.0);
        assert_eq!(capped.max_retries, 10, "10 waits of 300 s fit in an hour");
        let total = RetryCap { max_total_secs: 1000.0, ..cap };
        assert_eq!(total.apply(&policy(1_000_000, 300.0, 300.0, None)).max_retries, 3);
    }
}
