//! Settings of `subs serve` (and of `subs keys`, which needs the data
//! directory): flags, then environment variables (both parsed by clap),
//! then the TOML config file, then defaults. docs/configuration.md
//! documents every setting; keep the two in step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use serde::Deserialize;
use subs_engine::agents::uploads::UploadPolicy;
use subs_engine::model::{OFFLINE_MODEL, Price, ProviderConfig, ProvidersConfig};
use subs_engine::retry::RetryCap;
use subs_engine::store::KeyRecord;
use subs_engine::store::shared::SharedSettings;
use subs_engine::worker::component::{AgentPolicy, CompileBudget, HostConfig, LimitOverrides, Limits as SandboxLimits};
use subs_engine::{EngineConfig, StreamLimits};
use subs_server::edge::HttpConfig;
use subs_server::mcp::Bounds as McpBounds;
use subs_server::{Limits, ServerConfig};
use subs_store_postgres::{MAX_NODE_NAME, PgOptions, redact};

use crate::error::{CliError, CliResult};

/// Where `serve` listens when nothing says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The store's file name inside the data directory.
pub const STORE_FILE: &str = "subs.redb";

/// The config file, as written. Unknown keys are errors: a misspelt
/// setting silently ignored is worse than a refusal to start.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    /// `listen = "127.0.0.1:7878"`.
    pub listen: Option<String>,
    /// `data = "/var/lib/subs"`; relative to the file's directory.
    pub data: Option<PathBuf>,
    /// `default_model = "subs/offline"`.
    pub default_model: Option<String>,
    /// Origins browsers may call the API from.
    pub cors_origins: Vec<String>,
    /// `[[keys]]`: API keys and their tenants.
    pub keys: Vec<KeyEntry>,
    /// `[admin]`: the operator key, which enables the admin API.
    pub admin: AdminEntry,
    /// `[limits]`: every tenant's limits, unless it has its own.
    pub limits: LimitsEntry,
    /// `[tenants.<name>]`: one tenant's limits; what it leaves out comes
    /// from `[limits]`.
    pub tenants: BTreeMap<String, LimitsEntry>,
    /// `[agents.<tenant>.<agent>]`: one component agent's sandbox, over
    /// its tenant's.
    pub agents: BTreeMap<String, BTreeMap<String, SandboxEntry>>,
    /// `[[providers]]`: LLM providers to add, or built-ins to adjust
    /// (docs/models.md).
    pub providers: Vec<ProviderConfig>,
    /// `[prices."provider/model"]`: dollars per million tokens, over the
    /// built-in price table.
    pub prices: BTreeMap<String, Price>,
    /// Anthropic's `max_tokens` when a call sets none.
    pub max_tokens: Option<u32>,
    /// How long to wait for a provider's connection.
    pub connect_timeout_secs: Option<f64>,
    /// The longest a provider may stay silent.
    pub read_timeout_secs: Option<f64>,
    /// Names on agents' allow-lists that may resolve to private and
    /// loopback addresses: the operator's internal services
    /// (docs/sandbox.md). Every other name may lead only to public ones.
    pub private_hosts: Vec<String>,
    /// `[compile]`: what compiling an upload may cost (docs/security.md).
    pub compile: CompileEntry,
    /// `[pool]`: the instance pool's slots and each tenant's share.
    pub pool: PoolEntry,
    /// `[retry]`: the most any agent's retry policy may ask for.
    pub retry: RetryEntry,
    /// `[streams]`: what token deltas and event streams may hold.
    pub streams: StreamsEntry,
    /// `[http]`: the server-wide bounds of connections, request heads and
    /// bodies (docs/security.md, "The HTTP edge").
    pub http: HttpEntry,
    /// `[mcp_endpoint]`: what MCP clients of the agents' MCP endpoints may
    /// hold (docs/mcp.md).
    pub mcp_endpoint: McpEndpointEntry,
    /// `[mcp_servers]`: the bounds on tenants' MCP servers, the tool
    /// sources of their agents (docs/mcp.md).
    pub mcp_servers: McpServersEntry,
    /// `[oci]`: the OCI registries agents may be pulled from, their
    /// credentials and the pull deadline (docs/registries.md).
    pub oci: OciEntry,
    /// `[timeouts]`: how long deliveries and calls may take when no retry
    /// policy says, and how long a quiet session stays in memory.
    pub timeouts: TimeoutsEntry,
    /// `[recovery]`: how sessions with work left are resumed after a
    /// restart.
    pub recovery: RecoveryEntry,
    /// `[store]`: where sessions are kept: redb in the data directory
    /// (nothing set), or a PostgreSQL database several nodes share.
    pub store: StoreEntry,
    /// `[telemetry]`: where OpenTelemetry spans go (docs/operations.md).
    pub telemetry: crate::telemetry::TelemetryEntry,
}

/// `[store]` as written: a PostgreSQL database (`url`) and how this node
/// takes part in sharing it. Without `url`, sessions are kept in redb in
/// the data directory and nothing else here may be set.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreEntry {
    /// `postgres://user:password@host:port/database`.
    pub url: Option<String>,
    /// How long a node's leases outlive its last heartbeat, in seconds.
    pub lease_secs: Option<f64>,
    /// How often a node renews its heartbeat, in seconds.
    pub renew_secs: Option<f64>,
    /// This node's name among the nodes sharing the database.
    pub node: Option<String>,
    /// Connections to the database for reads (besides the writer's, the
    /// heartbeat's and the notice listener's).
    pub pool: Option<u32>,
}

/// Where `subs serve` keeps sessions.
#[derive(Debug, Clone)]
pub enum StoreChoice {
    /// redb, in the data directory (`subs.redb`).
    Redb,
    /// A PostgreSQL database, which several nodes may share.
    Postgres {
        /// Its URL (password included: show it with [`redact`]).
        url: String,
        /// This node's part in sharing it.
        options: PgOptions,
    },
}

/// The most database connections `[store] pool` takes.
pub const MAX_POOL: u32 = 1000;

