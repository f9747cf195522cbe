//! Tenants' MCP servers as tool sources: the registry of servers each
//! tenant registered, one [`subs_mcp::Client`] (the server's era learnt once,
//! and for a legacy server one MCP session) per (tenant, server), and the
//! core's [`ToolSources`] over them.
//!
//! Tools are offered to the model as `<server>__<tool>`. Server names are
//! 1-32 letters, digits and `-` (no `_`), so the first `__` of an offered
//! name ends the server's name. Providers take tool names of 1-64
//! characters of `[A-Za-z0-9_-]`: other characters of a tool's name
//! become `_`; a tool whose offered name would be longer than 64 bytes,
//! or equal to one an earlier tool of the same server's list took, is not
//! offered (the registry's description of the server lists it with the
//! reason, and the log says it once per listing).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value};
use subs_core::tool_sources::{ProgressSink, SourceCall, SourceOutcome, SourceProgress, ToolSources};
use subs_core::worker::BoxFuture;
use subs_mcp::guard::{PrivateHosts, UrlRefused, check_url};
use subs_mcp::wire::{ContentBlock, Tool};
use subs_mcp::{Client, ClientConfig, McpError};
use subs_protocol::{AgentTool, McpServerUse};
use subs_store::{Batch, McpServerRecord, Op, Store, StoreError};

/// The separator between a server's name and its tool's in an offered
/// name.
pub const SEPARATOR: &str = "__";

/// The longest tool name providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// The longest server name.
pub const MAX_SERVER_NAME: usize = 32;

/// The bounds on tenants' MCP servers.
#[derive(Debug, Clone)]
pub struct McpLimits {
    /// Servers one tenant may register.
    pub max_servers: usize,
    /// The most bytes of one answer (a tool list page, a call's result).
    pub max_result_bytes: usize,
    /// How long a server's tool list is used before it is listed again.
    pub list_ttl: Duration,
    /// The most tools kept of one server.
    pub max_tools: usize,
    /// The most headers of one registration, and bytes of them all.
    pub max_headers: usize,
    /// The most bytes of a registration's headers, names and values.
    pub max_header_bytes: usize,
    /// The longest URL.
    pub max_url_bytes: usize,
    /// Hosts the operator lets servers be at although they are not public
    /// (`private_hosts`).
    pub private_hosts: Vec<String>,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_servers: 16,
            max_result_bytes: 1 << 20,
            list_ttl: Duration::from_secs(300),
            max_tools: 128,
            max_headers: 16,
            max_header_bytes: 8 << 10,
            max_url_bytes: 2048,
            private_hosts: Vec::new(),
        }
    }
}

/// Why a registration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The name does not fit the rule.
    #[error("an MCP server name is 1-{MAX_SERVER_NAME} ASCII letters, digits and `-`, not {0:?}")]
    Name(String),
    /// The URL is refused.
    #[error("MCP server `{name}`: {error}")]
    Url {
        /// The server.
        name: String,
        /// Why.
        error: UrlRefused,
    },
    /// The URL is too long.
    #[error("MCP server `{name}`: the URL is longer than {max} bytes")]
    UrlTooLong {
        /// The server.
        name: String,
        /// The bound.
        max: usize,
    },
    /// The headers are not valid, or too many or too large.
    #[error("MCP server `{name}`: {error}")]
    Headers {
        /// The server.
        name: String,
        /// Why.
        error: String,
    },
    /// The store could not keep it.
    #[error("the MCP server could not be stored: {0}")]
    Store(StoreError),
    /// The tenant has as many servers as it may.
    #[error("the tenant has {max} MCP servers, as many as it may register; remove one first")]
    TooMany {
        /// The bound.
        max: usize,
    },
}

/// A tool of a server, as the registry shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ListedTool {
    /// Its name on the server.
    pub name: String,
    /// The name offered to the model; `None` when it is not offered.
    pub offered_as: Option<String>,
    /// Why it is not offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input schema, shared with the tools offered from it.
    pub input_schema: Arc<Value>,
    /// Its output schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Arc<Value>>,
}

/// A registered server, as `GET /v1/mcp-servers` shows it: never its
/// headers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServerInfo {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// `ready` (its tools listed), `error` (the last exchange failed), or
    /// `new` (not reached yet).
    pub status: &'static str,
    /// How many tools it offers, once listed.
    pub tool_count: Option<usize>,
    /// The last exchange's error, if it failed.
    pub last_error: Option<String>,
}

