//! Which providers exist, where they are and how to authenticate: the
//! [`ProvidersConfig`] (a section of the CLI's TOML file) plus the
//! environment, turned into a [`Models`] registry by [`models_from_config`].
//!
//! # Built-in providers
//!
//! | name | format | base URL (default) | base URL variable | key variable |
//! | --- | --- | --- | --- | --- |
//! | `openai` | OpenAI | `https://api.openai.com/v1` | `OPENAI_BASE_URL` | `OPENAI_API_KEY` |
//! | `anthropic` | Anthropic | `https://api.anthropic.com` | `ANTHROPIC_BASE_URL` | `ANTHROPIC_API_KEY` |
//! | `ollama` | OpenAI | `http://127.0.0.1:11434/v1` | `OLLAMA_BASE_URL` | none |
//! | `subs` | the built-in offline model | | | |
//!
//! A `[[providers]]` entry with a built-in's name changes only the fields it
//! sets; any other name adds a provider (then `format` and `base_url` are
//! required). A base URL variable that is set wins over the file (the CLI's
//! order is flags, environment, file, defaults). Keys are read only from
//! the environment — the file names the variable — so config files hold no
//! secrets; a provider whose key variable is unset sends no key (fine for
//! local servers; a service that wants one answers 401, and the error says
//! which variable is unset).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use subs_protocol::LlmFormat;

use super::anthropic::DEFAULT_MAX_TOKENS;
use super::price::{Price, PriceTable};
use super::provider::HttpProvider;
use super::{Models, OFFLINE_PROVIDER};

/// The providers section of the config file.
///
/// ```toml
/// max_tokens = 4096          # Anthropic's required max_tokens, when a call sets none
/// connect_timeout_secs = 10
/// read_timeout_secs = 300    # the longest silence from a provider
///
/// [[providers]]              # point the built-in `openai` at a proxy
/// name = "openai"
/// base_url = "https://llm-proxy.internal/v1"
///
/// [[providers]]              # a llama.cpp server, as `local/<model>`
/// name = "local"
/// format = "openai"
/// base_url = "http://127.0.0.1:8080/v1"
///
/// [[providers]]
/// name = "work-claude"
/// format = "anthropic"
/// base_url = "https://anthropic-gateway.example.com"
/// api_key_env = "WORK_ANTHROPIC_KEY"
///
/// [prices."local/qwen3-8b"]  # dollars per million tokens
/// input = "0.05"
/// output = "0.10"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProvidersConfig {
    /// Providers to add, or built-ins to adjust, by name.
    pub providers: Vec<ProviderConfig>,
    /// Prices by full model name (`local/qwen3-8b`), added to the built-in
    /// table and winning over its entries.
    pub prices: BTreeMap<String, Price>,
    /// Anthropic requires `max_tokens` on every request: this is sent when
    /// a call sets no `max_completion_tokens` (a provider's own
    /// `max_tokens` wins).
    pub max_tokens: u32,
    /// How long to wait for a connection.
    pub connect_timeout_secs: f64,
    /// The longest a provider may stay silent (before its answer starts, or
    /// between two pieces of a stream) before the call fails with
    /// `deadline_exceeded`. The call as a whole is bounded by the retry
    /// policy's `timeout_secs`, not by this.
    pub read_timeout_secs: f64,
}

impl Default for ProvidersConfig {
    fn default() -> Self {
        ProvidersConfig {
            providers: Vec::new(),
            prices: BTreeMap::new(),
            max_tokens: DEFAULT_MAX_TOKENS,
            connect_timeout_secs: 10.0,
            read_timeout_secs: 300.0,
        }
    }
}

/// One `[[providers]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The name models are prefixed with (`name/model`): letters, digits,
    /// `_`, `-`, `.`; not `subs` (the offline model's).
    pub name: String,
    /// The wire format; required unless `name` is a built-in's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<LlmFormat>,
    /// Where the API is: for the OpenAI format the URL that
    /// `/chat/completions` follows (usually ending in `/v1`); for Anthropic
    /// the URL that `/v1/messages` follows. Required unless `name` is a
    /// built-in's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding the API key; omitted: no key (or
    /// the built-in's variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// An environment variable that, when set, overrides `base_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<String>,
    /// This provider's default `max_tokens` (Anthropic format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// An API key. It never shows in logs: `Debug` prints `ApiKey(<redacted>)`
