//! What the engine tells operators: its [metrics](crate::metrics), always
//! kept, and OpenTelemetry spans, sent when a span processor is
//! configured ([`EngineConfig::spans`](crate::EngineConfig::spans)).
//!
//! Spans follow a turn: the turn (`invoke_agent`), each decision in it,
//! and each try of a call its decisions started (`chat` for LLM calls,
//! `execute_tool` for tools, `invoke_agent` for sub-agents), with the
//! OpenTelemetry GenAI attributes. A turn can wait hours for a client and
//! outlive the process that started it, so a span is not an object kept
//! in memory: where it sits in its trace ([`SpanRef`]) is stored with what
//! it covers (the turn, the call), and the span is built and sent when
//! that ends, from the stored times. Decisions, which live within one
//! delivery, are sent when the delivery ends.
//!
//! A turn is traced when spans are sent or when its input came with a
//! W3C `traceparent` (whose trace it then joins); the context of the
//! decision or call at hand is passed on as `traceparent` to HTTP workers
//! and LLM providers either way. With neither, nothing here runs.
//!
//! Span names and text attributes carry what agents chose (model, tool and
//! agent names, call ids, error messages): each is cut to
//! [`TelemetryLimits::max_attribute_bytes`] before it is sent, so a span
//! waiting in the exporter's queue holds a bounded number of bytes.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks, SpanProcessor};

pub use crate::store::SpanRef;

/// Where the engine's spans go: a span processor (batching, exporting),
/// shared by every session.
pub type Spans = Arc<dyn SpanProcessor>;

/// A span to send: what it covers, its times and attributes.
#[derive(Debug)]
pub struct Span {
    /// Where it sits in its trace.
    pub at: SpanRef,
    /// Its name (`chat gpt-4o`, `execute_tool add`).
    pub name: String,
    /// `Client` for calls out of the process, `Internal` otherwise.
    pub kind: SpanKind,
    /// When it started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Bounds on what the engine's metrics and spans take from tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetryLimits {
    /// The model names metrics label LLM calls with.
    pub labels: crate::metrics::LabelLimits,
    /// The longest span name, text attribute or status message sent, in
    /// bytes; longer ones are cut, ending with `…`.
    pub max_attribute_bytes: usize,
}

/// [`TelemetryLimits::max_attribute_bytes`] unless set.
pub const DEFAULT_ATTRIBUTE_BYTES: usize = 1024;

impl Default for TelemetryLimits {
    fn default() -> Self {
        Self { labels: crate::metrics::LabelLimits::default(), max_attribute_bytes: DEFAULT_ATTRIBUTE_BYTES }
    }
}

/// The instant `ms` after the Unix epoch.
pub fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The engine's span sending, when configured.
#[derive(Clone)]
pub struct Tracer {
    spans: Option<Spans>,
    max_attribute_bytes: usize,
}

impl Default for Tracer {
    fn default() -> Self {
        Self::new(None)
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").field("sending", &self.spans.is_some()).finish()
    }
}

impl Tracer {
    /// Spans go to `spans`; none are sent when `None`. Text is cut to
    /// [`DEFAULT_ATTRIBUTE_BYTES`] unless
    /// [`with_max_attribute_bytes`](Self::with_max_attribute_bytes) says.
    pub fn new(spans: Option<Spans>) -> Self {
        Self { spans, max_attribute_bytes: DEFAULT_ATTRIBUTE_BYTES }
    }

    /// This tracer, cutting span names, text attributes and status
    /// messages to `max` bytes.
    #[must_use]
    pub fn with_max_attribute_bytes(mut self, max: usize) -> Self {
        self.max_attribute_bytes = max;
        self
    }

    /// Whether spans are sent.
    pub fn sends(&self) -> bool {
        self.spans.is_some()
    }

