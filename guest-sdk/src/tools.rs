//! [`ToolRouter`]: an agent's own tools, run for `tool.execute` and
//! declared in its config; the tools that need a person's approval; the
//! sub-agents the model may call as tools.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use subs_protocol::trigger::{InterruptResumed, ToolExecute};
use subs_protocol::{
    Action, AgentConfig, AgentTool, Call, CallKind, CallStatus, DecisionRequest, DecisionResponse, SubAgent, ToolInput,
    Trigger, WorkerIdentity,
};

use crate::builders::ActionBuilders;
use crate::context::{Host, Level};
use crate::{Agent, Context, DecideError};

/// A tool's code, with its types erased: parsed arguments and what the
/// call may see in, result JSON or error text out.
type Handler = dyn Fn(Value, &mut Env<'_>) -> Result<Value, String> + Send + Sync;

/// Whether a call of a gated tool, by its arguments, needs approval.
type Gate = dyn Fn(&Value) -> bool + Send + Sync;

/// What a run of a handler may see and change, before it is typed for the
/// handler as a [`ToolContext`].
struct Env<'a> {
    call: &'a ToolExecute,
    request: Option<&'a DecisionRequest>,
    /// The session state, which the handler may replace.
    state: &'a mut Value,
    host: &'a mut dyn Host,
}

/// What a tool handler added with
/// [`ToolRouter::tool_with_context`] sees of its session: the call, the
/// session's owner, the agent state typed as `S` (read and write), and the
/// engine's logs.
///
/// `state` starts as the session's state (`S::default()` while it is
/// `null`); what the handler leaves in it becomes the session's state when
/// it changed, whether the handler succeeds or fails.
pub struct ToolContext<'a, S> {
    /// The agent state, typed; changes are stored with the decision.
    pub state: S,
    call: &'a ToolExecute,
    request: Option<&'a DecisionRequest>,
    host: &'a mut dyn Host,
}

impl<S> ToolContext<'_, S> {
    /// The call's id: the same on every execution of one call, for
    /// idempotency.
    pub fn call_id(&self) -> &str {
        &self.call.id
    }

    /// The `tool.execute` trigger: the call's id, name, raw arguments,
    /// `attempt` and `deadline`.
    pub fn call(&self) -> &ToolExecute {
        self.call
    }

    /// The session's owner (its `id` and labels), as the engine gives it
    /// to the agent; empty when the router runs a call without its request
    /// ([`ToolRouter::execute`]).
    pub fn identity(&self) -> &WorkerIdentity {
        static NOBODY: WorkerIdentity = WorkerIdentity { id: None, metadata: None };
        self.request.map_or(&NOBODY, |r| &r.identity)
    }

    /// The whole decision request the call came in, when the router was
    /// given it.
    pub fn request(&self) -> Option<&DecisionRequest> {
        self.request
    }

    /// Writes a line to the engine's logs at `level`.
    pub fn log(&mut self, level: Level, message: impl AsRef<str>) {
        self.host.log(level, message.as_ref());
    }

    /// Logs at [`Level::Info`].
    pub fn info(&mut self, message: impl AsRef<str>) {
        self.log(Level::Info, message);
    }

    /// Logs at [`Level::Warn`].
    pub fn warn(&mut self, message: impl AsRef<str>) {
        self.log(Level::Warn, message);
    }
}

impl<S: fmt::Debug> fmt::Debug for ToolContext<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext").field("state", &self.state).field("call", &self.call.id).finish_non_exhaustive()
    }
}

/// A [`Host`] for calls run without one ([`ToolRouter::execute`]): their
/// log lines have nowhere to go.
struct NoHost;

impl Host for NoHost {
    fn emit_delta(&mut self, _delta: &subs_protocol::StreamDelta) -> Result<(), String> {
        Err("deltas are only accepted while answering an llm.execute trigger with stream: true".to_owned())
    }

    fn log(&mut self, _level: Level, _message: &str) {}
}

