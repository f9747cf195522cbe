//! The server's configuration as it is now: the config file's limits with
//! the operator's changes (made through the admin API, kept in the store)
//! over them.
//!
//! A tenant's limits are, field by field, the first of: what the operator
//! set through the admin API, the config file's `[tenants.<name>]`, its
//! `[limits]`, the built-in defaults. Limits are handled as JSON objects of
//! [`Limits`]' fields, so a field added to `Limits` can be set and stored
//! without a change here.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Duration;

use serde_json::{Map, Value};
use subs_engine::Engine;
use subs_engine::agents::AgentRegistry;
use subs_engine::engine::{DecisionBounds, SpawnBounds};
use subs_engine::model::Money;
use subs_engine::store::{StoreError, TenantRecord};
use subs_engine::worker::component::AgentPolicy;
use subs_protocol::ProtocolError;

use crate::error::ApiError;
use crate::{Limits, ServerConfig};

/// The key of the component sandbox's limits in a tenant's limits object.
/// Stored for the component host; not one of [`Limits`]' fields.
pub const SANDBOX: &str = "sandbox";

/// The sandbox limits a tenant's `sandbox` object may set (the keys of the
/// config file's `[tenants.<name>.sandbox]`, docs/sandbox.md): all counts
/// of bytes, milliseconds or items but `http_hosts`, a list of hosts.
const SANDBOX_COUNTS: &[&str] = &[
    "memory_bytes",
    "wall_clock_ms",
    "cpu_ms",
    "table_elements",
    "instances",
    "tables",
    "memories",
    "decision_bytes",
    "log_bytes",
    "log_lines",
];

/// The most hosts a tenant's `sandbox.http_hosts` may list.
const MAX_HTTP_HOSTS: usize = 256;

/// Limits and CORS as they are now. Reads take a read lock; the admin API
/// changes it under [`writing`](Self::writing), one change at a time.
pub struct LiveConfig {
    /// What the config file says.
    file: ServerConfig,
    /// The stored tenants, with their limits worked out.
    stored: RwLock<BTreeMap<String, Stored>>,
    /// Held by an admin change from reading what is stored to updating
    /// this and the keys, so two changes cannot interleave.
    writing: tokio::sync::Mutex<()>,
}

/// A stored tenant and the limits that apply to it.
struct Stored {
    record: TenantRecord,
    limits: Limits,
}

impl From<ServerConfig> for LiveConfig {
    /// The config file's settings, with no stored tenant.
    fn from(file: ServerConfig) -> Self {
        Self::new(file, [])
    }
}

impl LiveConfig {
    /// The config file's settings with the stored tenants' over them. A
    /// stored tenant whose limits no longer read (a field this server does
    /// not know) is logged and gets the file's limits; its record is kept
    /// for the operator to see and fix.
    pub fn new(file: ServerConfig, stored: impl IntoIterator<Item = TenantRecord>) -> Self {
        let stored = stored
            .into_iter()
            .map(|record| {
                let limits = overlay(file.limits(&record.tenant), &record.limits).unwrap_or_else(|error| {
                    tracing::error!(tenant = %record.tenant, %error, "stored limits ignored");
                    file.limits(&record.tenant).clone()
                });
                (record.tenant.clone(), Stored { record, limits })
            })
            .collect();
        Self { file, stored: RwLock::new(stored), writing: tokio::sync::Mutex::new(()) }
    }

    /// The config file's settings with the tenants stored through
    /// `engine` over them.
    pub async fn load(file: ServerConfig, engine: &Engine) -> Result<Self, StoreError> {
        Ok(Self::new(file, engine.admin().tenant_records().await?))
    }

    /// What the config file says.
    pub fn file(&self) -> &ServerConfig {
        &self.file
    }

    /// Origins browsers may call from (CORS); the file's, fixed at start.
    pub fn cors_origins(&self) -> &[String] {
        &self.file.cors_origins
    }

    /// The limits of `tenant` now.
    pub fn limits(&self, tenant: &str) -> Limits {
        match self.read().get(tenant) {
            Some(stored) => stored.limits.clone(),
            None => self.file.limits(tenant).clone(),
        }
    }

    /// The sandbox limits the operator set for `tenant` (a JSON object of
    /// the keys of `[tenants.<name>.sandbox]`), if any.
    pub fn sandbox(&self, tenant: &str) -> Option<Map<String, Value>> {
        self.read().get(tenant)?.record.limits.get(SANDBOX)?.as_object().cloned()
    }

