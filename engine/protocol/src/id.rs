//! The id rules: what may name a tenant, session, agent, message, call,
//! turn or interrupt. Ids appear in URLs and store keys, so nothing that
//! could traverse paths or split keys is allowed.

/// Whether `id` may name a tenant, session, agent, message, call, turn or
/// interrupt: 1 to 128 characters of `A-Z a-z 0-9 _ - . :`, not starting
/// with `.`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::valid_id;

    #[test]
    fn ids_are_short_plain_and_never_paths() {
        for good in ["a", "s-1", "call_2.x", "tenant:sub", &"x".repeat(128)] {
            assert!(valid_id(good), "{good}");
        }
        for bad in ["", ".hidden", "..", "a/b", "a b", "é", "a\\b", "a\0", &"x".repeat(129)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }
}
