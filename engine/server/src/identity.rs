//! Session owners: the identity a tenant gives the sessions it creates
//! (the `identity` of an input, or of an end-user token), checked against
//! the bounds every identity keeps. An identity is stored with its
//! session and sent in every decision request, so it is bounded like
//! everything else a tenant fills.

use subs_protocol::WorkerIdentity;

use crate::error::ApiError;

/// The longest identity id, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// The most metadata entries an identity has.
pub const MAX_METADATA_ENTRIES: usize = 32;
/// The longest metadata key, and the longest value, in bytes.
pub const MAX_METADATA_BYTES: usize = 256;

/// Checks `identity` against the bounds; the error names the offending
/// field under `field` (`identity.id`, `identity.metadata.plan`).
pub fn check(identity: &WorkerIdentity, field: &str) -> Result<(), ApiError> {
    if let Some(id) = &identity.id {
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(ApiError::invalid(
                format!("{field}.id"),
                format!("an identity id is 1 to {MAX_ID_BYTES} bytes, not {}", id.len()),
            ));
        }
        if id.chars().any(char::is_control) {
            return Err(ApiError::invalid(format!("{field}.id"), "an identity id has no control characters"));
        }
    }
    let Some(metadata) = &identity.metadata else { return Ok(()) };
    if metadata.len() > MAX_METADATA_ENTRIES {
        return Err(ApiError::invalid(
            format!("{field}.metadata"),
            format!("an identity has at most {MAX_METADATA_ENTRIES} metadata entries, not {}", metadata.len()),
        ));
    }
    for (key, value) in metadata {
        if key.is_empty() || key.len() > MAX_METADATA_BYTES {
            let shown: String = key.chars().take(32).collect();
            return Err(ApiError::invalid(
                format!("{field}.metadata"),
                format!("metadata key `{shown}…` is {} bytes: keys are 1 to {MAX_METADATA_BYTES}", key.len()),
            ));
        }
        if key.chars().any(char::is_control) {
            return Err(ApiError::invalid(format!("{field}.metadata"), "metadata keys have no control characters"));
        }
        if value.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                format!("{field}.metadata.{key}"),
                "metadata values have no control characters",
            ));
        }
        if value.len() > MAX_METADATA_BYTES {
            return Err(ApiError::invalid(
                format!("{field}.metadata.{key}"),
                format!("a metadata value is at most {MAX_METADATA_BYTES} bytes, not {}", value.len()),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(id: Option<&str>, metadata: &[(&str, &str)]) -> WorkerIdentity {
        WorkerIdentity {
            id: id.map(str::to_owned),
            metadata: (!metadata.is_empty())
                .then(|| metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
        }
    }

    fn field(identity: &WorkerIdentity) -> Option<String> {
        check(identity, "identity").err().map(|e| e.field.unwrap_or_default())
    }

    #[test]
    fn identities_within_the_bounds_pass_and_others_name_the_field() {
        let long = "x".repeat(MAX_ID_BYTES);
        assert_eq!(field(&identity(None, &[])), None);
        assert_eq!(field(&identity(Some("alice@example.com"), &[("plan", "pro")])), None);
        assert_eq!(field(&identity(Some(&long), &[(&long, &long)])), None, "at the bounds");
        let longer = "x".repeat(MAX_ID_BYTES + 1);
        assert_eq!(field(&identity(Some(&longer), &[])).as_deref(), Some("identity.id"));
        assert_eq!(field(&identity(Some(""), &[])).as_deref(), Some("identity.id"));
        assert_eq!(field(&identity(Some("a\nb"), &[])).as_deref(), Some("identity.id"));
        assert_eq!(field(&identity(None, &[(&longer, "v")])).as_deref(), Some("identity.metadata"));
        assert_eq!(field(&identity(None, &[("", "v")])).as_deref(), Some("identity.metadata"));
        assert_eq!(field(&identity(None, &[("plan", &longer)])).as_deref(), Some("identity.metadata.plan"));
        assert_eq!(field(&identity(None, &[("plan", "a\u{7}")])).as_deref(), Some("identity.metadata.plan"));
        assert_eq!(field(&identity(None, &[("a\tb", "v")])).as_deref(), Some("identity.metadata"));
        let keys: Vec<String> = (0..=MAX_METADATA_ENTRIES).map(|n| format!("k{n}")).collect();
        let many: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        assert_eq!(field(&identity(None, &many)).as_deref(), Some("identity.metadata"));
        assert_eq!(field(&identity(None, &many[1..])), None, "exactly the most entries");
    }
}
