//! Who is calling: API keys, tenants, and short-lived event-stream tokens.
//!
//! A key is `subs_` and 32 random hex digits. Only its SHA-256 is stored
//! (in the config file or the store); a request's `Authorization: Bearer`
//! key is hashed and looked up. With no key configured anywhere the server
//! serves one tenant, `local`, without authentication — and then listens
//! on loopback only (enforced where it binds).
//!
//! Browsers' `EventSource` cannot set headers, so the events endpoint also
//! takes `?token=`: a token minted by `POST /v1/tokens`, valid for a few
//! minutes, signed with a secret that lives only in this process.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subs_engine::store::KeyRecord;

use crate::AppState;
use crate::error::ApiError;

/// The tenant with no keys configured.
pub const LOCAL_TENANT: &str = "local";

/// How long an event-stream token lives.
pub const TOKEN_TTL: Duration = Duration::from_secs(300);

/// The keys the server accepts.
pub struct Keys {
    /// SHA-256 hex → the key's record.
    by_hash: RwLock<HashMap<String, KeyRecord>>,
    /// Signs event-stream tokens; random per process.
    token_secret: [u8; 32],
}

impl Keys {
    /// The server's keys: those of the config file and of the store.
    pub fn new(records: impl IntoIterator<Item = KeyRecord>) -> Self {
        let mut token_secret = [0u8; 32];
        // Without randomness the tokens could be forged; refusing to start
        // is better than serving with a guessable secret.
        getrandom::fill(&mut token_secret).expect("the OS provides random bytes");
        Self { by_hash: RwLock::new(records.into_iter().map(|r| (r.hash.clone(), r)).collect()), token_secret }
    }

    /// Whether no key is configured: the single local tenant is served.
    pub fn is_open(&self) -> bool {
        self.by_hash.read().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
    }

    /// The tenant of a key.
    pub fn tenant_of(&self, key: &str) -> Option<String> {
        let keys = self.by_hash.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.get(&hash_key(key)).map(|r| r.tenant.clone())
    }

    /// A token for `tenant`'s event streams, valid until `expires` (Unix
    /// seconds).
    pub fn token(&self, tenant: &str, expires: u64) -> String {
        format!("{tenant}.{expires}.{}", self.sign(tenant, expires))
    }

    /// The tenant of a valid, unexpired token.
    pub fn tenant_of_token(&self, token: &str, now: u64) -> Option<String> {
        let mut parts = token.rsplitn(3, '.');
        let (mac, expires, tenant) = (parts.next()?, parts.next()?, parts.next()?);
        let expires: u64 = expires.parse().ok()?;
        let expected = self.sign(tenant, expires);
        (expires >= now && constant_time_eq(mac.as_bytes(), expected.as_bytes())).then(|| tenant.to_owned())
    }

    fn sign(&self, tenant: &str, expires: u64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.token_secret).expect("HMAC takes any key length");
        mac.update(format!("{tenant}.{expires}").as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

/// Hex SHA-256 of a key, as stored.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random key.
pub fn new_key() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS provides random bytes");
    format!("subs_{}", hex::encode(bytes))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The calling tenant, from `Authorization: Bearer <key>` (or the local
/// tenant when no keys are configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        authenticate(parts, state, false)
    }
}

/// The calling tenant for event streams: a bearer key, or a `token` query
/// parameter from `POST /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTenant(pub String);

impl FromRequestParts<Arc<AppState>> for StreamTenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        authenticate(parts, state, true).map(|Tenant(t)| StreamTenant(t))
    }
}

fn authenticate(parts: &Parts, state: &AppState, token_allowed: bool) -> Result<Tenant, ApiError> {
    let keys = &state.keys;
    if keys.is_open() {
        return Ok(Tenant(LOCAL_TENANT.to_owned()));
    }
    if let Some(header) = parts.headers.get(axum::http::header::AUTHORIZATION) {
        let key = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .ok_or_else(|| ApiError::unauthorized("the Authorization header must be `Bearer <key>`"))?;
        return keys.tenant_of(key.trim()).map(Tenant).ok_or_else(|| ApiError::unauthorized("unknown API key"));
    }
    if token_allowed {
        let token = parts.uri.query().into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix("token="));
        if let Some(token) = token {
            return keys
                .tenant_of_token(token, subs_engine::clock::now_ms() / 1000)
                .map(Tenant)
                .ok_or_else(|| ApiError::unauthorized("the token is invalid or expired"));
        }
    }
    Err(ApiError::unauthorized("an API key is required: `Authorization: Bearer <key>`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new([KeyRecord {
            tenant: "acme".to_owned(),
            hash: hash_key("subs_secret"),
            prefix: "subs_sec".to_owned(),
            name: None,
            created_ms: 0,
        }])
    }

    #[test]
    fn keys_are_looked_up_by_hash() {
        let keys = keys();
        assert_eq!(keys.tenant_of("subs_secret").as_deref(), Some("acme"));
        assert_eq!(keys.tenant_of("subs_other"), None);
        assert!(!keys.is_open());
        assert!(Keys::new([]).is_open());
    }

    #[test]
    fn tokens_expire_and_cannot_be_forged() {
        let keys = keys();
        let token = keys.token("acme", 100);
        assert_eq!(keys.tenant_of_token(&token, 99).as_deref(), Some("acme"));
        assert_eq!(keys.tenant_of_token(&token, 101), None, "expired");
        assert_eq!(keys.tenant_of_token(&token.replace("acme", "evil"), 99), None, "another tenant");
        assert_eq!(keys.tenant_of_token("acme.999.00", 99), None, "a wrong signature");
        assert_eq!(keys.tenant_of_token("garbage", 0), None);
        let other = Keys::new([]);
        assert_eq!(other.tenant_of_token(&token, 99), None, "another process's secret");
    }

    #[test]
    fn new_keys_are_random() {
        let (a, b) = (new_key(), new_key());
        assert_ne!(a, b);
        assert!(a.starts_with("subs_") && a.len() == 37);
    }
}

/// A short-lived token for event streams.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Token {
    /// Pass as `?token=` to `GET /v1/sessions/{id}/events`.
    pub token: String,
    /// When it stops working (Unix seconds).
    pub expires_at: u64,
}

/// Mints a token that authenticates the calling tenant's event streams for
/// five minutes, for clients (browsers' `EventSource`) that cannot send an
/// `Authorization` header.
#[utoipa::path(
    post,
    path = "/v1/tokens",
    responses((status = 200, body = Token), (status = 401, body = crate::error::ErrorBody)),
    tag = "auth"
)]
pub async fn mint_token(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    Tenant(tenant): Tenant,
) -> axum::Json<Token> {
    let expires_at = subs_engine::clock::now_ms() / 1000 + TOKEN_TTL.as_secs();
    axum::Json(Token { token: state.keys.token(&tenant, expires_at), expires_at })
}