    /// The span of a turn starting now, if it is traced: a child of the
    /// span its input came with (`incoming`), else, while spans are sent,
    /// the root of a new trace.
    pub fn turn(&self, incoming: Option<&SpanRef>) -> Option<SpanRef> {
        match incoming {
            Some(parent) => Some(child_of(parent)),
            None if self.sends() => {
                Some(SpanRef { trace_id: hex(&random::<16>()), span_id: new_span_id(), parent_id: None })
            }
            None => None,
        }
    }

    /// Sends `span`, if spans are sent. A span whose ids do not read as
    /// ids (a damaged record) is dropped.
    pub fn send(&self, span: Span) {
        let Some(spans) = &self.spans else { return };
        let Some(data) = span_data(bounded(span, self.max_attribute_bytes)) else { return };
        spans.on_end(data);
    }
}

/// A new span under `parent`, in its trace.
pub fn child_of(parent: &SpanRef) -> SpanRef {
    SpanRef { trace_id: parent.trace_id.clone(), span_id: new_span_id(), parent_id: Some(parent.span_id.clone()) }
}

fn new_span_id() -> String {
    loop {
        let id = random::<8>();
        if id != [0; 8] {
            return hex(&id);
        }
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    // The OS's generator does not fail on the systems subs runs on; were
    // it to, the ids would be all zeros and the spans dropped as invalid.
    let _ = getrandom::fill(&mut bytes);
    bytes
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

tokio::task_local! {
    /// The `traceparent` of the decision or call whose work the task is
    /// doing: HTTP workers and LLM providers are sent it.
    static TRACEPARENT: String;
}

/// Runs `work` with `span` as the trace context its requests carry
/// (`traceparent`); with `None`, as it is.
pub async fn in_span<F: std::future::Future>(span: Option<&SpanRef>, work: F) -> F::Output {
    match span {
        Some(span) => TRACEPARENT.scope(traceparent(span), work).await,
        None => work.await,
    }
}

/// The `traceparent` for requests made now, inside [`in_span`].
pub fn current_traceparent() -> Option<String> {
    TRACEPARENT.try_with(Clone::clone).ok()
}

/// The `traceparent` header that makes `span` the parent of what
/// receives it (W3C Trace Context, version 00, sampled).
pub fn traceparent(span: &SpanRef) -> String {
    format!("00-{}-{}-01", span.trace_id, span.span_id)
}

/// The span a `traceparent` header names, as the parent of what the
/// request starts; `None` for a header that is not a valid version-00
/// (or later) trace context, which is then ignored, as the W3C
/// recommendation says. OpenTelemetry's own W3C propagator reads it.
pub fn parse_traceparent(header: &str) -> Option<SpanRef> {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract_with_context(&opentelemetry::Context::new(), &Traceparent(header));
    let span = context.span();
    let parent = span.span_context();
    parent.is_valid().then(|| SpanRef {
        trace_id: parent.trace_id().to_string(),
        span_id: parent.span_id().to_string(),
        parent_id: None,
    })
}

/// A request's `traceparent` header, the only one of its headers the
/// propagator is shown: `tracestate` is not kept.
struct Traceparent<'a>(&'a str);

impl opentelemetry::propagation::Extractor for Traceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        key.eq_ignore_ascii_case("traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// `span` with its name, text attributes and error cut to `max` bytes.
fn bounded(mut span: Span, max: usize) -> Span {
    cut(&mut span.name, max);
    if let Some(error) = &mut span.error {
        cut(error, max);
    }
    for attribute in &mut span.attributes {
        match &mut attribute.value {
            opentelemetry::Value::String(text) if text.as_str().len() > max => {
                let mut owned = text.as_str().to_owned();
                cut(&mut owned, max);
                *text = owned.into();
            }
            opentelemetry::Value::Array(opentelemetry::Array::String(texts)) => {
                for text in texts.iter_mut().filter(|t| t.as_str().len() > max) {
                    let mut owned = text.as_str().to_owned();
                    cut(&mut owned, max);
                    *text = owned.into();
                }
            }
            _ => {}
        }
    }
    span
}

/// Cuts `text` to at most `max` bytes on a character boundary, ending
/// with `…` when anything was cut (and `max` leaves room for it).
fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    const MORE: &str = "…";
    let room = if max > MORE.len() { max - MORE.len() } else { max };
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    if max > MORE.len() {
        text.push_str(MORE);
    }
}

fn span_data(span: Span) -> Option<SpanData> {
    let trace_id = TraceId::from_hex(&span.at.trace_id).ok()?;
    let span_id = SpanId::from_hex(&span.at.span_id).ok()?;
    let parent_span_id = match &span.at.parent_id {
        Some(id) => SpanId::from_hex(id).ok()?,
        None => SpanId::INVALID,
    };
    let status = match span.error {
        Some(message) => Status::error(message),
        None => Status::Unset,
    };
    Some(SpanData {
        span_context: SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, false, TraceState::NONE),
        parent_span_id,
        parent_span_is_remote: false,
        span_kind: span.kind,
        name: Cow::Owned(span.name),
        start_time: span.start,
        end_time: span.end.max(span.start),
        attributes: span.attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope(),
    })
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("subs").with_version(env!("CARGO_PKG_VERSION")).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_and_bad_ones_are_ignored() {
        let span = SpanRef {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: "00f067aa0ba902b7".into(),
            parent_id: None,
        };
        let header = traceparent(&span);
        assert_eq!(header, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(parse_traceparent(&header), Some(span));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        // A later version may carry more.
        assert!(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some());
        // Whatever the propagator lets through is passed on well-formed.
        for lenient in ["00-abc-def-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"] {
            if let Some(span) = parse_traceparent(lenient) {
                assert_eq!((span.trace_id.len(), span.span_id.len()), (32, 16), "{lenient}");
                assert!(
                    traceparent(&span).bytes().all(|b| b == b'-' || b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                );
            }
        }
    }

    #[test]
    fn names_attributes_and_errors_are_cut_to_the_bound() {
        let long = format!("é{}", "x".repeat(1 << 20));
        let span = Span {
            at: SpanRef {
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                span_id: "00f067aa0ba902b7".into(),
                parent_id: None,
            },
            name: format!("chat {long}"),
            kind: SpanKind::Client,
            start: UNIX_EPOCH,
            end: UNIX_EPOCH,
            attributes: vec![
                KeyValue::new("gen_ai.request.model", long.clone()),
                KeyValue::new("gen_ai.usage.input_tokens", 3_i64),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(long.clone())].into()),
                ),
            ],
            error: Some(long.clone()),
        };
        let data = span_data(bounded(span, 16)).unwrap();
        assert_eq!(data.name, format!("chat é{}…", "x".repeat(6)));
        assert_eq!(data.attributes[0].value.as_str(), format!("é{}…", "x".repeat(11)));
        assert_eq!(data.attributes[1].value, opentelemetry::Value::I64(3));
        let opentelemetry::Value::Array(opentelemetry::Array::String(reasons)) = &data.attributes[2].value else {
            panic!("{:?}", data.attributes[2])
        };
        assert!(reasons[0].as_str().len() <= 16);
        assert_eq!(data.status, Status::error(format!("é{}…", "x".repeat(11))));
        // A bound too small for the mark cuts on a character boundary.
        let mut text = "éé".to_owned();
        cut(&mut text, 3);
        assert_eq!(text, "é");
    }

    #[test]
    fn a_turn_is_traced_only_when_spans_are_sent_or_its_input_was() {
        let off = Tracer::new(None);
        assert_eq!(off.turn(None), None);
        let incoming = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let turn = off.turn(Some(&incoming)).unwrap();
        assert_eq!(turn.trace_id, incoming.trace_id);
        assert_eq!(turn.parent_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(turn.span_id.len(), 16);
        assert_ne!(turn.span_id, incoming.span_id);
    }
}