/// The tools an agent runs itself, by name: each an [`AgentTool`]
/// declaration (what the model sees) and a handler; which of them need a
/// person's approval; and the sub-agents the model may call as tools.
///
/// A handler takes its arguments as any `T: Deserialize` and returns
/// `Result<R, E>` with `R: Serialize` and `E: Display`. For a `tool.execute`
/// trigger, [`execute`](Self::execute) settles the call:
///
/// - `valid` input that deserializes into `T` runs the handler: `Ok` is a
///   `tool.result`, `Err` a `tool.error` carrying the error's text;
/// - input that does not deserialize into `T` (the field is named), or that
///   the engine found `invalid` or `malformed`, is a `tool.error` that says
///   what is wrong, without running the handler;
/// - a tool the router does not know is a `tool.error` naming it, so that a
///   call never hangs on an agent that passed it over. An agent that runs
///   some tools by other means checks [`handles`](Self::handles) first.
///
/// Errors are terminal (`retryable` unset): the model reads them and may
/// call again. An agent that wants the engine to retry a call answers with
/// its own `tool.error`.
///
/// [`handle`](Self::handle) answers a whole decision request: it runs
/// `tool.execute` with the state, identity and logs of the session
/// ([`tool_with_context`](Self::tool_with_context)), asks for approval of
/// gated calls ([`needs_approval`](Self::needs_approval)), and answers those
/// approvals.
///
/// The router is `Send + Sync`, so an agent that holds one can be shared by
/// an HTTP worker's handlers.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use subs_sdk::prelude::*;
/// use subs_sdk::testing::tool_execute;
///
/// #[derive(Deserialize)]
/// struct Shout { text: String }
///
/// let router = ToolRouter::new().tool(
///     AgentTool::new("shout")
///         .description("Upper-cases a text")
///         .input(json!({
///             "type": "object",
///             "properties": { "text": { "type": "string" } },
///             "required": ["text"],
///         })),
///     |args: Shout| {
///         if args.text.is_empty() {
///             return Err("nothing to shout");
///         }
///         Ok(json!({ "text": args.text.to_uppercase() }))
///     },
/// );
///
/// // Declared in the config at session.start …
/// let config = router.configure(AgentConfig::new("openai/gpt-4o-mini"));
/// assert_eq!(config.tools.unwrap()[0].name, "shout");
///
/// // … and run for tool.execute.
/// let action = router.execute(&tool_execute("shout", r#"{"text": "hi"}"#));
/// assert_eq!(action, Action::tool_result(json!({ "text": "HI" })));
/// let action = router.execute(&tool_execute("shout", r#"{"text": ""}"#));
/// assert_eq!(action, Action::tool_error("nothing to shout"));
/// let action = router.execute(&tool_execute("shout", r#"{"txt": "hi"}"#));
/// assert_eq!(action, Action::tool_error("invalid arguments for `shout`: missing field `text`"));
/// ```
#[derive(Default)]
pub struct ToolRouter {
    /// In the order they were added, which is the order the model sees them
    /// in; a handful of tools makes a linear search the fastest lookup.
    routes: Vec<Route>,
    /// Agents the model may call as tools, in the order they were added.
    sub_agents: Vec<SubAgent>,
}

/// One tool: what the model is told, the code that runs it, and whether a
/// call needs approval first.
struct Route {
    tool: AgentTool,
    handler: Box<Handler>,
    approval: Option<Box<Gate>>,
}

impl ToolRouter {
    /// A router without tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the tool `tool`, run by `handler`.
    ///
    /// # Panics
    /// When a tool of the same name was already added: two handlers for one
    /// name is a bug that every decision would hit.
    #[must_use]
    pub fn tool<T, R, E, F>(self, tool: AgentTool, handler: F) -> Self
    where
        T: DeserializeOwned,
        R: Serialize,
        E: fmt::Display,
        F: Fn(T) -> Result<R, E> + Send + Sync + 'static,
    {
        self.tool_with_call(tool, move |args, _call: &ToolExecute| handler(args))
    }

