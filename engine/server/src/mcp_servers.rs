//! The MCP server routes: a tenant registers the MCP servers whose tools
//! its agents may use (`PUT /v1/mcp-servers/{name}`), lists them, reads
//! one with its tools, and removes one.
//!
//! The registry itself is the engine's ([`subs_engine::mcp`]): a server's
//! headers (its credentials) are kept there and sent to it, never
//! returned. The registry reaches the routes as a request extension
//! ([`serve_with_mcp`](crate::serve_with_mcp)); a server started without
//! one answers these routes with 503.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use subs_engine::mcp::{ListedTool, McpServers, RegisterError, ServerInfo};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Tenant;
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};

/// The body of `PUT /v1/mcp-servers/{name}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerBody {
    /// The server's Streamable HTTP endpoint.
    pub url: String,
    /// Headers sent with every request to it (its credentials, say):
    /// stored, never returned.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// A registered MCP server: never its headers.
#[derive(Debug, Serialize, ToSchema)]
pub struct McpServerView {
    /// Its name; its tools are offered as `<name>__<tool>`.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// `new` (not reached yet), `ready` (its tools listed) or `error`
    /// (the last exchange failed; see `last_error`).
    pub status: String,
    /// How many tools it offers, once listed.
    pub tool_count: Option<usize>,
    /// What the last failed exchange said.
    pub last_error: Option<String>,
    /// Its tools (`GET /v1/mcp-servers/{name}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<McpToolView>>,
}

/// One of a server's tools.
#[derive(Debug, Serialize, ToSchema)]
pub struct McpToolView {
    /// Its name on the server.
    pub name: String,
    /// The name the model sees; absent when it is not offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_as: Option<String>,
    /// Why it is not offered (a name too long, or colliding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input schema.
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
    /// Its output schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
}

fn view(info: ServerInfo, tools: Option<Vec<ListedTool>>) -> McpServerView {
    McpServerView {
        name: info.name,
        url: info.url,
        status: info.status.to_owned(),
        tool_count: info.tool_count,
        last_error: info.last_error,
        tools: tools.map(|tools| {
            tools
                .into_iter()
                .map(|t| McpToolView {
                    name: t.name,
                    offered_as: t.offered_as,
                    skipped: t.skipped,
                    description: t.description,
                    input_schema: std::sync::Arc::unwrap_or_clone(t.input_schema),
                    output_schema: t.output_schema.map(std::sync::Arc::unwrap_or_clone),
                })
                .collect()
        }),
    }
}

fn registry(extension: Option<Extension<Arc<McpServers>>>) -> Result<Arc<McpServers>, ApiError> {
    extension
        .map(|Extension(servers)| servers)
        .ok_or_else(|| ApiError::unavailable("this server has no MCP client (start it with `subs serve`)"))
}

fn refused(error: RegisterError) -> ApiError {
    match error {
        RegisterError::Name(_) => ApiError::invalid("name", error.to_string()),
        RegisterError::Url { .. } | RegisterError::UrlTooLong { .. } => ApiError::invalid("url", error.to_string()),
        RegisterError::Headers { .. } => ApiError::invalid("headers", error.to_string()),
        RegisterError::Store(e) => ApiError::unavailable(format!("the MCP server could not be stored: {e}")),
        RegisterError::TooMany { .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "mcp_server_limit", error.to_string())
        }
    }
}

/// Registers (or replaces) an MCP server of the tenant. The URL's host is
/// checked before anything connects to it; the server is first reached
/// when an agent lists or calls its tools, or `GET` reads it.
#[utoipa::path(
    put,
    path = "/v1/mcp-servers/{name}",
    params(("name" = String, Path, description = "1-32 ASCII letters, digits and `-`")),
    request_body = McpServerBody,
    responses(
        (status = 200, description = "Registered", body = McpServerView),
        (status = 400, description = "A bad name, URL (a host that is not public, unless the operator allows it) or headers", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 429, description = "The tenant has as many servers as it may (`mcp_server_limit`)", body = ErrorBody),
    ),
    tag = "mcp-servers"
)]
pub async fn put(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    servers: Option<Extension<Arc<McpServers>>>,
    Path(name): Path<String>,
    body: Incoming,
) -> Result<Json<McpServerView>, ApiError> {
    let servers = registry(servers)?;
    let limits = state.config.limits(&tenant).clone();
    let McpServerBody { url, headers } = body::json(body, limits.max_body_bytes).await?;
    let headers: Vec<(String, String)> = headers.into_iter().collect();
    if let Err(error) = servers.put(&tenant, &name, &url, &headers).await {
        tracing::info!(%tenant, server = %name, %error, "an MCP server registration was refused");
        return Err(refused(error));
    }
    let info = servers.list(&tenant).into_iter().find(|s| s.name == name);
    let info = info.ok_or_else(|| ApiError::not_found(format!("no MCP server `{name}`")))?;
    Ok(Json(view(info, None)))
}

/// The tenant's MCP servers: name, URL, status, tool count, last error.
#[utoipa::path(
    get,
    path = "/v1/mcp-servers",
    responses((status = 200, description = "The tenant's servers, by name", body = Vec<McpServerView>), (status = 401, body = ErrorBody)),
    tag = "mcp-servers"
)]
pub async fn list(
    Tenant(tenant): Tenant,
    servers: Option<Extension<Arc<McpServers>>>,
) -> Result<Json<Vec<McpServerView>>, ApiError> {
    let servers = registry(servers)?;
    Ok(Json(servers.list(&tenant).into_iter().map(|i| view(i, None)).collect()))
}

/// One MCP server with its tools, listed now unless its list is cached (a
/// listing that fails shows in `status` and `last_error`).
#[utoipa::path(
    get,
    path = "/v1/mcp-servers/{name}",
    params(("name" = String, Path)),
    responses((status = 200, body = McpServerView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    tag = "mcp-servers"
)]
pub async fn get(
    Tenant(tenant): Tenant,
    servers: Option<Extension<Arc<McpServers>>>,
    Path(name): Path<String>,
) -> Result<Json<McpServerView>, ApiError> {
    let servers = registry(servers)?;
    let (info, tools) =
        servers.describe(&tenant, &name).await.ok_or_else(|| ApiError::not_found(format!("no MCP server `{name}`")))?;
    Ok(Json(view(info, Some(tools))))
}

/// Removes an MCP server, closing the engine's MCP session with it. Calls
/// of its tools made after this fail, naming the server.
#[utoipa::path(
    delete,
    path = "/v1/mcp-servers/{name}",
    params(("name" = String, Path)),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    tag = "mcp-servers"
)]
pub async fn delete(
    Tenant(tenant): Tenant,
    servers: Option<Extension<Arc<McpServers>>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let servers = registry(servers)?;
    let removed = servers
        .remove(&tenant, &name)
        .await
        .map_err(|e| ApiError::unavailable(format!("the MCP server could not be removed: {e}")))?;
    if removed { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found(format!("no MCP server `{name}`"))) }
}
