//! [`HttpProvider`]: a model service reached over HTTP in one of the two
//! wire formats — one call is one POST, its answer read whole or as an
//! event stream, priced from the [`PriceTable`].

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use subs_protocol::{LlmFormat, LlmRequest};
use tracing::Instrument;

use super::config::ProviderSettings;
use super::http::{read_body, status_error, transport_error};
use super::price::PriceTable;
use super::reply::ReplyBuilder;
use super::sse::SseParser;
use super::{Completion, ModelError, Provider, anthropic, openai};
use crate::worker::{BoxFuture, DeltaSink};
use subs_core::model::ProviderTelemetry;
use subs_core::model::says::quote;

/// Largest non-streamed response body read.
const MAX_RESPONSE: usize = 32 * 1024 * 1024;

/// A provider speaking OpenAI Chat Completions or Anthropic Messages at a
/// base URL. `Debug` shows no key.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    settings: ProviderSettings,
    /// Shared by every provider of a registry: one connection pool.
    client: reqwest::Client,
    prices: Arc<PriceTable>,
}

impl HttpProvider {
    /// A provider for `settings`, sending with `client` and pricing calls
    /// with `prices` (looked up as `<settings.name>/<model>`).
    pub fn new(settings: ProviderSettings, client: reqwest::Client, prices: Arc<PriceTable>) -> HttpProvider {
        HttpProvider { settings, client, prices }
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    fn url(&self) -> String {
        match self.settings.format {
            LlmFormat::Openai => format!("{}/chat/completions", self.settings.base_url),
            LlmFormat::Anthropic => format!("{}/v1/messages", self.settings.base_url),
        }
    }

    fn headers(&self) -> Result<HeaderMap, ModelError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let key = |text: String| {
            // Marked sensitive so no HTTP-level debug output shows it.
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                ModelError::invalid_request(format!(
                    "the API key of provider `{}` is not a valid HTTP header value",
                    self.settings.name
                ))
            })?;
            value.set_sensitive(true);
            Ok::<_, ModelError>(value)
        };
        match self.settings.format {
            LlmFormat::Openai => {
                if let Some(k) = &self.settings.api_key {
                    headers.insert(AUTHORIZATION, key(format!("Bearer {}", k.expose()))?);
                }
            }
            LlmFormat::Anthropic => {
                if let Some(k) = &self.settings.api_key {
                    headers.insert("x-api-key", key(k.expose().to_owned())?);
                }
                headers.insert("anthropic-version", HeaderValue::from_static(anthropic::ANTHROPIC_VERSION));
            }
        }
        Ok(headers)
    }

    /// Why a 401/403 may have happened, when no key was sent.
    fn key_hint(&self) -> Option<String> {
        match (&self.settings.api_key, &self.settings.api_key_env) {
            (None, Some(var)) => Some(format!("no API key was sent: {var} is not set")),
            (None, None) => Some(format!("provider `{}` has no `api_key_env` configured", self.settings.name)),
            (Some(_), _) => None,
        }
    }

    async fn call(&self, request: LlmRequest, deltas: Option<DeltaSink>) -> Result<Completion, ModelError> {
        let name = self.settings.name.as_str();
        let stream = deltas.is_some();
        let body = match self.settings.format {
            LlmFormat::Openai => openai::request_body(&request, stream),
            LlmFormat::Anthropic => anthropic::request_body(&request, self.settings.max_tokens, stream)?,
        };
        let body = serde_json::to_vec(&body).map_err(|e| ModelError::invalid_request(e.to_string()))?;
        let mut post = self.client.post(self.url()).headers(self.headers()?);
        if let Some(traceparent) = crate::telemetry::current_traceparent() {
            post = post.header("traceparent", traceparent);
        }
        let response = post.body(body).send().await.map_err(|e| transport_error(name, "sending the request", &e))?;
        if !response.status().is_success() {
            return Err(status_error(name, response, self.key_hint().as_deref()).await);
        }
        let show_reasoning = request.reasoning.as_ref().and_then(|r| r.exclude) != Some(true);
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
        let reply = ReplyBuilder::new(deltas, show_reasoning);
        let Completion { response: mut answer, id } = if is_sse {
            self.read_stream(response, reply).await?
        } else {
            // Also taken when a server ignored `stream: true`: the whole
            // reply then streams at once.
            let bytes =
                read_body(response, MAX_RESPONSE).await.map_err(|e| transport_error(name, "reading the answer", &e))?;
            let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
                ModelError::provider_error(format!(
                    "{name} answered with a body that is not JSON ({e}): {}",
                    quote(&String::from_utf8_lossy(&bytes))
                ))
            })?;
            match self.settings.format {
                LlmFormat::Openai => openai::read_response(&value, reply)?,
                LlmFormat::Anthropic => anthropic::read_response(&value, reply)?,
            }
        };
        let answered = if answer.model.is_empty() { request.model.clone() } else { answer.model };
        let usage = answer.usage.as_ref();
        answer.cost = usage
            .and_then(|u| self.prices.reply_cost(&format!("{name}/{}", request.model), &answered, u))
            .map(|m| m.to_string());
        answer.model = format!("{name}/{answered}");
        Ok(Completion { response: answer, id })
    }

    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        reply: ReplyBuilder,
    ) -> Result<Completion, ModelError> {
        let name = self.settings.name.as_str();
        enum Reader {
            Openai(openai::StreamReader),
            Anthropic(anthropic::StreamReader),
        }
        let mut reader = match self.settings.format {
            LlmFormat::Openai => Reader::Openai(openai::StreamReader::new(reply)),
            LlmFormat::Anthropic => Reader::Anthropic(anthropic::StreamReader::new(reply)),
        };
        let mut parser = SseParser::new();
        let mut feed = |event: &super::sse::SseEvent| match &mut reader {
            Reader::Openai(r) => r.event(event),
            Reader::Anthropic(r) => r.event(event),
        };
        'read: loop {
            let chunk = response.chunk().await.map_err(|e| transport_error(name, "streaming the answer", &e))?;
            let events = match &chunk {
                Some(bytes) => parser.push(bytes),
                None => Ok(parser.finish().into_iter().collect()),
            }
            .map_err(|e| ModelError::provider_error(format!("{name} sent a broken event stream: {e}")))?;
            for event in &events {
                if feed(event)? {
                    break 'read;
                }
            }
            if chunk.is_none() {
                break;
            }
        }
        match reader {
            Reader::Openai(r) => r.finish(name),
            Reader::Anthropic(r) => r.finish(name),
        }
    }
}

