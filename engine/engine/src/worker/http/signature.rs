//! Signing requests to HTTP workers: `Subs-Signature: t=<unix
//! seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
//!
//! The timestamp is inside the MAC so a worker can refuse replays of an old
//! request; the body is signed byte for byte as sent, so a worker must
//! verify the raw body before parsing it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header that carries the signature.
pub(crate) const HEADER: &str = "subs-signature";

/// The `Subs-Signature` value for `body` sent at `timestamp` (Unix
/// seconds).
pub(crate) fn header_value(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    // HMAC takes keys of any length (long ones are hashed first), so this
    // cannot fail.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        unreachable!("HMAC accepts keys of every length")
    };
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_independent_hmac_sha256() {
        // HMAC-SHA256("secret", "1700000000.{}"), computed with Python's
        // hmac module: hmac.new(b"secret", b"1700000000.{}", "sha256").
        assert_eq!(
            header_value(b"secret", 1_700_000_000, b"{}"),
            "t=1700000000,v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }
}