/// The store: `flag` (`--store`, or `SUBS_STORE`: clap reads the flag
/// first), then the file's `[store] url`, then redb in the data directory.
///
/// # Errors
/// A URL that is not `postgres://` or `postgresql://`; lease settings that
/// [`SharedSettings::check`] refuses; a pool of 0 or above [`MAX_POOL`];
/// an empty node name; any `[store]` setting without a URL to apply to.
pub fn store(flag: Option<&str>, file: &ConfigFile) -> CliResult<StoreChoice> {
    let entry = &file.store;
    let url = flag.filter(|url| !url.is_empty()).or(entry.url.as_deref().filter(|url| !url.is_empty()));
    let Some(url) = url else {
        let set: Vec<&str> = [
            ("lease_secs", entry.lease_secs.is_some()),
            ("renew_secs", entry.renew_secs.is_some()),
            ("node", entry.node.is_some()),
            ("pool", entry.pool.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if !set.is_empty() {
            return Err(CliError::usage(anyhow!(
                "`[store] {}` applies to a PostgreSQL store only: set `[store] url` (or --store, SUBS_STORE) too, or \
                 leave it out to keep sessions in redb in the data directory",
                set.join("`, `")
            )));
        }
        return Ok(StoreChoice::Redb);
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(CliError::usage(anyhow!(
            "the store `{}` is not a PostgreSQL URL (postgres://user:password@host:port/database); leave the store \
             unset to keep sessions in redb in the data directory",
            redact(url)
        )));
    }
    let defaults = SharedSettings::default();
    let secs = |key: &str, value: Option<f64>, default: std::time::Duration| match value {
        None => Ok(default),
        Some(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => {
            Ok(std::time::Duration::from_secs_f64(secs))
        }
        Some(secs) => Err(CliError::usage(anyhow!(
            "`[store] {key}` must be a number of seconds above 0 and at most a day, not {secs}"
        ))),
    };
    let shared = SharedSettings {
        lease: secs("lease_secs", entry.lease_secs, defaults.lease)?,
        renew: secs("renew_secs", entry.renew_secs, defaults.renew)?,
    };
    shared.check().map_err(|why| CliError::usage(anyhow!("[store]: {why}")))?;
    let pool = entry.pool.unwrap_or(PgOptions::default().pool);
    if pool == 0 || pool > MAX_POOL {
        return Err(CliError::usage(anyhow!("`[store] pool` must be 1 to {MAX_POOL} connections, not {pool}")));
    }
    if let Some(node) = &entry.node
        && (node.is_empty() || node.len() > MAX_NODE_NAME || node.chars().any(char::is_control))
    {
        return Err(CliError::usage(anyhow!(
            "`[store] node` must be 1 to {MAX_NODE_NAME} bytes without control characters, not {node:?}"
        )));
    }
    let options = PgOptions { node: entry.node.clone(), shared, pool, ..PgOptions::default() };
    Ok(StoreChoice::Postgres { url: url.to_owned(), options })
}

/// `[recovery]` as written: how many sessions resumed after a restart
/// (or taken over from a node that died) may work at once.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryEntry {
    /// Resumed sessions working at once.
    pub concurrent: Option<usize>,
}

impl RecoveryEntry {
    /// The most `concurrent` may be.
    const MAX_CONCURRENT: usize = 100_000;

    /// Sets the engine's resume concurrency from this table.
    ///
    /// # Errors
    /// A count below 1 or above 100,000.
    pub fn apply(&self, config: &mut EngineConfig) -> CliResult<()> {
        let Some(concurrent) = self.concurrent else { return Ok(()) };
        if !(1..=Self::MAX_CONCURRENT).contains(&concurrent) {
            return Err(CliError::usage(anyhow!(
                "`[recovery] concurrent` must be from 1 to {}, not {concurrent}",
                Self::MAX_CONCURRENT
            )));
        }
        config.resume_concurrency = concurrent;
        Ok(())
    }
}

/// `[timeouts]` as written: the engine's defaults for deliveries and for
/// tries of calls whose retry policies set no `timeout_secs`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsEntry {
    /// One delivery of a decision, in seconds.
    pub decision_secs: Option<f64>,
    /// One try of a call (its deadline), in seconds.
    pub call_secs: Option<f64>,
    /// How long a quiet session's actor stays in memory, in seconds.
    pub linger_secs: Option<f64>,
    /// How long an input may wait for a contained agent's decisions, to be
    /// committed with them, in milliseconds.
    pub contained_hold_ms: Option<f64>,
}

impl TimeoutsEntry {
    /// The longest timeout the table takes: a day.
    const MAX_SECS: f64 = 86_400.0;
    /// The longest `linger_secs`: an hour.
    const MAX_LINGER_SECS: f64 = 3_600.0;
    /// The longest `contained_hold_ms`: a second.
    const MAX_CONTAINED_HOLD_MS: f64 = 1_000.0;

    /// Sets the engine's defaults from this table.
    ///
    /// # Errors
    /// A value that is not a number of seconds above 0 and at most a day.
    pub fn apply(&self, config: &mut EngineConfig) -> CliResult<()> {
        for (key, value, target) in [
            ("decision_secs", self.decision_secs, &mut config.decision_timeout),
            ("call_secs", self.call_secs, &mut config.call_timeout),
        ] {
            let Some(secs) = value else { continue };
            if !(secs > 0.0 && secs <= Self::MAX_SECS) {
                return Err(CliError::usage(anyhow!(
                    "`[timeouts] {key}` must be a number of seconds above 0 and at most {}, not {secs}",
                    Self::MAX_SECS
                )));
            }
            *target = std::time::Duration::from_secs_f64(secs);
        }
        if let Some(secs) = self.linger_secs {
            // Each lingering session holds its memory (and lease): an hour
            // is already more than a client's next message needs.
            if !(0.0..=Self::MAX_LINGER_SECS).contains(&secs) {
                return Err(CliError::usage(anyhow!(
                    "`[timeouts] linger_secs` must be a number of seconds from 0 to {}, not {secs}",
                    Self::MAX_LINGER_SECS
                )));
            }
            config.session_linger = std::time::Duration::from_secs_f64(secs);
        }
        if let Some(ms) = self.contained_hold_ms {
            // The hold is added to the answer of every input to a slow
            // agent's session before it is known to be slow, and is the
            // window in which a crash makes a call run again: past a
            // second it buys nothing a commit of its own costs.
            if !(0.0..=Self::MAX_CONTAINED_HOLD_MS).contains(&ms) {
                return Err(CliError::usage(anyhow!(
                    "`[timeouts] contained_hold_ms` must be a number of milliseconds from 0 to {}, not {ms}",
                    Self::MAX_CONTAINED_HOLD_MS
                )));
            }
            config.contained_hold = std::time::Duration::from_secs_f64(ms / 1_000.0);
        }
        Ok(())
    }
}

/// `[compile]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompileEntry {
    /// Wall-clock time of one compile, in seconds.
    pub wall_secs: Option<u64>,
    /// Memory of one compile, in MiB.
    pub memory_mib: Option<u64>,
    /// Functions one component may define.
    pub max_functions: Option<u64>,
    /// The largest function body, in bytes.
    pub max_function_bytes: Option<u64>,
    /// Locals one function may declare.
    pub max_locals: Option<u64>,
    /// All function bodies of one component, in bytes.
    pub max_code_bytes: Option<u64>,
    /// Compiles running at once on the server.
    pub concurrent: Option<usize>,
    /// The shared cache of compiled functions, in MiB.
    pub function_cache_mib: Option<u64>,
    /// Whether `subs serve` accepts a large upload on baseline code and
    /// compiles it optimized in the background (default true).
    pub baseline_first: Option<bool>,
}

/// `[retry]` as written: the operator's cap on retry policies.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryEntry {
    /// Retries of one delivery or call.
    pub max_retries: Option<u32>,
    /// The longest wait before a retry, in seconds.
    pub max_backoff_secs: Option<f64>,
    /// The longest one try may take, in seconds.
    pub max_timeout_secs: Option<f64>,
    /// All the waits of one delivery or call, in seconds.
    pub max_total_secs: Option<f64>,
}

impl RetryEntry {
    /// The cap this table sets over the defaults.
    pub fn cap(&self) -> RetryCap {
        let d = RetryCap::default();
        RetryCap {
            max_retries: self.max_retries.unwrap_or(d.max_retries),
            max_backoff_secs: self.max_backoff_secs.unwrap_or(d.max_backoff_secs),
            max_timeout_secs: self.max_timeout_secs.unwrap_or(d.max_timeout_secs),
            max_total_secs: self.max_total_secs.unwrap_or(d.max_total_secs),
        }
    }
}

/// `[pool]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolEntry {
    /// Slots of the instance pool.
    pub slots: Option<u32>,
    /// The most slots one tenant's decisions may hold at once.
    pub tenant_slots: Option<u32>,
}

/// `[streams]` as written: each field optional, over the engine's
/// defaults ([`StreamLimits`]).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamsEntry {
    /// The largest token delta, in bytes of JSON.
    pub max_delta_bytes: Option<usize>,
    /// Bytes all deltas of one decision or LLM call may add up to.
    pub max_call_delta_bytes: Option<u64>,
    /// Deltas one decision or LLM call may stream per second.
    pub max_deltas_per_sec: Option<u32>,
    /// Bytes of events waiting for one client before it is dropped.
    pub subscriber_buffer_bytes: Option<usize>,
    /// Event streams one tenant may have open at once.
    pub max_streams_per_tenant: Option<usize>,
}

impl StreamsEntry {
    /// The limits this table sets over the defaults.
    ///
    /// # Errors
    /// A zero: it would refuse every delta or every stream, which is
    /// better said by not streaming at all.
    pub fn limits(&self) -> CliResult<StreamLimits> {
        let defaults = StreamLimits::default();
        let checked = |key: &str, value: Option<u64>| match value {
            Some(0) => Err(CliError::usage(anyhow!("`[streams] {key}` must be at least 1"))),
            _ => Ok(()),
        };
        checked("max_delta_bytes", self.max_delta_bytes.map(|v| v as u64))?;
        checked("max_call_delta_bytes", self.max_call_delta_bytes)?;
        checked("max_deltas_per_sec", self.max_deltas_per_sec.map(u64::from))?;
        checked("subscriber_buffer_bytes", self.subscriber_buffer_bytes.map(|v| v as u64))?;
        checked("max_streams_per_tenant", self.max_streams_per_tenant.map(|v| v as u64))?;
        Ok(StreamLimits {
            max_delta_bytes: self.max_delta_bytes.unwrap_or(defaults.max_delta_bytes),
            max_call_delta_bytes: self.max_call_delta_bytes.unwrap_or(defaults.max_call_delta_bytes),
            max_deltas_per_sec: self.max_deltas_per_sec.unwrap_or(defaults.max_deltas_per_sec),
            subscriber_buffer_bytes: self.subscriber_buffer_bytes.unwrap_or(defaults.subscriber_buffer_bytes),
            max_streams_per_tenant: self.max_streams_per_tenant.unwrap_or(defaults.max_streams_per_tenant),
        })
    }
}

/// `[oci]` as written: which registries `PUT /v1/agents/{id}`
/// `{"oci": …}` may pull from (none unless listed), which of them over
/// plain HTTP, with what credentials, within what time.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OciEntry {
    /// Registries (`host[:port]`) pulls may reach.
    pub allow_registries: Vec<String>,
    /// Registries reached over plain HTTP (a registry on loopback, say).
    pub insecure: Vec<String>,
    /// How long one pull may take, in seconds (default 60).
    pub pull_timeout_secs: Option<f64>,
    /// `[oci.credentials."HOST"]`: credentials by registry, sent to that
    /// registry only.
    pub credentials: BTreeMap<String, OciCredentialsEntry>,
}

