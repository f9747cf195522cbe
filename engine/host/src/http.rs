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
//!
//! A name on the list is trusted for its name, not for wherever its DNS
//! points: it may only lead to public addresses ([`GuardedResolver`]), so
//! a listed name that resolves — or is rebound between two lookups — to
//! loopback, a private network or a cloud metadata address is refused at
//! connection time. `localhost` (and `*.localhost`) may only lead to
//! loopback. To let agents reach a private service, list its address, or
//! — to reach it by name, as HTTPS needs — have the operator name it in
//! `HostConfig::private_hosts`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// Destinations refused during this decision (some only once the
    /// request is on its way, hence shared).
    pub denied: Refusals,
}

/// Destinations refused during a decision, and why.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusals(Arc<Mutex<Vec<(String, String)>>>);

impl Refusals {
    /// Records and logs (with whose decision it was) a refused
    /// destination; the guest gets `HTTP-request-denied`.
    fn refuse(&self, labels: &Labels, destination: String, why: &str) -> wasmtime_wasi_http::Error {
        tracing::warn!(
            target: "subs::guest",
            tenant = %labels.tenant,
            agent = %labels.agent,
            session = %labels.session,
            destination = %destination,
            "outgoing HTTP refused: {why}"
        );
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push((destination, why.to_owned()));
        wasmtime_wasi_http::Error::HttpRequestDenied
    }

    /// "`destination`: why" for each refusal, or `None` when there was none.
    pub(crate) fn describe(&self) -> Option<String> {
        let refused = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (!refused.is_empty())
            .then(|| refused.iter().map(|(d, why)| format!("{d}: {why}")).collect::<Vec<_>>().join("; "))
    }
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

