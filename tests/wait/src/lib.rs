//! Waiting in tests for what has no event to await: a row in a store, a
//! snapshot's status, a child process's exit, a page's text. Each wait
//! names what it waits for and fails with the last state it saw, so a
//! test that times out says why; a test that can await an event (a
//! session's stream, a channel, a task's end) awaits that instead.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is checked again.
pub const POLL: Duration = Duration::from_millis(20);

/// A check's answer: ready with a value, or not yet, with what was seen
/// (shown if the wait times out).
pub trait Ready {
    /// What the wait returns once ready.
    type Value;
    /// The value, or what was seen instead.
    fn ready(self) -> Result<Self::Value, String>;
}

impl Ready for bool {
    type Value = ();
    fn ready(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("false".to_owned()) }
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_owned())
    }
}

impl<T, E: Display> Ready for Result<T, E> {
    type Value = T;
    fn ready(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// Checks `check` until it is ready, and returns its value; panics,
/// naming `what` and the last state seen, if it is not within `within`.
pub async fn eventually<R: Ready, F: Future<Output = R>>(
    within: Duration,
    what: impl Display,
    check: impl FnMut() -> F,
) -> R::Value {
    match until(within, check).await {
        Ok(value) => value,
        Err(seen) => panic!("{what}: not within {within:?}; last seen: {seen}"),
    }
}

/// Checks `check` until it is ready, and returns its value, or, if it
/// is not within `within`, the last state seen.
///
/// # Errors
/// What `check` last saw, once `within` has passed.
pub async fn until<R: Ready, F: Future<Output = R>>(
    within: Duration,
    mut check: impl FnMut() -> F,
) -> Result<R::Value, String> {
    let deadline = Instant::now() + within;
    loop {
        let seen = match check().await.ready() {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            return Err(seen);
        }
        pause().await;
    }
}

/// Checks `check` through `window` (first at once, last once it has
/// passed), failing, naming `what` and what was seen, the first time it
/// is not ready: for what must not happen, such as a held call running,
/// which no event can show did not.
pub async fn steadily<R: Ready, F: Future<Output = R>>(
    window: Duration,
    what: impl Display,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    loop {
        if let Err(seen) = check().await.ready() {
            panic!("{what}: broken after {:?}: {seen}", started.elapsed());
        }
        if started.elapsed() >= window {
            return;
        }
        pause().await;
    }
}

/// The wait between two checks: what is checked sends no event (see the
/// module docs), and checking again at once would spin on the cores the
/// server needs.
async fn pause() {
    pace(POLL).await;
}

/// Takes `time` on purpose, where slowness is what a test plays: an
/// attacker sending a byte at a time, a slow agent or tool, a client
/// backing off, the pauses of a chaos schedule, the cadence of a sampler;
/// and between the checks of [`eventually`]. Each caller says which.
pub async fn pace(time: Duration) {
    // The one timed wait of the tests' harnesses: not a wait for anything,
    // the time passing is the point.
    tokio::time::sleep(time).await;
}

/// [`pace`] for a thread outside the runtime: a synchronous agent that
/// streams slowly or whose tool takes a moment, a sampling thread.
pub fn pace_blocking(time: Duration) {
    // As in `pace`: the time passing is the point.
    std::thread::sleep(time);
}

/// [`eventually`] for a thread outside the runtime.
pub fn eventually_blocking<R: Ready>(within: Duration, what: impl Display, mut check: impl FnMut() -> R) -> R::Value {
    let deadline = Instant::now() + within;
    loop {
        let seen = match check().ready() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        assert!(Instant::now() < deadline, "{what}: not within {within:?}; last seen: {seen}");
        // As in `eventually`: nothing to await, and no core to spin on.
        pace_blocking(POLL);
    }
}
