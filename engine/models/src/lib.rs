//! The LLM providers the subs engine reaches over HTTP, and the config
//! that builds its [`Models`] registry.
//!
//! The provider trait, the registry, prices, the two wire formats (as
//! pure translations) and the built-in offline model are in `subs-core`;
//! this crate adds what needs an HTTP client, so that the core does not
//! link one.
//!
//! # Layout
//!
//! - [`config`]: [`ProvidersConfig`] (the config file's providers and
//!   prices) plus the environment → a [`Models`] registry
//!   ([`models_from_config`]).
//! - `provider.rs`: [`HttpProvider`], one POST per call, read whole or as
//!   an event stream.
//! - `http.rs`: how HTTP failures (transport errors, error statuses,
//!   `retry-after`) become [`ModelError`]s.

pub mod config;
mod http;
mod provider;

// The core's model modules under the names the providers use for them.
use subs_core::model::{Completion, ModelError, Models, OFFLINE_PROVIDER, Provider, anthropic, openai, price, reply};
use subs_core::{telemetry, worker};
use subs_protocol::sse;

pub use self::config::{
    ApiKey, ConfigError, ProviderConfig, ProviderSettings, ProvidersConfig, models_from_config, models_from_env,
};
pub use self::provider::HttpProvider;
