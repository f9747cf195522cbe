//! Who is calling: API keys, tenants, the operator, and short-lived
//! event-stream tokens.
//!
//! A key is `subs_` and 32 random hex digits. Only its SHA-256 is stored
//! (in the config file or the store); a request's `Authorization: Bearer`
//! key is hashed and looked up. With no key configured anywhere (no tenant
//! key, no operator key) the server serves one tenant, `local`, without
//! authentication — and then listens on loopback only (enforced where it
//! binds). Whether it does is decided when the server starts: revoking
//! the last key at run time never opens it.
//!
//! The operator key (`subs_admin_` and 32 hex digits) authorizes the admin
//! API and nothing else; a tenant key never authorizes it. The two are
//! kept apart: a key is one or the other.
//!
//! Browsers' `EventSource` cannot set headers, so the events endpoint also
//! takes `?token=`: a token minted by `POST /v1/tokens`, valid for a few
//! minutes, signed with a secret that lives only in this process. It names
//! the key that minted it, and works only while that key does: at every
//! connect, and for as long as its stream stays open (a stream ends when
//! the key it was opened with is revoked or its tenant deleted; see
//! [`Credential`]).
//!
//! `POST /v1/tokens` with a body mints an **end-user token** instead: the
//! same signature over the tenant, an expiry, an identity and optionally
//! one session. It reaches only the sessions of its identity (and of its
//! session, when it names one), through the routes that take a [`Caller`]:
//! input, snapshots, listing, cancel and events. Every route that takes a
//! [`Tenant`] or the [`Operator`] refuses it with 403.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use subs_engine::telemetry::{SpanRef, parse_traceparent};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subs_engine::store::{KeyRecord, SessionHead, SessionRecord, valid_id};
use subs_protocol::WorkerIdentity;
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::ApiError;

/// The tenant with no keys configured.
pub const LOCAL_TENANT: &str = "local";

/// How long an event-stream token lives.
pub const TOKEN_TTL: Duration = Duration::from_secs(300);

/// How long an end-user token lives unless its `ttl_secs` says.
pub const USER_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);

/// The longest `ttl_secs` an end-user token may ask for.
pub const MAX_USER_TOKEN_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How an end-user token starts, which tells it from keys and
/// event-stream tokens.
pub const USER_TOKEN_PREFIX: &str = "subs_user_";

/// An end user: who an end-user token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndUser {
    /// The tenant whose key minted the token.
    pub tenant: String,
    /// The owner of the sessions the token reaches, and of those it
    /// creates. Always has an id.
    pub identity: WorkerIdentity,
    /// The one session the token reaches, when it names one.
    pub session_id: Option<String>,
}

impl EndUser {
    /// The identity's id.
    pub fn id(&self) -> &str {
        self.identity.id.as_deref().unwrap_or_default()
    }

    /// Whether the token may name session `session_id` at all (its own
    /// session, when it names one).
    pub fn may_name(&self, session_id: &str) -> bool {
        self.session_id.as_deref().is_none_or(|own| own == session_id)
    }

    /// Whether the token reaches the session `record`: one the token may
    /// name, owned by its identity.
    pub fn may_reach(&self, record: &impl Owned) -> bool {
        let (session, owner) = record.owned();
        self.may_name(session) && owner.id.as_deref() == Some(self.id())
    }
}

/// A session as who may reach it is decided: its id and its owner. Both
/// its full record and its head say.
pub trait Owned {
    /// The session's id and its owner.
    fn owned(&self) -> (&str, &WorkerIdentity);
}

impl Owned for SessionRecord {
    fn owned(&self) -> (&str, &WorkerIdentity) {
        (&self.key.session, &self.identity)
    }
}

impl Owned for SessionHead {
    fn owned(&self) -> (&str, &WorkerIdentity) {
        (&self.key.session, &self.identity)
    }
}

/// What an end-user token carries, signed.
#[derive(Serialize, Deserialize)]
struct Claims {
    /// The tenant.
    t: String,
    /// Expiry, Unix seconds.
    e: u64,
    /// The identity.
    i: WorkerIdentity,
    /// The one session, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
}

/// Where a tenant key comes from, which says how it can be revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The store: made by the admin API or `subs keys create`, and revoked
    /// the same ways.
    Store,
    /// The config file's `[[keys]]`: changed only by editing the file and
    /// restarting.
    Config,
}

