//! Outgoing HTTP (`wasi:http/outgoing-handler`) for guests: only to the
//! hosts on the agent's allow-list, none by default.
//!
//! The check is on the request's real destination: the authority of the
//! URI the engine itself connects to. A guest cannot set `Host` (it is a
//! forbidden header in `wasi:http`), redirects are not followed, and no
//! proxy from the environment is used, so the only way to reach a host is
//! to name it, and naming it is what is checked.

use std::sync::Arc;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

/// A guest's request body is read into memory before it is sent; this
/// bounds it.
const MAX_REQUEST_BODY: usize = 8 << 20;

/// One allowed destination: a host name or IP address, and optionally a
/// port (any port when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedHost {
    host: String,
    port: Option<u16>,
}

impl AllowedHost {
    /// Parses `host` or `host:port` (`[v6]:port` for IPv6); the host is
    /// compared case-insensitively.
    pub(crate) fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim().to_ascii_lowercase();
        let authority: http::uri::Authority = entry.parse().ok()?;
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        (!host.is_empty()).then(|| Self { host, port: authority.port_u16() })
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        self.host == host && self.port.is_none_or(|p| p == port)
    }
}

/// The `wasi:http` hooks of one decision: the allow-list, the client that
/// sends what it allows, and what it refused (quoted in the delivery's
/// error).
pub(crate) struct HttpGate {
    pub allowed: Arc<[AllowedHost]>,
    pub client: reqwest::Client,
    /// Destinations refused during this decision.
    pub denied: Vec<String>,
}

/// The host and port a request goes to: its URI's authority, with the
/// scheme's port when none is given.
fn destination(uri: &http::Uri) -> Option<(String, u16)> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(if uri.scheme() == Some(&http::uri::Scheme::HTTPS) { 443 } else { 80 });
    Some((host, port))
}

type Sent = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
)>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_done: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        let allowed =
            destination(request.uri()).is_some_and(|(host, port)| self.allowed.iter().any(|a| a.allows(&host, port)));
        if !allowed {
            let authority = request.uri().authority().map_or_else(|| "(no host)".to_owned(), ToString::to_string);
            tracing::warn!(target: "subs::guest", destination = %authority, "outgoing HTTP refused: not on the agent's allow-list");
            self.denied.push(authority);
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        let client = self.client.clone();
        Box::new(async move {
            let (parts, body) = request.into_parts();
            let body = http_body_util::Limited::new(body, MAX_REQUEST_BODY)
                .collect()
                .await
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestBodySize(None))?
                .to_bytes();
            let mut request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestUriInvalid)?;
            if let Some(timeout) = options.and_then(|o| o.first_byte_timeout.or(o.connect_timeout)) {
                *request.timeout_mut() = Some(timeout);
            }
            let response = client.execute(request).await.map_err(|e| {
                if e.is_timeout() {
                    wasmtime_wasi_http::Error::ConnectionTimeout
                } else if e.is_connect() {
                    wasmtime_wasi_http::Error::ConnectionRefused
                } else {
                    wasmtime_wasi_http::Error::InternalError(Some(e.to_string()))
                }
            })?;
            let response: http::Response<reqwest::Body> = response.into();
            let response = response.map(|body| {
                body.map_err(|e| wasmtime_wasi_http::Error::InternalError(Some(e.to_string()))).boxed_unsync()
            });
            let done: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send> = Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

/// The client guests' requests go out through: no redirects (a redirect
/// could leave the allow-list) and no proxy from the environment.
pub(crate) fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_match_host_and_optional_port() {
        let any_port = AllowedHost::parse("API.example.com").unwrap();
        assert!(any_port.allows("api.example.com", 443));
        assert!(!any_port.allows("example.com", 443));
        let one_port = AllowedHost::parse("127.0.0.1:8080").unwrap();
        assert!(one_port.allows("127.0.0.1", 8080));
        assert!(!one_port.allows("127.0.0.1", 8081));
        assert!(AllowedHost::parse("").is_none());
    }

    #[test]
    fn the_destination_is_the_uri_authority() {
        let uri: http::Uri = "https://Example.com/x".parse().unwrap();
        assert_eq!(destination(&uri), Some(("example.com".to_owned(), 443)));
        let uri: http::Uri = "http://[::1]:81/".parse().unwrap();
        assert_eq!(destination(&uri), Some(("::1".to_owned(), 81)));
    }
}
