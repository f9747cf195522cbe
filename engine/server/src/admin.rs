//! The admin API, under `/v1/admin`: the operator creates and deletes
//! tenants, sets their limits and budgets, and creates, lists and revokes
//! their keys, while the server runs.
//!
//! Every route takes the operator key ([`Operator`]); without one
//! configured they all answer 403 `admin_disabled`. Each change is stored
//! first and then takes effect at once: the keys the server accepts, the
//! limits its handlers check, the budgets and session limits the engine
//! enforces. One change is made at a time.
//!
//! Deleting a tenant revokes its stored keys and cancels its open turns.
//! Its sessions and agents stay in the store, out of reach (no key leads
//! to them); a tenant created later with the same name sees them again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use subs_engine::store::{KeyRecord, NAME_RULE, TenantRecord, valid_name};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::{KeySource, Operator, hash_key, key_prefix, names_key, new_key};
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};
use crate::tenants::checked_limits;

/// The largest body an admin route reads: limits and key names are small.
pub const MAX_ADMIN_BODY: usize = 64 << 10;

/// The longest name a key may have, in characters.
pub const MAX_KEY_NAME: usize = 128;

/// The fewest characters that name a key to revoke.
pub const MIN_KEY_REF: usize = 8;

/// A tenant as the operator sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantView {
    /// Its name.
    pub tenant: String,
    /// Whether the store has a record of it (made through this API or
    /// `subs keys create`).
    pub stored: bool,
    /// Whether the config file names it (`[tenants.<name>]` or a
    /// `[[keys]]` entry); such a tenant is deleted by editing the file.
    pub configured: bool,
    /// How many keys it has.
    pub keys: usize,
    /// The limits that apply to it now (the fields of the config file's
    /// `[limits]`).
    #[schema(value_type = Object)]
    pub limits: Value,
    /// What the operator set over the config file: the body of the last
    /// `PUT …/limits`; `{}` when nothing.
    #[schema(value_type = Object)]
    pub overrides: Map<String, Value>,
    /// When its record was created (Unix ms), if it has one.
    pub created_ms: Option<u64>,
    /// When its limits last changed (Unix ms), if it has a record.
    pub updated_ms: Option<u64>,
}

/// A tenant's limits.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsView {
    /// The tenant.
    pub tenant: String,
    /// The limits that apply now: the operator's over the config file's.
    #[schema(value_type = Object)]
    pub limits: Value,
    /// What the operator set (the body of the last `PUT`); fields absent
    /// here come from the config file.
    #[schema(value_type = Object)]
    pub overrides: Map<String, Value>,
    /// What the tenant's LLM calls have cost so far, in dollars, against
    /// its `budget`.
    pub spent: String,
}

/// The body of `PUT /v1/admin/tenants/{tenant}` (optional).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantBody {
    /// Limits to set, as `PUT …/limits` takes them; absent: left as they
    /// are.
    #[schema(value_type = Option<Object>)]
    pub limits: Option<Value>,
}

/// The body of `POST /v1/admin/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKeyBody {
    /// The tenant the key acts for; it must exist.
    pub tenant: String,
    /// A label for people (at most 128 characters).
    pub name: Option<String>,
}

/// A tenant key as listed: never the key, only its hash and first
/// characters.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyView {
    /// The tenant it acts for.
    pub tenant: String,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// The key's first characters (empty for a config-file key given by
    /// its hash).
    pub prefix: String,
    /// Its label.
    pub name: Option<String>,
    /// When it was created (Unix ms; 0 for config-file keys).
    pub created_ms: u64,
    /// `store` (revocable here) or `config` (the config file's).
    pub source: KeySource,
}

impl KeyView {
    fn new((record, source): (KeyRecord, KeySource)) -> Self {
        Self {
            tenant: record.tenant,
            hash: record.hash,
            prefix: record.prefix,
            name: record.name,
            created_ms: record.created_ms,
            source,
        }
    }
}

/// A key just created: the only time the key itself is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewKey {
    /// The key. Only its hash is kept: it cannot be shown again.
    pub key: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// The key's first characters, as listings show them.
    pub prefix: String,
    /// Its label.
    pub name: Option<String>,
    /// When it was created (Unix ms).
    pub created_ms: u64,
}

/// A revoked key.
#[derive(Debug, Serialize, ToSchema)]
pub struct Revoked {
    /// The tenant it acted for.
    pub tenant: String,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// The key's first characters.
    pub prefix: String,
    /// Always true.
    pub revoked: bool,
}

/// A deleted tenant.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantDeleted {
    /// The tenant.
    pub tenant: String,
    /// Always true.
    pub deleted: bool,
    /// How many keys were revoked.
    pub revoked_keys: usize,
    /// How many open turns were cancelled.
    pub cancelled_turns: usize,
}