/// What a request was authenticated with, which an event stream must go
/// on holding to stay open: when the key is revoked (or its tenant
/// deleted, which revokes its keys) the stream ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A server that takes no key: nothing can be revoked.
    Open,
    /// A tenant's key, by its hash: given as `Authorization`, or the key
    /// that minted the event-stream token.
    Key {
        /// The tenant it acts for.
        tenant: String,
        /// Hex SHA-256 of the key.
        hash: String,
    },
    /// An end-user token, which works while its tenant has a key.
    User {
        /// The tenant whose key minted it.
        tenant: String,
    },
}

/// The keys the server accepts: tenants' keys, which the admin API changes
/// while the server runs, and the operator's, fixed at start.
pub struct Keys {
    /// SHA-256 hex → the key's record and where it comes from.
    by_hash: RwLock<HashMap<String, (KeyRecord, KeySource)>>,
    /// Counts the times keys were removed: open streams watch it and check
    /// their [`Credential`] again when it moves.
    removals: tokio::sync::watch::Sender<u64>,
    /// SHA-256 hex of each operator key.
    admin: Vec<String>,
    /// Whether nobody is authenticated (no key of any kind at start).
    open: bool,
    /// Signs event-stream tokens; random per process.
    token_secret: [u8; 32],
}

impl Keys {
    /// The server's keys: `records` are the store's. Add the config
    /// file's with [`with_config_keys`](Self::with_config_keys) and the
    /// operator's with [`with_admin_keys`](Self::with_admin_keys).
    pub fn new(records: impl IntoIterator<Item = KeyRecord>) -> Self {
        let mut token_secret = [0u8; 32];
        // Without randomness the tokens could be forged; refusing to start
        // is better than serving with a guessable secret.
        getrandom::fill(&mut token_secret).expect("the OS provides random bytes");
        let by_hash: HashMap<_, _> = records.into_iter().map(|r| (r.hash.clone(), (r, KeySource::Store))).collect();
        let open = by_hash.is_empty();
        Self {
            by_hash: RwLock::new(by_hash),
            removals: tokio::sync::watch::Sender::new(0),
            admin: Vec::new(),
            open,
            token_secret,
        }
    }

    /// Adds the config file's keys; where the store holds the same key,
    /// the file's tenant wins.
    pub fn with_config_keys(mut self, records: impl IntoIterator<Item = KeyRecord>) -> Self {
        let by_hash = self.by_hash.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        by_hash.extend(records.into_iter().map(|r| (r.hash.clone(), (r, KeySource::Config))));
        self.open = self.open && by_hash.is_empty();
        self
    }

    /// Signs tokens with `secret` instead of a secret of this process's
    /// own: every node sharing a store signs with the same one, so a token
    /// minted by one is accepted by all.
    pub fn with_token_secret(mut self, secret: [u8; 32]) -> Self {
        self.token_secret = secret;
        self
    }