    /// Adds the tool `tool`, run by `handler`, which also gets the
    /// `tool.execute` trigger: its call `id` (the same on every execution
    /// of one call, for idempotency), `attempt` and `deadline`.
    ///
    /// # Panics
    /// As [`tool`](Self::tool).
    #[must_use]
    pub fn tool_with_call<T, R, E, F>(self, tool: AgentTool, handler: F) -> Self
    where
        T: DeserializeOwned,
        R: Serialize,
        E: fmt::Display,
        F: Fn(T, &ToolExecute) -> Result<R, E> + Send + Sync + 'static,
    {
        let name = tool.name.clone();
        self.route(tool, move |value: Value, env: &mut Env<'_>| {
            let args: T = parse_args(&name, value)?;
            finish(&name, handler(args, env.call))
        })
    }

    /// Adds the tool `tool`, run by `handler`, which also gets a
    /// [`ToolContext`]: the agent state typed as `S` to read and change,
    /// the call id, the session's owner and a logger. `S` is the whole
    /// state of the session, the type every stateful tool of the agent
    /// shares.
    ///
    /// A state that does not deserialize into `S` settles the call with a
    /// `tool.error` naming the field, without running the handler.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use subs_sdk::prelude::*;
    /// use subs_sdk::testing::tool_execute;
    ///
    /// #[derive(Default, Serialize, Deserialize)]
    /// struct Counter { calls: u32 }
    ///
    /// let router = ToolRouter::new().tool_with_context(AgentTool::new("count"), |_: Value, cx: &mut ToolContext<Counter>| {
    ///     cx.state.calls += 1;
    ///     cx.info(format!("call {} counted", cx.call_id()));
    ///     Ok::<_, String>(cx.state.calls)
    /// });
    ///
    /// let mut request = DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute("count", "{}")));
    /// request.state = json!({"calls": 2});
    /// let mut host = RecordingHost::new();
    /// let decision = host.decide(&router, request).unwrap();
    /// assert_eq!(decision.actions(), [Action::tool_result(json!(3))]);
    /// assert_eq!(decision.state, Some(json!({"calls": 3})));
    /// assert_eq!(host.logs, [(Level::Info, "call call-1 counted".to_owned())]);
    /// ```
    ///
    /// # Panics
    /// As [`tool`](Self::tool).
    #[must_use]
    pub fn tool_with_context<T, S, R, E, F>(self, tool: AgentTool, handler: F) -> Self
    where
        T: DeserializeOwned,
        S: Serialize + DeserializeOwned + Default,
        R: Serialize,
        E: fmt::Display,
        F: Fn(T, &mut ToolContext<'_, S>) -> Result<R, E> + Send + Sync + 'static,
    {
        let name = tool.name.clone();
        self.route(tool, move |value: Value, env: &mut Env<'_>| {
            let args: T = parse_args(&name, value)?;
            // `{}` is what an agent state holding nothing but used-up
            // approval answers is left as (see `keep_cleared`).
            let empty = env.state.as_object().is_some_and(serde_json::Map::is_empty);
            let state: S = if env.state.is_null() || empty {
                S::default()
            } else {
                subs_protocol::from_value(env.state.clone()).map_err(|e| {
                    format!("the session state does not fit the state of `{name}`: {}", e.in_field("state"))
                })?
            };
            let mut cx = ToolContext { state, call: env.call, request: env.request, host: &mut *env.host };
            let outcome = handler(args, &mut cx);
            let state =
                serde_json::to_value(&cx.state).map_err(|e| format!("the state `{name}` left is not JSON: {e}"))?;
            *env.state = state;
            finish(&name, outcome)
        })
    }

    /// Marks the tool added last as needing a person's approval for every
    /// call. [`handle`](Self::handle) then answers the model's call of it
    /// with the proposed `tool.call` and an `interrupt` (see
    /// [`Action::approval`](crate::builders::ActionBuilders::approval)):
    /// the call waits, queued, until the interrupt is resumed with
    /// `{"approved": true}`; any other answer (`{"approved": false,
    /// "reason": …}`, or one that is not an approval) denies it: the call
    /// is settled with a `tool.error` the model reads, and the handler
    /// never runs.
    ///
    /// Each gated call of one reply gets its own interrupt, answered on its
    /// own. The engine holds every call of the reply until the last of them
    /// is answered, and refuses to settle a call it still holds; so the
    /// answers wait in the agent state under [`APPROVALS_STATE_KEY`] and
    /// the call's `tool.execute` reads its own: approved, the handler runs;
    /// denied, or with no answer recorded (a state the agent replaced
    /// meanwhile), it is settled with the `tool.error` unrun. A denial of a
    /// call no longer held settles it at once, and the engine drops its
    /// execution.
    ///
    /// ```
    /// use subs_sdk::prelude::*;
    ///
    /// let router = ToolRouter::new()
    ///     .tool(AgentTool::new("refund"), |_: Value| Ok::<_, String>("refunded"))
    ///     .needs_approval();
    ///
    /// // The model calls `refund`: the call and an approval interrupt.
    /// let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    /// let mut call = Action::tool_call("refund", json!({"amount": 5}));
    /// if let Action::ToolCall(c) = &mut call { c.id = Some("c1".into()); }
    /// request.proposed = DecisionResponse::new().with_action(call.clone());
    /// let decision = RecordingHost::new().decide(&router, request).unwrap();
    /// assert_eq!(decision.actions(), [call, Action::approval("c1", "refund", json!({"amount": 5}))]);
    /// ```
    ///
    /// # Panics
    /// When no tool was added yet.
    #[must_use]
    pub fn needs_approval(self) -> Self {
        self.gate_last(Box::new(|_| true))
    }

    /// Marks the tool added last as needing approval for the calls whose
    /// arguments `needs` says so; arguments that do not deserialize into
    /// `T` need approval.
    ///
    /// # Panics
    /// When no tool was added yet.
    #[must_use]
    pub fn needs_approval_when<T, F>(self, needs: F) -> Self
    where
        T: DeserializeOwned,
        F: Fn(&T) -> bool + Send + Sync + 'static,
    {
        self.gate_last(Box::new(move |args: &Value| {
            subs_protocol::from_value::<T>(args.clone()).map_or(true, |args| needs(&args))
        }))
    }

    /// Adds the agent `id` as a tool the model may call (described to it by
    /// `description`): the engine runs a call of it as a child session of
    /// that agent, and the child's reply is the call's result. The agent
    /// must be registered with the engine under `id`.
    #[must_use]
    pub fn sub_agent(mut self, id: impl Into<String>, description: impl Into<String>) -> Self {
        self.sub_agents.push(SubAgent { id: id.into(), description: Some(description.into()) });
        self
    }

    /// The declarations of all tools, in the order they were added: what
    /// the agent puts in its config
    /// ([`AgentConfig::with_tools`](subs_protocol::AgentConfig::with_tools)).
    pub fn tools(&self) -> Vec<AgentTool> {
        self.routes.iter().map(|r| r.tool.clone()).collect()
    }

    /// The sub-agents the model may call, in the order they were added.
    pub fn sub_agents(&self) -> &[SubAgent] {
        &self.sub_agents
    }

    /// `config` with the router's tools and sub-agents added.
    pub fn configure(&self, mut config: AgentConfig) -> AgentConfig {
        config = config.with_tools(self.tools());
        for sub in &self.sub_agents {
            config = config.with_sub_agent(sub.clone());
        }
        config
    }

    /// The declaration of the tool named `name`.
    pub fn get(&self, name: &str) -> Option<&AgentTool> {
        self.find(name).map(|r| &r.tool)
    }

    /// Whether the router runs a tool named `name`.
    pub fn handles(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Whether a call of `name` with `arguments` needs approval.
    pub fn needs_approval_for(&self, name: &str, arguments: &Value) -> bool {
        self.find(name).and_then(|r| r.approval.as_ref()).is_some_and(|gate| gate(arguments))
    }

    /// Runs the tool `call` names and returns the `tool.result` or
    /// `tool.error` that settles the call (see the type's docs for which).
    /// The action leaves `id` and `attempt` out: the engine takes them from
    /// the `tool.execute` being answered.
    ///
    /// Run this way, a handler's [`ToolContext`] has a `null` state (its
    /// changes are dropped), no identity, and its log lines go nowhere;
    /// [`handle`](Self::handle) runs it with its session's.
    pub fn execute(&self, call: &ToolExecute) -> Action {
        let mut state = Value::Null;
        self.run(&mut Env { call, request: None, state: &mut state, host: &mut NoHost })
    }

    /// The decision for `request` when its trigger is `tool.execute`: the
    /// settling action of [`execute`](Self::execute) (added to `proposed`,
    /// which the engine leaves empty for `tool.execute`), with the state
    /// the handler left. `None` for every other trigger.
    ///
    /// ```
    /// use subs_sdk::prelude::*;
    ///
    /// struct Agent1 { router: ToolRouter }
    /// impl Agent for Agent1 {
    ///     fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
    ///         Ok(self.router.decide(&request).unwrap_or(request.proposed))
    ///     }
    /// }
    ///
    /// let agent = Agent1 {
    ///     router: ToolRouter::new().tool(AgentTool::new("ping"), |_: Value| Ok::<_, String>("pong")),
    /// };
    /// let call = subs_sdk::testing::tool_execute("ping", "{}");
    /// let decision = RecordingHost::new()
    ///     .decide(&agent, DecisionRequest::for_trigger(Trigger::ToolExecute(call)))
    ///     .unwrap();
    /// assert_eq!(decision.actions(), [Action::tool_result(json!("pong"))]);
    /// ```
    pub fn decide(&self, request: &DecisionRequest) -> Option<DecisionResponse> {
        matches!(request.trigger, Trigger::ToolExecute(_)).then(|| self.handle(request, &mut Context::new(&mut NoHost)))
    }

    /// The decision for `request`, taking the engine's proposal for all
    /// that is not the router's:
    ///
    /// - `tool.execute`: the call run (see [`execute`](Self::execute)) with
    ///   the session's state, identity and logs, and the state its handler
    ///   left;
    /// - `interrupt.resumed` of an approval this router asked for: nothing
    ///   when approved (the call starts), else a `tool.error` settling the
    ///   call with the reason;
    /// - any other: `proposed`, with an approval asked for each call of a
    ///   gated tool in it (see [`gate`](Self::gate)).
    ///
    /// The router is also an [`Agent`] whose `decide` is this.
    pub fn handle(&self, request: &DecisionRequest, cx: &mut Context<'_>) -> DecisionResponse {
        match &request.trigger {
            Trigger::ToolExecute(call) => {
                let mut state = request.state.clone();
                let mut answers = take_answers(&mut state);
                let action = if self.needs_approval_for(&call.name, &execute_arguments(call)) {
                    // A gated call runs only on a recorded approval: a
                    // denial, or a record lost with the state, denies.
                    match answers.remove(&call.id) {
                        Some(Value::Bool(true)) => {
                            self.run(&mut Env { call, request: Some(request), state: &mut state, host: cx.host() })
                        }
                        Some(Value::String(reason)) => Action::tool_error(denial(&reason)),
                        _ => Action::tool_error(denial("no approval of this call was recorded")),
                    }
                } else {
                    self.run(&mut Env { call, request: Some(request), state: &mut state, host: cx.host() })
                };
                put_answers(&mut state, answers);
                keep_cleared(&mut state, &request.state);
                let decision = request.proposed.clone().with_action(action);
                if state == request.state { decision } else { decision.with_state(state) }
            }
            Trigger::InterruptResumed(resumed) => {
                let Some((call, answer)) = self.answer(request, resumed) else {
                    return request.proposed.clone();
                };
                let id = resumed.interrupt_id.clone();
                let tool = call.name.as_deref().unwrap_or_default();
                let mut state = request.state.clone();
                let mut answers = take_answers(&mut state);
                let mut decision = request.proposed.clone();
                match answer {
                    Ok(()) => {
                        cx.info(format!("the call `{id}` of `{tool}` was approved"));
                        answers.insert(id, Value::Bool(true));
                    }
                    // Still held behind another open approval: the engine
                    // refuses to settle it before it starts, so the denial
                    // waits in the state for its `tool.execute`.
                    Err(reason) if call.status == CallStatus::Queued => {
                        cx.info(format!("the call `{id}` of `{tool}` was denied: {reason}"));
                        answers.insert(id, Value::String(reason));
                    }
                    Err(reason) => {
                        cx.info(format!("the call `{id}` of `{tool}` was denied: {reason}"));
                        let mut error = subs_protocol::action::CallError::new(denial(&reason));
                        error.id = Some(id);
                        decision = decision.with_action(Action::ToolError(error));
                    }
                }
                // A state that is neither an object nor null cannot hold
                // the answer: the call's `tool.execute` then finds none and
                // denies.
                put_answers(&mut state, answers);
                keep_cleared(&mut state, &request.state);
                if state == request.state { decision } else { decision.with_state(state) }
            }
            _ => self.gate(request, request.proposed.clone()),
        }
    }

    /// `decision` with an approval `interrupt` after each `tool.call` of a
    /// tool that needs one (see [`needs_approval`](Self::needs_approval)).
    /// A call without an id gets one (derived from the request's
    /// decision), since the approval names it. An agent that builds its own
    /// decisions passes them through this to keep its gates.
    pub fn gate(&self, request: &DecisionRequest, decision: DecisionResponse) -> DecisionResponse {
        if !decision
            .actions()
            .iter()
            .any(|a| matches!(a, Action::ToolCall(c) if self.needs_approval_for(&c.name, &c.arguments)))
        {
            return decision;
        }
        let asked: Vec<String> = decision
            .actions()
            .iter()
            .filter_map(|a| match a {
                Action::Interrupt(i) => i.interrupt_id.clone(),
                _ => None,
            })
            .collect();
        let mut decision = decision;
        let actions = decision.actions.take().unwrap_or_default();
        let mut gated = Vec::with_capacity(actions.len() * 2);
        for (i, mut action) in actions.into_iter().enumerate() {
            let mut approval = None;
            if let Action::ToolCall(call) = &mut action
                && self.needs_approval_for(&call.name, &call.arguments)
            {
                let id = call.id.get_or_insert_with(|| format!("approve.{}.{i}", request.decision_id)).clone();
                if !asked.contains(&id) {
                    approval = Some(Action::approval(id, call.name.clone(), call.arguments.clone()));
                }
            }
            gated.push(action);
            gated.extend(approval);
        }
        decision.actions = Some(gated);
        decision
    }

    /// The call the approval `resumed` answers and the answer: `Ok`
    /// approved, `Err(reason)` denied; `None` when it is not an approval of
    /// a call of this router still open.
    fn answer<'r>(
        &self,
        request: &'r DecisionRequest,
        resumed: &InterruptResumed,
    ) -> Option<(&'r Call, Result<(), String>)> {
        let call = request.call(&resumed.interrupt_id)?;
        let open = !matches!(call.status, CallStatus::Completed | CallStatus::Failed);
        let tool = call.name.as_deref()?;
        if call.kind != CallKind::ToolCall || !open || self.find(tool).is_none_or(|r| r.approval.is_none()) {
            return None;
        }
        const NOT_AN_ANSWER: &str = r#"the answer was not {"approved": true|false}"#;
        // Anything but an explicit `"approved": true` denies: an approval
        // fails closed.
        let answer = match resumed.payload.as_ref().and_then(Value::as_object) {
            Some(answer) => match answer.get("approved") {
                Some(Value::Bool(true)) => Ok(()),
                Some(Value::Bool(false)) => {
                    Err(answer.get("reason").and_then(Value::as_str).unwrap_or_default().to_owned())
                }
                _ => Err(NOT_AN_ANSWER.to_owned()),
            },
            None => Err(NOT_AN_ANSWER.to_owned()),
        };
        Some((call, answer))
    }

    /// Adds a route.
    fn route(
        mut self,
        tool: AgentTool,
        handler: impl Fn(Value, &mut Env<'_>) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        assert!(!self.handles(&tool.name), "the tool `{}` was added to the ToolRouter twice", tool.name);
        self.routes.push(Route { tool, handler: Box::new(handler), approval: None });
        self
    }

    /// Gates the tool added last.
    fn gate_last(mut self, gate: Box<Gate>) -> Self {
        let route = self.routes.last_mut().expect("needs_approval follows the tool it gates: no tool was added yet");
        route.approval = Some(gate);
        self
    }

    /// Runs a call in `env`.
    fn run(&self, env: &mut Env<'_>) -> Action {
        let call = env.call;
        let Some(route) = self.find(&call.name) else {
            return Action::tool_error(self.unknown(&call.name));
        };
        let value = match &call.input {
            ToolInput::Valid { value } => value.clone(),
            ToolInput::Invalid { error, .. } => {
                return Action::tool_error(format!("invalid arguments for `{}`: {error}", call.name));
            }
            ToolInput::Malformed { error } => {
                return Action::tool_error(format!("malformed arguments for `{}`: {error}", call.name));
            }
        };
        match (route.handler)(value, env) {
            Ok(result) => Action::tool_result(result),
            Err(error) => Action::tool_error(error),
        }
    }

    fn find(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.tool.name == name)
    }

    fn unknown(&self, name: &str) -> String {
        if self.routes.is_empty() {
            return format!("unknown tool `{name}`: this agent runs no tools");
        }
        let known: Vec<_> = self.routes.iter().map(|r| format!("`{}`", r.tool.name)).collect();
        format!("unknown tool `{name}`: this agent runs {}", known.join(", "))
    }
}