struct Server {
    name: String,
    url: String,
    headers: Vec<(String, String)>,
    client: Client,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Offered name → the tool on the server.
    offered: Option<Arc<Offered>>,
    last_error: Option<String>,
    /// When a listing last failed, and how.
    failed_listing: Option<(std::time::Instant, McpError)>,
}

/// How long a failed listing is answered from memory: a server that is
/// down costs each delivery of its agents' sessions nothing for this long,
/// instead of a listing's timeout each.
const LISTING_BACKOFF: Duration = Duration::from_secs(5);

struct Offered {
    source: Arc<Vec<Tool>>,
    tools: Vec<ListedTool>,
    by_name: HashMap<String, Tool>,
}

impl Server {
    fn record_error(&self, error: &str) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).last_error = Some(error.to_owned());
    }

    /// The server's tools, as offered, listing them when the client's
    /// cache is stale.
    async fn offered(&self) -> Result<Arc<Offered>, McpError> {
        let recent = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.failed_listing.as_ref().filter(|(at, _)| at.elapsed() < LISTING_BACKOFF).map(|(_, e)| e.clone())
        };
        if let Some(error) = recent {
            return Err(error);
        }
        let tools = match self.client.tools().await {
            Ok(tools) => tools,
            Err(e) => {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.last_error = Some(e.to_string());
                state.failed_listing = Some((std::time::Instant::now(), e.clone()));
                return Err(e);
            }
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.failed_listing = None;
        // The client hands out the same list until it lists again.
        if let Some(offered) = &state.offered
            && Arc::ptr_eq(&offered.source, &tools)
        {
            return Ok(offered.clone());
        }
        state.last_error = None;
        let offered = Arc::new(offer(&self.name, tools));
        for skipped in offered.tools.iter().filter(|t| t.skipped.is_some()) {
            tracing::warn!(server = %self.name, tool = %skipped.name, reason = skipped.skipped.as_deref().unwrap_or_default(), "an MCP tool is not offered");
        }
        state.offered = Some(offered.clone());
        Ok(offered)
    }
}

/// The offered names of a server's tools (see the module docs).
fn offer(server: &str, source: Arc<Vec<Tool>>) -> Offered {
    let tools = source.as_slice();
    let mut by_name: HashMap<String, Tool> = HashMap::new();
    let mut listed = Vec::new();
    for tool in tools {
        let clean: String = tool
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
            .collect();
        let offered = format!("{server}{SEPARATOR}{clean}");
        let skipped = if tool.name.is_empty() {
            Some(format!("MCP server `{server}` lists a tool without a name"))
        } else if offered.len() > MAX_TOOL_NAME {
            Some(format!(
                "MCP server `{server}` tool `{}`: its offered name `{offered}` is longer than {MAX_TOOL_NAME} bytes",
                tool.name
            ))
        } else {
            by_name.get(&offered).map(|first| {
                format!(
                    "MCP server `{server}` tool `{}`: its offered name `{offered}` collides with tool `{}`'s, which \
                     keeps it",
                    tool.name, first.name
                )
            })
        };
        if skipped.is_none() {
            by_name.insert(offered.clone(), tool.clone());
        }
        listed.push(ListedTool {
            name: tool.name.clone(),
            offered_as: skipped.is_none().then_some(offered),
            skipped,
            description: tool.description.clone(),
            input_schema: Arc::new(tool.input_schema.clone()),
            output_schema: tool.output_schema.clone().map(Arc::new),
        });
    }
    Offered { source: source.clone(), tools: listed, by_name }
}

/// Every tenant's MCP servers; see the [module docs](self).
pub struct McpServers {
    store: Option<Arc<dyn Store>>,
    http: reqwest::Client,
    limits: McpLimits,
    private: PrivateHosts,
    servers: Mutex<HashMap<(String, String), Arc<Server>>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// Whether `name` may name a server.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_SERVER_NAME && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl McpServers {
    /// A registry with no servers.
    pub fn new(limits: McpLimits) -> Result<Self, String> {
        let private = PrivateHosts::new(&limits.private_hosts);
        let http = subs_mcp::guard::client(&private).map_err(|e| format!("the MCP client could not be built: {e}"))?;
        Ok(Self { store: None, http, limits, private, servers: Mutex::new(HashMap::new()) })
    }