    /// Replaces the store's keys with `records` (what another node sharing
    /// the store changed); the config file's keys stay as they are.
    pub fn replace_stored(&self, records: impl IntoIterator<Item = KeyRecord>) {
        {
            let mut by_hash = self.write();
            by_hash.retain(|_, (_, source)| !matches!(source, KeySource::Store));
            for record in records {
                by_hash.entry(record.hash.clone()).or_insert((record, KeySource::Store));
            }
        }
        // Some may be gone: open streams check theirs.
        self.removals.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Adds operator keys, by SHA-256 (hex): they enable the admin API.
    pub fn with_admin_keys(mut self, hashes: impl IntoIterator<Item = String>) -> Self {
        self.admin.extend(hashes.into_iter().map(|h| h.to_ascii_lowercase()));
        self.open = self.open && self.admin.is_empty();
        self
    }

    /// Whether no key was configured when the server started: the single
    /// local tenant is served without authentication.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether an operator key is configured (the admin API answers).
    pub fn admin_enabled(&self) -> bool {
        !self.admin.is_empty()
    }

    /// Whether `key` is an operator key. Compared in constant time: the
    /// operator key is the one secret worth timing.
    pub fn is_admin(&self, key: &str) -> bool {
        let hash = hash_key(key);
        // Every configured hash is compared, so the time taken does not
        // say which one matched.
        self.admin.iter().fold(false, |found, admin| bool::from(hash.as_bytes().ct_eq(admin.as_bytes())) | found)
    }

    /// The tenant of a key.
    pub fn tenant_of(&self, key: &str) -> Option<String> {
        self.holder_of(key).map(|(tenant, _)| tenant)
    }

    /// The tenant a key acts for and the key's prefix (which names it in
    /// key listings and in `interrupt.resumed` events); `None` when it is
    /// not a tenant's key.
    pub fn holder_of(&self, key: &str) -> Option<(String, String)> {
        self.read().get(&hash_key(key)).map(|(r, _)| (r.tenant.clone(), r.prefix.clone()))
    }

    /// Accepts a key of the store from now on.
    pub fn insert(&self, record: KeyRecord) {
        self.write().insert(record.hash.clone(), (record, KeySource::Store));
    }

    /// Stops accepting the key with this hash; its record, if it had one.
    /// Event streams opened with it (or with a token it minted) end.
    pub fn remove(&self, hash: &str) -> Option<(KeyRecord, KeySource)> {
        let removed = self.write().remove(hash);
        if removed.is_some() {
            self.removals.send_modify(|n| *n = n.wrapping_add(1));
        }
        removed
    }

    /// Whether `credential` still authenticates: its key is still
    /// accepted (for its tenant), or its end user's tenant still has a
    /// key.
    pub fn still_valid(&self, credential: &Credential) -> bool {
        match credential {
            Credential::Open => true,
            Credential::Key { tenant, hash } => self.read().get(hash).is_some_and(|(r, _)| &r.tenant == tenant),
            Credential::User { tenant } => self.is_open() || self.has_tenant(tenant),
        }
    }

    /// Moves each time keys are removed (revoked, a tenant deleted, or
    /// gone from the store another node changed): a stream holding a
    /// [`Credential`] checks it again then.
    pub fn removals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.removals.subscribe()
    }

    /// Every tenant key (hashes, never keys), by tenant, then oldest first.
    pub fn list(&self) -> Vec<(KeyRecord, KeySource)> {
        let mut keys: Vec<_> = self.read().values().cloned().collect();
        keys.sort_by(|(a, _), (b, _)| (&a.tenant, a.created_ms, &a.hash).cmp(&(&b.tenant, b.created_ms, &b.hash)));
        keys
    }