/// `[oci.credentials."HOST"]`: a user name and password, or a token.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OciCredentialsEntry {
    /// The user name (with `password`).
    pub username: Option<String>,
    /// The password or access token (with `username`).
    pub password: Option<String>,
    /// A bearer token the registry takes as it is (instead of a user name
    /// and password).
    pub token: Option<String>,
}

impl OciEntry {
    /// The longest pull deadline the table takes: an hour.
    const MAX_SECS: f64 = 3_600.0;

    /// The server's pull policy.
    ///
    /// # Errors
    /// A deadline out of range, credentials that are neither a user name
    /// with a password nor a token, or credentials for a registry not
    /// allowed (they could never be used).
    pub fn policy(&self) -> CliResult<subs_oci::PullPolicy> {
        let deadline = match self.pull_timeout_secs {
            None => subs_oci::DEFAULT_DEADLINE,
            Some(secs) if secs > 0.0 && secs <= Self::MAX_SECS => std::time::Duration::from_secs_f64(secs),
            Some(secs) => {
                return Err(CliError::usage(anyhow!(
                    "`[oci] pull_timeout_secs` must be a number of seconds above 0 and at most {}, not {secs}",
                    Self::MAX_SECS
                )));
            }
        };
        let mut credentials = std::collections::HashMap::new();
        for (host, entry) in &self.credentials {
            if !self.allow_registries.iter().any(|r| r.eq_ignore_ascii_case(host)) {
                return Err(CliError::usage(anyhow!(
                    "`[oci.credentials.\"{host}\"]` names a registry not in `[oci] allow_registries`"
                )));
            }
            let parsed = match (&entry.username, &entry.password, &entry.token) {
                (Some(username), Some(password), None) => {
                    subs_oci::Credentials::Basic { username: username.clone(), password: password.clone() }
                }
                (None, None, Some(token)) => subs_oci::Credentials::Token(token.clone()),
                _ => {
                    return Err(CliError::usage(anyhow!(
                        "`[oci.credentials.\"{host}\"]` takes `username` and `password`, or `token`"
                    )));
                }
            };
            credentials.insert(host.clone(), parsed);
        }
        Ok(subs_oci::PullPolicy {
            allow_registries: self.allow_registries.clone(),
            insecure: self.insecure.clone(),
            credentials,
            deadline,
        })
    }
}

/// `[mcp_servers]` as written: each field optional, over the defaults of
/// [`subs_engine::mcp::McpLimits`].
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServersEntry {
    /// MCP servers one tenant may register.
    pub max_per_tenant: Option<usize>,
    /// The most bytes of one answer of a server (a call's result, a page
    /// of its tool list, an event stream in all).
    pub max_result_bytes: Option<usize>,
    /// How long a server's tool list is used before it is listed again,
    /// in seconds.
    pub list_ttl_secs: Option<f64>,
    /// The most tools kept of one server.
    pub max_tools: Option<usize>,
}

impl McpServersEntry {
    /// The registry's bounds: this table over the defaults, with the
    /// operator's `private_hosts`.
    ///
    /// # Errors
    /// A count or size of 0, or a TTL that is not above 0 and at most a
    /// day.
    pub fn limits(&self, private_hosts: &[String]) -> CliResult<subs_engine::mcp::McpLimits> {
        let defaults = subs_engine::mcp::McpLimits::default();
        let count = |key: &str, value: Option<usize>, default: usize| match value {
            None => Ok(default),
            Some(0) => Err(CliError::usage(anyhow!("`[mcp_servers] {key}` must be at least 1"))),
            Some(n) => Ok(n),
        };
        let list_ttl = match self.list_ttl_secs {
            None => defaults.list_ttl,
            Some(secs) if secs > 0.0 && secs <= 86_400.0 => std::time::Duration::from_secs_f64(secs),
            Some(secs) => {
                return Err(CliError::usage(anyhow!(
                    "`[mcp_servers] list_ttl_secs` must be a number of seconds above 0 and at most 86400, not {secs}"
                )));
            }
        };
        Ok(subs_engine::mcp::McpLimits {
            max_servers: count("max_per_tenant", self.max_per_tenant, defaults.max_servers)?,
            max_result_bytes: count("max_result_bytes", self.max_result_bytes, defaults.max_result_bytes)?,
            max_tools: count("max_tools", self.max_tools, defaults.max_tools)?,
            list_ttl,
            private_hosts: private_hosts.to_vec(),
            ..defaults
        })
    }
}

/// `[mcp_endpoint]` as written: each field optional, over the server's
/// defaults ([`McpBounds`]).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpEndpointEntry {
    /// MCP sessions one tenant may have open at once.
    pub max_sessions_per_tenant: Option<usize>,
    /// How long an unused MCP session lives, in seconds.
    pub session_idle_secs: Option<f64>,
    /// `tools/call` requests one MCP session may have running at once.
    pub max_calls_per_session: Option<usize>,
    /// How long a call waits for the client's answer to an elicitation, in
    /// seconds.
    pub elicitation_timeout_secs: Option<f64>,
}

impl McpEndpointEntry {
    /// The longest time the table takes: a day.
    const MAX_SECS: f64 = 86_400.0;

    /// The bounds this table sets over the defaults.
    ///
    /// # Errors
    /// A count of 0, or a time that is not a number of seconds above 0 and
    /// at most a day.
    pub fn bounds(&self) -> CliResult<McpBounds> {
        let defaults = McpBounds::default();
        let secs = |key: &str, value: Option<f64>, default: std::time::Duration| match value {
            None => Ok(default),
            Some(secs) if secs > 0.0 && secs <= Self::MAX_SECS => Ok(std::time::Duration::from_secs_f64(secs)),
            Some(secs) => Err(CliError::usage(anyhow!(
                "`[mcp_endpoint] {key}` must be a number of seconds above 0 and at most {}, not {secs}",
                Self::MAX_SECS
            ))),
        };
        let count = |key: &str, value: Option<usize>, default: usize| match value {
            None => Ok(default),
            Some(0) => Err(CliError::usage(anyhow!("`[mcp_endpoint] {key}` must be at least 1"))),
            Some(n) => Ok(n),
        };
        Ok(McpBounds {
            max_sessions_per_tenant: count(
                "max_sessions_per_tenant",
                self.max_sessions_per_tenant,
                defaults.max_sessions_per_tenant,
            )?,
            session_idle: secs("session_idle_secs", self.session_idle_secs, defaults.session_idle)?,
            max_calls_per_session: count(
                "max_calls_per_session",
                self.max_calls_per_session,
                defaults.max_calls_per_session,
            )?,
            elicitation_timeout: secs(
                "elicitation_timeout_secs",
                self.elicitation_timeout_secs,
                defaults.elicitation_timeout,
            )?,
        })
    }
}

/// `[http]` as written: each field optional, over the server's defaults
/// ([`HttpConfig`]).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpEntry {
    /// How long a connection may take to send a request's head (and stay
    /// idle between requests), in seconds.
    pub header_read_timeout_secs: Option<f64>,
    /// Connections open at once, server-wide.
    pub max_connections: Option<usize>,
    /// Connections open at once from one client address.
    pub max_connections_per_address: Option<usize>,
    /// Connections past the caps that may still ask for `/healthz`.
    pub healthz_connections: Option<usize>,
    /// The largest request head, in bytes.
    pub max_head_bytes: Option<usize>,
    /// The most headers in a request.
    pub max_headers: Option<usize>,
    /// How long a request body may go without a byte arriving, in seconds.
    pub body_read_timeout_secs: Option<f64>,
    /// Bytes of request bodies in flight, server-wide.
    pub max_body_bytes_in_flight: Option<usize>,
    /// The deepest nesting of a JSON body.
    pub max_json_depth: Option<usize>,
    /// Array elements and object members in a JSON body.
    pub max_json_values: Option<usize>,
}

impl HttpEntry {
    /// The longest timeout the table takes: an hour.
    const MAX_SECS: f64 = 3600.0;