    /// Keeps registrations in `store` (and reads them with
    /// [`sync`](Self::sync)).
    #[must_use]
    pub fn with_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Makes the registry what the store holds: servers registered (or
    /// changed) elsewhere are added, those removed are dropped. Called at
    /// start, and when another node sharing the store changed records.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let Some(store) = &self.store else { return Ok(()) };
        let records = store.mcp_servers().await?;
        let stored: std::collections::HashSet<(String, String)> =
            records.iter().map(|r| (r.tenant.clone(), r.name.clone())).collect();
        let gone: Vec<Arc<Server>> = {
            let mut servers = self.servers();
            let gone = servers.keys().filter(|k| !stored.contains(*k)).cloned().collect::<Vec<_>>();
            gone.into_iter().filter_map(|k| servers.remove(&k)).collect()
        };
        for server in gone {
            server.client.close().await;
        }
        for record in records {
            let same = self
                .server(&record.tenant, &record.name)
                .is_some_and(|s| s.url == record.url && s.headers == record.headers);
            if same {
                continue;
            }
            match self.client(&record.name, &record.url, &record.headers) {
                Ok(server) => {
                    let old = self.servers().insert((record.tenant.clone(), record.name.clone()), server);
                    if let Some(old) = old {
                        old.client.close().await;
                    }
                }
                Err(error) => {
                    tracing::warn!(tenant = %record.tenant, server = %record.name, %error, "a stored MCP server was not loaded");
                }
            }
        }
        Ok(())
    }

    fn client(&self, name: &str, url: &str, headers: &[(String, String)]) -> Result<Arc<Server>, RegisterError> {
        let parsed =
            check_url(url, &self.private).map_err(|error| RegisterError::Url { name: name.to_owned(), error })?;
        let config = ClientConfig {
            max_result_bytes: self.limits.max_result_bytes,
            list_ttl: self.limits.list_ttl,
            max_tools: self.limits.max_tools,
            ..ClientConfig::default()
        };
        let client = Client::new(self.http.clone(), parsed, headers, config)
            .map_err(|error| RegisterError::Headers { name: name.to_owned(), error })?;
        Ok(Arc::new(Server {
            name: name.to_owned(),
            url: url.to_owned(),
            headers: headers.to_vec(),
            client,
            state: Mutex::new(State::default()),
        }))
    }