/// and there is no `Display`; [`expose`](Self::expose) is the one way to
/// read it, for the request header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// A provider as it will be called: config and environment resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSettings {
    /// The name models are prefixed with.
    pub name: String,
    /// The wire format.
    pub format: LlmFormat,
    /// Where the API is, without a trailing `/`.
    pub base_url: String,
    /// The key, when there is one.
    pub api_key: Option<ApiKey>,
    /// The variable the key comes from, named in the error when a service
    /// rejects the missing key.
    pub api_key_env: Option<String>,
    /// The default `max_tokens` (Anthropic format).
    pub max_tokens: u32,
}

/// Why the providers config cannot be used. Each names the provider and
/// the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A name that cannot prefix model names.
    #[error("provider name `{0}` is not allowed: use letters, digits, `_`, `-` and `.` (and not `{OFFLINE_PROVIDER}`)")]
    BadName(String),
    /// The same name twice.
    #[error("provider `{0}` is configured twice")]
    Duplicate(String),
    /// A new provider without a `format`.
    #[error("provider `{0}` needs a `format` (`openai` or `anthropic`)")]
    MissingFormat(String),
    /// A new provider without a `base_url`.
    #[error("provider `{0}` needs a `base_url`")]
    MissingBaseUrl(String),
    /// A base URL that is not an `http(s)` URL.
    #[error("provider `{name}`: base URL `{url}` is not an http(s) URL: {reason}")]
    BadBaseUrl {
        /// The provider.
        name: String,
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A timeout that is not a positive number of seconds.
    #[error("`{0}` must be a positive number of seconds")]
    BadTimeout(&'static str),
    /// The HTTP client could not be built (TLS setup).
    #[error("the HTTP client could not be set up: {0}")]
    Client(String),
}

/// A built-in provider's defaults.
struct Builtin {
    name: &'static str,
    format: LlmFormat,
    base_url: &'static str,
    base_url_env: &'static str,
    api_key_env: Option<&'static str>,
}

const BUILTINS: [Builtin; 3] = [
    Builtin {
        name: "openai",
        format: LlmFormat::Openai,
        base_url: "https://api.openai.com/v1",
        base_url_env: "OPENAI_BASE_URL",
        api_key_env: Some("OPENAI_API_KEY"),
    },
    Builtin {
        name: "anthropic",
        format: LlmFormat::Anthropic,
        base_url: "https://api.anthropic.com",
        base_url_env: "ANTHROPIC_BASE_URL",
        api_key_env: Some("ANTHROPIC_API_KEY"),
    },
    Builtin {
        name: "ollama",
        format: LlmFormat::Openai,
        base_url: "http://127.0.0.1:11434/v1",
        base_url_env: "OLLAMA_BASE_URL",
        api_key_env: None,
    },
];

impl ProvidersConfig {
    /// Every provider the config and `env` describe, built-ins first, then
    /// the added ones in file order. `env` reads a variable (`None` when
    /// unset); pass `|k| std::env::var(k).ok()` for the process's.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<ProviderSettings>, ConfigError> {
        let mut seen: Vec<&str> = Vec::new();
        for entry in &self.providers {
            let ok = !entry.name.is_empty()
                && entry.name != OFFLINE_PROVIDER
                && entry.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !ok {
                return Err(ConfigError::BadName(entry.name.clone()));
            }
            if seen.contains(&entry.name.as_str()) {
                return Err(ConfigError::Duplicate(entry.name.clone()));
            }
            seen.push(&entry.name);
        }
        let entry = |name: &str| self.providers.iter().find(|p| p.name == name);
        let set = |var: &str| env(var).filter(|v| !v.trim().is_empty());

        let mut resolved = Vec::new();
        for b in &BUILTINS {
            let over = entry(b.name);
            let base_url_env = over.and_then(|o| o.base_url_env.as_deref()).unwrap_or(b.base_url_env);
            let api_key_env = over.and_then(|o| o.api_key_env.as_deref()).or(b.api_key_env);
            let base_url = set(base_url_env)
                .or_else(|| over.and_then(|o| o.base_url.clone()))
                .unwrap_or_else(|| b.base_url.to_owned());
            resolved.push(ProviderSettings {
                name: b.name.to_owned(),
                format: over.and_then(|o| o.format).unwrap_or(b.format),
                base_url: checked_url(b.name, &base_url)?,
                api_key: api_key_env.and_then(set).map(ApiKey),
                api_key_env: api_key_env.map(str::to_owned),
                max_tokens: over.and_then(|o| o.max_tokens).unwrap_or(self.max_tokens),
            });
        }
        for p in self.providers.iter().filter(|p| BUILTINS.iter().all(|b| b.name != p.name)) {
            let format = p.format.ok_or_else(|| ConfigError::MissingFormat(p.name.clone()))?;
            let base_url = p
                .base_url_env
                .as_deref()
                .and_then(set)
                .or_else(|| p.base_url.clone())
                .ok_or_else(|| ConfigError::MissingBaseUrl(p.name.clone()))?;
            resolved.push(ProviderSettings {
                name: p.name.clone(),
                format,
                base_url: checked_url(&p.name, &base_url)?,
                api_key: p.api_key_env.as_deref().and_then(set).map(ApiKey),
                api_key_env: p.api_key_env.clone(),
                max_tokens: p.max_tokens.unwrap_or(self.max_tokens),
            });
        }
        Ok(resolved)
    }

    /// The price table: the built-in prices with the config's on top.
    pub fn price_table(&self) -> PriceTable {
        let mut table = PriceTable::builtin();
        table.extend(self.prices.iter().map(|(k, v)| (k.clone(), *v)));
        table
    }

    /// The HTTP client every provider shares (one connection pool).
    pub fn http_client(&self) -> Result<reqwest::Client, ConfigError> {
        let secs = |value: f64, field: &'static str| {
            if value.is_finite() && value > 0.0 && value < 1e9 {
                Ok(Duration::from_secs_f64(value))
            } else {
                Err(ConfigError::BadTimeout(field))
            }
        };
        reqwest::Client::builder()
            .connect_timeout(secs(self.connect_timeout_secs, "connect_timeout_secs")?)
            .read_timeout(secs(self.read_timeout_secs, "read_timeout_secs")?)
            .user_agent(concat!("subs/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client(e.to_string()))
    }
}

/// `url` without trailing slashes, when it is an http(s) URL.
fn checked_url(name: &str, url: &str) -> Result<String, ConfigError> {
    let bad = |reason: String| ConfigError::BadBaseUrl { name: name.to_owned(), url: url.to_owned(), reason };
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| bad(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!("the scheme is `{}`", parsed.scheme())));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("it has a query or fragment".to_owned()));
    }
    Ok(url.trim().trim_end_matches('/').to_owned())
}