fn checked_tenant(tenant: &str) -> Result<(), ApiError> {
    if valid_name(tenant) {
        Ok(())
    } else {
        Err(ApiError::invalid("tenant", format!("`{tenant}` is not a valid tenant name ({NAME_RULE})")))
    }
}

fn no_tenant(tenant: &str) -> ApiError {
    ApiError::not_found(format!(
        "tenant `{tenant}` does not exist: create it first (PUT /v1/admin/tenants/{tenant}, or `subs tenants create \
         {tenant}`)"
    ))
}

fn now_ms() -> u64 {
    subs_engine::clock::now_ms()
}

impl AppState {
    /// Whether `tenant` exists: it has a record, a `[tenants.<name>]` in
    /// the config file, or a key.
    fn tenant_exists(&self, tenant: &str) -> bool {
        self.config.record(tenant).is_some()
            || self.config.configured(tenant)
            || !self.keys.of_tenant(tenant).is_empty()
    }

    fn tenant_view(&self, tenant: &str) -> Option<TenantView> {
        let keys = self.keys.of_tenant(tenant);
        let record = self.config.record(tenant);
        let configured = self.config.configured(tenant) || keys.iter().any(|(_, source)| *source == KeySource::Config);
        if record.is_none() && !configured && keys.is_empty() {
            return None;
        }
        Some(TenantView {
            tenant: tenant.to_owned(),
            stored: record.is_some(),
            configured,
            keys: keys.len(),
            limits: subs_protocol::to_value(&self.config.limits(tenant)),
            overrides: record.as_ref().map(|r| r.limits.clone()).unwrap_or_default(),
            created_ms: record.as_ref().map(|r| r.created_ms),
            updated_ms: record.as_ref().map(|r| r.updated_ms),
        })
    }

    async fn limits_view(&self, tenant: &str) -> Result<LimitsView, ApiError> {
        Ok(LimitsView {
            tenant: tenant.to_owned(),
            limits: subs_protocol::to_value(&self.config.limits(tenant)),
            overrides: self.config.record(tenant).map(|r| r.limits).unwrap_or_default(),
            spent: self.engine.reads().tenant_spent(tenant).await?.to_string(),
        })
    }

    /// Stores `record` and makes it take effect. The caller holds
    /// [`LiveConfig::writing`](crate::LiveConfig).
    async fn put_tenant(&self, record: TenantRecord) -> Result<(), ApiError> {
        // Checked before it is stored: a record that cannot be applied
        // must not reach the store.
        crate::tenants::overlay(self.config.file().limits(&record.tenant), &record.limits)
            .map_err(|e| ApiError::invalid(e.field().unwrap_or("limits"), e.message()))?;
        self.engine.admin().put_tenant_record(record.clone()).await?;
        let tenant = record.tenant.clone();
        self.config.put(record).map_err(|e| ApiError::internal(&e))?;
        self.config.apply_tenant(&self.engine, &tenant);
        self.config.apply_sandbox(&self.agents, &tenant)
    }
}