    /// The registry's bounds.
    pub fn limits(&self) -> &McpLimits {
        &self.limits
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Server>>> {
        self.servers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks a registration without connecting anywhere: the name, the
    /// URL (its host against the rule), the headers, and the tenant's
    /// count.
    pub fn check(
        &self,
        tenant: &str,
        name: &str,
        url: &str,
        headers: &[(String, String)],
    ) -> Result<reqwest::Url, RegisterError> {
        if !valid_server_name(name) {
            return Err(RegisterError::Name(name.to_owned()));
        }
        if url.len() > self.limits.max_url_bytes {
            return Err(RegisterError::UrlTooLong { name: name.to_owned(), max: self.limits.max_url_bytes });
        }
        let parsed =
            check_url(url, &self.private).map_err(|error| RegisterError::Url { name: name.to_owned(), error })?;
        let bytes: usize = headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        if headers.len() > self.limits.max_headers || bytes > self.limits.max_header_bytes {
            return Err(RegisterError::Headers {
                name: name.to_owned(),
                error: format!(
                    "at most {} headers of {} bytes in all",
                    self.limits.max_headers, self.limits.max_header_bytes
                ),
            });
        }
        let servers = self.servers();
        let count = servers.keys().filter(|(t, _)| t == tenant).count();
        if count >= self.limits.max_servers && !servers.contains_key(&(tenant.to_owned(), name.to_owned())) {
            return Err(RegisterError::TooMany { max: self.limits.max_servers });
        }
        Ok(parsed)
    }

    /// Registers (or replaces) `tenant`'s server `name`; nothing is sent
    /// to it until a tool list or call needs it. A replaced server's MCP
    /// session is closed.
    pub async fn put(
        &self,
        tenant: &str,
        name: &str,
        url: &str,
        headers: &[(String, String)],
    ) -> Result<(), RegisterError> {
        self.check(tenant, name, url, headers)?;
        let server = self.client(name, url, headers)?;
        if let Some(store) = &self.store {
            let record = McpServerRecord {
                tenant: tenant.to_owned(),
                name: name.to_owned(),
                url: url.to_owned(),
                headers: headers.to_vec(),
                updated_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            };
            store.commit(Batch::of([Op::PutMcpServer(record)])).await.map_err(RegisterError::Store)?;
        }
        let old = self.servers().insert((tenant.to_owned(), name.to_owned()), server);
        if let Some(old) = old {
            old.client.close().await;
        }
        Ok(())
    }

    /// Removes `tenant`'s server `name`, closing its MCP session; `false`
    /// when there was none.
    pub async fn remove(&self, tenant: &str, name: &str) -> Result<bool, StoreError> {
        if self.server(tenant, name).is_none() {
            return Ok(false);
        }
        if let Some(store) = &self.store {
            let op = Op::DeleteMcpServer { tenant: tenant.to_owned(), name: name.to_owned() };
            store.commit(Batch::of([op])).await?;
        }
        let old = self.servers().remove(&(tenant.to_owned(), name.to_owned()));
        if let Some(old) = &old {
            old.client.close().await;
        }
        Ok(old.is_some())
    }

    fn info(server: &Server) -> ServerInfo {
        let state = server.state.lock().unwrap_or_else(PoisonError::into_inner);
        let tool_count = state.offered.as_ref().map(|o| o.by_name.len());
        let status = match (&state.last_error, tool_count) {
            (Some(_), _) => "error",
            (None, Some(_)) => "ready",
            (None, None) => "new",
        };
        ServerInfo {
            name: server.name.clone(),
            url: server.url.clone(),
            status,
            tool_count,
            last_error: state.last_error.clone(),
        }
    }

    /// `tenant`'s servers, by name.
    pub fn list(&self, tenant: &str) -> Vec<ServerInfo> {
        let servers: Vec<Arc<Server>> =
            self.servers().iter().filter(|((t, _), _)| t == tenant).map(|(_, s)| s.clone()).collect();
        let mut infos: Vec<ServerInfo> = servers.iter().map(|s| Self::info(s)).collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        infos
    }

    /// `tenant`'s server `name` with its tools (listed now unless cached);
    /// `None` when there is no such server. A listing that fails leaves
    /// the tools out and the error in `last_error`.
    pub async fn describe(&self, tenant: &str, name: &str) -> Option<(ServerInfo, Vec<ListedTool>)> {
        let server = self.server(tenant, name)?;
        let tools = server.offered().await.map(|o| o.tools.clone()).unwrap_or_default();
        Some((Self::info(&server), tools))
    }

    fn server(&self, tenant: &str, name: &str) -> Option<Arc<Server>> {
        self.servers().get(&(tenant.to_owned(), name.to_owned())).cloned()
    }
}

impl ToolSources for McpServers {
    fn tools<'a>(&'a self, tenant: &'a str, uses: &'a [McpServerUse]) -> BoxFuture<'a, Vec<AgentTool>> {
        Box::pin(async move {
            let mut tools = Vec::new();
            for use_ in uses {
                let Some(server) = self.server(tenant, &use_.server) else {
                    tracing::warn!(tenant, server = %use_.server, "an agent names an MCP server the tenant has not registered");
                    continue;
                };
                let offered = match server.offered().await {
                    Ok(offered) => offered,
                    Err(error) => {
                        tracing::warn!(tenant, server = %use_.server, %error, "an MCP server's tools could not be listed");
                        continue;
                    }
                };
                for listed in &offered.tools {
                    let Some(name) = &listed.offered_as else { continue };
                    if use_.tools.as_ref().is_some_and(|wanted| !wanted.contains(&listed.name)) {
                        continue;
                    }
                    tools.push(AgentTool {
                        name: name.clone(),
                        description: listed.description.clone(),
                        input: Some(Arc::clone(&listed.input_schema).into()),
                        output: listed.output_schema.clone().map(Into::into),
                        handler: None,
                    });
                }
            }
            tools
        })
    }

