//! Credentials, and the registry's `WWW-Authenticate` challenges.
//!
//! The challenge parser is our own: the one crate for the header
//! (`www-authenticate`) depends on hyper 0.x-era `hyperx` and `url` 1.x,
//! and what registries send is one small grammar (RFC 9110 §11.6.1:
//! a scheme, then `key=value` or `key="quoted"` parameters).

use std::collections::HashMap;
use std::fmt;

/// What proves who we are to a registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user name and password (or an access token used as one, as GHCR
    /// and Harbor take them): HTTP basic auth for registries that ask for
    /// it, and to the token service of those that ask for a bearer token.
    Basic {
        /// The user name.
        username: String,
        /// The password or access token.
        password: String,
    },
    /// A bearer token the registry takes as it is.
    Token(String),
    /// An OAuth2 refresh token from `docker login` (`identitytoken` in the
    /// docker config file), exchanged at the token service.
    IdentityToken(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret, whatever logs a value holding credentials.
        match self {
            Self::Basic { username, .. } => write!(f, "Basic({username}, …)"),
            Self::Token(_) => f.write_str("Token(…)"),
            Self::IdentityToken(_) => f.write_str("IdentityToken(…)"),
        }
    }
}

/// The credentials the docker config file (`$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`) holds for `registry`, through its
/// credential helpers where it names them, as docker, oras and wkg find
/// them. `None` when there are none (or no file): the registry is then
/// asked anonymously.
pub fn docker_credentials(registry: &str) -> Option<Credentials> {
    // Docker Hub's credentials are stored under its v1 index URL.
    let key = match registry {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "https://index.docker.io/v1/",
        other => other,
    };
    match docker_credential::get_credential(key) {
        Ok(docker_credential::DockerCredential::UsernamePassword(username, password)) => {
            Some(Credentials::Basic { username, password })
        }
        Ok(docker_credential::DockerCredential::IdentityToken(token)) => Some(Credentials::IdentityToken(token)),
        Err(error) => {
            tracing::debug!(%registry, %error, "no docker credentials");
            None
        }
    }
}

/// A challenge of a `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The scheme, lowercased: `basic`, `bearer`.
    pub scheme: String,
    /// Its parameters (`realm`, `service`, `scope`), keys lowercased.
    pub params: HashMap<String, String>,
}

/// The challenges of a `WWW-Authenticate` header value: several may come
/// in one value, each a scheme followed by its parameters. What does not
/// parse ends the list rather than failing: the caller reports a
/// registry that asked for nothing it understands.
pub fn challenges(header: &str) -> Vec<Challenge> {
    let mut out: Vec<Challenge> = Vec::new();
    let mut rest = header.trim_start();
    while !rest.is_empty() {
        let end = rest.find(|c: char| c.is_whitespace() || c == ',' || c == '=').unwrap_or(rest.len());
        let word = &rest[..end];
        let after = rest[end..].trim_start();
        if word.is_empty() {
            // A stray comma between challenges.
            rest = rest[1..].trim_start();
            continue;
        }
        if let Some(value) = after.strip_prefix('=') {
            // `key=value`: a parameter of the current challenge.
            let Some(current) = out.last_mut() else { break };
            let Some((value, left)) = param_value(value.trim_start()) else { break };
            current.params.insert(word.to_ascii_lowercase(), value);
            rest = left.trim_start().trim_start_matches(',').trim_start();
        } else {
            out.push(Challenge { scheme: word.to_ascii_lowercase(), params: HashMap::new() });
            rest = after.trim_start_matches(',').trim_start();
        }
    }
    out
}

/// A parameter's value (a quoted string with `\` escapes, or a token) and
/// what follows it.
fn param_value(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.push(chars.next()?.1),
                '"' => return Some((value, &quoted[i + 1..])),
                c => value.push(c),
            }
        }
        None
    } else {
        let end = text.find(|c: char| c.is_whitespace() || c == ',').unwrap_or(text.len());
        Some((text[..end].to_owned(), &text[end..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_and_basic_challenges_parse() {
        let header = r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:team/agent:pull,push""#;
        let parsed = challenges(header);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].scheme, "bearer");
        assert_eq!(parsed[0].params["realm"], "https://auth.example/token");
        assert_eq!(parsed[0].params["service"], "registry.example");
        assert_eq!(parsed[0].params["scope"], "repository:team/agent:pull,push", "commas inside quotes stay");

        let parsed = challenges(r#"Basic realm="Registry Realm", Bearer realm=https://t/x , error="a \"b\"""#);
        assert_eq!(parsed.len(), 2);
        assert_eq!((parsed[0].scheme.as_str(), parsed[0].params["realm"].as_str()), ("basic", "Registry Realm"));
        assert_eq!(parsed[1].params["realm"], "https://t/x");
        assert_eq!(parsed[1].params["error"], r#"a "b""#);
    }

    #[test]
    fn broken_challenges_end_the_list_without_panicking() {
        for header in ["", ",", "=", "Bearer realm=\"open", "realm=x", "Bearer ,, realm", "Bearer realm=\"a\\"] {
            let _ = challenges(header);
        }
        assert!(challenges("realm=x").is_empty());
    }

    #[test]
    fn credentials_never_print_their_secret() {
        let basic = Credentials::Basic { username: "ci".into(), password: "hunter2".into() };
        assert!(!format!("{basic:?}").contains("hunter2"));
        assert!(!format!("{:?}", Credentials::Token("t0ken".into())).contains("t0ken"));
    }
}
