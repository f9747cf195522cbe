//! Outgoing HTTP (`wasi:http/outgoing-handler`) for guests: only to the
//! hosts on the agent's allow-list, none by default.
//!
//! The check is on the request's real destination: the authority of the
//! URI the engine itself connects to, checked again on the URL the client
//! is handed (so a parser disagreement cannot send it elsewhere). A guest
//! cannot set `Host` (it is a forbidden header in `wasi:http`), redirects
//! are not followed (the guest gets the 3xx, and the engine logs it), and
//! no proxy from the environment is used, so the only way to reach a host
//! is to name it, and naming it is what is checked. Names are compared as
//! written: an entry `localhost` does not admit `127.0.0.1`, `[::1]` or
//! `2130706433`, and a name that resolves to an allowed address is still
//! another name.

use std::sync::Arc;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use super::output::Labels;

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
    /// Whose decision it is, for the logs.
    pub labels: Labels,
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

/// The host and port of the URL the client will connect to.
fn url_destination(url: &reqwest::Url) -> Option<(String, u16)> {
    let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    Some((host, url.port_or_known_default()?))
}

impl HttpGate {
    fn allows(&self, destination: Option<(String, u16)>) -> bool {
        destination.is_some_and(|(host, port)| self.allowed.iter().any(|a| a.allows(&host, port)))
    }

    /// Records and logs a refused destination; the guest gets
    /// `HTTP-request-denied`.
    fn refuse(&mut self, destination: String, why: &str) -> wasmtime_wasi_http::Error {
        tracing::warn!(
            target: "subs::guest",
            tenant = %self.labels.tenant,
            agent = %self.labels.agent,
            session = %self.labels.session,
            destination = %destination,
            "outgoing HTTP refused: {why}"
        );
        self.denied.push(destination);
        wasmtime_wasi_http::Error::HttpRequestDenied
    }
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
        if !self.allows(destination(request.uri())) {
            let authority = request.uri().authority().map_or_else(|| "(no host)".to_owned(), ToString::to_string);
            let denied = self.refuse(authority, "not on the agent's allow-list");
            return Box::new(async { Err(denied) });
        }
        let (parts, body) = request.into_parts();
        // The client connects to the URL it is given, parsed again from
        // the URI: check that too, in case the two parsers disagree.
        let url = match reqwest::Url::parse(&parts.uri.to_string()) {
            Ok(url) if self.allows(url_destination(&url)) => url,
            Ok(url) => {
                let denied = self.refuse(url.to_string(), "the URL leaves the agent's allow-list");
                return Box::new(async { Err(denied) });
            }
            Err(_) => return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestUriInvalid) }),
        };
        let labels = self.labels.clone();
        let client = self.client.clone();
        Box::new(async move {
            let body = http_body_util::Limited::new(body, MAX_REQUEST_BODY)
                .collect()
                .await
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestBodySize(None))?
                .to_bytes();
            let mut request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestUriInvalid)?;
            *request.url_mut() = url;
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
            if response.status().is_redirection() {
                // Not followed: the guest gets the 3xx as it is. Following
                // it is the guest's choice, and goes through this gate.
                let location = response.headers().get(http::header::LOCATION).and_then(|v| v.to_str().ok());
                tracing::warn!(
                    target: "subs::guest",
                    tenant = %labels.tenant,
                    agent = %labels.agent,
                    session = %labels.session,
                    destination = %response.url(),
                    status = response.status().as_u16(),
                    location = %location.unwrap_or("(none)"),
                    "outgoing HTTP redirect not followed"
                );
            }
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

    #[test]
    fn the_url_check_sees_the_address_the_client_connects_to() {
        // Spellings of loopback that are not the text `127.0.0.1`: the
        // URI check compares them as written, the URL check as the client
        // reads them; an entry `localhost` matches neither.
        let localhost = AllowedHost::parse("localhost").unwrap();
        for (uri, host) in [
            ("http://2130706433:8080/", "127.0.0.1"),
            ("http://0x7f000001:8080/", "127.0.0.1"),
            ("http://127.1:8080/", "127.0.0.1"),
            ("http://[::1]:8080/", "::1"),
            ("http://localhost@127.0.0.1:8080/", "127.0.0.1"),
        ] {
            let url = reqwest::Url::parse(uri).unwrap();
            assert_eq!(url_destination(&url), Some((host.to_owned(), 8080)), "{uri}");
            let (checked, port) = destination(&uri.parse().unwrap()).unwrap();
            assert!(!localhost.allows(&checked, port), "{uri}");
            assert!(!localhost.allows(host, 8080), "{uri}");
        }
    }
}