    fn call(&self, call: SourceCall, progress: ProgressSink) -> BoxFuture<'_, SourceOutcome> {
        Box::pin(async move {
            let Some((server_name, _)) = call.name.split_once(SEPARATOR) else {
                return failed(format!("`{}` is not the name of an MCP server's tool", call.name), false);
            };
            let Some(server) = self.server(&call.tenant, server_name) else {
                return failed(format!("MCP server `{server_name}` is not registered (tool `{}`)", call.name), false);
            };
            let offered = match server.offered().await {
                Ok(offered) => offered,
                Err(error) => {
                    return failed(
                        format!("MCP server `{server_name}`: its tools could not be listed: {error}"),
                        error.is_retryable(),
                    );
                }
            };
            let Some(tool) = offered.by_name.get(&call.name).cloned() else {
                return failed(format!("MCP server `{server_name}` offers no tool `{}`", call.name), false);
            };
            let arguments = match serde_json::from_str::<Value>(&call.arguments) {
                Ok(Value::Object(map)) => map,
                Ok(Value::Null) => Map::new(),
                _ => {
                    return failed(
                        format!("MCP server `{server_name}` tool `{}`: the arguments are not a JSON object", tool.name),
                        false,
                    );
                }
            };
            let forward = |p: subs_mcp::wire::ProgressParams| {
                progress(SourceProgress { progress: p.progress, total: p.total, message: p.message });
            };
            match server.client.call_tool(&tool.name, arguments, &forward).await {
                Ok(result) => {
                    server.state.lock().unwrap_or_else(PoisonError::into_inner).last_error = None;
                    outcome(server_name, &tool, result)
                }
                Err(error) => {
                    let text = format!("MCP server `{server_name}` tool `{}`: {error}", tool.name);
                    server.record_error(&text);
                    tracing::info!(tenant = %call.tenant, session = %call.session, call = %call.call_id, %text, "an MCP tool call failed");
                    failed(text, error.is_retryable())
                }
            }
        })
    }
}

fn failed(error: String, retryable: bool) -> SourceOutcome {
    SourceOutcome::Failed { error, retryable, code: None }
}

/// A call's result as the tool message's content: its structured content
/// when the tool has an output schema (checked against it by the loop),
/// else its text when every block is text, else the content blocks as
/// JSON. `isError` fails the call (not retried) with the result's text.
fn outcome(server: &str, tool: &Tool, result: subs_mcp::wire::CallToolResult) -> SourceOutcome {
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if result.is_error {
        let why = if text.is_empty() { "no reason given".to_owned() } else { text.join("\n") };
        return failed(format!("MCP server `{server}` tool `{}` failed: {why}", tool.name), false);
    }
    if let Some(structured) = result.structured_content {
        return SourceOutcome::Ok(structured);
    }
    if tool.output_schema.is_some() {
        return failed(
            format!(
                "MCP server `{server}` tool `{}` has an output schema but returned no structuredContent",
                tool.name
            ),
            false,
        );
    }
    if text.len() == result.content.len() {
        return SourceOutcome::Ok(Value::String(text.join("\n")));
    }
    SourceOutcome::Ok(serde_json::json!({"content": result.content}))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str) -> Tool {
        Tool {
            name: name.to_owned(),
            title: None,
            description: None,
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        }
    }

    #[test]
    fn names_that_do_not_fit_or_collide_are_not_offered_and_say_why() {
        let long = "x".repeat(61);
        let offered = offer("gh", Arc::new(vec![tool("a.b"), tool("a_b"), tool(&long), tool("ok")]));
        let names: Vec<_> = offered.tools.iter().map(|t| t.offered_as.clone()).collect();
        assert_eq!(names, [Some("gh__a_b".to_owned()), None, None, Some("gh__ok".to_owned())]);
        let collided = offered.tools[1].skipped.as_deref().unwrap();
        assert!(collided.contains("`gh`") && collided.contains("`a_b`") && collided.contains("collides"), "{collided}");
        assert!(offered.tools[2].skipped.as_deref().unwrap().contains("longer than 64"));
        assert_eq!(offered.by_name["gh__a_b"].name, "a.b");
    }

    #[test]
    fn server_names_leave_the_separator_unambiguous() {
        assert!(valid_server_name("github-2"));
        assert!(!valid_server_name("git_hub"));
        assert!(!valid_server_name(""));
        assert!(!valid_server_name(&"a".repeat(33)));
    }
}