/// The registry for `config` and `env`: the offline model (`subs`), the
/// built-in providers, and the configured ones, all pricing calls with
/// [`ProvidersConfig::price_table`] (which is also the registry's
/// [`Models::prices`]). `env` reads a variable; see
/// [`models_from_env`] for the process environment.
pub fn models_from_config(
    config: &ProvidersConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Models, ConfigError> {
    let client = config.http_client()?;
    let prices = Arc::new(config.price_table());
    let mut models = Models::with_offline().with_shared_prices(Arc::clone(&prices));
    for settings in config.resolve(env)? {
        let name = settings.name.clone();
        models.register(&name, Arc::new(HttpProvider::new(settings, client.clone(), Arc::clone(&prices))));
    }
    Ok(models)
}

/// [`models_from_config`] with the process's environment.
pub fn models_from_env(config: &ProvidersConfig) -> Result<Models, ConfigError> {
    models_from_config(config, &|key| std::env::var(key).ok())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    fn by_name(all: &[ProviderSettings], name: &str) -> ProviderSettings {
        all.iter().find(|s| s.name == name).cloned().unwrap()
    }

    #[test]
    fn built_ins_come_from_defaults_and_environment() {
        let all = ProvidersConfig::default()
            .resolve(&env(&[
                ("OPENAI_API_KEY", "sk-1"),
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
                ("OLLAMA_BASE_URL", " "),
            ]))
            .unwrap();
        let openai = by_name(&all, "openai");
        assert_eq!(openai.base_url, "https://api.openai.com/v1");
        assert_eq!(openai.api_key, Some(ApiKey::new("sk-1")));
        let anthropic = by_name(&all, "anthropic");
        assert_eq!((anthropic.base_url.as_str(), anthropic.api_key.is_none()), ("http://127.0.0.1:9", true));
        assert_eq!(anthropic.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(anthropic.max_tokens, DEFAULT_MAX_TOKENS);
        let ollama = by_name(&all, "ollama");
        assert_eq!((ollama.format, ollama.base_url.as_str()), (LlmFormat::Openai, "http://127.0.0.1:11434/v1"));
        assert_eq!(ollama.api_key_env, None);
    }

    #[test]
    fn the_file_adds_providers_and_adjusts_built_ins_and_the_environment_wins() {
        let config: ProvidersConfig = toml_like(serde_json::json!({
            "max_tokens": 1000,
            "providers": [
                {"name": "openai", "base_url": "https://proxy/v1", "api_key_env": "PROXY_KEY"},
                {"name": "local", "format": "openai", "base_url": "http://127.0.0.1:8080/v1"},
                {"name": "gw", "format": "anthropic", "base_url": "https://gw", "api_key_env": "GW_KEY",
                 "base_url_env": "GW_URL", "max_tokens": 64}
            ],
            "prices": {"local/qwen": {"input": "0.05", "output": 0.1}}
        }));
        let all = config.resolve(&env(&[("PROXY_KEY", "k"), ("GW_URL", "https://gw2/"), ("GW_KEY", "g")])).unwrap();
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["openai", "anthropic", "ollama", "local", "gw"]);
        let openai = by_name(&all, "openai");
        assert_eq!(
            (openai.base_url.as_str(), openai.api_key.as_ref().map(ApiKey::expose)),
            ("https://proxy/v1", Some("k"))
        );
        let gw = by_name(&all, "gw");
        assert_eq!((gw.format, gw.base_url.as_str(), gw.max_tokens), (LlmFormat::Anthropic, "https://gw2", 64));
        assert_eq!(by_name(&all, "anthropic").max_tokens, 1000);
        let table = config.price_table();
        assert_eq!(table.get("local/qwen"), Some(&Price::per_million("0.05", "0.1")));
        assert!(table.get("openai/gpt-4o").is_some());

        let over = config.resolve(&env(&[("OPENAI_BASE_URL", "https://env/v1")])).unwrap();
        assert_eq!(by_name(&over, "openai").base_url, "https://env/v1");
    }

    fn toml_like(value: serde_json::Value) -> ProvidersConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let cases: [(serde_json::Value, &str); 7] = [
            (serde_json::json!([{"name": "a/b", "format": "openai", "base_url": "http://x"}]), "`a/b` is not allowed"),
            (
                serde_json::json!([{"name": "subs", "format": "openai", "base_url": "http://x"}]),
                "`subs` is not allowed",
            ),
            (serde_json::json!([{"name": "x", "base_url": "http://x"}]), "`x` needs a `format`"),
            (serde_json::json!([{"name": "x", "format": "openai"}]), "`x` needs a `base_url`"),
            (serde_json::json!([{"name": "x", "format": "openai", "base_url": "ftp://x"}]), "scheme is `ftp`"),
            (serde_json::json!([{"name": "x", "format": "openai", "base_url": "not a url"}]), "`not a url`"),
            (
                serde_json::json!([{"name": "x", "format": "openai", "base_url": "http://a"},
                                   {"name": "x", "format": "openai", "base_url": "http://b"}]),
                "configured twice",
            ),
        ];
        for (providers, says) in cases {
            let config = toml_like(serde_json::json!({ "providers": providers }));
            let e = config.resolve(&env(&[])).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
        assert!(serde_json::from_value::<ProvidersConfig>(serde_json::json!({"provders": []})).is_err());
        let config = ProvidersConfig { read_timeout_secs: 0.0, ..ProvidersConfig::default() };
        assert_eq!(config.http_client().unwrap_err(), ConfigError::BadTimeout("read_timeout_secs"));
    }

    #[test]
    fn keys_never_show_in_debug_output() {
        let config = ProvidersConfig {
            providers: vec![ProviderConfig {
                name: "x".into(),
                format: Some(LlmFormat::Anthropic),
                base_url: Some("http://127.0.0.1:1".into()),
                api_key_env: Some("X_KEY".into()),
                base_url_env: None,
                max_tokens: None,
            }],
            ..ProvidersConfig::default()
        };
        let env = env(&[("X_KEY", "sk-secret-123"), ("OPENAI_API_KEY", "sk-secret-456")]);
        let all = config.resolve(&env).unwrap();
        let printed = format!("{all:?} {config:?}");
        assert!(!printed.contains("sk-secret"), "{printed}");
        assert!(printed.contains("ApiKey(<redacted>)"), "{printed}");
        let models = models_from_config(&config, &env).unwrap();
        let printed = format!("{models:?}");
        assert!(!printed.contains("sk-secret"), "{printed}");
        assert_eq!(models.providers().collect::<Vec<_>>(), ["anthropic", "ollama", "openai", "subs", "x"]);
    }
}