    /// The bounds this table sets over the defaults.
    ///
    /// # Errors
    /// A timeout that is not a number of seconds above 0 and at most an
    /// hour; a count of 0; a head bound under hyper's smallest buffer; a
    /// JSON depth past serde_json's own.
    pub fn config(&self) -> CliResult<HttpConfig> {
        let defaults = HttpConfig::default();
        let secs = |key: &str, value: Option<f64>, default: std::time::Duration| match value {
            None => Ok(default),
            Some(secs) if secs > 0.0 && secs <= Self::MAX_SECS => Ok(std::time::Duration::from_secs_f64(secs)),
            Some(secs) => Err(CliError::usage(anyhow!(
                "`[http] {key}` must be a number of seconds above 0 and at most {}, not {secs}",
                Self::MAX_SECS
            ))),
        };
        let count = |key: &str, value: Option<usize>, default: usize, least: usize, most: usize| match value {
            None => Ok(default),
            Some(n) if (least..=most).contains(&n) => Ok(n),
            Some(n) if n < least => Err(CliError::usage(anyhow!("`[http] {key}` must be at least {least}, not {n}"))),
            Some(n) => Err(CliError::usage(anyhow!("`[http] {key}` must be at most {most}, not {n}"))),
        };
        let config = HttpConfig {
            header_read_timeout: secs(
                "header_read_timeout_secs",
                self.header_read_timeout_secs,
                defaults.header_read_timeout,
            )?,
            max_connections: count("max_connections", self.max_connections, defaults.max_connections, 1, usize::MAX)?,
            max_connections_per_address: count(
                "max_connections_per_address",
                self.max_connections_per_address,
                defaults.max_connections_per_address,
                1,
                usize::MAX,
            )?,
            healthz_connections: count(
                "healthz_connections",
                self.healthz_connections,
                defaults.healthz_connections,
                0,
                usize::MAX,
            )?,
            max_head_bytes: count(
                "max_head_bytes",
                self.max_head_bytes,
                defaults.max_head_bytes,
                subs_server::edge::MIN_HEAD_BYTES,
                usize::MAX,
            )?,
            max_headers: count("max_headers", self.max_headers, defaults.max_headers, 1, usize::MAX)?,
            body_read_timeout: secs("body_read_timeout_secs", self.body_read_timeout_secs, defaults.body_read_timeout)?,
            max_body_bytes_in_flight: count(
                "max_body_bytes_in_flight",
                self.max_body_bytes_in_flight,
                defaults.max_body_bytes_in_flight,
                1,
                usize::MAX,
            )?,
            max_json_depth: count(
                "max_json_depth",
                self.max_json_depth,
                defaults.max_json_depth,
                1,
                subs_server::edge::MAX_JSON_DEPTH,
            )?,
            max_json_values: count("max_json_values", self.max_json_values, defaults.max_json_values, 1, usize::MAX)?,
        };
        Ok(HttpConfig {
            max_connections_per_address: config.max_connections_per_address.min(config.max_connections),
            ..config
        })
    }
}

/// One `[[keys]]` entry: a tenant and its key, hashed or not.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The tenant the key acts for.
    pub tenant: String,
    /// Hex SHA-256 of the key (what `subs keys create` prints): the file
    /// then holds nothing that grants access.
    pub key_sha256: Option<String>,
    /// The key itself, hashed on load (convenient; keep the file private).
    pub key: Option<String>,
    /// A label for people.
    pub name: Option<String>,
}

/// The `[admin]` table: the operator key, hashed or not.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminEntry {
    /// Hex SHA-256 of the operator key (what `subs admin-key` prints).
    pub key_sha256: Option<String>,
    /// The operator key itself, hashed on load (keep the file private).
    pub key: Option<String>,
}

/// The fewest characters an operator key given as is may have: it guards
/// every tenant.
pub const MIN_ADMIN_KEY: usize = 16;

/// Limits as written: each field optional, so a tenant's table can
/// override one limit and inherit the rest.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsEntry {
    /// Sessions a tenant may have.
    pub max_sessions: Option<usize>,
    /// Sub-agent sessions one turn may spawn.
    pub max_spawns_per_turn: Option<u32>,
    /// How deep below its root a sub-agent session may be.
    pub max_sub_agent_depth: Option<u32>,
    /// Sessions one tree of sub-agents may hold, its root included.
    pub max_tree_sessions: Option<u32>,
    /// Actions one decision may hold.
    pub max_actions_per_decision: Option<u32>,
    /// Calls one turn may hold, settled ones included.
    pub max_calls_per_turn: Option<u32>,
    /// Bytes of messages one session may store, each counted as its JSON.
    pub max_session_bytes: Option<u64>,
    /// Whole-session reads (snapshots) a tenant may have running at once.
    pub max_session_reads: Option<usize>,
    /// Stored bytes of decisions one page of a session's decisions holds.
    pub max_page_bytes: Option<usize>,
    /// Sessions a tenant's filtered listings may look at per second.
    pub max_listing_scan_per_sec: Option<u32>,
    /// Largest JSON request body, in bytes.
    pub max_body_bytes: Option<usize>,
    /// Bytes of the tenant's request bodies in flight at once.
    pub max_body_bytes_in_flight: Option<usize>,
    /// Largest component upload, in bytes.
    pub max_component_bytes: Option<usize>,
    /// Agent uploads (components and HTTP workers) per hour.
    pub max_uploads_per_hour: Option<u32>,
    /// Compiled code the tenant's agents may hold, in bytes.
    pub max_compiled_bytes: Option<u64>,
    /// Versions one agent keeps, the current one included.
    pub max_agent_versions: Option<usize>,
    /// Bytes one agent's stored versions may hold.
    pub max_agent_bytes: Option<u64>,
    /// Bytes all the tenant's agents' stored versions may hold.
    pub max_stored_agent_bytes: Option<u64>,
    /// The longest HTTP worker URL, in bytes.
    pub max_worker_url_bytes: Option<usize>,
    /// The longest HTTP worker signing secret, in bytes.
    pub max_worker_secret_bytes: Option<usize>,
    /// Dollars the tenant's sessions may spend on LLM calls, in all.
    pub budget: Option<subs_engine::model::Money>,
    /// Whether LLM calls stream token deltas when neither the call nor the
    /// agent's config says.
    pub stream_by_default: Option<bool>,
    /// `[limits.sandbox]` / `[tenants.<name>.sandbox]`: what each decision
    /// of a component agent may use.
    pub sandbox: SandboxEntry,
}

/// A component sandbox's limits as written (docs/sandbox.md): each field
/// optional, changing only what it names.
///
/// It mirrors [`LimitOverrides`] in the file's units (milliseconds) plus
/// `http_hosts`, rather than embedding it: serde cannot flatten one struct
/// into another and still refuse unknown keys, which this file promises.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxEntry {
    /// Linear memory, in bytes.
    pub memory_bytes: Option<usize>,
    /// Wall-clock time of one decision, in milliseconds.
    pub wall_clock_ms: Option<u64>,
    /// Guest CPU time of one decision, in milliseconds.
    pub cpu_ms: Option<u64>,
    /// Elements of any one table.
    pub table_elements: Option<usize>,
    /// Core instances.
    pub instances: Option<usize>,
    /// Tables.
    pub tables: Option<usize>,
    /// Linear memories.
    pub memories: Option<usize>,
    /// Largest decision, in bytes of JSON.
    pub decision_bytes: Option<usize>,
    /// Guest stdout and stderr kept in the logs, in bytes (and, apart, of
    /// lines sent through the host's `log`).
    pub log_bytes: Option<usize>,
    /// Lines sent through the host's `log` kept in the logs.
    pub log_lines: Option<usize>,
    /// Hosts (`host` or `host:port`) the agent may send HTTP requests to;
    /// only per tenant or per agent, never for everyone.
    pub http_hosts: Option<Vec<String>>,
}

impl SandboxEntry {
    fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            memory_bytes: self.memory_bytes,
            wall_clock: self.wall_clock_ms.map(std::time::Duration::from_millis),
            cpu: self.cpu_ms.map(std::time::Duration::from_millis),
            table_elements: self.table_elements,
            instances: self.instances,
            tables: self.tables,
            memories: self.memories,
            decision_bytes: self.decision_bytes,
            log_bytes: self.log_bytes,
            log_lines: self.log_lines,
        }
    }

    /// The policy this entry grants.
    pub fn policy(&self) -> AgentPolicy {
        AgentPolicy { limits: self.overrides(), http_hosts: self.http_hosts.clone() }
    }
}

