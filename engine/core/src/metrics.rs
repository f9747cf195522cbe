//! The engine's metrics, for Prometheus: latency histograms of decisions,
//! store commits, LLM calls and tool calls; counters of tokens, cost,
//! deliveries, retries and traps; gauges of active sessions and inputs
//! waiting for their session. Names, units and labels are listed in
//! `docs/operations.md`.
//!
//! Recording is a few atomic operations (a histogram observation is a
//! bucket search and two adds), cheap enough to stay always on: Prometheus
//! pulls, so nothing is sent anywhere until `/metrics` is read.
//!
//! The one label whose values tenants choose is the model of LLM calls.
//! A model name becomes a label value only when it names a configured
//! model (one the price table knows, or one a configured provider
//! answered: the offline provider, which answers any name, only for its
//! own model), is at most [`LabelLimits::max_bytes`] long, and fewer than
//! [`LabelLimits::max_values`] names have become labels before; any other
//! name is counted as `other`. So what a scrape carries is bounded by the
//! operator's settings, whatever names agents ask for. Every other label
//! takes its values from a fixed set.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

use crate::model::{Money, PriceTable};
use crate::worker::WorkerError;

/// The label value of every model name that is not a label of its own.
pub const OTHER: &str = "other";

/// Bounds on the model names metrics label LLM calls with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelLimits {
    /// How many distinct model names become label values; later ones are
    /// counted as `other`.
    pub max_values: usize,
    /// The longest model name that becomes a label value, in bytes;
    /// longer ones are counted as `other`.
    pub max_bytes: usize,
}

impl Default for LabelLimits {
    fn default() -> Self {
        Self { max_values: 100, max_bytes: 128 }
    }
}

/// Buckets (seconds) for what takes microseconds to seconds: decisions,
/// commits, tool calls.
const FAST_SECONDS: [f64; 18] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
];

/// Buckets (seconds) for LLM calls: tens of milliseconds to minutes.
const LLM_SECONDS: [f64; 14] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0];

/// Buckets for a commit's size, in store operations.
const BATCH_OPS: [f64; 11] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// Which kind of worker decided.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabel {
    worker: &'static str,
}

/// A delivery's end, by worker kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    worker: &'static str,
    outcome: &'static str,
}

/// A trap's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrapLabel {
    kind: &'static str,
}

/// An LLM call's model.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

/// Tokens by model and kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: &'static str,
}

/// An LLM call's end.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LlmLabels {
    model: String,
    outcome: &'static str,
}

/// Who ran a tool call, and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    handler: &'static str,
    outcome: &'static str,
}

/// The engine's metrics; one per engine, encoded by the server's
/// `/metrics`.
pub struct Metrics {
    registry: Registry,
    decision_seconds: Histograms<WorkerLabel>,
    deliveries: Family<DeliveryLabels, Counter>,
    retries: Family<WorkerLabel, Counter>,
    traps: Family<TrapLabel, Counter>,
    commit_seconds: Histogram,
    commit_ops: Histogram,
    llm_seconds: Histograms<LlmLabels>,
    llm_first_token_seconds: Histograms<ModelLabel>,
    tokens: Family<TokenLabels, Counter>,
    cost_dollars: Family<ModelLabel, Dollars>,
    tool_seconds: Histograms<ToolLabels>,
    sessions_active: Gauge,
    inputs_waiting: Gauge,
    waiting: AtomicI64,
    /// The model names that are label values of their own.
    models: Mutex<HashSet<String>>,
    limits: LabelLimits,
    /// What makes a model name configured before any call answered it.
    prices: PriceTable,
}

/// A counter of dollars, summed exactly: prices are decimals, and a sum
/// of floats drifts (`0.0004000000000000001` for four calls of
/// `0.0001`). The sum is kept as [`Money`] (integer atto-dollars) and
/// written, at each scrape, as the float nearest to it, which prints as
/// the exact decimal for any amount a scrape can show.
#[derive(Debug, Default, Clone)]
struct Dollars(Arc<Mutex<Money>>);

