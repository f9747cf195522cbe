//! Agents in OCI registries: WebAssembly components pushed and pulled as
//! CNCF Wasm OCI artifacts (config `application/vnd.wasm.config.v0+json`,
//! one `application/wasm` layer) over the distribution API, the way
//! `wkg oci`, `oras` and wasmCloud keep them.
//!
//! A pull is bounded: the manifest and the layer by a byte limit (the
//! server's upload limit), the whole pull by a deadline; every digest is
//! checked, the manifest's against a pinned reference and the layer's
//! against the manifest. What the server may pull from is the operator's
//! [`PullPolicy`].
//!
//! # Layout
//!
//! - [`reference`]: references, `REGISTRY/REPOSITORY[:TAG][@sha256:…]`.
//! - [`registry`]: the client: authentication (basic, and the bearer
//!   token flow of `distribution`), pull, push.
//! - [`artifact`]: the Wasm artifact's manifest and config.
//! - [`auth`]: credentials (the docker config file's among them) and
//!   `WWW-Authenticate` challenges.
//! - [`cache`]: pulled artifacts on disk, by digest, for offline runs.

pub mod artifact;
pub mod auth;
pub mod cache;
pub mod reference;
pub mod registry;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

pub use crate::auth::Credentials;
pub use crate::reference::Reference;
pub use crate::registry::{Options, Pulled, Pushed, Registry};

/// The default deadline of a pull or a push.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// Why a reference could not be pulled or pushed. Each names the
/// reference (and the registry where it matters) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse.
    #[error("`{reference}` is not an OCI reference: {message}")]
    Reference {
        /// The text given.
        reference: String,
        /// What is wrong with it.
        message: String,
    },
    /// The registry is not on the operator's allow-list; nothing was
    /// sent to it.
    #[error(
        "`{reference}`: registry `{registry}` is not one this server pulls from (the operator's `[oci] \
         allow_registries`)"
    )]
    NotAllowed {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
    },
    /// The registry (or its token service) refused us.
    #[error("`{reference}`: registry `{registry}` refused access ({status}): {detail}")]
    Unauthorized {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
        /// The registry's status.
        status: u16,
        /// What it said, or what we lacked.
        detail: String,
    },
    /// The repository has no such tag, digest or blob.
    #[error("`{reference}`: not found in the registry ({message})")]
    NotFound {
        /// The reference.
        reference: String,
        /// What the registry said.
        message: String,
    },
    /// The registry answered an error.
    #[error("`{reference}`: the registry answered {status}: {message}")]
    Registry {
        /// The reference.
        reference: String,
        /// Its status.
        status: u16,
        /// What it said.
        message: String,
    },
    /// The registry could not be reached, or the connection broke.
    #[error("`{reference}`: the registry could not be reached: {message}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// Why.
        message: String,
    },
    /// What the registry holds is not a Wasm artifact subs runs.
    #[error("`{reference}`: {message}")]
    Invalid {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        message: String,
    },
    /// Content did not match its digest.
    #[error("`{reference}`: {what} does not match its digest: expected {expected}, got {actual}")]
    Digest {
        /// The reference.
        reference: String,
        /// What: `the manifest`, `the wasm layer`.
        what: String,
        /// The digest it should have.
        expected: String,
        /// The digest it had.
        actual: String,
    },
    /// Content larger than the limit.
    #[error("`{reference}`: {what} is {bytes} bytes, more than the limit of {limit} (`max_component_bytes`)")]
    TooLarge {
        /// The reference.
        reference: String,
        /// What: `the manifest`, `the wasm layer`.
        what: String,
        /// Its size, or what had come when it passed the limit.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The pull or push took longer than its deadline.
    #[error("`{reference}`: the registry did not finish within {secs} s (`[oci] pull_timeout`)")]
    Deadline {
        /// The reference.
        reference: String,
        /// The deadline.
        secs: u64,
    },
}

/// `sha256:<hex>` of `bytes`: the digest registries name content by.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// What a server may pull: the operator's `[oci]` settings.
#[derive(Debug, Clone)]
pub struct PullPolicy {
    /// The registries (`host[:port]`) pulls may reach; none by default.
    pub allow_registries: Vec<String>,
    /// The registries reached over plain HTTP instead of HTTPS.
    pub insecure: Vec<String>,
    /// Credentials by registry, sent to that registry only.
    pub credentials: HashMap<String, Credentials>,
    /// How long a pull may take.
    pub deadline: Duration,
}

impl Default for PullPolicy {
    fn default() -> Self {
        Self {
            allow_registries: Vec::new(),
            insecure: Vec::new(),
            credentials: HashMap::new(),
            deadline: DEFAULT_DEADLINE,
        }
    }
}

impl PullPolicy {
    /// Parses `text` and checks its registry against the allow-list,
    /// before anything is sent anywhere; answers the reference and how to
    /// reach its registry, with layers up to `max_bytes`.
    ///
    /// # Errors
    /// [`OciError::Reference`], or [`OciError::NotAllowed`].
    pub fn check(&self, text: &str, max_bytes: u64) -> Result<(Reference, Options), OciError> {
        // `oci://` as the CLI writes references is taken too.
        let reference = Reference::parse(text.strip_prefix("oci://").unwrap_or(text))?;
        if !self.allow_registries.iter().any(|r| r.eq_ignore_ascii_case(&reference.registry)) {
            return Err(OciError::NotAllowed {
                registry: reference.registry.clone(),
                reference: reference.to_string(),
            });
        }
        let options = Options {
            plain_http: self.insecure.iter().any(|r| r.eq_ignore_ascii_case(&reference.registry)),
            credentials: self.credentials.get(&reference.registry).cloned(),
            max_bytes,
            deadline: self.deadline,
        };
        Ok((reference, options))
    }

    /// Pulls `text` under this policy: [`PullPolicy::check`], then
    /// [`Registry::pull`].
    ///
    /// # Errors
    /// See [`PullPolicy::check`] and [`Registry::pull`].
    pub async fn pull(&self, text: &str, max_bytes: u64) -> Result<(Reference, Pulled), OciError> {
        let (reference, options) = self.check(text, max_bytes)?;
        let registry = Registry::new(&reference.registry, options)?;
        let pulled = registry.pull(&reference).await?;
        Ok((reference, pulled))
    }
}