impl Agent for ToolRouter {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        Ok(self.handle(&request, cx))
    }
}

/// The key of the agent state under which the router keeps the answers to
/// its approvals until the calls' `tool.execute`: call id → `true`
/// (approved) or the reason of a denial.
pub const APPROVALS_STATE_KEY: &str = "subs_approvals";

/// Takes the approval answers out of `state` (see [`APPROVALS_STATE_KEY`]),
/// so that handlers see the state without them.
fn take_answers(state: &mut Value) -> serde_json::Map<String, Value> {
    let Some(Value::Object(answers)) = state.as_object_mut().and_then(|s| s.remove(APPROVALS_STATE_KEY)) else {
        return serde_json::Map::new();
    };
    // The answers alone made a `null` state an object: it is `null` again
    // for handlers, whose state type then starts from its default.
    if state.as_object().is_some_and(serde_json::Map::is_empty) {
        *state = Value::Null;
    }
    answers
}

/// Puts approval answers back into `state`; none when there are none left.
/// A state that is neither an object nor null cannot hold them.
fn put_answers(state: &mut Value, answers: serde_json::Map<String, Value>) {
    if answers.is_empty() {
        return;
    }
    if state.is_null() {
        *state = Value::Object(serde_json::Map::new());
    }
    if let Some(object) = state.as_object_mut() {
        object.insert(APPROVALS_STATE_KEY.to_owned(), Value::Object(answers));
    }
}