    /// The keys of `tenant`.
    pub fn of_tenant(&self, tenant: &str) -> Vec<(KeyRecord, KeySource)> {
        self.list().into_iter().filter(|(k, _)| k.tenant == tenant).collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, (KeyRecord, KeySource)>> {
        self.by_hash.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, (KeyRecord, KeySource)>> {
        self.by_hash.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A token for `tenant`'s event streams, minted with the key of hash
    /// `key` (`None` on a server that takes no key), valid until `expires`
    /// (Unix seconds) and while that key is: `<tenant>.<key hash or
    /// ->.<expires>.<signature>`.
    pub fn token(&self, tenant: &str, key: Option<&str>, expires: u64) -> String {
        let key = key.unwrap_or(NO_KEY);
        format!("{tenant}.{key}.{expires}.{}", self.sign(tenant, key, expires))
    }

    /// The tenant of a valid, unexpired event-stream token whose key is
    /// still accepted (minted without one: while the server takes none),
    /// and that key as the stream's [`Credential`].
    pub fn tenant_of_token(&self, token: &str, now: u64) -> Option<(String, Credential)> {
        let mut parts = token.rsplitn(4, '.');
        let (mac, expires, key, tenant) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let expires_at: u64 = expires.parse().ok()?;
        if expires_at < now || !self.verify(&stream_message(tenant, key, expires_at), mac) {
            return None;
        }
        let credential = match key {
            NO_KEY if self.is_open() => Credential::Open,
            NO_KEY => return None,
            hash => Credential::Key { tenant: tenant.to_owned(), hash: hash.to_owned() },
        };
        self.still_valid(&credential).then(|| (tenant.to_owned(), credential))
    }

    fn sign(&self, tenant: &str, key: &str, expires: u64) -> String {
        self.mac(&stream_message(tenant, key, expires))
    }

    /// The HMAC of `message` under this process's token secret: the one
    /// signer of every token.
    fn mac(&self, message: &str) -> String {
        hex::encode(self.hmac(message).finalize().into_bytes())
    }

    /// Whether `mac` (hex) is this process's signature of `message`,
    /// compared in constant time by the `hmac` crate.
    fn verify(&self, message: &str, mac: &str) -> bool {
        hex::decode(mac).is_ok_and(|mac| self.hmac(message).verify_slice(&mac).is_ok())
    }

    fn hmac(&self, message: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.token_secret).expect("HMAC takes any key length");
        mac.update(message.as_bytes());
        mac
    }

    /// An end-user token for `user`, valid until `expires` (Unix seconds):
    /// [`USER_TOKEN_PREFIX`], the claims as hex of their JSON, `.`, and
    /// their signature.
    pub fn user_token(&self, user: &EndUser, expires: u64) -> String {
        let claims =
            Claims { t: user.tenant.clone(), e: expires, i: user.identity.clone(), s: user.session_id.clone() };
        let payload = hex::encode(serde_json::to_vec(&claims).expect("claims are JSON"));
        format!("{USER_TOKEN_PREFIX}{payload}.{}", self.mac(&user_message(&payload)))
    }

    /// The end user of a valid, unexpired end-user token.
    pub fn user_of_token(&self, token: &str, now: u64) -> Option<EndUser> {
        let (payload, mac) = token.strip_prefix(USER_TOKEN_PREFIX)?.split_once('.')?;
        if !self.verify(&user_message(payload), mac) {
            return None;
        }
        let claims: Claims = serde_json::from_slice(&hex::decode(payload).ok()?).ok()?;
        (claims.e >= now && claims.i.id.is_some()).then_some(EndUser {
            tenant: claims.t,
            identity: claims.i,
            session_id: claims.s,
        })
    }

    /// Whether `tenant` has a key (of the store or the config file): an
    /// end-user token works only while its tenant does.
    pub fn has_tenant(&self, tenant: &str) -> bool {
        self.read().values().any(|(k, _)| k.tenant == tenant)
    }
}

/// What an event-stream token names in place of a key when the server
/// takes none.
const NO_KEY: &str = "-";

/// What an event-stream token signs: the tenant, the key's hash (or the
/// open server's marker) and the expiry.
fn stream_message(tenant: &str, key: &str, expires: u64) -> String {
    format!("{tenant}.{key}.{expires}")
}

/// What an end-user token's signature covers. A `/` appears in no
/// event-stream token's signed text (a tenant name, a key's hash or `-`,
/// and digits), so no signature of one kind is ever one of the other.
fn user_message(payload: &str) -> String {
    format!("user/{payload}")
}

/// Hex SHA-256 of a key, as stored.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random tenant key.
pub fn new_key() -> String {
    format!("subs_{}", random_hex())
}

/// A new random operator key: its own prefix, so it is not mistaken for a
/// tenant's.
pub fn new_admin_key() -> String {
    format!("subs_admin_{}", random_hex())
}

fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS provides random bytes");
    hex::encode(bytes)
}

/// The first characters of a key, to tell keys apart in listings without
/// revealing enough to guess them.
pub fn key_prefix(key: &str) -> String {
    key.chars().take(12).collect()
}

/// Whether `wanted` names `key`: its hash or a prefix of it, its listed
/// prefix (or more of the key), or the key itself.
pub fn names_key(key: &KeyRecord, wanted: &str) -> bool {
    let lower = wanted.to_ascii_lowercase();
    key.hash.starts_with(&lower)
        || (!key.prefix.is_empty() && (wanted.starts_with(&key.prefix) || key.prefix.starts_with(wanted)))
        || key.hash == hash_key(wanted)
}

/// The calling tenant, from `Authorization: Bearer <key>` (or the local
/// tenant when no keys are configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let (caller, _) = authenticate(parts, state, Accept { users: false, stream_tokens: false })?;
        Ok(Tenant(caller.tenant))
    }
}

/// Who calls a session route: a tenant (by its key), or an end user (by an
/// end-user token, as `Authorization: Bearer` or `?token=`), who reaches
/// only the sessions [`EndUser::may_reach`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The tenant.
    pub tenant: String,
    /// The end user, when an end-user token authenticated the request.
    pub user: Option<EndUser>,
    /// The prefix of the tenant key that authenticated the request (as
    /// key listings show it); `None` for an end user or a server without
    /// keys.
    pub key: Option<String>,
    /// The trace the request is part of: its W3C `traceparent` header,
    /// when it has a valid one. The turn an input starts joins it.
    pub trace: Option<SpanRef>,
}

