//! Request signatures, the one definition of them: the engine [`sign`]s
//! each request to an HTTP worker whose agent has a secret, and the worker
//! (the `subs-http-worker` SDK, which re-exports this module) checks it
//! with [`verify_signature`]. Tests and clients that call a worker
//! directly sign with [`sign`] too.
//!
//! Needs the crate's `signature` feature (on by default).
//!
//! The header is `t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
//! "<t>.<body>")>`. The MAC covers the timestamp, so an old request cannot
//! be replayed with a fresh one, and the raw body, so it is verified before
//! the body is parsed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header that carries the signature (header names are
/// case-insensitive; HTTP/2 and most clients send it as `subs-signature`).
pub const SIGNATURE_HEADER: &str = "Subs-Signature";

/// How far a signature's timestamp may be from the worker's clock, either
/// way, by default: long enough for clock skew and a slow network, short
/// enough that a captured request soon stops working.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The request carries no `Subs-Signature` header.
    #[error("the request has no Subs-Signature header")]
    Missing,
    /// The header is not `t=<unix seconds>,v1=<64 hex digits>`.
    #[error("the Subs-Signature header is malformed: {0}")]
    Malformed(String),
    /// No `v1` MAC matches the body and timestamp: a different secret, or
    /// a body changed on the way.
    #[error("the signature does not match the request (is the secret the same on both sides?)")]
    Mismatch,
    /// The signature is authentic but its timestamp is outside the
    /// tolerance: a replayed request, or clocks far apart.
    #[error("the signature is {skew_secs} s {direction}; at most {tolerance_secs} s is accepted", direction = if *.ahead { "ahead of this clock" } else { "old" })]
    Stale {
        /// How far the timestamp is from now, in seconds.
        skew_secs: u64,
        /// Whether the timestamp is in the future.
        ahead: bool,
        /// The tolerance, in seconds.
        tolerance_secs: u64,
    },
}