/// `{}` for a `state` that became `null` from `before`: a decision's
/// `null` state keeps the session's, which would keep approval answers
/// already used.
fn keep_cleared(state: &mut Value, before: &Value) {
    if state.is_null() && !before.is_null() {
        *state = Value::Object(serde_json::Map::new());
    }
}

/// The arguments of a `tool.execute` as its `tool.call` had them, for the
/// approval gate: the parsed value, or the raw text when it did not parse.
fn execute_arguments(call: &ToolExecute) -> Value {
    match &call.input {
        ToolInput::Valid { value } | ToolInput::Invalid { value, .. } => value.clone(),
        ToolInput::Malformed { .. } => Value::String(call.arguments.clone()),
    }
}

/// The error a denied call is settled with: what the model reads.
fn denial(reason: &str) -> String {
    if reason.is_empty() { "denied by the approver".to_owned() } else { format!("denied by the approver: {reason}") }
}

/// The arguments of a call of `name`, as the handler takes them.
fn parse_args<T: DeserializeOwned>(name: &str, value: Value) -> Result<T, String> {
    subs_protocol::from_value(value).map_err(|e| format!("invalid arguments for `{name}`: {e}"))
}

/// A handler's outcome as JSON or error text.
fn finish<R: Serialize, E: fmt::Display>(name: &str, outcome: Result<R, E>) -> Result<Value, String> {
    let result = outcome.map_err(|e| e.to_string())?;
    serde_json::to_value(result).map_err(|e| format!("the result of `{name}` is not JSON: {e}"))
}