impl Provider for HttpProvider {
    fn telemetry(&self) -> ProviderTelemetry {
        let url = reqwest::Url::parse(&self.settings.base_url).ok();
        ProviderTelemetry {
            name: Some(match self.settings.format {
                LlmFormat::Openai => "openai",
                LlmFormat::Anthropic => "anthropic",
            }),
            address: url.as_ref().and_then(|u| u.host_str()).map(str::to_owned),
            port: url.as_ref().and_then(reqwest::Url::port_or_known_default),
        }
    }

    fn complete(
        &self,
        request: LlmRequest,
        deltas: Option<DeltaSink>,
    ) -> BoxFuture<'_, Result<Completion, ModelError>> {
        let span = tracing::info_span!(
            "llm_call",
            provider = %self.settings.name,
            model = %request.model,
            stream = deltas.is_some(),
        );
        Box::pin(
            async move {
                let result = self.call(request, deltas).await;
                match &result {
                    Ok(Completion { response: r, id }) => tracing::debug!(
                        id = id.as_deref().unwrap_or_default(),
                        finish_reason = r.finish_reason.as_deref().unwrap_or_default(),
                        cost = r.cost.as_deref().unwrap_or("unknown"),
                        "llm call done"
                    ),
                    Err(e) => {
                        tracing::warn!(code = e.code.as_str(), retryable = e.retryable, error = %e, "llm call failed")
                    }
                }
                result
            }
            .instrument(span),
        )
    }
}