/// The `Subs-Signature` value for `body` sent at `timestamp` (Unix
/// seconds).
///
/// ```
/// use subs_protocol::signature::sign;
///
/// let header = sign(b"s3cret", 1_700_000_000, br#"{"session_id":"s"}"#);
/// assert!(header.starts_with("t=1700000000,v1="));
/// assert_eq!(header.len(), "t=1700000000,v1=".len() + 64);
/// ```
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let mac = mac(secret, &t, body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks that `header` (the `Subs-Signature` value) signs `body` with
/// `secret`, at a time within `tolerance` of `now`.
///
/// The header may carry several `v1` MACs (a secret being rotated); one
/// matching is enough. Keys other than `t` and `v1` are ignored, for later
/// signature versions. MACs are compared in constant time.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use subs_protocol::signature::{sign, verify_signature, SignatureError, DEFAULT_TOLERANCE};
///
/// let body = br#"{"session_id":"s"}"#;
/// let sent = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let header = sign(b"s3cret", 1_700_000_000, body);
///
/// assert_eq!(verify_signature(b"s3cret", &header, body, sent, DEFAULT_TOLERANCE), Ok(()));
/// assert_eq!(
///     verify_signature(b"other", &header, body, sent, DEFAULT_TOLERANCE),
///     Err(SignatureError::Mismatch)
/// );
/// let later = sent + Duration::from_secs(600);
/// assert!(matches!(
///     verify_signature(b"s3cret", &header, body, later, DEFAULT_TOLERANCE),
///     Err(SignatureError::Stale { skew_secs: 600, ahead: false, .. })
/// ));
/// ```
///
/// # Errors
/// [`SignatureError::Malformed`] for a header that does not parse,
/// [`SignatureError::Mismatch`] when no MAC matches, and
/// [`SignatureError::Stale`] for an authentic signature whose timestamp
/// is too far from `now`. An empty header is [`SignatureError::Missing`].
pub fn verify_signature(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    if header.trim().is_empty() {
        return Err(SignatureError::Missing);
    }
    let mut timestamp: Option<&str> = None;
    let mut macs = Vec::new();
    for part in header.split(',') {
        let Some((key, value)) = part.trim().split_once('=') else {
            return Err(SignatureError::Malformed(format!("`{}` is not key=value", part.trim())));
        };
        match key {
            "t" if timestamp.replace(value).is_some() => {
                return Err(SignatureError::Malformed("more than one `t`".to_owned()));
            }
            "t" => {}
            "v1" => {
                let mac = hex::decode(value)
                    .ok()
                    .filter(|m| m.len() == 32)
                    .ok_or_else(|| SignatureError::Malformed("`v1` is not 64 hex digits".to_owned()))?;
                macs.push(mac);
            }
            _ => {}
        }
    }
    let Some(t) = timestamp else {
        return Err(SignatureError::Malformed("no `t=<unix seconds>`".to_owned()));
    };
    let Ok(signed_at) = t.parse::<u64>() else {
        return Err(SignatureError::Malformed(format!("`t={t}` is not Unix seconds")));
    };
    if macs.is_empty() {
        return Err(SignatureError::Malformed("no `v1=<hex HMAC-SHA256>`".to_owned()));
    }
    // The MAC is checked before the time: `Stale` then means an authentic
    // request sent too long ago, never a forgery.
    let expected = mac(secret, t, body);
    if !macs.iter().any(|m| expected.clone().verify_slice(m).is_ok()) {
        return Err(SignatureError::Mismatch);
    }
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (skew_secs, ahead) = if signed_at > now { (signed_at - now, true) } else { (now - signed_at, false) };
    if skew_secs > tolerance.as_secs() {
        return Err(SignatureError::Stale { skew_secs, ahead, tolerance_secs: tolerance.as_secs() });
    }
    Ok(())
}

/// HMAC-SHA256 over `"<t>.<body>"`, with `t` exactly as it is written in
/// the header.
fn mac(secret: &[u8], t: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length (long ones are hashed first).
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret) else {
        unreachable!("HMAC accepts keys of every length")
    };
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"session_id":"s","attempts":1}"#;
    const T: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn verify(header: &str, now: u64) -> Result<(), SignatureError> {
        verify_signature(b"s3cret", header, BODY, at(now), DEFAULT_TOLERANCE)
    }

    #[test]
    fn matches_an_independent_hmac_sha256() {
        // python3 -c 'import hmac; print(hmac.new(b"secret", b"1700000000.{}", "sha256").hexdigest())'
        assert_eq!(
            sign(b"secret", T, b"{}"),
            "t=1700000000,v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }

    #[test]
    fn a_fresh_signature_passes() {
        let header = sign(b"s3cret", T, BODY);
        assert_eq!(verify(&header, T), Ok(()));
        assert_eq!(verify(&header, T + 300), Ok(()));
        assert_eq!(verify(&header, T - 300), Ok(()));
        assert_eq!(verify(&format!(" {} ", header.replace(',', " , ")), T), Ok(()));
    }

    #[test]
    fn a_changed_body_or_secret_is_a_mismatch() {
        let header = sign(b"s3cret", T, BODY);
        assert_eq!(
            verify_signature(b"s3cret", &header, b"{}", at(T), DEFAULT_TOLERANCE),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(verify_signature(b"other", &header, BODY, at(T), DEFAULT_TOLERANCE), Err(SignatureError::Mismatch));
        // The timestamp is signed too: moving it breaks the MAC.
        let moved = header.replace("t=1700000000", "t=1700000100");
        assert_eq!(verify(&moved, T + 100), Err(SignatureError::Mismatch));
        let flipped = format!("{}0", &header[..header.len() - 1]);
        let flipped = if flipped == header { format!("{}1", &header[..header.len() - 1]) } else { flipped };
        assert_eq!(verify(&flipped, T), Err(SignatureError::Mismatch));
    }

    #[test]
    fn old_and_future_timestamps_are_stale() {
        let header = sign(b"s3cret", T, BODY);
        assert_eq!(
            verify(&header, T + 301),
            Err(SignatureError::Stale { skew_secs: 301, ahead: false, tolerance_secs: 300 })
        );
        let err = verify(&header, T - 1000).unwrap_err();
        assert_eq!(err, SignatureError::Stale { skew_secs: 1000, ahead: true, tolerance_secs: 300 });
        assert_eq!(err.to_string(), "the signature is 1000 s ahead of this clock; at most 300 s is accepted");
        let tight = verify_signature(b"s3cret", &header, BODY, at(T + 2), Duration::from_secs(1));
        assert!(matches!(tight, Err(SignatureError::Stale { skew_secs: 2, .. })), "{tight:?}");
    }

    #[test]
    fn any_of_several_macs_may_match() {
        let header = sign(b"s3cret", T, BODY);
        let old = sign(b"old", T, BODY);
        let old_mac = old.split_once("v1=").unwrap().1;
        assert_eq!(verify(&format!("{header},v1={old_mac}"), T), Ok(()));
        assert_eq!(verify(&format!("t={T},v1={old_mac},v2=abc"), T), Err(SignatureError::Mismatch));
        assert_eq!(verify(&format!("{header},v0=zzz,scheme=hmac"), T), Ok(()));
    }

    #[test]
    fn bad_formats_say_what_is_wrong() {
        let mac = "a".repeat(64);
        let cases = [
            ("", None),
            ("   ", None),
            ("nonsense", Some("`nonsense` is not key=value")),
            (&*format!("v1={mac}"), Some("no `t=<unix seconds>`")),
            ("t=1700000000", Some("no `v1=<hex HMAC-SHA256>`")),
            (&*format!("t=soon,v1={mac}"), Some("`t=soon` is not Unix seconds")),
            (&*format!("t=-5,v1={mac}"), Some("`t=-5` is not Unix seconds")),
            (&*format!("t=1,t=2,v1={mac}"), Some("more than one `t`")),
            ("t=1700000000,v1=xyz", Some("`v1` is not 64 hex digits")),
            ("t=1700000000,v1=abcd", Some("`v1` is not 64 hex digits")),
        ];
        for (header, expected) in cases {
            let err = verify(header, T).unwrap_err();
            match expected {
                None => assert_eq!(err, SignatureError::Missing, "{header:?}"),
                Some(text) => assert_eq!(err, SignatureError::Malformed(text.to_owned()), "{header:?}"),
            }
        }
    }
}