impl Caller {
    /// Whether the caller reaches the session `record`: every session of
    /// its tenant for a key, its own for an end user.
    pub fn may_reach(&self, record: &impl Owned) -> bool {
        self.user.as_ref().is_none_or(|user| user.may_reach(record))
    }
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let (caller, _) = authenticate(parts, state, Accept { users: true, stream_tokens: false })?;
        let trace = parts.headers.get("traceparent").and_then(|v| v.to_str().ok()).and_then(parse_traceparent);
        Ok(Caller { trace, ..caller })
    }
}

/// The caller of an event stream: a [`Caller`], or a tenant by an
/// event-stream token from `POST /v1/tokens` as `?token=`; and what it
/// was authenticated with, which the stream must go on holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCaller(pub Caller, pub Credential);

impl FromRequestParts<Arc<AppState>> for StreamCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let (caller, credential) = authenticate(parts, state, Accept { users: true, stream_tokens: true })?;
        Ok(StreamCaller(caller, credential))
    }
}

/// The credentials a route takes besides tenant keys.
#[derive(Debug, Clone, Copy)]
struct Accept {
    /// End-user tokens (refused with 403 otherwise).
    users: bool,
    /// Event-stream tokens as `?token=`.
    stream_tokens: bool,
}

/// The key of `Authorization: Bearer <key>`, if the header is there.
fn bearer(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let Some(header) = parts.headers.get(axum::http::header::AUTHORIZATION) else { return Ok(None) };
    let key = header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError::unauthorized("the Authorization header must be `Bearer <key>`"))?;
    Ok(Some(key.trim()))
}

/// The `token` query parameter, if any.
fn query_token(parts: &Parts) -> Option<&str> {
    parts.uri.query().into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix("token="))
}

/// The end user of the request's end-user token (bearer or `?token=`), if
/// it presents one; 401 when it is invalid, expired, or its tenant has
/// no key left.
fn end_user(parts: &Parts, keys: &Keys) -> Result<Option<EndUser>, ApiError> {
    let token = match bearer(parts)? {
        Some(key) => Some(key),
        None => query_token(parts),
    };
    let Some(token) = token.filter(|t| t.starts_with(USER_TOKEN_PREFIX)) else { return Ok(None) };
    let user = keys
        .user_of_token(token, subs_engine::clock::now_ms() / 1000)
        .filter(|user| keys.is_open() || keys.has_tenant(&user.tenant))
        .ok_or_else(|| ApiError::unauthorized("the end-user token is invalid or expired"))?;
    Ok(Some(user))
}

/// 403 for an end-user token on a route it may not use.
fn not_for_end_users() -> ApiError {
    ApiError::forbidden(
        "an end-user token reaches only its own sessions (input, snapshots, decisions, listing, cancel, events); \
         this route takes the tenant's key",
    )
}

fn authenticate(parts: &Parts, state: &AppState, accept: Accept) -> Result<(Caller, Credential), ApiError> {
    let keys = &state.keys;
    // An end-user token is honoured even by a server without keys: it only
    // ever narrows what the request reaches.
    if let Some(user) = end_user(parts, keys)? {
        if !accept.users {
            return Err(not_for_end_users());
        }
        let credential = Credential::User { tenant: user.tenant.clone() };
        return Ok((Caller { tenant: user.tenant.clone(), user: Some(user), key: None, trace: None }, credential));
    }
    let tenant = |tenant: String| Caller { tenant, user: None, key: None, trace: None };
    if keys.is_open() {
        return Ok((tenant(LOCAL_TENANT.to_owned()), Credential::Open));
    }
    if let Some(key) = bearer(parts)? {
        if let Some((name, prefix)) = keys.holder_of(key) {
            let credential = Credential::Key { tenant: name.clone(), hash: hash_key(key) };
            return Ok((Caller { key: Some(prefix), ..tenant(name) }, credential));
        }
        if keys.is_admin(key) {
            return Err(ApiError::forbidden(
                "the operator key cannot act as a tenant: use a key of the tenant (POST /v1/admin/keys makes one)",
            ));
        }
        return Err(ApiError::unauthorized("unknown API key"));
    }
    if accept.stream_tokens
        && let Some(token) = query_token(parts)
    {
        return keys
            .tenant_of_token(token, subs_engine::clock::now_ms() / 1000)
            .map(|(name, credential)| (tenant(name), credential))
            .ok_or_else(|| {
                ApiError::unauthorized("the token is invalid or expired, or the key that minted it was revoked")
            });
    }
    Err(ApiError::unauthorized("an API key is required: `Authorization: Bearer <key>`"))
}

