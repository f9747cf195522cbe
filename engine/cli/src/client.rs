//! The HTTP client of a running server (`subs agents …`, `subs sessions
//! …`, and with the operator key `subs tenants …`, `subs keys …`): where
//! the server is, the key, and the API's errors turned into messages and
//! exit codes.

use std::time::Duration;

use anyhow::anyhow;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;

use crate::error::{CliError, CliResult};

/// Where the server is when nothing says otherwise (`subs serve`'s
/// default address).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7878";

/// Flags of every command that talks to a server.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The server's base URL.
    #[arg(long, value_name = "URL", env = "SUBS_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// The API key (a server with keys configured requires one).
    #[arg(long, value_name = "KEY", env = "SUBS_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// Print JSON (the server's answer, or one object per event and line)
    /// instead of text for people.
    #[arg(long)]
    pub json: bool,
}

/// A client of one server.
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    /// How to give the key, for a 401.
    key_hint: &'static str,
}

impl Client {
    /// A client for `args.server`, with a tenant's key.
    pub fn new(args: &ClientArgs) -> CliResult<Self> {
        Self::with_key(&args.server, args.key.clone(), "pass --key or set SUBS_API_KEY")
    }

    /// A client for `server` with `key`; `key_hint` says how to give it
    /// when the server refuses it.
    pub fn with_key(server: &str, key: Option<String>, key_hint: &'static str) -> CliResult<Self> {
        let base = server.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::usage(anyhow!("--server `{server}` is not an http(s) URL")));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("subs-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::failed(anyhow!("the HTTP client could not be built: {e}")))?;
        Ok(Self { http, base, key, key_hint })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (which starts with `/`), with the key.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends `request`; a connection failure or an error status is an
    /// error naming the server.
    pub async fn send(&self, request: RequestBuilder) -> CliResult<Response> {
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(self.refused(response).await)
    }

    /// Sends `request` and reads the JSON answer (`null` for an empty one).
    pub async fn json(&self, request: RequestBuilder) -> CliResult<Value> {
        let response = self.send(request).await?;
        let bytes = response.bytes().await.map_err(|e| self.transport(&e))?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            CliError::failed(anyhow!("the server at {} answered something that is not JSON: {e}", self.base))
        })
    }

    /// GETs the list at `path` for a `list` command. With `--json` it
    /// prints the answer as it came and returns `None`; an empty list
    /// prints `no <what>` and returns `None`; otherwise the items, for a
    /// table.
    pub async fn list(&self, path: &str, json: bool, what: &str) -> CliResult<Option<Vec<Value>>> {
        let answer = self.json(self.request(Method::GET, path)).await?;
        if json {
            println!("{answer}");
            return Ok(None);
        }
        let items = answer.as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            println!("no {what}");
            return Ok(None);
        }
        Ok(Some(items))
    }

    /// A connection that failed: the server is unreachable (exit code 3).
    pub fn transport(&self, error: &reqwest::Error) -> CliError {
        CliError::unavailable(anyhow!("cannot reach the server at {}: {}", self.base, chain(error)))
    }

    /// The error of a non-2xx answer: the API's `{error, code}` when it
    /// has one.
    pub async fn refused(&self, response: Response) -> CliError {
        let status = response.status();
        let body = response.bytes().await.unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().chars().take(300).collect());
        if status == StatusCode::UNAUTHORIZED {
            return CliError::failed(anyhow!("the server answered {status}: {message} ({})", self.key_hint));
        }
        CliError::failed(anyhow!("the server answered {status}: {message}"))
    }
}

/// An error with its causes (reqwest's own message is often just "error
/// sending request").
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `name` checked to be an agent or tenant name (1 to 128 of `A-Z a-z 0-9
/// _ - . :`, not starting with `.`), so it is one path segment as is: a
/// mistyped name must not turn into another path.
pub fn checked_name<'a>(what: &str, name: &'a str) -> CliResult<&'a str> {
    if subs_engine::store::valid_name(name) {
        Ok(name)
    } else {
        Err(CliError::usage(anyhow!("`{name}` is not a valid {what} ({})", subs_engine::store::NAME_RULE)))
    }
}

/// `id` checked to be a session id: any text of 1 to 256 bytes without
/// control characters (`/`, spaces and unicode included).
pub fn checked_session(id: &str) -> CliResult<&str> {
    if subs_engine::store::valid_id(id) {
        Ok(id)
    } else {
        Err(CliError::usage(anyhow!(
            "`{}` is not a valid session id ({})",
            id.escape_debug(),
            subs_engine::store::ID_RULE
        )))
    }
}

/// The API path of session `id` followed by `tail` (`""`, `"/input"`,
/// `"/events"`): the id percent-encoded, so that whatever it holds (`/`,
/// `?`, `%`, spaces) it stays one path segment naming this session.
pub fn session_path(id: &str, tail: &str) -> String {
    format!("/v1/sessions/{}{tail}", subs_server::sessions::encode_id(id))
}

/// The path of the page of at most `limit` sessions after the session id
/// `after` (from the first when `None`), `after` percent-encoded.
pub fn sessions_page_path(limit: usize, after: Option<&str>) -> String {
    match after {
        None => format!("/v1/sessions?limit={limit}"),
        Some(after) => format!("/v1/sessions?limit={limit}&after={}", subs_server::sessions::encode_id(after)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(checked_name("agent", "demo.1:a_b-c").unwrap(), "demo.1:a_b-c");
        for bad in ["../x", "..", "a b", "a/b", "", "ü"] {
            assert!(checked_name("agent", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn session_ids_are_any_text_and_go_encoded_into_urls() {
        for good in ["s1", "chat/ü 1:x", "../..", " a ", "a?b#c&d=e+f%2F"] {
            assert_eq!(checked_session(good).unwrap(), good);
        }
        for bad in ["", "a\nb", "a\0", &"x".repeat(257)] {
            assert!(checked_session(bad).is_err(), "{bad:?}");
        }
        assert_eq!(session_path("s1", ""), "/v1/sessions/s1");
        assert_eq!(session_path("chat/ü 1:x", "/events"), "/v1/sessions/chat%2F%C3%BC%201%3Ax/events");
        assert_eq!(session_path("../..", "/input"), "/v1/sessions/..%2F../input");
        assert_eq!(session_path("a?b#c&d=e+f%2F", ""), "/v1/sessions/a%3Fb%23c%26d%3De%2Bf%252F");
        assert_eq!(sessions_page_path(10, None), "/v1/sessions?limit=10");
        assert_eq!(sessions_page_path(10, Some("a b&after=z")), "/v1/sessions?limit=10&after=a%20b%26after%3Dz");
        // What reqwest sends is what was built: nothing re-encoded or
        // decoded on the way.
        let client = Client::with_key("http://127.0.0.1:1", None, "").unwrap();
        let request = client.request(Method::GET, &session_path("chat/ü 1:x", "/events")).build().unwrap();
        assert_eq!(request.url().path(), "/v1/sessions/chat%2F%C3%BC%201%3Ax/events");
        let request = client.request(Method::GET, &sessions_page_path(5, Some("ü/1"))).build().unwrap();
        assert_eq!(request.url().query(), Some("limit=5&after=%C3%BC%2F1"));
    }
}