/// Every tenant: those with a record, those the config file names, and
/// those with a key, by name.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants",
    responses((status = 200, body = Vec<TenantView>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn list_tenants(State(state): State<Arc<AppState>>, _: Operator) -> Json<Vec<TenantView>> {
    let mut names: BTreeSet<String> = state.config.records().into_iter().map(|r| r.tenant).collect();
    names.extend(state.config.file().tenant_limits.keys().cloned());
    names.extend(state.keys.list().into_iter().map(|(k, _)| k.tenant));
    Json(names.iter().filter_map(|tenant| state.tenant_view(tenant)).collect())
}

/// One tenant.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants/{tenant}",
    params(("tenant" = String, Path)),
    responses(
        (status = 200, body = TenantView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn get_tenant(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Path(tenant): Path<String>,
) -> Result<Json<TenantView>, ApiError> {
    state.tenant_view(&tenant).map(Json).ok_or_else(|| no_tenant(&tenant))
}

/// Creates a tenant (201), or answers the existing one (200). The optional
/// body `{"limits": {…}}` sets its limits as `PUT …/limits` does.
#[utoipa::path(
    put,
    path = "/v1/admin/tenants/{tenant}",
    params(("tenant" = String, Path, description = "1-128 of A-Z a-z 0-9 _ - . :")),
    request_body(content = TenantBody, description = "Optional", content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = TenantView),
        (status = 200, description = "It existed; its limits are set if the body has them", body = TenantView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn put_tenant(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Path(tenant): Path<String>,
    body: Incoming,
) -> Result<impl IntoResponse, ApiError> {
    checked_tenant(&tenant)?;
    let body: Option<TenantBody> = body::optional_json(body, MAX_ADMIN_BODY).await?;
    let limits = body.and_then(|b| b.limits).map(|limits| checked_limits(limits, "limits")).transpose()?;

    let _writing = state.config.writing().await;
    let existed = state.tenant_exists(&tenant);
    let stored = state.config.record(&tenant);
    let now = now_ms();
    let record = match (stored.clone(), limits) {
        (Some(record), None) => record,
        (Some(record), Some(limits)) => TenantRecord { limits, updated_ms: now, ..record },
        (None, limits) => TenantRecord {
            tenant: tenant.clone(),
            limits: limits.unwrap_or_default(),
            created_ms: now,
            updated_ms: now,
        },
    };
    if stored.as_ref() != Some(&record) {
        state.put_tenant(record).await?;
    }
    let view = state.tenant_view(&tenant).ok_or_else(|| no_tenant(&tenant))?;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(view)))
}

/// Deletes a tenant: revokes its keys and cancels its open turns. Its
/// sessions and agents stay in the store, out of reach; a tenant created
/// later with the same name sees them again. A tenant the config file
/// names cannot be deleted here (409): remove it from the file.
#[utoipa::path(
    delete,
    path = "/v1/admin/tenants/{tenant}",
    params(("tenant" = String, Path)),
    responses(
        (status = 200, body = TenantDeleted),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "The config file names the tenant", body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn delete_tenant(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Path(tenant): Path<String>,
) -> Result<Json<TenantDeleted>, ApiError> {
    let _writing = state.config.writing().await;
    let view = state.tenant_view(&tenant).ok_or_else(|| no_tenant(&tenant))?;
    if view.configured {
        return Err(ApiError::conflict(format!(
            "tenant `{tenant}` is in the config file ([tenants.{tenant}] or [[keys]]): remove it there and restart"
        )));
    }
    let hashes: Vec<String> = state.keys.of_tenant(&tenant).into_iter().map(|(k, _)| k.hash).collect();
    state.engine.admin().delete_tenant(&tenant, &hashes).await?;
    for hash in &hashes {
        state.keys.remove(hash);
    }
    state.config.remove(&tenant);
    state.config.apply_tenant(&state.engine, &tenant);
    state.config.apply_sandbox(&state.agents, &tenant)?;

    // No key reaches its sessions any more; what they were doing stops too
    // (no more LLM calls charged to a tenant that is gone).
    let mut cancelled_turns = 0;
    for session in state.engine.reads().unfinished_sessions(&tenant).await? {
        match state.engine.sessions().cancel(&tenant, &session).await {
            Ok(true) => cancelled_turns += 1,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%tenant, %session, %error, "a deleted tenant's turn was not cancelled")
            }
        }
    }
    tracing::info!(%tenant, revoked_keys = hashes.len(), cancelled_turns, "tenant deleted");
    Ok(Json(TenantDeleted { tenant, deleted: true, revoked_keys: hashes.len(), cancelled_turns }))
}

/// A tenant's limits: those that apply now, what the operator set, and
/// what it has spent against its budget.
#[utoipa::path(
    get,
    path = "/v1/admin/tenants/{tenant}/limits",
    params(("tenant" = String, Path)),
    responses(
        (status = 200, body = LimitsView),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn get_limits(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Path(tenant): Path<String>,
) -> Result<Json<LimitsView>, ApiError> {
    if !state.tenant_exists(&tenant) {
        return Err(no_tenant(&tenant));
    }
    Ok(Json(state.limits_view(&tenant).await?))
}

/// Sets a tenant's limits, at once and durably. The body is an object of
/// limit fields (`max_sessions`, `max_body_bytes`, `max_component_bytes`,
/// `budget`, and `sandbox`, an object of component limits); a field
/// absent inherits the config file's, `null` means no limit. It replaces
/// what an earlier `PUT` set.
#[utoipa::path(
    put,
    path = "/v1/admin/tenants/{tenant}/limits",
    params(("tenant" = String, Path)),
    request_body(content = Object, description = "Limit fields; absent ones inherit", content_type = "application/json"),
    responses(
        (status = 200, body = LimitsView),
        (status = 400, description = "Not limits; `field` names the offending one", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn put_limits(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Path(tenant): Path<String>,
    body: Incoming,
) -> Result<Json<LimitsView>, ApiError> {
    let body: Value = body::optional_json(body, MAX_ADMIN_BODY).await?.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "the body is empty: send an object of limits (`{}` inherits all)",
        )
    })?;
    let limits = checked_limits(body, "")?;
    let _writing = state.config.writing().await;
    if !state.tenant_exists(&tenant) {
        return Err(no_tenant(&tenant));
    }
    let now = now_ms();
    let record = match state.config.record(&tenant) {
        Some(record) => TenantRecord { limits, updated_ms: now, ..record },
        None => TenantRecord { tenant: tenant.clone(), limits, created_ms: now, updated_ms: now },
    };
    state.put_tenant(record).await?;
    Ok(Json(state.limits_view(&tenant).await?))
}

/// The tenant keys (hashes and first characters, never the keys), by
/// tenant; `?tenant=` keeps one tenant's.
#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    params(("tenant" = Option<String>, Query, description = "only this tenant's keys")),
    responses(
        (status = 200, body = Vec<KeyView>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn list_keys(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Vec<KeyView>>, ApiError> {
    if let Some(other) = query.keys().find(|k| *k != "tenant") {
        return Err(ApiError::invalid(other.as_str(), format!("unknown query parameter `{other}`; only `tenant`")));
    }
    let keys = match query.get("tenant") {
        Some(tenant) => state.keys.of_tenant(tenant),
        None => state.keys.list(),
    };
    Ok(Json(keys.into_iter().map(KeyView::new).collect()))
}

/// Creates a key for a tenant and answers it, once: only its hash is kept.
/// It works at once.
#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    request_body(content = NewKeyBody, content_type = "application/json"),
    responses(
        (status = 201, body = NewKey),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody),
        (status = 413, body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn create_key(
    State(state): State<Arc<AppState>>,
    _: Operator,
    body: Incoming,
) -> Result<impl IntoResponse, ApiError> {
    let body: NewKeyBody = body::optional_json(body, MAX_ADMIN_BODY)
        .await?
        .ok_or_else(|| ApiError::invalid("tenant", "the body is empty: send `{\"tenant\": \"…\"}`"))?;
    checked_tenant(&body.tenant)?;
    if let Some(name) = &body.name
        && (name.chars().count() > MAX_KEY_NAME || name.chars().any(char::is_control))
    {
        return Err(ApiError::invalid(
            "name",
            format!("a key's name is at most {MAX_KEY_NAME} characters, none a control character"),
        ));
    }

    let _writing = state.config.writing().await;
    if !state.tenant_exists(&body.tenant) {
        return Err(no_tenant(&body.tenant));
    }
    let key = new_key();
    let record = KeyRecord {
        tenant: body.tenant,
        hash: hash_key(&key),
        prefix: key_prefix(&key),
        name: body.name,
        created_ms: now_ms(),
    };
    state.engine.admin().put_key_record(record.clone()).await?;
    state.keys.insert(record.clone());
    tracing::info!(tenant = %record.tenant, prefix = %record.prefix, "key created");
    let KeyRecord { tenant, hash, prefix, name, created_ms } = record;
    Ok((StatusCode::CREATED, Json(NewKey { key, tenant, hash, prefix, name, created_ms })))
}

/// Revokes a key, at once: requests with it are refused from now on. The
/// key is named by its hash, at least 8 leading characters of the hash,
/// or its listed prefix. Keys of the config file are revoked by editing
/// it (409).
#[utoipa::path(
    delete,
    path = "/v1/admin/keys/{key}",
    params(("key" = String, Path, description = "the key's hash, 8 or more of its first characters, or its prefix")),
    responses(
        (status = 200, body = Revoked),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "Several keys match, or the key is the config file's", body = ErrorBody),
    ),
    security(("operator" = [])),
    tag = "admin"
)]
pub async fn revoke_key(
    State(state): State<Arc<AppState>>,
    _: Operator,
    Path(wanted): Path<String>,
) -> Result<Json<Revoked>, ApiError> {
    let wanted = wanted.trim();
    if wanted.chars().count() < MIN_KEY_REF {
        return Err(ApiError::invalid(
            "key",
            format!("give at least {MIN_KEY_REF} characters of the key's hash, or its listed prefix"),
        ));
    }
    let _writing = state.config.writing().await;
    let matching: Vec<(KeyRecord, KeySource)> =
        state.keys.list().into_iter().filter(|(key, _)| names_key(key, wanted)).collect();
    let (record, source) = match <[_; 1]>::try_from(matching) {
        Ok([one]) => one,
        Err(matching) if matching.is_empty() => {
            return Err(ApiError::not_found(format!("no key matches `{wanted}` (GET /v1/admin/keys lists them)")));
        }
        Err(matching) => {
            let hashes: Vec<String> = matching.iter().map(|(k, _)| k.hash.chars().take(16).collect()).collect();
            return Err(ApiError::conflict(format!(
                "`{wanted}` matches {} keys ({}…): give more of the hash",
                matching.len(),
                hashes.join("…, ")
            )));
        }
    };
    if source == KeySource::Config {
        return Err(ApiError::conflict(
            "that key is in the config file ([[keys]]): remove it there and restart the server",
        ));
    }
    state.engine.admin().delete_key_record(&record.tenant, &record.hash).await?;
    state.keys.remove(&record.hash);
    tracing::info!(tenant = %record.tenant, prefix = %record.prefix, "key revoked");
    Ok(Json(Revoked { tenant: record.tenant, hash: record.hash, prefix: record.prefix, revoked: true }))
}