    /// Sets the sandbox of `tenant`'s component agents: the config file's,
    /// with what the operator stored over it, field by field.
    pub fn apply_sandbox(&self, agents: &AgentRegistry, tenant: &str) -> Result<(), ApiError> {
        let policy = self.sandbox(tenant).map(|stored| sandbox_policy(agents.configured_sandbox(tenant), &stored));
        Ok(agents.set_tenant_sandbox(tenant, policy)?)
    }

    /// [`apply_sandbox`](Self::apply_sandbox) for every stored tenant: at
    /// start, before agents are loaded.
    pub fn apply_sandboxes(&self, agents: &AgentRegistry) -> Result<(), ApiError> {
        let tenants: Vec<String> = self.read().keys().cloned().collect();
        tenants.iter().try_for_each(|tenant| self.apply_sandbox(agents, tenant))
    }

    /// The stored record of `tenant`.
    pub fn record(&self, tenant: &str) -> Option<TenantRecord> {
        self.read().get(tenant).map(|stored| stored.record.clone())
    }

    /// Every stored tenant, by name.
    pub fn records(&self) -> Vec<TenantRecord> {
        self.read().values().map(|stored| stored.record.clone()).collect()
    }

    /// Whether the config file has a `[tenants.<name>]` for `tenant`.
    pub fn configured(&self, tenant: &str) -> bool {
        self.file.tenant_limits.contains_key(tenant)
    }

    /// Hands the limits the engine enforces (budgets, session limits,
    /// spawn and decision bounds) to `engine`: the defaults, and those of every tenant
    /// with its own.
    pub fn apply_to(&self, engine: &Engine) {
        engine.admin().set_default_tenant_budget(self.file.default_limits.budget);
        engine.admin().set_default_session_limit(sessions(&self.file.default_limits));
        engine.admin().set_default_spawn_bounds(spawn_bounds(&self.file.default_limits));
        engine.admin().set_default_decision_bounds(decision_bounds(&self.file.default_limits));
        engine.admin().set_default_max_session_bytes(self.file.default_limits.max_session_bytes);
        engine.admin().set_default_max_session_reads(self.file.default_limits.max_session_reads);
        for tenant in self.file.tenant_limits.keys() {
            self.apply_tenant(engine, tenant);
        }
        for tenant in self.read().keys() {
            self.apply_tenant(engine, tenant);
        }
    }

    /// Hands `tenant`'s limits to `engine`, or, for a tenant with none of
    /// its own, lets the defaults apply.
    pub fn apply_tenant(&self, engine: &Engine, tenant: &str) {
        if self.read().contains_key(tenant) || self.configured(tenant) {
            let limits = self.limits(tenant);
            engine.admin().set_tenant_budget(tenant, limits.budget);
            engine.admin().set_tenant_session_limit(tenant, sessions(&limits));
            engine.admin().set_tenant_spawn_bounds(tenant, spawn_bounds(&limits));
            engine.admin().set_tenant_decision_bounds(tenant, decision_bounds(&limits));
            engine.admin().set_tenant_max_session_bytes(tenant, Some(limits.max_session_bytes));
            engine.admin().set_tenant_max_session_reads(tenant, Some(limits.max_session_reads));
        } else {
            engine.admin().clear_tenant_limits(tenant);
        }
    }

    /// Replaces the stored tenants with `records` (what another node
    /// sharing the store changed), as [`new`](Self::new) reads them.
    pub async fn replace_stored(&self, records: impl IntoIterator<Item = TenantRecord>) {
        let _writing = self.writing().await;
        let fresh = Self::new(self.file.clone(), records);
        let stored = fresh.stored.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        *self.write() = stored;
    }