    fn refuse(&self, destination: String, why: &str) -> wasmtime_wasi_http::Error {
        self.denied.refuse(&self.labels, destination, why)
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
        let denied = self.denied.clone();
        Box::new(async move {
            let body = http_body_util::Limited::new(body, MAX_REQUEST_BODY)
                .collect()
                .await
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestBodySize(None))?
                .to_bytes();
            let mut request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(|_| wasmtime_wasi_http::Error::HttpRequestUriInvalid)?;
            let destination = url.to_string();
            *request.url_mut() = url;
            if let Some(timeout) = options.and_then(|o| o.first_byte_timeout.or(o.connect_timeout)) {
                *request.timeout_mut() = Some(timeout);
            }
            let response = client.execute(request).await.map_err(|e| {
                if let Some(refused) = not_public(&e) {
                    denied.refuse(&labels, destination, &refused.to_string())
                } else if e.is_timeout() {
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
/// could leave the allow-list), no proxy from the environment, and names
/// resolved by a [`GuardedResolver`] over `hosts`.
pub(crate) fn client(
    hosts: &HashMap<String, Vec<IpAddr>>,
    private_hosts: &[String],
) -> Result<reqwest::Client, reqwest::Error> {
    let resolver = GuardedResolver {
        hosts: hosts.iter().map(|(name, addrs)| (normal_name(name), addrs.clone())).collect(),
        private: private_hosts.iter().map(|name| normal_name(name)).collect(),
    };
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(resolver))
        .build()
}

/// Resolves the names guests' requests go to, keeping only the addresses a
/// name may lead to ([`vet`]). It resolves each new connection, so a name
/// rebound to a private address after an earlier lookup is caught too.
/// IP literals never come here: listing an address is how a private one is
/// allowed.
struct GuardedResolver {
    /// Fixed answers, consulted before the system's resolver (as
    /// `/etc/hosts` would be), and vetted the same way.
    hosts: HashMap<String, Vec<IpAddr>>,
    /// Names the operator lets lead anywhere (internal services).
    private: std::collections::HashSet<String>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = normal_name(name.as_str());
        let fixed = self.hosts.get(&name).cloned();
        let anywhere = self.private.contains(&name);
        Box::pin(async move {
            let addresses = match fixed {
                Some(addresses) => addresses,
                None => tokio::net::lookup_host((name.as_str(), 0)).await?.map(|a| a.ip()).collect(),
            };
            let kept = if anywhere { addresses } else { vet(&name, &addresses)? };
            let addrs: reqwest::dns::Addrs = Box::new(kept.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// A name, lowercase, without the trailing dot of a fully qualified one.
fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A listed name that led only to addresses it may not lead to.
#[derive(Debug, thiserror::Error)]
#[error("{name} resolves to {addresses}, which it may not lead to ({rule}); list an address itself to allow it")]
pub(crate) struct NotPublic {
    name: String,
    addresses: String,
    rule: &'static str,
}

/// The addresses of `addresses` that `name` may lead to: loopback ones for
/// `localhost` and `*.localhost` (RFC 6761), public ones for every other
/// name. Fails when none is left.
fn vet(name: &str, addresses: &[IpAddr]) -> Result<Vec<IpAddr>, NotPublic> {
    let local = name == "localhost" || name.ends_with(".localhost");
    let kept: Vec<IpAddr> =
        addresses.iter().copied().filter(|ip| if local { ip.is_loopback() } else { is_public(*ip) }).collect();
    if kept.is_empty() {
        let listed: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        return Err(NotPublic {
            name: name.to_owned(),
            addresses: if listed.is_empty() { "nothing".to_owned() } else { listed.join(", ") },
            rule: if local {
                "localhost may only lead to loopback"
            } else {
                "a name may only lead to public addresses"
            },
        });
    }
    Ok(kept)
}

/// Whether `ip` is an address of the public internet: not loopback,
/// private, link-local (cloud metadata services live there), shared
/// (carrier NAT), unspecified, broadcast, multicast, documentation or
/// reserved, and not one of those wrapped in IPv6.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let first = v6.segments()[0];
            // NAT64 (64:ff9b::/96) carries an IPv4 address in its low bits.
            if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [.., a, b, c, d] = v6.octets();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
                || (first == 0x2001 && v6.segments()[1] == 0x0db8) // documentation
                || v6.segments()[..6] == [0; 6]) // IPv4-compatible ::a.b.c.d
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b & 0xfe) == 18) // benchmarking 198.18/15
        || a >= 240) // reserved
}

/// The resolver's refusal inside a client error, if that is what it is.
fn not_public(error: &reqwest::Error) -> Option<&NotPublic> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<NotPublic>() {
            return Some(refused);
        }
        source = e.source();
    }
    None
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

    fn v6(text: &str) -> IpAddr {
        IpAddr::V6(text.parse().unwrap())
    }

    #[test]
    fn listed_names_may_only_lead_to_public_addresses() {
        let ip = |t: &str| t.parse::<IpAddr>().unwrap();
        // Public addresses pass; a mixed answer keeps only them.
        assert_eq!(vet("api.example.com", &[ip("93.184.216.34")]).unwrap(), [ip("93.184.216.34")]);
        assert_eq!(vet("api.example.com", &[ip("10.0.0.7"), ip("93.184.216.34")]).unwrap(), [ip("93.184.216.34")]);
        assert!(vet("api.example.com", &[v6("2606:4700::1111")]).is_ok());
        // Whatever a name may not lead to, in either family.
        for refused in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "198.18.0.1",
        ] {
            let err = vet("rebind.example", &[ip(refused)]).unwrap_err().to_string();
            assert!(err.contains(refused) && err.contains("public addresses"), "{refused}: {err}");
        }
        for refused in
            ["::1", "::", "fd00::1", "fe80::1", "ff02::1", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "::7f00:1"]
        {
            assert!(vet("rebind.example", &[v6(refused)]).is_err(), "{refused}");
        }
        assert!(vet("rebind.example", &[]).unwrap_err().to_string().contains("resolves to nothing"));
        // localhost may only be loopback.
        assert_eq!(vet("localhost", &[ip("127.0.0.1"), v6("::1")]).unwrap(), [ip("127.0.0.1"), v6("::1")]);
        assert!(vet("app.localhost", &[ip("93.184.216.34")]).unwrap_err().to_string().contains("loopback"));
        assert_eq!(normal_name("LocalHost."), "localhost");
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
