//! The id rules, in two kinds.
//!
//! - **Names** ([`valid_name`]) name tenants, agents and keys: they become
//!   store keys, file names and config entries, so they are short and
//!   plain, and nothing in them could traverse a path or split a key.
//! - **Ids** ([`valid_id`]) of sessions, messages, calls, turns and
//!   interrupts are the client's and the model's strings (a provider's
//!   tool-call id is a call id): any UTF-8 text of 1 to [`MAX_ID_BYTES`]
//!   bytes without control characters. They are opaque: compared byte for
//!   byte, never trimmed nor normalized, so leading and trailing spaces are
//!   part of the id. URLs carry them percent-encoded; stores must keep them
//!   apart whatever they hold (`/`, spaces, one id a prefix of another).

/// The longest id, in bytes of UTF-8: room for any provider's tool-call id
/// and a child session id built from a parent's and one of them.
pub const MAX_ID_BYTES: usize = 256;

/// The longest name, in bytes (all ASCII).
pub const MAX_NAME_BYTES: usize = 128;

/// [`valid_id`]'s rule in words, for error messages.
pub const ID_RULE: &str = "1 to 256 bytes of UTF-8 without control characters";

/// [`valid_name`]'s rule in words, for error messages.
pub const NAME_RULE: &str = "1 to 128 of A-Z a-z 0-9 _ - . :, not starting with .";

/// Whether `id` may name a session, message, call, turn or interrupt: 1 to
/// [`MAX_ID_BYTES`] bytes with no control character (Unicode category
/// `Cc`: U+0000–U+001F, U+007F–U+009F). Spaces, `/`, `%`, `.` and any
/// other character are allowed anywhere, leading and trailing included.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_BYTES && !id.chars().any(char::is_control)
}

/// Whether `name` may name a tenant, an agent or a key: 1 to
/// [`MAX_NAME_BYTES`] characters of `A-Z a-z 0-9 _ - . :`, not starting
/// with `.`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_plain_and_never_paths() {
        for good in ["a", "s-1", "call_2.x", "tenant:sub", &"x".repeat(128)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", ".hidden", "..", "a/b", "a b", "é", "a\\b", "a\0", &"x".repeat(129)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn ids_are_any_text_without_control_characters() {
        let longest = "ü".repeat(MAX_ID_BYTES / 2);
        for good in [
            "a",
            "call_AbC123",
            "toolu_01A09q90qw90lq917835lq9",
            "chat/ü 1:x",
            "../..",
            ".hidden",
            " padded ",
            "a%2Fb",
            "日本語",
            "\u{200b}",
            &longest,
        ] {
            assert!(valid_id(good), "{good:?}");
        }
        let too_long = format!("{longest}x");
        for bad in ["", "a\0", "line\nbreak", "tab\t", "del\u{7f}", "c1\u{85}", "\u{9f}", &too_long] {
            assert!(!valid_id(bad), "{bad:?}");
        }
        assert_eq!(ID_RULE, format!("1 to {MAX_ID_BYTES} bytes of UTF-8 without control characters"));
        assert!(NAME_RULE.starts_with(&format!("1 to {MAX_NAME_BYTES} ")));
    }

    #[test]
    fn every_name_is_an_id() {
        for name in ["a", "tenant:sub", "call_2.x", &"x".repeat(128)] {
            assert!(valid_name(name) && valid_id(name), "{name}");
        }
    }
}