impl fmt::Debug for ToolRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRouter")
            .field("tools", &self.routes.iter().map(|r| &r.tool.name).collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;
    use crate::testing::tool_execute;

    #[derive(Deserialize)]
    struct Pair {
        a: f64,
        b: f64,
    }

    #[derive(Serialize)]
    struct Sum {
        sum: f64,
    }

    fn router() -> ToolRouter {
        ToolRouter::new()
            .tool(AgentTool::new("add").description("adds"), |p: Pair| Ok::<_, String>(Sum { sum: p.a + p.b }))
            .tool_with_call(AgentTool::new("who"), |_: Value, call: &ToolExecute| {
                Ok::<_, String>(json!({ "id": call.id, "attempt": call.attempt }))
            })
            .tool(AgentTool::new("fail"), |_: Value| Err::<(), _>("it broke"))
    }

    #[test]
    fn valid_input_runs_the_handler() {
        let action = router().execute(&tool_execute("add", r#"{"a": 1, "b": 2.5}"#));
        assert_eq!(action, Action::tool_result(json!({ "sum": 3.5 })));
    }

    #[test]
    fn handlers_can_see_the_call() {
        let mut call = tool_execute("who", "{}");
        call.id = "c7".to_owned();
        call.attempt = 2;
        let action = router().execute(&call);
        assert_eq!(action, Action::tool_result(json!({ "id": "c7", "attempt": 2 })));
    }

    #[test]
    fn handler_errors_become_tool_errors() {
        let action = router().execute(&tool_execute("fail", "{}"));
        assert_eq!(action, Action::tool_error("it broke"));
    }

    #[test]
    fn arguments_of_the_wrong_shape_name_the_field() {
        let action = router().execute(&tool_execute("add", r#"{"a": 1, "b": "2"}"#));
        let Action::ToolError(e) = action else { panic!("{action:?}") };
        assert!(e.error.starts_with("invalid arguments for `add`: b: invalid type"), "{}", e.error);
        assert_eq!(e.retryable, None);
    }

    #[test]
    fn invalid_and_malformed_input_never_reach_the_handler() {
        let mut call = tool_execute("add", r#"{"a": 1, "b": 2}"#);
        call.input =
            ToolInput::Invalid { value: json!({ "a": 1, "b": 2 }), error: "additional property `c`".to_owned() };
        assert_eq!(router().execute(&call), Action::tool_error("invalid arguments for `add`: additional property `c`"));
        assert_eq!(
            router().execute(&tool_execute("add", "[]")),
            Action::tool_error("malformed arguments for `add`: the arguments are not a JSON object")
        );
    }

    #[test]
    fn unknown_tools_are_named_with_the_known_ones() {
        assert_eq!(
            router().execute(&tool_execute("mul", "{}")),
            Action::tool_error("unknown tool `mul`: this agent runs `add`, `who`, `fail`")
        );
        assert_eq!(
            ToolRouter::new().execute(&tool_execute("mul", "{}")),
            Action::tool_error("unknown tool `mul`: this agent runs no tools")
        );
    }

    #[test]
    fn tools_are_listed_in_order() {
        let router = router();
        let names: Vec<_> = router.tools().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["add", "who", "fail"]);
        assert_eq!(router.get("add").unwrap().description.as_deref(), Some("adds"));
        assert!(router.handles("who"));
        assert!(!router.handles("mul"));
        assert_eq!(format!("{router:?}"), r#"ToolRouter { tools: ["add", "who", "fail"] }"#);
    }

    #[test]
    fn decide_answers_only_tool_execute() {
        let router = router();
        let request = DecisionRequest::for_trigger(Trigger::SessionStart);
        assert!(router.decide(&request).is_none());
        let request = DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute("fail", "{}")));
        let decision = router.decide(&request).unwrap();
        assert_eq!(decision.actions(), [Action::tool_error("it broke")]);
    }

    #[test]
    #[should_panic(expected = "the tool `add` was added to the ToolRouter twice")]
    fn duplicate_names_panic() {
        let _ = router().tool(AgentTool::new("add"), |_: Value| Ok::<_, String>(()));
    }

    #[test]
    fn routers_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ToolRouter>();
    }
}

#[cfg(test)]
mod approval_tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;
    use subs_protocol::trigger::InterruptResumed;
    use subs_protocol::{Call, CallKind, CallStatus, DecisionRequest, DecisionResponse, Trigger};

    use super::*;
    use crate::RecordingHost;
    use crate::builders::DecisionBuilders;
    use crate::testing::tool_execute;

    #[derive(Debug, Default, Serialize, Deserialize)]
    struct Refunds {
        count: u32,
    }

    #[derive(Deserialize)]
    struct Refund {
        amount: u32,
    }

    fn router() -> ToolRouter {
        ToolRouter::new()
            .tool(AgentTool::new("lookup"), |_: Value| Ok::<_, String>("shipped"))
            .tool_with_context(AgentTool::new("refund"), |args: Refund, cx: &mut ToolContext<Refunds>| {
                cx.state.count += 1;
                Ok::<_, String>(json!({ "refunded": args.amount, "by": cx.identity().id }))
            })
            .needs_approval()
            .tool(AgentTool::new("note"), |_: Value| Ok::<_, String>("noted"))
            .needs_approval_when(|args: &Refund| args.amount > 10)
    }

    fn call(id: &str, name: &str, arguments: Value) -> Action {
        let mut action = Action::tool_call(name, arguments);
        if let Action::ToolCall(c) = &mut action {
            c.id = Some(id.to_owned());
        }
        action
    }

    /// The model's reply proposing `actions`, as an `llm.finished` does.
    fn proposing(actions: Vec<Action>) -> DecisionRequest {
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        request.proposed = DecisionResponse::new().replace_actions(actions);
        request
    }

    /// An `interrupt.resumed` of `id` answering with `payload`, while the
    /// gated call `id` of `tool` waits queued.
    fn resumed(id: &str, tool: &str, payload: Option<Value>) -> DecisionRequest {
        let mut request = DecisionRequest::for_trigger(Trigger::InterruptResumed(InterruptResumed {
            interrupt_id: id.to_owned(),
            payload,
        }));
        request.calls.push(Call {
            id: id.to_owned(),
            kind: CallKind::ToolCall,
            status: CallStatus::Queued,
            attempt: 1,
            deadline: None,
            anchor: None,
            name: Some(tool.to_owned()),
            arguments: Some("{}".to_owned()),
            handler: None,
            stream: None,
            agent_id: None,
            session_id: None,
        });
        request
    }

    fn decide(request: DecisionRequest) -> DecisionResponse {
        RecordingHost::new().decide(&router(), request).unwrap()
    }

    /// The `tool.execute` of the call `id` of `refund`.
    fn execute(id: &str, arguments: &str) -> DecisionRequest {
        let mut call = tool_execute("refund", arguments);
        call.id = id.to_owned();
        DecisionRequest::for_trigger(Trigger::ToolExecute(call))
    }

    #[test]
    fn each_gated_call_gets_its_own_approval_and_others_none() {
        let decision = decide(proposing(vec![
            call("c1", "refund", json!({"amount": 5})),
            call("c2", "lookup", json!({})),
            call("c3", "refund", json!({"amount": 7})),
            call("c4", "note", json!({"amount": 3})),
            call("c5", "note", json!({"amount": 30})),
        ]));
        assert_eq!(
            decision.actions(),
            [
                call("c1", "refund", json!({"amount": 5})),
                Action::approval("c1", "refund", json!({"amount": 5})),
                call("c2", "lookup", json!({})),
                call("c3", "refund", json!({"amount": 7})),
                Action::approval("c3", "refund", json!({"amount": 7})),
                call("c4", "note", json!({"amount": 3})),
                call("c5", "note", json!({"amount": 30})),
                Action::approval("c5", "note", json!({"amount": 30})),
            ]
        );
    }

    #[test]
    fn ungated_proposals_pass_unchanged_and_calls_without_ids_get_one() {
        let request = proposing(vec![call("c2", "lookup", json!({})), Action::llm_call()]);
        assert_eq!(decide(request.clone()), request.proposed);
        let decision = decide(proposing(vec![Action::tool_call("refund", json!({"amount": 1}))]));
        assert_eq!(decision.actions()[1], Action::approval("approve.decision.0", "refund", json!({"amount": 1})));
        let Action::ToolCall(c) = &decision.actions()[0] else { panic!() };
        assert_eq!(c.id.as_deref(), Some("approve.decision.0"));
    }

    #[test]
    fn arguments_a_gate_cannot_read_need_approval() {
        assert!(router().needs_approval_for("note", &json!({"amount": "lots"})));
        assert!(!router().needs_approval_for("note", &json!({"amount": 1})));
        assert!(!router().needs_approval_for("lookup", &json!({})));
    }

    #[test]
    fn an_approval_is_recorded_for_the_calls_execution() {
        let decision = decide(resumed("c1", "refund", Some(json!({"approved": true}))));
        assert!(decision.actions().is_empty(), "{decision:?}");
        assert_eq!(decision.state, Some(json!({"subs_approvals": {"c1": true}})));

        let mut request = execute("c1", r#"{"amount": 5}"#);
        request.state = json!({"count": 1, "subs_approvals": {"c1": true, "c9": "later"}});
        let decision = decide(request);
        assert_eq!(decision.actions(), [Action::tool_result(json!({"refunded": 5, "by": null}))]);
        assert_eq!(
            decision.state,
            Some(json!({"count": 2, "subs_approvals": {"c9": "later"}})),
            "the answer is used up"
        );
    }

    #[test]
    fn a_gated_call_without_a_recorded_approval_never_runs() {
        for state in [Value::Null, json!({"count": 1}), json!({"subs_approvals": {"c2": true}}), json!([1])] {
            let mut request = execute("c1", r#"{"amount": 5}"#);
            request.state = state.clone();
            let decision = decide(request);
            assert_eq!(
                decision.actions(),
                [Action::tool_error("denied by the approver: no approval of this call was recorded")],
                "{state}"
            );
        }
        // A call its gate let through runs without one.
        let decision =
            decide(DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute("note", r#"{"amount": 1}"#))));
        assert_eq!(decision.actions(), [Action::tool_result(json!("noted"))]);
    }

    #[test]
    fn a_denial_settles_the_call_with_its_reason() {
        let mut request = resumed("c1", "refund", Some(json!({"approved": false, "reason": "too much"})));
        request.calls[0].status = CallStatus::Pending;
        let decision = decide(request);
        let Action::ToolError(e) = &decision.actions()[0] else { panic!("{decision:?}") };
        assert_eq!((e.id.as_deref(), e.error.as_str()), (Some("c1"), "denied by the approver: too much"));
        assert_eq!(e.retryable, None);
        assert_eq!(decision.state, None);
    }

    #[test]
    fn a_denial_of_a_call_still_held_waits_for_its_execution() {
        let decision = decide(resumed("c1", "refund", Some(json!({"approved": false, "reason": "too much"}))));
        assert!(decision.actions().is_empty(), "{decision:?}");
        assert_eq!(decision.state, Some(json!({"subs_approvals": {"c1": "too much"}})));
        let mut request = execute("c1", r#"{"amount": 5}"#);
        request.state = decision.state.unwrap();
        let decision = decide(request);
        assert_eq!(decision.actions(), [Action::tool_error("denied by the approver: too much")]);
        assert_eq!(decision.state, Some(json!({})), "a null state would keep the answer");
    }

    #[test]
    fn anything_but_an_approval_denies() {
        for payload in [None, Some(json!("yes")), Some(json!({"approved": "true"})), Some(json!({"aproved": true}))] {
            let mut request = resumed("c1", "refund", payload.clone());
            request.calls[0].status = CallStatus::Pending;
            let decision = decide(request);
            let Action::ToolError(e) = &decision.actions()[0] else { panic!("{payload:?}: {decision:?}") };
            assert!(e.error.contains(r#"not {"approved": true|false}"#), "{}", e.error);
        }
    }

    #[test]
    fn other_interrupts_are_the_agents_own() {
        // Not a call, a call of an ungated tool, a settled call.
        let mut request = resumed("c1", "refund", Some(json!({"approved": false})));
        request.calls.clear();
        assert!(decide(request).is_empty());
        assert!(decide(resumed("c1", "lookup", Some(json!({"approved": false})))).is_empty());
        let mut request = resumed("c1", "refund", Some(json!({"approved": false})));
        request.calls[0].status = CallStatus::Completed;
        assert!(decide(request).is_empty());
    }

    #[test]
    fn handlers_read_and_write_typed_state_and_see_the_owner() {
        let mut request = execute("c1", r#"{"amount": 5}"#);
        request.identity.id = Some("ann".to_owned());
        request.state = json!({"subs_approvals": {"c1": true}});
        let decision = decide(request.clone());
        assert_eq!(decision.actions(), [Action::tool_result(json!({"refunded": 5, "by": "ann"}))]);
        assert_eq!(decision.state, Some(json!({"count": 1})));
        request.state = json!({"count": 4, "subs_approvals": {"c1": true}});
        assert_eq!(decide(request.clone()).state, Some(json!({"count": 5})));
        // A tool that does not change the state leaves it out.
        let request = DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute("lookup", "{}")));
        assert_eq!(decide(request).state, None);
    }

    #[test]
    fn a_state_of_another_shape_is_a_tool_error_naming_the_field() {
        let mut request = execute("c1", r#"{"amount": 5}"#);
        request.state = json!({"count": "many", "subs_approvals": {"c1": true}});
        let decision = decide(request);
        let Action::ToolError(e) = &decision.actions()[0] else { panic!("{decision:?}") };
        assert!(
            e.error.starts_with("the session state does not fit the state of `refund`: state.count:"),
            "{}",
            e.error
        );
        assert_eq!(decision.state, Some(json!({"count": "many"})), "the approval is used up");
    }

    #[test]
    fn sub_agents_are_declared_with_the_tools() {
        let router = router().sub_agent("summarizer", "Summarizes a text");
        let config = router.configure(AgentConfig::new("m"));
        assert_eq!(config.tools.as_ref().map(Vec::len), Some(3));
        let subs = config.sub_agents.unwrap();
        assert_eq!((subs[0].id.as_str(), subs[0].description.as_deref()), ("summarizer", Some("Summarizes a text")));
    }

    #[test]
    #[should_panic(expected = "no tool was added yet")]
    fn approval_needs_a_tool() {
        let _ = ToolRouter::new().needs_approval();
    }
}
