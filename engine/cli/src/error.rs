//! How a command fails: an error for people and the exit code for scripts.
//!
//! Every command returns [`CliError`]; `main` prints it as one line on
//! stderr (`error: …`) and exits with its code. The codes are few on
//! purpose, so a script can branch on them:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | the work failed: a turn failed, the server refused a request |
//! | 2 | bad usage or configuration: a flag, the config file, a listen address that needs keys |
//! | 3 | something needed is unavailable: the port is taken, the data directory is unwritable, the store is locked by another process, the server cannot be reached |

use std::fmt;

/// The exit code of a command that failed at its work.
pub const FAILED: u8 = 1;
/// The exit code of bad usage or configuration (clap uses it too).
pub const USAGE: u8 = 2;
/// The exit code when a resource the command needs is unavailable.
pub const UNAVAILABLE: u8 = 3;

/// A command's failure: what went wrong and the exit code that says so.
#[derive(Debug)]
pub struct CliError {
    /// The process's exit code.
    pub code: u8,
    /// What went wrong, with its causes.
    pub error: anyhow::Error,
}

impl CliError {
    /// The work failed (exit code 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self { code: FAILED, error: error.into() }
    }

    /// Bad usage or configuration (exit code 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self { code: USAGE, error: error.into() }
    }

    /// Something needed is unavailable (exit code 3).
    pub fn unavailable(error: impl Into<anyhow::Error>) -> Self {
        Self { code: UNAVAILABLE, error: error.into() }
    }

    /// Whether the command failed only because whoever read its output
    /// went away (`subs run … | head`): a closed pipe on stdout. Not a
    /// failure to report; the process ends quietly, as `head` asked.
    pub fn is_closed_output(&self) -> bool {
        self.error.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:#}` joins the causes on one line: `reading x: No such file`.
        write!(f, "{:#}", self.error)
    }
}

/// Any other error is the work failing; commands say otherwise where they
/// know better.
impl From<anyhow::Error> for CliError {
    fn from(error: anyhow::Error) -> Self {
        Self::failed(error)
    }
}

impl From<std::io::Error> for CliError {
    fn from(error: std::io::Error) -> Self {
        Self::failed(error)
    }
}

/// What every command returns.
pub type CliResult<T = ()> = Result<T, CliError>;
