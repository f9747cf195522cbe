//! How the engine behaves where agents say nothing, and the bounds on
//! what a tenant's agents may spawn and decide: read by the sessions,
//! the tenants' accounts and the [`Engine`](crate::Engine) alike, so kept
//! apart from all of them.

use std::sync::Arc;
use std::time::Duration;

use subs_protocol::RetryPolicy;

use crate::events::StreamLimits;
use crate::model::OFFLINE_MODEL;
use crate::retry::RetryCap;

/// How the engine behaves where agents say nothing.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The model proposed at `session.start` and used by `llm.call`s when
    /// neither the call nor the config names one.
    pub default_model: String,
    /// Retries of deliveries and LLM calls when the agent's config sets no
    /// `retry`.
    pub default_retry: RetryPolicy,
    /// The most any retry policy (the agent's, a call's, the default) may
    /// ask for.
    pub retry_cap: RetryCap,
    /// How long one delivery may take when the retry policy sets no
    /// `timeout_secs`.
    pub decision_timeout: Duration,
    /// How long one try of a call (tool, LLM) may take when neither its
    /// retry policy nor the agent's sets `timeout_secs`: the call's
    /// `deadline` is its start plus this.
    pub call_timeout: Duration,
    /// Whether LLM calls stream token deltas when neither the call nor the
    /// agent's config says (`subs run` turns it on to show tokens as they
    /// come).
    pub default_stream: bool,
    /// What streaming may hold: the size and rate of deltas, subscribers'
    /// buffers, and how many event streams a tenant may have open.
    pub streams: StreamLimits,
    /// Where the loop reads the time: the system's clock, or in tests one
    /// that follows tokio's paused time (see [`crate::clock`]).
    pub clock: Arc<dyn crate::clock::Clock>,
    /// When several nodes share the store: how often this node looks for
    /// sessions whose node died, to take them over.
    pub takeover_scan: Duration,
    /// Where the engine's OpenTelemetry spans go (a batching processor
    /// with an OTLP exporter, for `subs serve`); `None` sends none. See
    /// [`telemetry`](crate::telemetry).
    pub spans: Option<crate::telemetry::Spans>,
    /// How many sessions resumed after a restart (or taken over from a
    /// node that died) may work at once: the others wait their turn, so
    /// that a store full of unfinished sessions does not load and run
    /// them all at the same moment. A resumed session works until it has
    /// nothing in flight (no delivery, no engine-run call); at least 1.
    pub resume_concurrency: usize,
    /// Bounds on the model names metrics label calls with and on the
    /// text spans carry.
    pub telemetry: crate::telemetry::TelemetryLimits,
    /// How long a session's actor, once the session has gone quiet, waits
    /// for another message before it leaves and frees the session's
    /// memory (and, with several nodes, its lease): a client's next
    /// message within it spares reloading the session from the store.
    pub session_linger: Duration,
    /// The longest a client's input or a call's result waits in memory
    /// for the decisions of a contained agent it leads to, so that one
    /// commit holds them all: what an agent slow to decide may add to
    /// the input's answer. An agent that makes an input wait this long
    /// has the inputs to its sessions committed at once, until one of its
    /// decisions comes within it again (see docs/durability.md).
    pub contained_hold: Duration,
    /// The tools the engine calls itself for agents whose config names
    /// them (a tenant's MCP servers); `None`: an agent's `mcp` offers
    /// nothing.
    pub tool_sources: Option<Arc<dyn crate::tool_sources::ToolSources>>,
}

/// What the agents of a tenant may spawn: sub-agent sessions past any of
/// these bounds are not created, and the spawning call fails at once
/// (its `sub_agent.finished` says `ok: false` and which bound), as one
/// past the tenant's session limit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnBounds {
    /// Sub-agent spawns one turn of a session may start
    /// (`max_spawns_per_turn`).
    pub max_spawns_per_turn: u32,
    /// How far below its root a sub-agent session may be: a root's
    /// children are at depth 1 (`max_sub_agent_depth`; 0: no sub-agents).
    pub max_sub_agent_depth: u32,
    /// Sessions one tree may hold, its root included
    /// (`max_tree_sessions`).
    pub max_tree_sessions: u32,
}

impl Default for SpawnBounds {
    /// 16 children per turn, 4 deep, 256 sessions per tree: room for
    /// agents that delegate, not for one input to fill a shared server.
    fn default() -> Self {
        Self { max_spawns_per_turn: 16, max_sub_agent_depth: 4, max_tree_sessions: 256 }
    }
}

/// What one decision of a tenant's agent may start, and what one turn
/// may hold: each action becomes records, events and writes, and every
/// call the turn holds goes into each decision request after it. A
/// decision past either bound is rejected whole (nothing of it applied),
/// as a decision that breaks any rule is, the error naming the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionBounds {
    /// Actions one decision may hold (`max_actions_per_decision`).
    pub max_actions_per_decision: u32,
    /// Calls one turn may hold, settled ones included, counting those a
    /// decision would start (`max_calls_per_turn`).
    pub max_calls_per_turn: u32,
    /// Whether the LLM calls a decision starts stream token deltas when
    /// neither the call nor the agent's config says (`stream_by_default`);
    /// `None`: the engine's [`EngineConfig::default_stream`].
    pub stream_by_default: Option<bool>,
}

impl Default for DecisionBounds {
    /// 1,000 actions a decision and 10,000 calls a turn: models call a
    /// handful of tools at once and long turns make hundreds of calls;
    /// at these bounds one decision's writes and a request's calls stay
    /// a few MiB.
    fn default() -> Self {
        Self { max_actions_per_decision: 1_000, max_calls_per_turn: 10_000, stream_by_default: None }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            default_model: OFFLINE_MODEL.to_owned(),
            default_retry: RetryPolicy {
                timeout_secs: None,
                max_retries: 2,
                backoff_base_secs: 0.5,
                backoff_max_secs: 10.0,
            },
            retry_cap: RetryCap::default(),
            decision_timeout: Duration::from_secs(60),
            call_timeout: Duration::from_secs(300),
            default_stream: false,
            streams: StreamLimits::default(),
            clock: Arc::new(crate::clock::SystemClock),
            takeover_scan: Duration::from_secs(2),
            spans: None,
            resume_concurrency: 32,
            telemetry: crate::telemetry::TelemetryLimits::default(),
            session_linger: Duration::from_secs(1),
            contained_hold: Duration::from_millis(5),
            tool_sources: None,
        }
    }
}
