//! Where an MCP server may be: the rule component HTTP follows
//! (`subs-host`'s `http.rs`), applied to the URLs tenants register. This
//! crate cannot link `subs-host` (it brings wasmtime), so the rule is
//! restated here and kept identical: a name leads only to public
//! addresses (`localhost` only to loopback), unless the operator lists it
//! in `private_hosts`; an address written in the URL must be public
//! unless the operator lists that address.
//!
//! [`check_url`] refuses a URL before any connection; the
//! [`GuardedResolver`] of the client built by [`client`] checks each
//! connection's addresses again, so a name rebound to a private address
//! after registration is caught too.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// Why a server URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    /// Not an absolute `http` or `https` URL.
    #[error("`{0}` is not an http(s) URL with a host")]
    NotHttp(String),
    /// The URL holds credentials (`user:pass@`): they belong in `headers`.
    #[error("the URL holds credentials; put them in `headers`")]
    Credentials,
    /// The host is an address that is not public, and not allowed.
    #[error("{host} is not a public address; an operator may allow it in `private_hosts`")]
    NotPublic {
        /// The host as written.
        host: String,
    },
}

/// Hosts the operator lets lead anywhere (`private_hosts`): names and
/// addresses, lowercase, without a trailing dot.
#[derive(Debug, Clone, Default)]
pub struct PrivateHosts(HashSet<String>);

impl PrivateHosts {
    /// The operator's list.
    pub fn new<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> Self {
        Self(hosts.into_iter().map(|h| normal_name(h.as_ref())).collect())
    }

    fn allows(&self, host: &str) -> bool {
        self.0.contains(&normal_name(host))
    }
}

/// Checks `url` before anything connects to it: its scheme, and that an
/// address written in it is public or allowed. A name is checked when it
/// is resolved (see the module docs).
pub fn check_url(url: &str, private: &PrivateHosts) -> Result<reqwest::Url, UrlRefused> {
    let parsed = reqwest::Url::parse(url).map_err(|_| UrlRefused::NotHttp(url.to_owned()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(UrlRefused::NotHttp(url.to_owned()));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlRefused::Credentials);
    }
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(name)) => {
            let name = normal_name(name);
            if (name == "localhost" || name.ends_with(".localhost")) && !private.allows(&name) {
                return Err(UrlRefused::NotPublic { host: name });
            }
            return Ok(parsed);
        }
        None => return Err(UrlRefused::NotHttp(url.to_owned())),
    };
    if is_public(ip) || private.allows(&ip.to_string()) {
        Ok(parsed)
    } else {
        Err(UrlRefused::NotPublic { host: ip.to_string() })
    }
}

/// The client MCP requests go out through: no redirects (one could lead
/// past the rule), no proxy from the environment, names resolved by a
/// [`GuardedResolver`].
pub fn client(private: &PrivateHosts) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { private: private.clone() }))
        .build()
}

/// Resolves server names, keeping only the addresses a name may lead to.
struct GuardedResolver {
    private: PrivateHosts,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = normal_name(name.as_str());
        let anywhere = self.private.allows(&name);
        Box::pin(async move {
            let addresses: Vec<IpAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.map(|a| a.ip()).collect();
            let local = name == "localhost" || name.ends_with(".localhost");
            let kept: Vec<IpAddr> = if anywhere {
                addresses.clone()
            } else {
                addresses.iter().copied().filter(|ip| if local { ip.is_loopback() } else { is_public(*ip) }).collect()
            };
            if kept.is_empty() {
                let listed: Vec<String> = addresses.iter().map(ToString::to_string).collect();
                let error: Box<dyn std::error::Error + Send + Sync> = format!(
                    "{name} resolves to {}, which it may not lead to; an operator may allow it in `private_hosts`",
                    if listed.is_empty() { "nothing".to_owned() } else { listed.join(", ") }
                )
                .into();
                return Err(error);
            }
            let addrs: reqwest::dns::Addrs = Box::new(kept.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

/// Whether `ip` is an address of the public internet (the rule of
/// component HTTP, see the module docs).
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let first = v6.segments()[0];
            if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [.., a, b, c, d] = v6.octets();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
                || (first == 0x2001 && v6.segments()[1] == 0x0db8)
                || v6.segments()[..6] == [0; 6])
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
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b & 0xfe) == 18)
        || a >= 240)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_refused_unless_listed() {
        let none = PrivateHosts::default();
        for url in [
            "http://127.0.0.1:9/mcp",
            "http://10.1.2.3/mcp",
            "http://[::1]/",
            "http://169.254.169.254/",
            "http://localhost:8000/",
        ] {
            assert!(matches!(check_url(url, &none), Err(UrlRefused::NotPublic { .. })), "{url}");
        }
        assert!(check_url("https://example.com/mcp", &none).is_ok());
        assert!(check_url("http://93.184.216.34/mcp", &none).is_ok());
        let listed = PrivateHosts::new(["127.0.0.1", "localhost"]);
        assert!(check_url("http://127.0.0.1:9/mcp", &listed).is_ok());
        assert!(check_url("http://localhost:9/mcp", &listed).is_ok());
        assert!(matches!(check_url("ftp://example.com/", &none), Err(UrlRefused::NotHttp(_))));
        assert!(matches!(check_url("not a url", &none), Err(UrlRefused::NotHttp(_))));
        assert_eq!(check_url("https://u:p@example.com/", &none), Err(UrlRefused::Credentials));
    }
}
