//! The mapping between the generated WIT types and the protocol types: the
//! protocol crate's one mapping, instantiated against these bindings, plus
//! the SDK's own types that cross the boundary.

use crate::bindings::{host, wit};
use crate::{DecideError, Level};

#[cfg(not(feature = "wit-0-1-0"))]
use crate::bindings::branch;
#[cfg(not(feature = "wit-0-1-0"))]
subs_protocol::wit_conversions!(wit, branch);
#[cfg(feature = "wit-0-1-0")]
subs_protocol::wit_conversions!(wit);

impl From<DecideError> for wit::DecideError {
    fn from(e: DecideError) -> Self {
        Self { message: e.message, retryable: e.retryable }
    }
}

impl From<wit::DecideError> for DecideError {
    fn from(e: wit::DecideError) -> Self {
        Self { message: e.message, retryable: e.retryable }
    }
}

impl From<Level> for host::Level {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => host::Level::Trace,
            Level::Debug => host::Level::Debug,
            Level::Info => host::Level::Info,
            Level::Warn => host::Level::Warn,
            Level::Error => host::Level::Error,
        }
    }
}