/// The operator: a request authenticated with an operator key, which the
/// admin API's routes require.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator;

impl FromRequestParts<Arc<AppState>> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let keys = &state.keys;
        if !keys.admin_enabled() {
            return Err(ApiError::admin_disabled());
        }
        if end_user(parts, keys)?.is_some() {
            return Err(not_for_end_users());
        }
        let Some(key) = bearer(parts)? else {
            return Err(ApiError::unauthorized("the admin API needs the operator key: `Authorization: Bearer <key>`"));
        };
        if keys.is_admin(key) {
            return Ok(Operator);
        }
        if keys.tenant_of(key).is_some() {
            return Err(ApiError::forbidden("a tenant's key cannot use the admin API: it takes the operator key"));
        }
        Err(ApiError::unauthorized("unknown operator key"))
    }
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
        let hash = hash_key("subs_secret");
        let token = keys.token("acme", Some(&hash), 100);
        let tenant = |keys: &Keys, token: &str, now| keys.tenant_of_token(token, now).map(|(tenant, _)| tenant);
        assert_eq!(tenant(&keys, &token, 99).as_deref(), Some("acme"));
        assert_eq!(
            keys.tenant_of_token(&token, 99).map(|(_, c)| c),
            Some(Credential::Key { tenant: "acme".to_owned(), hash: hash.clone() })
        );
        assert_eq!(tenant(&keys, &token, 101), None, "expired");
        assert_eq!(tenant(&keys, &token.replace("acme", "evil"), 99), None, "another tenant");
        assert_eq!(tenant(&keys, &format!("acme.{hash}.999.00"), 99), None, "a wrong signature");
        assert_eq!(tenant(&keys, "acme.999.00", 99), None, "no key named");
        assert_eq!(tenant(&keys, "garbage", 0), None);
        let other = Keys::new([]);
        assert_eq!(tenant(&other, &token, 99), None, "another process's secret");
        let keyless = keys.token("acme", None, 100);
        assert_eq!(tenant(&keys, &keyless, 99), None, "minted with no key, on a server that takes keys");
    }

    #[test]
    fn a_token_works_only_while_its_key_does() {
        let keys = keys();
        let hash = hash_key("subs_secret");
        let token = keys.token("acme", Some(&hash), 100);
        let mut removals = keys.removals();
        let credential = keys.tenant_of_token(&token, 0).expect("the key is there").1;
        assert!(keys.still_valid(&credential));
        let foreign = keys.token("other", Some(&hash), 100);
        assert_eq!(keys.tenant_of_token(&foreign, 0), None, "a key of another tenant");

        let (record, _) = keys.remove(&hash).expect("revoked");
        assert!(removals.has_changed().unwrap(), "open streams are told");
        assert_eq!(keys.tenant_of_token(&token, 0), None, "refused at connect once its key is gone");
        assert!(!keys.still_valid(&credential), "and an open stream holding it ends");
        let user = Credential::User { tenant: "acme".to_owned() };
        assert!(!keys.still_valid(&user), "an end user's tenant without a key");

        keys.insert(record);
        removals.borrow_and_update();
        assert!(keys.still_valid(&credential) && keys.still_valid(&user));
        keys.replace_stored([]);
        assert!(removals.has_changed().unwrap(), "another node's changes are checked too");
        assert!(!keys.still_valid(&credential));

        let open = Keys::new([]);
        let keyless = open.token(LOCAL_TENANT, None, 100);
        assert_eq!(open.tenant_of_token(&keyless, 0), Some((LOCAL_TENANT.to_owned(), Credential::Open)));
        assert!(open.still_valid(&Credential::Open));
    }

    #[test]
    fn user_tokens_carry_their_claims_expire_and_cannot_be_forged() {
        let keys = keys();
        let user = EndUser {
            tenant: "acme".to_owned(),
            identity: WorkerIdentity {
                id: Some("alice".to_owned()),
                metadata: Some([("plan".to_owned(), "pro".to_owned())].into()),
            },
            session_id: Some("s1".to_owned()),
        };
        let token = keys.user_token(&user, 100);
        assert!(token.starts_with(USER_TOKEN_PREFIX));
        assert_eq!(keys.user_of_token(&token, 100), Some(user.clone()));
        assert_eq!(keys.user_of_token(&token, 101), None, "expired");
        let (payload, mac) = token.split_once('.').unwrap();
        let mut other = user.clone();
        other.identity.id = Some("mallory".to_owned());
        let forged_payload = keys.user_token(&other, 100).split_once('.').unwrap().0.to_owned();
        assert_eq!(keys.user_of_token(&format!("{forged_payload}.{mac}"), 0), None, "another identity, same mac");
        assert_eq!(keys.user_of_token(&format!("{payload}.00"), 0), None, "a wrong signature");
        assert_eq!(keys.user_of_token(&token, 0).map(|u| u.id().to_owned()).as_deref(), Some("alice"));
        assert_eq!(Keys::new([]).user_of_token(&token, 0), None, "another process's secret");
        assert_eq!(keys.user_of_token("subs_user_zz.00", 0), None, "not hex");
        assert_eq!(keys.tenant_of_token(&token, 0), None, "not an event-stream token");
        let stream = keys.token("acme", Some(&hash_key("subs_secret")), 100);
        assert_eq!(keys.user_of_token(&stream, 0), None, "an event-stream token is no user's");
        assert!(keys.has_tenant("acme") && !keys.has_tenant("other"));
    }

    #[test]
    fn an_end_user_reaches_only_sessions_of_its_identity_and_session() {
        use subs_engine::store::SessionKey;
        let record = |session: &str, owner: Option<&str>| {
            let mut r = subs_engine::store::conformance::sample::session(
                &SessionKey::new("acme", session),
                subs_engine::store::SessionStatus::Idle,
            );
            r.identity.id = owner.map(str::to_owned);
            r
        };
        let alice = |session: Option<&str>| EndUser {
            tenant: "acme".to_owned(),
            identity: WorkerIdentity { id: Some("alice".to_owned()), metadata: None },
            session_id: session.map(str::to_owned),
        };
        assert!(alice(None).may_reach(&record("s1", Some("alice"))));
        assert!(!alice(None).may_reach(&record("s1", Some("bob"))));
        assert!(!alice(None).may_reach(&record("s1", None)), "a session without an owner is the tenant's");
        assert!(alice(Some("s1")).may_reach(&record("s1", Some("alice"))));
        assert!(!alice(Some("s1")).may_reach(&record("s2", Some("alice"))), "only the token's session");
        assert!(
            Caller { tenant: "acme".to_owned(), user: None, key: None, trace: None }
                .may_reach(&record("s1", Some("bob")))
        );
    }

    #[test]
    fn new_keys_are_random() {
        let (a, b) = (new_key(), new_key());
        assert_ne!(a, b);
        assert!(a.starts_with("subs_") && a.len() == 37);
        let admin = new_admin_key();
        assert!(admin.starts_with("subs_admin_") && admin.len() == 43, "{admin}");
    }

    #[test]
    fn operator_keys_are_not_tenant_keys() {
        let keys = keys().with_admin_keys([hash_key("subs_admin_x").to_uppercase()]);
        assert!(keys.admin_enabled());
        assert!(keys.is_admin("subs_admin_x"), "hashes are compared in lower case");
        assert!(!keys.is_admin("subs_secret"), "a tenant key");
        assert_eq!(keys.tenant_of("subs_admin_x"), None);
        assert!(!Keys::new([]).admin_enabled());
    }

    #[test]
    fn openness_is_decided_at_start() {
        assert!(!Keys::new([]).with_admin_keys([hash_key("a")]).is_open(), "an operator key turns auth on");
        assert!(!Keys::new([]).with_config_keys(keys().list().into_iter().map(|(k, _)| k)).is_open());
        let keys = keys();
        let (record, source) = keys.remove(&hash_key("subs_secret")).unwrap();
        assert_eq!((record.tenant.as_str(), source), ("acme", KeySource::Store));
        assert!(!keys.is_open(), "revoking the last key does not open the server");
        assert_eq!(keys.tenant_of("subs_secret"), None);
        keys.insert(record);
        assert_eq!(keys.tenant_of("subs_secret").as_deref(), Some("acme"));
    }

    #[test]
    fn config_keys_win_over_stored_ones() {
        let mut file_key = keys().list()[0].0.clone();
        file_key.tenant = "other".to_owned();
        let keys = keys().with_config_keys([file_key]);
        assert_eq!(keys.tenant_of("subs_secret").as_deref(), Some("other"));
        assert_eq!(keys.list()[0].1, KeySource::Config);
    }

    #[test]
    fn keys_are_named_by_hash_prefix_or_key() {
        let key = "subs_0123456789abcdef0123456789abcdef";
        let record = KeyRecord {
            tenant: "t".to_owned(),
            hash: hash_key(key),
            prefix: key_prefix(key),
            name: None,
            created_ms: 0,
        };
        assert!(names_key(&record, &record.hash));
        assert!(names_key(&record, &record.hash[..8]));
        assert!(names_key(&record, &record.hash[..8].to_uppercase()));
        assert!(names_key(&record, &record.prefix));
        assert!(names_key(&record, key));
        assert!(!names_key(&record, "subs_ffffffff"));
        assert!(!names_key(&record, "00000000"));
    }
}