impl Dollars {
    fn add(&self, amount: Money) {
        let mut total = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A sum past i128 atto-dollars (10^20 dollars) stays where it is.
        *total = total.checked_add(amount).unwrap_or(*total);
    }
}

impl TypedMetric for Dollars {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Dollars {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let total = *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Money's decimal, read as a float: the nearest one to the sum.
        let value: f64 = total.to_string().parse().unwrap_or(0.0);
        encoder.encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The workers a delivery goes to: the `worker` label's values.
const WORKERS: [&str; 2] = ["component", "http"];

/// How a delivery ends: the `outcome` label's values.
const DELIVERY_OUTCOMES: [&str; 4] = ["ok", "error", "trap", "timeout"];

/// How a component fails: the `kind` label's values.
const TRAP_KINDS: [&str; 3] = ["trap", "limit", "instantiation"];

/// Who runs a tool call: the `handler` label's values.
const TOOL_HANDLERS: [&str; 3] = ["server", "worker", "client"];

/// How a call ends: the `outcome` label's values of LLM and tool calls.
const CALL_OUTCOMES: [&str; 2] = ["ok", "error"];

/// Histograms by label, each made by a constructor with its buckets.
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn fast() -> Histogram {
    Histogram::new(FAST_SECONDS.iter().copied())
}

fn slow() -> Histogram {
    Histogram::new(LLM_SECONDS.iter().copied())
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(LabelLimits::default(), PriceTable::new())
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `subs_` prefix, with
    /// model names held to `limits`; the models `prices` lists are
    /// configured ones (see the [module docs](self)).
    pub fn new(limits: LabelLimits, prices: PriceTable) -> Self {
        let mut registry = Registry::with_prefix("subs");
        let decision_seconds: Histograms<_> = Family::new_with_constructor(fast);
        registry.register_with_unit(
            "decision_duration",
            "Time a worker took to decide, from the request sent to the decision read, by worker kind (component, http)",
            Unit::Seconds,
            decision_seconds.clone(),
        );
        let deliveries = Family::default();
        registry.register(
            "deliveries",
            "Decision requests delivered to workers, by worker kind and outcome (ok, error, trap, timeout)",
            deliveries.clone(),
        );
        let retries = Family::default();
        registry.register(
            "delivery_retries",
            "Deliveries scheduled again after a failed one, by worker kind",
            retries.clone(),
        );
        let traps = Family::default();
        registry.register(
            "guest_traps",
            "Component agents that crashed or hit a limit while deciding, by kind (trap, limit, instantiation)",
            traps.clone(),
        );
        let commit_seconds = fast();
        registry.register_with_unit(
            "store_commit_duration",
            "Time a session waited for its writes to be durable (group commit included)",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        let commit_ops = Histogram::new(BATCH_OPS.iter().copied());
        registry.register("store_commit_operations", "Store operations in one session's commit", commit_ops.clone());
        let llm_seconds: Histograms<_> = Family::new_with_constructor(slow);
        registry.register_with_unit(
            "llm_call_duration",
            "Time the engine's LLM calls took, by model and outcome (ok, error)",
            Unit::Seconds,
            llm_seconds.clone(),
        );
        let llm_first_token_seconds: Histograms<_> = Family::new_with_constructor(slow);
        registry.register_with_unit(
            "llm_time_to_first_token",
            "Time from a streamed LLM call's start to its first delta, by model",
            Unit::Seconds,
            llm_first_token_seconds.clone(),
        );
        let tokens = Family::default();
        registry.register(
            "llm_tokens",
            "Tokens of settled LLM calls, by model and kind (input, output)",
            tokens.clone(),
        );
        let cost_dollars = Family::default();
        registry.register(
            "llm_cost_dollars",
            "What settled LLM calls cost, in dollars, by model (calls without a known price add nothing)",
            cost_dollars.clone(),
        );
        let tool_seconds: Histograms<_> = Family::new_with_constructor(fast);
        registry.register_with_unit(
            "tool_call_duration",
            "Time from a tool call's try starting to its result, by who ran it (server, worker, client) and outcome",
            Unit::Seconds,
            tool_seconds.clone(),
        );
        let sessions_active = Gauge::default();
        registry.register("sessions_active", "Sessions with work in memory on this node", sessions_active.clone());
        let inputs_waiting = Gauge::default();
        registry.register(
            "inputs_waiting",
            "Inputs sent to sessions on this node that their session has not taken yet",
            inputs_waiting.clone(),
        );
        // Every series whose labels come from a fixed set is there from the
        // start, at zero: a dashboard's rate or an alert on a series that
        // has not happened yet reads 0, not "no data". The model-labelled
        // ones start with `other`, the label every model may end up in.
        for worker in WORKERS {
            let _ = decision_seconds.get_or_create(&WorkerLabel { worker });
            let _ = retries.get_or_create(&WorkerLabel { worker });
            for outcome in DELIVERY_OUTCOMES {
                let _ = deliveries.get_or_create(&DeliveryLabels { worker, outcome });
            }
        }
        for kind in TRAP_KINDS {
            let _ = traps.get_or_create(&TrapLabel { kind });
        }
        for handler in TOOL_HANDLERS {
            for outcome in CALL_OUTCOMES {
                let _ = tool_seconds.get_or_create(&ToolLabels { handler, outcome });
            }
        }
        for outcome in CALL_OUTCOMES {
            let _ = llm_seconds.get_or_create(&LlmLabels { model: OTHER.to_owned(), outcome });
        }
        let _ = llm_first_token_seconds.get_or_create(&ModelLabel { model: OTHER.to_owned() });
        for kind in ["input", "output"] {
            let _ = tokens.get_or_create(&TokenLabels { model: OTHER.to_owned(), kind });
        }
        let _ = cost_dollars.get_or_create(&ModelLabel { model: OTHER.to_owned() });
        Self {
            registry,
            decision_seconds,
            deliveries,
            retries,
            traps,
            commit_seconds,
            commit_ops,
            llm_seconds,
            llm_first_token_seconds,
            tokens,
            cost_dollars,
            tool_seconds,
            sessions_active,
            inputs_waiting,
            waiting: AtomicI64::new(0),
            models: Mutex::new(HashSet::new()),
            limits,
            prices,
        }
    }

    /// Appends the metrics in Prometheus' text format (0.0.4), with
    /// `sessions_active` set to `active` first.
    pub fn encode(&self, active: usize, out: &mut String) {
        self.sessions_active.set(i64::try_from(active).unwrap_or(i64::MAX));
        self.inputs_waiting.set(self.waiting.load(Ordering::Relaxed).max(0));
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(out, &self.registry);
    }

    /// A model's label: its name when the name is a label already, or
    /// may become one (it is configured, as `served` says or the price
    /// table knows it, no longer than the bound, and the bound on names
    /// is not reached); `other` otherwise.
    fn model(&self, model: &str, served: bool) -> String {
        let mut models = self.models.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if models.contains(model) {
            return model.to_owned();
        }
        let configured = served || self.prices.get(model).is_some();
        if configured && model.len() <= self.limits.max_bytes && models.len() < self.limits.max_values {
            models.insert(model.to_owned());
            return model.to_owned();
        }
        OTHER.to_owned()
    }

    /// A delivery ended after `took`.
    pub fn delivered(&self, worker: &'static str, took: Duration, error: Option<&WorkerError>) {
        self.decision_seconds.get_or_create(&WorkerLabel { worker }).observe(took.as_secs_f64());
        let outcome = match error {
            None => "ok",
            Some(WorkerError::Timeout(_)) => "timeout",
            Some(e) if e.is_trap() => "trap",
            Some(_) => "error",
        };
        self.deliveries.get_or_create(&DeliveryLabels { worker, outcome }).inc();
        let trap = match error {
            Some(WorkerError::Trapped(_)) => Some("trap"),
            Some(WorkerError::LimitExceeded(_)) => Some("limit"),
            Some(WorkerError::Instantiation(_)) => Some("instantiation"),
            _ => None,
        };
        if let Some(kind) = trap {
            self.traps.get_or_create(&TrapLabel { kind }).inc();
        }
    }

    /// A failed delivery was scheduled again.
    pub fn retried(&self, worker: &'static str) {
        self.retries.get_or_create(&WorkerLabel { worker }).inc();
    }

    /// A session's commit of `ops` store operations took `took`.
    pub fn committed(&self, ops: usize, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
        self.commit_ops.observe(ops as f64);
    }

    /// An LLM call the engine ran, on the configured provider `model`
    /// resolved to, ended after `took`. `served`: the call showed that
    /// the provider serves `model` (it answered, and its answers say so),
    /// which makes the name configured from then on.
    pub fn llm_call(&self, model: &str, took: Duration, ok: bool, served: bool) {
        let labels = LlmLabels { model: self.model(model, served), outcome: if ok { "ok" } else { "error" } };
        self.llm_seconds.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// A streamed LLM call's first delta, from the configured provider
    /// `model` resolved to, came `after` its start; `served` as for
    /// [`llm_call`](Self::llm_call).
    pub fn first_token(&self, model: &str, after: Duration, served: bool) {
        self.llm_first_token_seconds
            .get_or_create(&ModelLabel { model: self.model(model, served) })
            .observe(after.as_secs_f64());
    }

    /// An LLM call settled with this usage and cost. `model`
    /// is the name the agent asked for; a worker may have answered the
    /// call, so the name counts as configured only as the price table
    /// or an earlier engine-run call says.
    pub fn llm_usage(&self, model: &str, input_tokens: u64, output_tokens: u64, cost: Option<Money>) {
        let model = self.model(model, false);
        for (kind, n) in [("input", input_tokens), ("output", output_tokens)] {
            if n > 0 {
                self.tokens.get_or_create(&TokenLabels { model: model.clone(), kind }).inc_by(n);
            }
        }
        if let Some(cost) = cost.filter(|c| *c > Money::ZERO) {
            self.cost_dollars.get_or_create(&ModelLabel { model }).add(cost);
        }
    }

    /// A tool call's try settled after `took`.
    pub fn tool_call(&self, handler: &'static str, took: Duration, ok: bool) {
        let labels = ToolLabels { handler, outcome: if ok { "ok" } else { "error" } };
        self.tool_seconds.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// An input was sent to a session's actor.
    pub fn input_sent(&self) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
    }

    /// A session's actor took an input.
    pub fn input_taken(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(metrics: &Metrics) -> String {
        let mut out = String::new();
        metrics.encode(3, &mut out);
        out
    }

    #[test]
    fn deliveries_are_counted_by_outcome_and_traps_by_kind() {
        let metrics = Metrics::default();
        let took = Duration::from_micros(20);
        metrics.delivered("component", took, None);
        metrics.delivered("component", took, Some(&WorkerError::Trapped("unreachable".into())));
        metrics.delivered("component", took, Some(&WorkerError::LimitExceeded("memory".into())));
        metrics.delivered("http", took, Some(&WorkerError::Timeout(Duration::from_secs(1))));
        metrics.retried("http");
        let out = text(&metrics);
        for line in [
            "subs_deliveries_total{worker=\"component\",outcome=\"ok\"} 1",
            "subs_deliveries_total{worker=\"component\",outcome=\"trap\"} 1",
            "subs_deliveries_total{worker=\"component\",outcome=\"error\"} 1",
            "subs_deliveries_total{worker=\"http\",outcome=\"timeout\"} 1",
            "subs_guest_traps_total{kind=\"trap\"} 1",
            "subs_guest_traps_total{kind=\"limit\"} 1",
            "subs_delivery_retries_total{worker=\"http\"} 1",
            "subs_decision_duration_seconds_count{worker=\"component\"} 3",
            "subs_sessions_active 3",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
    }

    #[test]
    fn model_labels_are_bounded_in_number() {
        let metrics = Metrics::default();
        let max = LabelLimits::default().max_values;
        for n in 0..max + 20 {
            metrics.llm_call(&format!("p/model-{n}"), Duration::from_millis(5), true, true);
            metrics.llm_usage(&format!("p/model-{n}"), 1, 1, Some(Money::parse("0.5").unwrap()));
        }
        let out = text(&metrics);
        let series = out.lines().filter(|l| l.starts_with("subs_llm_cost_dollars_total{")).count();
        assert_eq!(series, max + 1, "{out}");
        assert!(out.contains("subs_llm_cost_dollars_total{model=\"other\"} 10"), "{out}");
        // A model seen before the bound keeps its name after it.
        metrics.llm_usage("p/model-0", 2, 0, None);
        assert!(text(&metrics).contains("subs_llm_tokens_total{model=\"p/model-0\",kind=\"input\"} 3"));
    }

    #[test]
    fn only_configured_names_of_bounded_length_become_labels() {
        let mut prices = PriceTable::new();
        prices.insert("p/priced", crate::model::Price::per_million("1", "1"));
        let metrics = Metrics::new(LabelLimits { max_values: 10, max_bytes: 16 }, prices);
        let took = Duration::from_millis(5);
        // Refused by the provider, or answered by a worker: not configured.
        metrics.llm_call("p/refused", took, false, false);
        // Answered by a provider whose answers show nothing (the offline
        // one answers any name).
        metrics.llm_call("p/any-name", took, true, false);
        metrics.llm_usage("p/worker-named", 1, 1, None);
        // A name of any length is `other` past the bound, even served.
        let long = format!("p/{}", "x".repeat(4 << 20));
        metrics.llm_call(&long, took, true, true);
        metrics.first_token(&long, took, true);
        metrics.llm_usage(&long, 1, 1, Some(Money::from_dollars(1)));
        // Priced, or served by a configured provider: its own label.
        metrics.llm_usage("p/priced", 1, 0, None);
        metrics.llm_call("p/served", took, true, true);
        metrics.llm_call("p/served", took, false, false);
        let out = text(&metrics);
        assert!(out.len() < 64 << 10, "the scrape is {} bytes", out.len());
        let labels: HashSet<&str> = out.lines().filter_map(|l| l.split("model=\"").nth(1)?.split('"').next()).collect();
        assert_eq!(labels, HashSet::from(["other", "p/priced", "p/served"]), "{out}");
        assert!(out.contains("subs_llm_call_duration_seconds_count{model=\"p/served\",outcome=\"error\"} 1"));
        assert!(out.contains("subs_llm_call_duration_seconds_count{model=\"other\",outcome=\"error\"} 1"));
        assert!(out.contains("subs_llm_call_duration_seconds_count{model=\"other\",outcome=\"ok\"} 2"));
    }

    #[test]
    fn every_fixed_series_is_there_from_the_start_and_cost_sums_exactly() {
        let metrics = Metrics::default();
        let out = text(&metrics);
        for line in [
            "subs_deliveries_total{worker=\"http\",outcome=\"timeout\"} 0",
            "subs_delivery_retries_total{worker=\"component\"} 0",
            "subs_guest_traps_total{kind=\"instantiation\"} 0",
            "subs_decision_duration_seconds_count{worker=\"http\"} 0",
            "subs_tool_call_duration_seconds_count{handler=\"client\",outcome=\"error\"} 0",
            "subs_llm_call_duration_seconds_count{model=\"other\",outcome=\"ok\"} 0",
            "subs_llm_time_to_first_token_seconds_count{model=\"other\"} 0",
            "subs_llm_tokens_total{model=\"other\",kind=\"output\"} 0",
            "subs_llm_cost_dollars_total{model=\"other\"} 0.0",
            "subs_inputs_waiting 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        let tenth_of_a_mil = Money::parse("0.0001").unwrap();
        for _ in 0..4 {
            metrics.llm_usage("p/x", 1, 1, Some(tenth_of_a_mil));
        }
        assert!(text(&metrics).lines().any(|l| l == "subs_llm_cost_dollars_total{model=\"other\"} 0.0004"));
    }

    #[test]
    fn waiting_inputs_rise_and_fall() {
        let metrics = Metrics::default();
        metrics.input_sent();
        metrics.input_sent();
        metrics.input_taken();
        assert!(text(&metrics).lines().any(|l| l == "subs_inputs_waiting 1"));
    }
}
