//! LLM calls: the [`Provider`] trait every model backend implements, and
//! [`Models`], the registry that maps a `provider/model` name to the
//! provider that serves it.
//!
//! The loop never talks to a backend directly: it hands an [`LlmRequest`] to
//! [`Models::complete`] (or [`Models::resolve`] then
//! [`Provider::complete`]), which picks the provider by the name's prefix
//! and passes the rest of the name on. Streamed pieces of the reply go to a
//! [`DeltaSink`] as they arrive, before the call settles; the call settles
//! with a [`Completion`]: the reply and the provider's id of it.
//!
//! # Layout
//!
//! - [`ModelError`] (`error.rs`): why a call failed, with its
//!   [`ErrorCode`](subs_protocol::ErrorCode) and whether to retry.
//! - [`offline`]: the built-in deterministic model ([`OFFLINE_MODEL`]) for
//!   demos and tests.
//! - [`openai`], [`anthropic`]: the two wire formats — request bodies,
//!   responses, stream events; [`reply`] assembles a reply from either's
//!   pieces ([`assistant_message`] is the message a reply is recorded
//!   as); [`says`] reads a provider's error object.
//! - The providers that speak these formats over HTTP, and the config
//!   that builds a [`Models`] registry from the config file and the
//!   environment, are in the `subs-models` crate.
//! - [`native`]: the formats as pure translations ([`to_native`],
//!   [`from_native`], [`completion_from_native`]) for worker-handled
//!   calls.
//! - [`price`]: [`Money`] (exact decimal dollars) and the [`PriceTable`].

pub mod anthropic;
mod error;
#[cfg(test)]
mod fuzz;
pub mod native;
pub mod offline;
pub mod openai;
pub mod price;
pub mod reply;
pub mod says;
use subs_protocol::sse;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use subs_protocol::{LlmRequest, LlmResponse};

pub use self::anthropic::{ANTHROPIC_VERSION, DEFAULT_MAX_TOKENS};
pub use self::error::ModelError;
pub use self::native::{completion_from_native, from_native, to_native};
pub use self::offline::OfflineProvider;
pub use self::price::{Money, MoneyError, Price, PriceTable, TokenUsage, add_cost};
pub use self::reply::assistant_message;
use crate::worker::{BoxFuture, DeltaSink};

/// The built-in offline model's full name: the default model for demos and
/// tests (no key, no network).
pub const OFFLINE_MODEL: &str = "subs/offline";

/// The provider name the offline model is registered under.
pub const OFFLINE_PROVIDER: &str = "subs";

/// A model backend: one per wire format or service (OpenAI-compatible,
/// Anthropic, the offline model).
pub trait Provider: Send + Sync {
    /// Runs one call. `request.model` is the model name without the provider
    /// prefix (`gpt-4o-mini`, not `openai/gpt-4o-mini`).
    ///
    /// When `deltas` is given the provider streams: each piece of the reply
    /// goes to the sink as soon as it is produced, before the returned
    /// future resolves, and the pieces add up to the final response. A
    /// dropped future abandons the call.
    fn complete(&self, request: LlmRequest, deltas: Option<DeltaSink>)
    -> BoxFuture<'_, Result<Completion, ModelError>>;

    /// What its calls' spans say of it; nothing by default.
    fn telemetry(&self) -> ProviderTelemetry {
        ProviderTelemetry::default()
    }
}

/// A provider's answer to one call: the reply, and the provider's id of it.
///
/// The id is kept beside the [`LlmResponse`] rather than in it: it is for
/// the call's span (`gen_ai.response.id`), not for agents or the session's
/// record, and the response is a wire type agents already read.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The reply.
    pub response: LlmResponse,
    /// The provider's id of the reply, as it sent it (OpenAI's
    /// `chatcmpl-…`, Anthropic's `msg_…`); `None` when it sent none, and
    /// for the offline model, which has no such id.
    pub id: Option<String>,
}

impl From<LlmResponse> for Completion {
    /// A reply without a provider id.
    fn from(response: LlmResponse) -> Self {
        Completion { response, id: None }
    }
}

/// What an LLM call's span says of the provider that ran it, in
/// OpenTelemetry's GenAI conventions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderTelemetry {
    /// `gen_ai.provider.name`: the well-known name of the provider's wire
    /// format (`openai`, `anthropic`); `None`: the configured name is used.
    pub name: Option<&'static str>,
    /// `server.address`: the host calls are sent to.
    pub address: Option<String>,
    /// `server.port`: its port.
    pub port: Option<u16>,
}

/// The providers the engine can call, by name, and the price table its
/// LLM calls are priced with.
///
/// Cheap to clone (providers and prices are shared), so the loop can hold
/// one per session task.
#[derive(Clone)]
pub struct Models {
    /// Ordered so listings and error messages come out the same every time.
    providers: BTreeMap<String, Arc<dyn Provider>>,
    /// What calls cost: the providers' own (HTTP providers price their
    /// replies themselves) and the replies workers give for calls they
    /// handle, which the loop prices.
    prices: Arc<PriceTable>,
}

impl Default for Models {
    fn default() -> Self {
        Self { providers: BTreeMap::new(), prices: Arc::new(PriceTable::builtin()) }
    }
}

impl Models {
    /// What the provider of `model` (`provider/model`) says of itself in
    /// spans; `None` for a model no provider serves.
    pub fn telemetry(&self, model: &str) -> Option<ProviderTelemetry> {
        let (provider, _) = model.split_once('/')?;
        Some(self.providers.get(provider)?.telemetry())
    }

    /// A registry with no providers, pricing with the built-in prices.
    pub fn new() -> Self {
        Self::default()
    }