impl LimitsEntry {
    /// These limits over `base`.
    pub(crate) fn over(&self, base: &Limits) -> Limits {
        Limits {
            max_sessions: self.max_sessions.or(base.max_sessions),
            max_spawns_per_turn: self.max_spawns_per_turn.unwrap_or(base.max_spawns_per_turn),
            max_sub_agent_depth: self.max_sub_agent_depth.unwrap_or(base.max_sub_agent_depth),
            max_tree_sessions: self.max_tree_sessions.unwrap_or(base.max_tree_sessions),
            max_actions_per_decision: self.max_actions_per_decision.unwrap_or(base.max_actions_per_decision),
            max_calls_per_turn: self.max_calls_per_turn.unwrap_or(base.max_calls_per_turn),
            max_session_bytes: self.max_session_bytes.unwrap_or(base.max_session_bytes),
            max_session_reads: self.max_session_reads.unwrap_or(base.max_session_reads),
            max_page_bytes: self.max_page_bytes.unwrap_or(base.max_page_bytes),
            max_listing_scan_per_sec: self.max_listing_scan_per_sec.unwrap_or(base.max_listing_scan_per_sec),
            max_body_bytes: self.max_body_bytes.unwrap_or(base.max_body_bytes),
            max_body_bytes_in_flight: self.max_body_bytes_in_flight.unwrap_or(base.max_body_bytes_in_flight),
            max_component_bytes: self.max_component_bytes.unwrap_or(base.max_component_bytes),
            max_uploads_per_hour: self.max_uploads_per_hour.unwrap_or(base.max_uploads_per_hour),
            max_compiled_bytes: self.max_compiled_bytes.unwrap_or(base.max_compiled_bytes),
            max_agent_versions: self.max_agent_versions.unwrap_or(base.max_agent_versions),
            max_agent_bytes: self.max_agent_bytes.unwrap_or(base.max_agent_bytes),
            max_stored_agent_bytes: self.max_stored_agent_bytes.unwrap_or(base.max_stored_agent_bytes),
            max_worker_url_bytes: self.max_worker_url_bytes.unwrap_or(base.max_worker_url_bytes),
            max_worker_secret_bytes: self.max_worker_secret_bytes.unwrap_or(base.max_worker_secret_bytes),
            budget: self.budget.or(base.budget),
            stream_by_default: self.stream_by_default.unwrap_or(base.stream_by_default),
        }
    }
}

impl ConfigFile {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> CliResult<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the config file {}", path.display()))
            .map_err(CliError::usage)?;
        let mut file: ConfigFile = toml::from_str(&text)
            .map_err(|e| anyhow!("the config file {} is invalid: {}", path.display(), e.to_string().trim_end()))
            .map_err(CliError::usage)?;
        // A relative data dir means "next to the config file", not "where
        // the server happened to be started".
        if let Some(data) = &file.data
            && data.is_relative()
        {
            let base = path.parent().unwrap_or(Path::new("."));
            file.data = Some(base.join(data));
        }
        Ok(file)
    }

    /// The `[[keys]]` as the server keeps them (hashes only).
    pub fn key_records(&self) -> CliResult<Vec<KeyRecord>> {
        self.keys
            .iter()
            .enumerate()
            .map(|(i, entry)| entry.record().with_context(|| format!("keys[{i}]")).map_err(CliError::usage))
            .collect()
    }

    /// The SHA-256 (hex) of each operator key: the file's `[admin]` and
    /// `flag` (`--admin-key` or `SUBS_ADMIN_KEY` of `subs serve`). None:
    /// the admin API is off.
    ///
    /// # Errors
    /// A malformed hash, a key shorter than [`MIN_ADMIN_KEY`], both `key`
    /// and `key_sha256`.
    pub fn admin_key_hashes(&self, flag: Option<&str>) -> CliResult<Vec<String>> {
        let mut hashes = Vec::new();
        let entry = &self.admin;
        match (&entry.key, &entry.key_sha256) {
            (Some(_), Some(_)) => {
                return Err(CliError::usage(anyhow!("[admin]: give `key` or `key_sha256`, not both")));
            }
            (Some(key), None) => hashes.push(admin_key_hash(key).context("[admin] key").map_err(CliError::usage)?),
            (None, Some(hash)) => {
                hashes.push(checked_hash(hash).context("[admin] key_sha256").map_err(CliError::usage)?)
            }
            (None, None) => {}
        }
        if let Some(key) = flag {
            hashes.push(admin_key_hash(key).context("--admin-key (SUBS_ADMIN_KEY)").map_err(CliError::usage)?);
        }
        Ok(hashes)
    }

    /// The LLM providers section: what the file sets over the defaults.
    pub fn providers_config(&self) -> ProvidersConfig {
        let defaults = ProvidersConfig::default();
        ProvidersConfig {
            providers: self.providers.clone(),
            prices: self.prices.clone(),
            max_tokens: self.max_tokens.unwrap_or(defaults.max_tokens),
            connect_timeout_secs: self.connect_timeout_secs.unwrap_or(defaults.connect_timeout_secs),
            read_timeout_secs: self.read_timeout_secs.unwrap_or(defaults.read_timeout_secs),
        }
    }

    /// The component host's defaults and tenant policies.
    ///
    /// # Errors
    /// `http_hosts` under `[limits.sandbox]`: outgoing HTTP is granted per
    /// tenant or per agent, so that no upload gets it by default.
    pub fn host_config(&self) -> CliResult<HostConfig> {
        if self.limits.sandbox.http_hosts.is_some() {
            return Err(CliError::usage(anyhow!(
                "`http_hosts` cannot be set in [limits.sandbox]: grant outgoing HTTP per tenant \
                 ([tenants.<name>.sandbox]) or per agent ([agents.<tenant>.<agent>])"
            )));
        }
        let defaults = HostConfig::default();
        let limits = SandboxLimits::default().with(&self.limits.sandbox.overrides());
        let tenants = self.tenants.iter().map(|(tenant, entry)| (tenant.clone(), entry.sandbox.policy())).collect();
        let c = &self.compile;
        let budget = CompileBudget::default();
        let compile_budget = CompileBudget {
            max_functions: c.max_functions.unwrap_or(budget.max_functions),
            max_function_bytes: c.max_function_bytes.unwrap_or(budget.max_function_bytes),
            max_locals: c.max_locals.unwrap_or(budget.max_locals),
            max_code_bytes: c.max_code_bytes.unwrap_or(budget.max_code_bytes),
            wall: c.wall_secs.map_or(budget.wall, std::time::Duration::from_secs),
            memory_bytes: c.memory_mib.map_or(budget.memory_bytes, |mib| mib.saturating_mul(1 << 20)),
        };
        Ok(HostConfig {
            limits,
            tenants,
            private_hosts: self.private_hosts.clone(),
            compile_budget,
            max_concurrent: self.pool.slots.unwrap_or(defaults.max_concurrent),
            tenant_slots: self.pool.tenant_slots.unwrap_or(defaults.tenant_slots),
            function_cache_bytes: c
                .function_cache_mib
                .map_or(defaults.function_cache_bytes, |mib| mib.saturating_mul(1 << 20)),
            baseline_first: c.baseline_first.unwrap_or(true),
            ..defaults
        })
    }

    /// How many uploads compile at once.
    pub fn upload_policy(&self) -> UploadPolicy {
        UploadPolicy { concurrent: self.compile.concurrent.unwrap_or(UploadPolicy::default().concurrent) }
    }

    /// Each configured agent's sandbox policy, by `(tenant, agent)`.
    pub fn agent_policies(&self) -> std::collections::HashMap<(String, String), AgentPolicy> {
        let mut policies = std::collections::HashMap::new();
        for (tenant, agents) in &self.agents {
            for (agent, entry) in agents {
                policies.insert((tenant.clone(), agent.clone()), entry.policy());
            }
        }
        policies
    }

    /// The server's limits, CORS origins and HTTP bounds.
    ///
    /// # Errors
    /// A bad value in `[http]` ([`HttpEntry::config`]) or `[mcp_endpoint]`
    /// ([`McpEndpointEntry::bounds`]).
    pub fn server_config(&self) -> CliResult<ServerConfig> {
        let default_limits = self.limits.over(&Limits::default());
        let tenant_limits =
            self.tenants.iter().map(|(tenant, limits)| (tenant.clone(), limits.over(&default_limits))).collect();
        Ok(ServerConfig {
            default_limits,
            tenant_limits,
            cors_origins: self.cors_origins.clone(),
            http: self.http.config()?,
            mcp_endpoint: self.mcp_endpoint.bounds()?,
            oci: self.oci.policy()?,
        })
    }
}

impl KeyEntry {
    fn record(&self) -> anyhow::Result<KeyRecord> {
        if self.tenant.is_empty() {
            bail!("`tenant` is empty");
        }
        let (hash, prefix) = match (&self.key, &self.key_sha256) {
            (Some(key), None) => {
                if key.is_empty() {
                    bail!("`key` is empty");
                }
                (subs_server::auth::hash_key(key), subs_server::auth::key_prefix(key))
            }
            (None, Some(hash)) => (checked_hash(hash)?, String::new()),
            (Some(_), Some(_)) => bail!("give `key` or `key_sha256`, not both"),
            (None, None) => bail!("give `key` (hashed on load) or `key_sha256`"),
        };
        Ok(KeyRecord { tenant: self.tenant.clone(), hash, prefix, name: self.name.clone(), created_ms: 0 })
    }
}

