//! LLM calls: the core's [`Provider`] trait, [`Models`] registry, prices,
//! wire formats and offline model, with the providers over HTTP and the
//! config that builds a registry ([`config`], [`models_from_config`]) from
//! `subs-models`.

pub use subs_core::model::*;
pub use subs_models::{
    ApiKey, ConfigError, HttpProvider, ProviderConfig, ProviderSettings, ProvidersConfig, config, models_from_config,
    models_from_env,
};