/// A short-lived token: for event streams, or for an end user.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Token {
    /// Pass as `?token=` to `GET /v1/sessions/{id}/events`; an end-user
    /// token also as `Authorization: Bearer` (or `?token=`) on the session
    /// routes it may use.
    pub token: String,
    /// When it stops working (Unix seconds).
    pub expires_at: u64,
    /// An end-user token's identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub identity: Option<WorkerIdentity>,
    /// The one session an end-user token reaches, when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// What `POST /v1/tokens` takes to mint an end-user token.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The end user: the owner of the sessions the token reaches and
    /// creates. Its `id` is required.
    #[schema(value_type = Object)]
    pub identity: WorkerIdentity,
    /// The one session the token reaches; every session of the identity
    /// when absent.
    #[serde(default)]
    pub session_id: Option<String>,
    /// How long the token lives, in seconds: 1 to 86,400 (24 hours);
    /// default 900 (15 minutes).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
}

/// Mints a short-lived token. Without a body: a token that authenticates
/// the calling tenant's event streams as `?token=` for five minutes, and
/// only while the key that minted it is not revoked, for clients
/// (browsers' `EventSource`) that cannot send an `Authorization` header.
/// With a body `{identity, session_id?, ttl_secs?}`: an end-user
/// token, which reaches only the sessions of that identity (see
/// docs/security.md).
#[utoipa::path(
    post,
    path = "/v1/tokens",
    request_body(content = Option<TokenRequest>, description = "Optional: mints an end-user token", content_type = "application/json"),
    responses(
        (status = 200, body = Token),
        (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody),
        (status = 403, description = "An end-user token cannot mint tokens", body = crate::error::ErrorBody),
    ),
    tag = "auth"
)]
pub async fn mint_token(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    headers: axum::http::HeaderMap,
    body: crate::body::Incoming,
) -> Result<axum::Json<Token>, ApiError> {
    let now = subs_engine::clock::now_ms() / 1000;
    let limit = state.config.limits(&tenant).max_body_bytes;
    let Some(request) = crate::body::optional_json::<TokenRequest>(body, limit).await? else {
        let expires_at = now + TOKEN_TTL.as_secs();
        // The key the request authenticated with (`Tenant` checked it):
        // the token works while that key does.
        let key = (!state.keys.is_open())
            .then(|| headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer "))
            .flatten()
            .map(|key| hash_key(key.trim()));
        let token = state.keys.token(&tenant, key.as_deref(), expires_at);
        return Ok(axum::Json(Token { token, expires_at, identity: None, session_id: None }));
    };
    crate::identity::check(&request.identity, "identity")?;
    if request.identity.id.is_none() {
        return Err(ApiError::invalid("identity.id", "an end-user token's identity needs an `id`"));
    }
    if let Some(session) = request.session_id.as_deref().filter(|s| !valid_id(s)) {
        return Err(ApiError::invalid(
            "session_id",
            format!("`{session}` is not a valid session id (1-128 of A-Z a-z 0-9 _ - . :)"),
        ));
    }
    let max = MAX_USER_TOKEN_TTL.as_secs();
    let ttl = match request.ttl_secs {
        None => USER_TOKEN_TTL.as_secs(),
        Some(ttl) if (1..=max).contains(&ttl) => ttl,
        Some(ttl) => return Err(ApiError::invalid("ttl_secs", format!("{ttl} is not from 1 to {max} seconds"))),
    };
    let user = EndUser { tenant, identity: request.identity, session_id: request.session_id };
    let expires_at = now + ttl;
    let token = state.keys.user_token(&user, expires_at);
    Ok(axum::Json(Token { token, expires_at, identity: Some(user.identity), session_id: user.session_id }))
}