/// A key's hash as written in the file, checked and in lower case.
fn checked_hash(hash: &str) -> anyhow::Result<String> {
    let hash = hash.trim().to_ascii_lowercase();
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("`key_sha256` must be 64 hex digits (the SHA-256 of the key)");
    }
    Ok(hash)
}

/// The hash of an operator key given as is, if it is long enough.
fn admin_key_hash(key: &str) -> anyhow::Result<String> {
    let key = key.trim();
    if key.chars().count() < MIN_ADMIN_KEY {
        bail!("an operator key has at least {MIN_ADMIN_KEY} characters (`subs admin-key` makes one)");
    }
    Ok(subs_server::auth::hash_key(key))
}

/// The config file at `path`, or an empty one.
pub fn load(path: Option<&Path>) -> CliResult<ConfigFile> {
    path.map_or_else(|| Ok(ConfigFile::default()), ConfigFile::load)
}

/// The data directory: `flag` (flag or env), then the file's, then the
/// per-user default.
pub fn data_dir(flag: Option<&Path>, file: &ConfigFile) -> CliResult<PathBuf> {
    flag.map(Path::to_path_buf).or_else(|| file.data.clone()).or_else(default_data_dir).ok_or_else(|| {
        CliError::usage(anyhow!(
            "there is no per-user data directory (HOME is not set): pass --data DIR or set SUBS_DATA"
        ))
    })
}

/// The per-user data directory: `$XDG_DATA_HOME/subs` or
/// `~/.local/share/subs` (Linux and other Unixes),
/// `~/Library/Application Support/subs` (macOS), `%LOCALAPPDATA%\subs`
/// (Windows).
pub fn default_data_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = if cfg!(windows) {
        var("LOCALAPPDATA")
    } else if cfg!(target_os = "macos") {
        var("HOME").map(|home| home.join("Library").join("Application Support"))
    } else {
        // The XDG spec ignores a relative XDG_DATA_HOME.
        var("XDG_DATA_HOME").filter(|p| p.is_absolute()).or_else(|| var("HOME").map(|h| h.join(".local").join("share")))
    };
    base.map(|b| b.join("subs"))
}

/// The per-user cache directory: `$XDG_CACHE_HOME/subs` or
/// `~/.cache/subs` (Linux and other Unixes), `~/Library/Caches/subs`
/// (macOS), `%LOCALAPPDATA%\subs\cache` (Windows).
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if cfg!(windows) {
        var("LOCALAPPDATA").map(|base| base.join("subs").join("cache"))
    } else if cfg!(target_os = "macos") {
        var("HOME").map(|home| home.join("Library").join("Caches").join("subs"))
    } else {
        var("XDG_CACHE_HOME")
            .filter(|p| p.is_absolute())
            .or_else(|| var("HOME").map(|h| h.join(".cache")))
            .map(|b| b.join("subs"))
    }
}

/// The listen address: flag (or env), then the file's, then the default.
pub fn listen(flag: Option<&str>, file: &ConfigFile) -> String {
    flag.or(file.listen.as_deref()).unwrap_or(DEFAULT_LISTEN).to_owned()
}