    /// This registry pricing with `prices` instead. Providers already
    /// registered keep the table they were built with;
    /// `subs_models::models_from_config` gives the registry and its HTTP
    /// providers the same table ([`Models::with_shared_prices`]).
    #[must_use]
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = Arc::new(prices);
        self
    }

    /// This registry pricing with `prices`, a table shared with the
    /// providers it registers, so that both price a call alike.
    #[must_use]
    pub fn with_shared_prices(mut self, prices: Arc<PriceTable>) -> Self {
        self.prices = prices;
        self
    }

    /// The price table of calls whose reply came without a cost (worker-
    /// handled calls, above all).
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// A registry with the built-in offline provider registered as `subs`,
    /// so [`OFFLINE_MODEL`] resolves.
    pub fn with_offline() -> Self {
        let mut models = Self::new();
        models.register(OFFLINE_PROVIDER, Arc::new(OfflineProvider::new()));
        models
    }

    /// Registers `p` as the provider `provider`, replacing any provider
    /// already registered under that name. Names are matched exactly and end
    /// at the model name's first `/`, so a name holding a `/` never resolves.
    pub fn register(&mut self, provider: &str, p: Arc<dyn Provider>) {
        self.providers.insert(provider.to_owned(), p);
    }

    /// The registered provider names, in order.
    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.providers.keys().map(String::as_str)
    }

    /// Splits `provider/model` and finds the provider: returns it with the
    /// model name it knows (`openai/gpt-4o` → the `openai` provider and
    /// `gpt-4o`). A name without a `/`, with nothing after it, or with an
    /// unregistered provider is an error naming the model (`provider_error`,
    /// not retryable: no retry can fix it).
    pub fn resolve(&self, model: &str) -> Result<(Arc<dyn Provider>, String), ModelError> {
        let Some((provider, name)) = model.split_once('/') else {
            return Err(ModelError::invalid_request(format!(
                "model `{model}` names no provider: model names are `provider/model`, like `{OFFLINE_MODEL}`"
            )));
        };
        if name.is_empty() {
            return Err(ModelError::invalid_request(format!("model `{model}` names a provider but no model")));
        }
        match self.providers.get(provider) {
            Some(p) => Ok((Arc::clone(p), name.to_owned())),
            None => Err(ModelError::invalid_request(format!(
                "model `{model}`: no provider `{provider}` is configured (configured: {})",
                self.listing()
            ))),
        }
    }

    /// Resolves `request.model` and runs the call on its provider, with the
    /// provider prefix taken off the model name.
    pub async fn complete(&self, mut request: LlmRequest, deltas: Option<DeltaSink>) -> Result<Completion, ModelError> {
        let (provider, name) = self.resolve(&request.model)?;
        request.model = name;
        provider.complete(request, deltas).await
    }

    fn listing(&self) -> String {
        if self.providers.is_empty() { "none".to_owned() } else { self.providers().collect::<Vec<_>>().join(", ") }
    }
}

impl fmt::Debug for Models {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Models").field("providers", &self.providers().collect::<Vec<_>>()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use subs_protocol::{DraftMessage, ErrorCode};

    use super::*;

    /// Records the model name it was asked for.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Provider for Recorder {
        fn complete(
            &self,
            request: LlmRequest,
            _deltas: Option<DeltaSink>,
        ) -> BoxFuture<'_, Result<Completion, ModelError>> {
            self.0.lock().unwrap().push(request.model.clone());
            Box::pin(async move {
                Ok(Completion::from(LlmResponse {
                    model: request.model,
                    content: Some("ok".into()),
                    tool_calls: None,
                    finish_reason: Some("stop".into()),
                    usage: None,
                    cost: None,
                    images: None,
                }))
            })
        }
    }

    fn request(model: &str) -> LlmRequest {
        LlmRequest {
            model: model.into(),
            messages: vec![DraftMessage::user("hi")].into(),
            tools: None,
            temperature: None,
            max_completion_tokens: None,
            reasoning: None,
        }
    }

    #[test]
    fn resolve_splits_at_the_first_slash() {
        let mut models = Models::new();
        models.register("ollama", Arc::new(Recorder::default()));
        let (_, name) = models.resolve("ollama/library/llama3.2:latest").unwrap();
        assert_eq!(name, "library/llama3.2:latest");
    }

    #[test]
    fn bad_names_are_permanent_provider_errors_naming_the_model() {
        let models = Models::with_offline();
        for (model, says) in [
            ("gpt-4o", "names no provider"),
            ("subs/", "no model"),
            ("openai/gpt-4o", "no provider `openai` is configured (configured: subs)"),
        ] {
            let Err(e) = models.resolve(model) else { panic!("{model} resolved") };
            assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false), "{model}");
            assert!(e.message.contains(&format!("`{model}`")), "{e}");
            assert!(e.message.contains(says), "{e}");
        }
        let Err(e) = Models::new().resolve("subs/offline") else { panic!("resolved") };
        assert!(e.message.contains("(configured: none)"), "{e}");
    }

    #[tokio::test]
    async fn complete_strips_the_provider_prefix() {
        let recorder = Arc::new(Recorder::default());
        let mut models = Models::new();
        models.register("fake", recorder.clone());
        let response = models.complete(request("fake/m-1"), None).await.unwrap().response;
        assert_eq!(response.model, "m-1");
        assert_eq!(*recorder.0.lock().unwrap(), ["m-1"]);
    }

    #[tokio::test]
    async fn the_offline_model_is_registered_by_default() {
        let models = Models::with_offline();
        assert_eq!(format!("{models:?}"), r#"Models { providers: ["subs"] }"#);
        let response = models.complete(request(OFFLINE_MODEL), None).await.unwrap().response;
        assert_eq!(response.model, OFFLINE_MODEL);
        assert_eq!(response.content.as_deref(), Some("You said: hi"));
    }
}