    /// Held while an admin change is made.
    pub(crate) async fn writing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writing.lock().await
    }

    /// Stores `record` in memory (the store already has it).
    pub(crate) fn put(&self, record: TenantRecord) -> Result<(), ProtocolError> {
        let limits = overlay(self.file.limits(&record.tenant), &record.limits)?;
        self.write().insert(record.tenant.clone(), Stored { record, limits });
        Ok(())
    }

    /// Forgets `tenant`'s record (the store already has).
    pub(crate) fn remove(&self, tenant: &str) {
        self.write().remove(tenant);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Stored>> {
        self.stored.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Stored>> {
        self.stored.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn sessions(limits: &Limits) -> Option<u64> {
    limits.max_sessions.map(|max| max as u64)
}

fn spawn_bounds(limits: &Limits) -> SpawnBounds {
    SpawnBounds {
        max_spawns_per_turn: limits.max_spawns_per_turn,
        max_sub_agent_depth: limits.max_sub_agent_depth,
        max_tree_sessions: limits.max_tree_sessions,
    }
}

fn decision_bounds(limits: &Limits) -> DecisionBounds {
    DecisionBounds {
        max_actions_per_decision: limits.max_actions_per_decision,
        max_calls_per_turn: limits.max_calls_per_turn,
        stream_by_default: Some(limits.stream_by_default),
    }
}

/// `base`, a tenant's sandbox policy, with the fields a stored `sandbox`
/// object sets (checked when it was stored) over it; `null` keeps the
/// field beneath.
pub fn sandbox_policy(mut base: AgentPolicy, sandbox: &Map<String, Value>) -> AgentPolicy {
    for (name, value) in sandbox {
        if name == "http_hosts" {
            if let Some(hosts) = value.as_array() {
                base.http_hosts = Some(hosts.iter().filter_map(|h| h.as_str().map(str::to_owned)).collect());
            }
            continue;
        }
        let Some(n) = value.as_u64() else { continue };
        let count = usize::try_from(n).unwrap_or(usize::MAX);
        let l = &mut base.limits;
        match name.as_str() {
            "memory_bytes" => l.memory_bytes = Some(count),
            "wall_clock_ms" => l.wall_clock = Some(Duration::from_millis(n)),
            "cpu_ms" => l.cpu = Some(Duration::from_millis(n)),
            "table_elements" => l.table_elements = Some(count),
            "instances" => l.instances = Some(count),
            "tables" => l.tables = Some(count),
            "memories" => l.memories = Some(count),
            "decision_bytes" => l.decision_bytes = Some(count),
            "log_bytes" => l.log_bytes = Some(count),
            "log_lines" => l.log_lines = Some(count),
            _ => {}
        }
    }
    base
}

/// `base` with the fields `overrides` sets replaced (`sandbox` aside).
pub fn overlay(base: &Limits, overrides: &Map<String, Value>) -> Result<Limits, ProtocolError> {
    // Limits is a struct, which serde writes as an object.
    let mut merged = match subs_protocol::to_value(base) {
        Value::Object(fields) => fields,
        _ => Map::new(),
    };
    for (field, value) in overrides.iter().filter(|(field, _)| *field != SANDBOX) {
        merged.insert(field.clone(), value.clone());
    }
    subs_protocol::from_value(Value::Object(merged))
}

/// Checks a body of limits (`PUT …/limits`, or the `limits` of `PUT
/// /v1/admin/tenants/{tenant}`): an object of [`Limits`]' fields and,
/// optionally, `sandbox`. `path` is where the object is in the body, for
/// the errors' `field`. Answers the object to store, each limit written
/// as `Limits` writes it (a budget of `2.5` as `"2.5"`), so what is stored
/// and shown reads the same way as the limits in effect.
pub fn checked_limits(body: Value, path: &str) -> Result<Map<String, Value>, ApiError> {
    let field = |name: &str| if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") };
    let Value::Object(mut overrides) = body else {
        let message = "limits are a JSON object of limit fields (`max_sessions`, `budget`, …)";
        return Err(if path.is_empty() {
            ApiError::new(axum::http::StatusCode::BAD_REQUEST, "invalid_input", message)
        } else {
            ApiError::invalid(path, message)
        });
    };
    // One field at a time, so the error names it whatever serde says.
    for (name, value) in overrides.iter_mut().filter(|(name, _)| *name != SANDBOX) {
        let single = Map::from_iter([(name.clone(), value.take())]);
        let limits: Limits = subs_protocol::from_value(Value::Object(single))
            .map_err(|error| ApiError::invalid(field(name), error.message()))?;
        if name == "budget" && limits.budget.is_some_and(|budget| budget < Money::ZERO) {
            return Err(ApiError::invalid(field(name), "a budget cannot be negative"));
        }
        *value = subs_protocol::to_value(&limits).get_mut(name.as_str()).map(Value::take).unwrap_or_default();
    }
    if let Some(sandbox) = overrides.get(SANDBOX) {
        checked_sandbox(sandbox, &field(SANDBOX))?;
    }
    Ok(overrides)
}

fn checked_sandbox(sandbox: &Value, path: &str) -> Result<(), ApiError> {
    let Value::Object(fields) = sandbox else {
        return Err(ApiError::invalid(path, "`sandbox` is an object of component limits (docs/sandbox.md)"));
    };
    for (name, value) in fields {
        let at = format!("{path}.{name}");
        if SANDBOX_COUNTS.contains(&name.as_str()) {
            if !value.is_u64() {
                return Err(ApiError::invalid(at, "a sandbox limit is a whole number, 0 or more"));
            }
        } else if name == "http_hosts" {
            let hosts = value.as_array().filter(|hosts| hosts.len() <= MAX_HTTP_HOSTS);
            let valid = hosts.is_some_and(|hosts| {
                hosts.iter().all(|host| host.as_str().is_some_and(|h| !h.is_empty() && h.len() <= 255))
            });
            if !valid {
                return Err(ApiError::invalid(
                    at,
                    format!("`http_hosts` is a list of at most {MAX_HTTP_HOSTS} hosts (`host` or `host:port`)"),
                ));
            }
        } else {
            return Err(ApiError::invalid(
                at,
                format!("unknown sandbox limit `{name}`; known: {}, http_hosts", SANDBOX_COUNTS.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(tenant: &str, limits: Value) -> TenantRecord {
        TenantRecord {
            tenant: tenant.to_owned(),
            limits: limits.as_object().cloned().unwrap(),
            created_ms: 0,
            updated_ms: 0,
        }
    }

    fn file() -> ServerConfig {
        let default_limits =
            Limits { max_sessions: Some(10), budget: Some(Money::from_dollars(5)), ..Limits::default() };
        let acme = Limits { max_sessions: Some(3), ..default_limits.clone() };
        ServerConfig { default_limits, tenant_limits: [("acme".to_owned(), acme)].into(), ..ServerConfig::default() }
    }

    #[test]
    fn stored_limits_win_field_by_field_over_the_file() {
        let config = LiveConfig::new(
            file(),
            [record("acme", json!({"budget": "1.5"})), record("beta", json!({"max_sessions": null}))],
        );
        let acme = config.limits("acme");
        assert_eq!(acme.max_sessions, Some(3), "the file's [tenants.acme]");
        assert_eq!(acme.budget, Some("1.5".parse().unwrap()), "stored");
        let beta = config.limits("beta");
        assert_eq!(beta.max_sessions, None, "null: no limit, over the file's default");
        assert_eq!(beta.budget, Some(Money::from_dollars(5)), "the file's [limits]");
        assert_eq!(config.limits("nobody"), file().default_limits);

        config.put(record("beta", json!({}))).unwrap();
        assert_eq!(config.limits("beta").max_sessions, Some(10), "an empty object inherits everything");
        config.remove("beta");
        assert!(config.record("beta").is_none());
    }

    #[test]
    fn unreadable_stored_limits_fall_back_to_the_file() {
        let config = LiveConfig::new(file(), [record("acme", json!({"max_sessions": "many"}))]);
        assert_eq!(config.limits("acme").max_sessions, Some(3));
        assert!(config.record("acme").is_some(), "kept, to be seen and fixed");
    }

    #[test]
    fn bad_limits_name_their_field() {
        let field = |body: Value| checked_limits(body, "").unwrap_err().field;
        assert_eq!(field(json!({"max_sessions": "x"})).as_deref(), Some("max_sessions"));
        assert_eq!(field(json!({"max_session": 1})).as_deref(), Some("max_session"));
        assert_eq!(field(json!({"budget": "-1"})).as_deref(), Some("budget"));
        assert_eq!(field(json!({"budget": "abc"})).as_deref(), Some("budget"));
        assert_eq!(field(json!({"sandbox": 3})).as_deref(), Some("sandbox"));
        assert_eq!(field(json!({"sandbox": {"cpu_ms": -1}})).as_deref(), Some("sandbox.cpu_ms"));
        assert_eq!(field(json!({"sandbox": {"cpu": 1}})).as_deref(), Some("sandbox.cpu"));
        assert_eq!(field(json!({"sandbox": {"http_hosts": [1]}})).as_deref(), Some("sandbox.http_hosts"));
        assert_eq!(field(json!([])), None);
        let nested = checked_limits(json!({"max_body_bytes": -1}), "limits").unwrap_err();
        assert_eq!(nested.field.as_deref(), Some("limits.max_body_bytes"));

        let good = json!({"max_sessions": null, "budget": 2.5, "sandbox": {"cpu_ms": 5, "http_hosts": ["a.example"]}});
        let stored =
            json!({"max_sessions": null, "budget": "2.5", "sandbox": {"cpu_ms": 5, "http_hosts": ["a.example"]}});
        assert_eq!(Value::Object(checked_limits(good, "").unwrap()), stored, "as Limits writes them");
    }
}