/// The default model: flag (or env), then the file's, then the offline
/// model.
pub fn default_model(flag: Option<&str>, file: &ConfigFile) -> String {
    flag.or(file.default_model.as_deref()).unwrap_or(OFFLINE_MODEL).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ConfigFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn the_documented_example_parses() {
        let text = include_str!("../../../docs/configuration.md");
        let example = text.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("an example");
        let file = parse(example).unwrap();
        assert_eq!(file.key_records().unwrap().len(), 2);
        assert_eq!(file.admin_key_hashes(None).unwrap().len(), 1);
        let config = file.server_config().unwrap();
        assert_eq!(config.default_limits.max_sessions, Some(1000));
        let acme = config.limits("acme");
        assert_eq!(acme.max_sessions, Some(50), "the tenant's own");
        assert_eq!(acme.max_body_bytes, config.default_limits.max_body_bytes, "inherited from [limits]");
        assert_eq!(file.streams.limits().unwrap(), subs_engine::StreamLimits::default(), "the defaults, as shown");
        assert_eq!(config.http, HttpConfig::default(), "the defaults, as shown");
        assert_eq!(config.mcp_endpoint, McpBounds::default(), "the defaults, as shown");
        assert_eq!(config.default_limits.max_body_bytes_in_flight, Limits::default().max_body_bytes_in_flight);
    }

    #[test]
    fn sandbox_limits_come_from_limits_tenants_and_agents() {
        let file = parse(
            "private_hosts = [\"billing.internal\"]\n\
             [limits.sandbox]\nmemory_bytes = 1048576\ncpu_ms = 250\n\
             [tenants.acme.sandbox]\nwall_clock_ms = 500\nhttp_hosts = [\"api.example.com\"]\n\
             [agents.acme.scraper]\nmemory_bytes = 2097152\nhttp_hosts = [\"example.com:8443\"]\n",
        )
        .unwrap();
        let host = file.host_config().unwrap();
        assert_eq!(host.private_hosts, ["billing.internal"]);
        assert_eq!(host.limits.memory_bytes, 1 << 20);
        assert_eq!(host.limits.cpu, std::time::Duration::from_millis(250));
        assert_eq!(host.limits.wall_clock, SandboxLimits::default().wall_clock, "untouched");
        assert!(host.baseline_first, "the server accepts large uploads on baseline code unless told not to");
        let off = parse("[compile]\nbaseline_first = false\n").unwrap();
        assert!(!off.host_config().unwrap().baseline_first);
        let acme = &host.tenants["acme"];
        assert_eq!(acme.limits.wall_clock, Some(std::time::Duration::from_millis(500)));
        assert_eq!(acme.http_hosts.as_deref(), Some(&["api.example.com".to_owned()][..]));
        let scraper = &file.agent_policies()[&("acme".to_owned(), "scraper".to_owned())];
        assert_eq!(scraper.limits.memory_bytes, Some(2 << 20));

        let everyone = parse("[limits.sandbox]\nhttp_hosts = [\"example.com\"]\n").unwrap();
        assert!(everyone.host_config().unwrap_err().to_string().contains("per tenant"));
        assert!(parse("[limits.sandbox]\nmemory = 3\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn keys_are_hashed_or_taken_as_hashes() {
        let hash = subs_server::auth::hash_key("subs_abc");
        let file = parse(&format!(
            "[[keys]]\ntenant = \"a\"\nkey = \"subs_abc\"\n[[keys]]\ntenant = \"b\"\nkey_sha256 = \"{}\"\nname = \"ci\"\n",
            hash.to_uppercase()
        ))
        .unwrap();
        let keys = file.key_records().unwrap();
        assert_eq!((keys[0].tenant.as_str(), keys[0].hash.as_str()), ("a", hash.as_str()));
        assert_eq!((keys[1].tenant.as_str(), keys[1].hash.as_str()), ("b", hash.as_str()));
        assert_eq!(keys[1].name.as_deref(), Some("ci"));
        for bad in [
            "[[keys]]\ntenant = \"a\"\n",
            "[[keys]]\ntenant = \"a\"\nkey_sha256 = \"abc\"\n",
            "[[keys]]\ntenant = \"a\"\nkey = \"k\"\nkey_sha256 = \"abc\"\n",
            "[[keys]]\ntenant = \"\"\nkey = \"k\"\n",
        ] {
            let err = parse(bad).unwrap().key_records().unwrap_err();
            assert!(format!("{err}").starts_with("keys[0]"), "{bad}: {err}");
        }
    }

    #[test]
    fn read_bounds_take_what_the_file_sets() {
        let file = parse("[limits]\nmax_page_bytes = 1024\n[tenants.acme]\nmax_listing_scan_per_sec = 5\n").unwrap();
        let config = file.server_config().unwrap();
        let (acme, other) = (config.limits("acme"), config.limits("other"));
        assert_eq!((acme.max_page_bytes, acme.max_listing_scan_per_sec), (1024, 5));
        assert_eq!(
            (other.max_page_bytes, other.max_listing_scan_per_sec),
            (1024, Limits::default().max_listing_scan_per_sec)
        );
        assert_eq!(parse("").unwrap().server_config().unwrap().default_limits.max_page_bytes, 16 << 20);
    }

    #[test]
    fn session_bounds_take_what_the_file_sets() {
        let file = parse("[limits]\nmax_session_bytes = 1048576\n[tenants.acme]\nmax_session_reads = 1\n").unwrap();
        let config = file.server_config().unwrap();
        let limits = &config.default_limits;
        assert_eq!(
            (limits.max_session_bytes, limits.max_session_reads),
            (1 << 20, subs_engine::engine::DEFAULT_MAX_SESSION_READS)
        );
        let acme = config.limits("acme");
        assert_eq!((acme.max_session_bytes, acme.max_session_reads), (1 << 20, 1));
        let other = config.limits("other");
        assert_eq!(other.max_session_bytes, 1 << 20);
        let defaults = parse("").unwrap().server_config().unwrap();
        assert_eq!(defaults.default_limits.max_session_bytes, subs_engine::engine::DEFAULT_MAX_SESSION_BYTES);
    }

    #[test]
    fn spawn_bounds_and_recovery_take_what_the_file_sets() {
        let file = parse(
            "[limits]\nmax_spawns_per_turn = 3\nmax_tree_sessions = 9\n[tenants.acme]\nmax_sub_agent_depth = 1\n\
             [recovery]\nconcurrent = 4\n",
        )
        .unwrap();
        let config = file.server_config().unwrap();
        let defaults = subs_engine::engine::SpawnBounds::default();
        let limits = &config.default_limits;
        assert_eq!(
            (limits.max_spawns_per_turn, limits.max_sub_agent_depth, limits.max_tree_sessions),
            (3, defaults.max_sub_agent_depth, 9)
        );
        let acme = config.limits("acme");
        assert_eq!((acme.max_spawns_per_turn, acme.max_sub_agent_depth, acme.max_tree_sessions), (3, 1, 9));
        let mut engine = EngineConfig::default();
        file.recovery.apply(&mut engine).unwrap();
        assert_eq!(engine.resume_concurrency, 4);
        let zero = parse("[recovery]\nconcurrent = 0\n").unwrap().recovery.apply(&mut engine).unwrap_err();
        assert!(zero.to_string().contains("[recovery] concurrent"), "{zero}");
        assert!(parse("[recovery]\nsessions = 3\n").is_err(), "unknown keys are refused");
        assert!(parse("[limits]\nmax_spawns_per_turn = -1\n").is_err());
        // A configured price is never negative.
        let price = parse("[prices.\"a/b\"]\ninput = -1\noutput = 1\n").unwrap_err();
        assert!(price.contains("negative"), "{price}");
        assert!(parse("[prices.\"a/b\"]\ninput = nan\noutput = 1\n").is_err());
        assert!(parse("[limits]\nbudget = \"-5\"\n").unwrap_err().contains("negative"));
    }

    #[test]
    fn oci_settings_become_the_pull_policy_and_bad_ones_are_refused() {
        let file = parse(
            "[oci]\nallow_registries = [\"ghcr.io\", \"127.0.0.1:5000\"]\ninsecure = [\"127.0.0.1:5000\"]\n\
             pull_timeout_secs = 5\n[oci.credentials.\"ghcr.io\"]\nusername = \"ci\"\npassword = \"p\"\n",
        )
        .unwrap();
        let policy = file.oci.policy().unwrap();
        assert_eq!(policy.allow_registries, ["ghcr.io", "127.0.0.1:5000"]);
        assert_eq!(policy.deadline, std::time::Duration::from_secs(5));
        assert!(matches!(policy.credentials["ghcr.io"], subs_oci::Credentials::Basic { .. }));
        let none = parse("").unwrap().oci.policy().unwrap();
        assert!(none.allow_registries.is_empty(), "no registry unless the operator lists it");
        assert_eq!(none.deadline, subs_oci::DEFAULT_DEADLINE);
        for (text, says) in [
            ("[oci]\npull_timeout_secs = 0\n", "pull_timeout_secs"),
            ("[oci.credentials.\"ghcr.io\"]\ntoken = \"t\"\n", "not in `[oci] allow_registries`"),
            (
                "[oci]\nallow_registries = [\"ghcr.io\"]\n[oci.credentials.\"ghcr.io\"]\nusername = \"u\"\ntoken = \"t\"\n",
                "`username` and `password`, or `token`",
            ),
        ] {
            let error = parse(text).unwrap().oci.policy().unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn mcp_servers_limits_take_what_the_file_sets_over_the_defaults() {
        let file =
            parse("private_hosts = [\"127.0.0.1\"]\n[mcp_servers]\nmax_per_tenant = 3\nlist_ttl_secs = 2.5\n").unwrap();
        let limits = file.mcp_servers.limits(&file.private_hosts).unwrap();
        assert_eq!(limits.max_servers, 3);
        assert_eq!(limits.list_ttl, std::time::Duration::from_millis(2500));
        assert_eq!(limits.private_hosts, ["127.0.0.1"]);
        assert_eq!(limits.max_result_bytes, subs_engine::mcp::McpLimits::default().max_result_bytes);
        for bad in ["max_per_tenant = 0", "max_result_bytes = 0", "list_ttl_secs = 0", "list_ttl_secs = 86401"] {
            let err = parse(&format!("[mcp_servers]\n{bad}\n")).unwrap().mcp_servers.limits(&[]).unwrap_err();
            assert!(err.to_string().contains("`[mcp_servers]"), "{bad}: {err}");
        }
        assert!(parse("[mcp_servers]\nnope = 1\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn mcp_endpoint_bounds_take_what_the_file_sets_over_the_defaults() {
        let bounds = parse("[mcp_endpoint]\nmax_sessions_per_tenant = 3\nsession_idle_secs = 2.5\n")
            .unwrap()
            .mcp_endpoint
            .bounds()
            .unwrap();
        assert_eq!(bounds.max_sessions_per_tenant, 3);
        assert_eq!(bounds.session_idle, std::time::Duration::from_millis(2500));
        assert_eq!(bounds.max_calls_per_session, McpBounds::default().max_calls_per_session);
        assert_eq!(ConfigFile::default().mcp_endpoint.bounds().unwrap(), McpBounds::default());
        for bad in ["max_calls_per_session = 0", "elicitation_timeout_secs = 0", "session_idle_secs = 86401"] {
            let err = parse(&format!("[mcp_endpoint]\n{bad}\n")).unwrap().mcp_endpoint.bounds().unwrap_err();
            assert!(err.to_string().contains("`[mcp_endpoint]"), "{bad}: {err}");
        }
        assert!(parse("[mcp_endpoint]\nmax_sessions = 3\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn streams_take_what_the_file_sets_over_the_defaults() {
        let limits = parse("[streams]\nmax_delta_bytes = 1024\nmax_streams_per_tenant = 4\n").unwrap().streams.limits();
        let limits = limits.unwrap();
        assert_eq!((limits.max_delta_bytes, limits.max_streams_per_tenant), (1024, 4));
        let defaults = StreamLimits::default();
        assert_eq!(limits.subscriber_buffer_bytes, defaults.subscriber_buffer_bytes, "untouched");
        assert_eq!(ConfigFile::default().streams.limits().unwrap(), defaults);
        let zero = parse("[streams]\nsubscriber_buffer_bytes = 0\n").unwrap().streams.limits().unwrap_err();
        assert!(zero.to_string().contains("subscriber_buffer_bytes"), "{zero}");
        assert!(parse("[streams]\nmax_deltas = 3\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn http_takes_what_the_file_sets_over_the_defaults_and_refuses_nonsense() {
        let file = parse(
            "[http]\nheader_read_timeout_secs = 2.5\nmax_connections = 100\nmax_connections_per_address = 500\n\
             max_json_values = 10\n[limits]\nmax_body_bytes_in_flight = 1000\n\
             [tenants.acme]\nmax_body_bytes_in_flight = 2000\n",
        )
        .unwrap();
        let config = file.server_config().unwrap();
        assert_eq!(config.http.header_read_timeout, std::time::Duration::from_millis(2500));
        assert_eq!(config.http.max_connections, 100);
        assert_eq!(config.http.max_connections_per_address, 100, "never more than the server's cap");
        assert_eq!(config.http.max_json_values, 10);
        assert_eq!(config.http.max_head_bytes, HttpConfig::default().max_head_bytes, "untouched");
        assert_eq!(config.default_limits.max_body_bytes_in_flight, 1000);
        assert_eq!(config.limits("acme").max_body_bytes_in_flight, 2000);
        for (bad, named) in [
            ("header_read_timeout_secs = 0", "header_read_timeout_secs"),
            ("body_read_timeout_secs = -1", "body_read_timeout_secs"),
            ("body_read_timeout_secs = nan", "body_read_timeout_secs"),
            ("max_connections = 0", "max_connections"),
            ("max_head_bytes = 4096", "at least 8192"),
            ("max_json_depth = 129", "at most 128"),
            ("max_body_bytes_in_flight = 0", "max_body_bytes_in_flight"),
        ] {
            let err = parse(&format!("[http]\n{bad}\n")).unwrap().server_config().unwrap_err();
            assert!(err.to_string().contains(named), "{bad}: {err}");
        }
        assert!(parse("[http]\nmax_connection = 3\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn timeouts_set_the_engine_defaults_and_refuse_nonsense() {
        let mut config = EngineConfig::default();
        parse("[timeouts]\ncall_secs = 2.5\n").unwrap().timeouts.apply(&mut config).unwrap();
        assert_eq!(config.call_timeout, std::time::Duration::from_millis(2500));
        assert_eq!(config.decision_timeout, EngineConfig::default().decision_timeout, "untouched");
        for bad in ["0", "-1", "nan", "100000"] {
            let file = parse(&format!("[timeouts]\ndecision_secs = {bad}\n")).unwrap();
            let err = file.timeouts.apply(&mut config).unwrap_err();
            assert!(err.to_string().contains("`[timeouts] decision_secs`"), "{err}");
        }
        assert!(parse("[timeouts]\ntool_secs = 3\n").is_err(), "unknown keys are refused");
        assert_eq!(config.session_linger, std::time::Duration::from_secs(1), "a second unless set");
        parse("[timeouts]\nlinger_secs = 0.05\n").unwrap().timeouts.apply(&mut config).unwrap();
        assert_eq!(config.session_linger, std::time::Duration::from_millis(50));
        for bad in ["-1", "nan", "3601"] {
            let file = parse(&format!("[timeouts]\nlinger_secs = {bad}\n")).unwrap();
            let err = file.timeouts.apply(&mut config).unwrap_err();
            assert!(err.to_string().contains("`[timeouts] linger_secs`"), "{err}");
        }
        assert_eq!(config.contained_hold, std::time::Duration::from_millis(5), "5 ms unless set");
        parse("[timeouts]\ncontained_hold_ms = 0.5\n").unwrap().timeouts.apply(&mut config).unwrap();
        assert_eq!(config.contained_hold, std::time::Duration::from_micros(500));
        for bad in ["-1", "nan", "1001"] {
            let file = parse(&format!("[timeouts]\ncontained_hold_ms = {bad}\n")).unwrap();
            let err = file.timeouts.apply(&mut config).unwrap_err();
            assert!(err.to_string().contains("`[timeouts] contained_hold_ms`"), "{err}");
        }
    }

    #[test]
    fn operator_keys_come_from_the_file_and_the_flag() {
        let key = "subs_admin_0123456789abcdef";
        let hash = subs_server::auth::hash_key(key);
        let hashed = parse(&format!("[admin]\nkey_sha256 = \"{}\"\n", hash.to_uppercase())).unwrap();
        assert_eq!(hashed.admin_key_hashes(None).unwrap(), std::slice::from_ref(&hash));
        let plain = parse(&format!("[admin]\nkey = \"{key}\"\n")).unwrap();
        assert_eq!(plain.admin_key_hashes(Some(key)).unwrap(), [hash.clone(), hash]);
        assert!(ConfigFile::default().admin_key_hashes(None).unwrap().is_empty());
        let short = ConfigFile::default().admin_key_hashes(Some("secret")).unwrap_err();
        assert!(short.to_string().contains("at least 16"), "{short}");
        let both = parse(&format!("[admin]\nkey = \"{key}\"\nkey_sha256 = \"00\"\n")).unwrap();
        assert!(both.admin_key_hashes(None).is_err());
        let bad = parse("[admin]\nkey_sha256 = \"abc\"\n").unwrap().admin_key_hashes(None).unwrap_err();
        assert!(bad.to_string().contains("64 hex digits"), "{bad}");
        assert!(parse("[admin]\nkeys = \"x\"\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn unknown_settings_are_refused() {
        let err = parse("listen = \"127.0.0.1:1\"\nlisten_addr = \"x\"\n").unwrap_err();
        assert!(err.contains("listen_addr"), "{err}");
        let err = parse("[limits]\nmax_session = 3\n").unwrap_err();
        assert!(err.contains("max_session"), "{err}");
    }

    #[test]
    fn flags_win_over_the_file_which_wins_over_defaults() {
        let file = parse("listen = \"0.0.0.0:1\"\ndefault_model = \"x/y\"\ndata = \"/srv/subs\"\n").unwrap();
        assert_eq!(listen(Some("127.0.0.1:2"), &file), "127.0.0.1:2");
        assert_eq!(listen(None, &file), "0.0.0.0:1");
        assert_eq!(listen(None, &ConfigFile::default()), DEFAULT_LISTEN);
        assert_eq!(default_model(None, &file), "x/y");
        assert_eq!(default_model(None, &ConfigFile::default()), OFFLINE_MODEL);
        assert_eq!(data_dir(Some(Path::new("/d")), &file).unwrap(), Path::new("/d"));
        assert_eq!(data_dir(None, &file).unwrap(), Path::new("/srv/subs"));
    }

    #[test]
    fn the_store_is_redb_unless_a_postgres_url_is_given() {
        assert!(matches!(store(None, &ConfigFile::default()).unwrap(), StoreChoice::Redb));
        assert!(matches!(store(Some(""), &ConfigFile::default()).unwrap(), StoreChoice::Redb), "an empty SUBS_STORE");
        let file = parse(
            "[store]\nurl = \"postgres://file@db/subs\"\nlease_secs = 20\nrenew_secs = 5\nnode = \"eu-1\"\npool = 3\n",
        )
        .unwrap();
        // The flag (or SUBS_STORE, which clap reads when the flag is
        // absent) wins over the file; the file's other settings still
        // apply.
        let StoreChoice::Postgres { url, options } = store(Some("postgresql://flag@db/subs"), &file).unwrap() else {
            panic!("a PostgreSQL store")
        };
        assert_eq!(url, "postgresql://flag@db/subs");
        assert_eq!(options.shared.lease, std::time::Duration::from_secs(20));
        assert_eq!(options.shared.renew, std::time::Duration::from_secs(5));
        assert_eq!((options.node.as_deref(), options.pool), (Some("eu-1"), 3));
        let StoreChoice::Postgres { url, options } = store(None, &file).unwrap() else { panic!("a PostgreSQL store") };
        assert_eq!(url, "postgres://file@db/subs");
        assert_eq!(options.node.as_deref(), Some("eu-1"));
        let StoreChoice::Postgres { options, .. } = store(Some("postgres://h/db"), &ConfigFile::default()).unwrap()
        else {
            panic!("a PostgreSQL store")
        };
        assert_eq!(options.shared, SharedSettings::default());
        assert_eq!((options.node, options.pool), (None, PgOptions::default().pool));
    }

    #[test]
    fn store_settings_are_checked() {
        let err = |text: &str, flag: Option<&str>| store(flag, &parse(text).unwrap()).unwrap_err().to_string();
        let url = "[store]\nurl = \"postgres://u:secret@db/subs\"\n";
        let half = err(&format!("{url}lease_secs = 4\nrenew_secs = 3\n"), None);
        assert!(half.contains("at most half"), "{half}");
        let zero = err(&format!("{url}renew_secs = 0\n"), None);
        assert!(zero.contains("`[store] renew_secs`"), "{zero}");
        let nan = err(&format!("{url}lease_secs = nan\n"), None);
        assert!(nan.contains("`[store] lease_secs`"), "{nan}");
        let pool = err(&format!("{url}pool = 0\n"), None);
        assert!(pool.contains("`[store] pool`"), "{pool}");
        let node = err(&format!("{url}node = \"\"\n"), None);
        assert!(node.contains("`[store] node`"), "{node}");
        let orphan = err("[store]\nlease_secs = 30\npool = 2\n", None);
        assert!(orphan.contains("`[store] lease_secs`, `pool`") && orphan.contains("url"), "{orphan}");
        let mysql = err("", Some("mysql://u:secret@db/subs"));
        assert!(mysql.contains("mysql://u:***@db/subs") && !mysql.contains("secret"), "{mysql}");
        assert!(parse("[store]\nuri = \"postgres://db\"\n").is_err(), "unknown keys are refused");
    }

    #[test]
    fn providers_sit_at_the_top_level_as_in_the_models_doc() {
        let text = include_str!("../../../docs/models.md");
        let section = text.split("### The config file").nth(1).expect("the section");
        let example = section.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).expect("an example");
        let config = parse(example).unwrap().providers_config();
        let names: Vec<&str> = config.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["openai", "local"]);
        assert_eq!((config.max_tokens, config.read_timeout_secs), (4096, 300.0));
        assert!(config.prices.contains_key("local/qwen3-8b"));
        let defaults = ConfigFile::default().providers_config();
        assert_eq!(defaults, subs_engine::model::ProvidersConfig::default());
    }

    #[test]
    fn a_relative_data_dir_is_next_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subs.toml");
        std::fs::write(&path, "data = \"state\"\n").unwrap();
        let file = ConfigFile::load(&path).unwrap();
        assert_eq!(file.data.unwrap(), dir.path().join("state"));
    }
}
