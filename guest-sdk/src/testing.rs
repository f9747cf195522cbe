//! Native unit tests of agents: [`RecordingHost`], a [`Host`] that keeps
//! what the agent logged and streamed, [`tool_execute`] to build the
//! trigger of a tool call, and [`approval_resumed`] the answer to an
//! approval.
//!
//! Requests themselves come from
//! [`DecisionRequest::for_trigger`](subs_protocol::DecisionRequest::for_trigger).

use serde_json::Value;
use subs_protocol::trigger::{InterruptResumed, ToolExecute};
use subs_protocol::{Call, CallKind, CallStatus, DecisionRequest, DecisionResponse, StreamDelta, ToolInput, Trigger};

use crate::{Agent, Context, DecideError, Host, Level};

/// A [`Host`] that records instead of talking to an engine, so that agents
/// are unit tested natively: run a decision with [`RecordingHost::decide`],
/// then assert on the decision and on [`logs`](Self::logs) and
/// [`deltas`](Self::deltas).
///
/// ```
/// use subs_sdk::prelude::*;
///
/// struct Greeter;
/// impl Agent for Greeter {
///     fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
///         cx.info(format!("trigger {}", request.trigger.kind()));
///         Ok(DecisionResponse::new()
///             .with_message(DraftMessage::assistant("hi"))
///             .with_action(Action::done()))
///     }
/// }
///
/// let mut host = RecordingHost::new();
/// let decision = host.decide(&Greeter, DecisionRequest::for_trigger(Trigger::SessionStart)).unwrap();
/// assert_eq!(decision.actions(), [Action::done()]);
/// assert_eq!(host.logs, [(Level::Info, "trigger session.start".to_owned())]);
/// ```
#[derive(Debug, Clone)]
pub struct RecordingHost {
    /// Every line logged, in order.
    pub logs: Vec<(Level, String)>,
    /// Every delta streamed (and accepted), in order.
    pub deltas: Vec<StreamDelta>,
    /// Whether [`Host::emit_delta`] succeeds. The engine refuses deltas
    /// unless the decision answers a streaming `llm.execute`; turning this
    /// off tests an agent's behaviour in that case.
    pub accept_deltas: bool,
}

impl RecordingHost {
    /// A host that accepts every delta.
    pub fn new() -> Self {
        Self { logs: Vec::new(), deltas: Vec::new(), accept_deltas: true }
    }

    /// A host that refuses deltas, as the engine does for a decision that
    /// does not answer a streaming `llm.execute`.
    pub fn refusing_deltas() -> Self {
        Self { accept_deltas: false, ..Self::new() }
    }

    /// Runs `agent` on `request` with a [`Context`] over this host.
    ///
    /// # Errors
    /// Whatever the agent returns.
    pub fn decide<A: Agent + ?Sized>(
        &mut self,
        agent: &A,
        request: DecisionRequest,
    ) -> Result<DecisionResponse, DecideError> {
        agent.decide(request, &mut Context::new(self))
    }

    /// The text of all deltas, joined: what a client streaming the reply
    /// has seen.
    pub fn text(&self) -> String {
        self.deltas.iter().filter_map(|d| d.text.as_deref()).collect()
    }
}

impl Default for RecordingHost {
    fn default() -> Self {
        Self::new()
    }
}

impl Host for RecordingHost {
    fn emit_delta(&mut self, delta: &StreamDelta) -> Result<(), String> {
        if !self.accept_deltas {
            return Err("deltas are only accepted while answering an llm.execute trigger with stream: true".to_owned());
        }
        self.deltas.push(delta.clone());
        Ok(())
    }

    fn log(&mut self, level: Level, message: &str) {
        self.logs.push((level, message.to_owned()));
    }
}

/// A `tool.execute` of `name` with `arguments` as the model wrote them
/// (call id `call-1`, first attempt), with the input judged as the engine
/// judges it before the schema check: a JSON object is `valid`, anything
/// else `malformed`. Set `input` to test an `invalid` one.
///
/// ```
/// use subs_sdk::prelude::*;
/// use subs_sdk::testing::tool_execute;
///
/// let call = tool_execute("add", r#"{"a": 1}"#);
/// assert_eq!(call.input, ToolInput::Valid { value: json!({"a": 1}) });
/// assert!(matches!(tool_execute("add", "[1]").input, ToolInput::Malformed { .. }));
///
/// let request = DecisionRequest::for_trigger(Trigger::ToolExecute(call));
/// # let _ = request;
/// ```
pub fn tool_execute(name: impl Into<String>, arguments: impl Into<String>) -> ToolExecute {
    let arguments = arguments.into();
    let input = match serde_json::from_str::<Value>(&arguments) {
        Ok(value @ Value::Object(_)) => ToolInput::Valid { value },
        Ok(_) => ToolInput::Malformed { error: "the arguments are not a JSON object".to_owned() },
        Err(e) => ToolInput::Malformed { error: e.to_string() },
    };
    ToolExecute { id: "call-1".to_owned(), name: name.into(), arguments, input, attempt: 1, deadline: None }
}

/// The `interrupt.resumed` request a [`ToolRouter`](crate::ToolRouter)
/// gets when the approval of the call `call_id` of `tool` is answered with
/// `payload` (`{"approved": true}`, `{"approved": false, "reason": …}`):
/// the call open and started, as it is once no other approval holds it.
///
/// ```
/// use subs_sdk::prelude::*;
/// use subs_sdk::testing::approval_resumed;
///
/// let router = ToolRouter::new().tool(AgentTool::new("refund"), |_: Value| Ok::<_, String>("done")).needs_approval();
/// let request = approval_resumed("c1", "refund", json!({"approved": false, "reason": "no"}));
/// let decision = RecordingHost::new().decide(&router, request).unwrap();
/// let Action::ToolError(e) = &decision.actions()[0] else { panic!() };
/// assert_eq!(e.error, "denied by the approver: no");
/// ```
pub fn approval_resumed(call_id: impl Into<String>, tool: impl Into<String>, payload: Value) -> DecisionRequest {
    let call_id = call_id.into();
    let mut request = DecisionRequest::for_trigger(Trigger::InterruptResumed(InterruptResumed {
        interrupt_id: call_id.clone(),
        payload: Some(payload),
    }));
    request.calls.push(Call {
        id: call_id,
        kind: CallKind::ToolCall,
        status: CallStatus::Pending,
        attempt: 1,
        deadline: None,
        anchor: None,
        name: Some(tool.into()),
        arguments: None,
        handler: None,
        stream: None,
        agent_id: None,
        session_id: None,
    });
    request.pending_calls = 1;
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_judged_like_the_engine_does() {
        let call = tool_execute("t", "{}");
        assert_eq!(call.input, ToolInput::Valid { value: serde_json::json!({}) });
        assert_eq!(call.arguments, "{}");
        let ToolInput::Malformed { error } = tool_execute("t", "{").input else { panic!("not malformed") };
        assert!(error.contains("EOF"), "{error}");
        assert!(matches!(tool_execute("t", "3").input, ToolInput::Malformed { .. }));
    }

    #[test]
    fn refusing_hosts_record_no_deltas() {
        let mut host = RecordingHost::refusing_deltas();
        assert!(host.emit_delta(&StreamDelta::text("x")).is_err());
        host.accept_deltas = true;
        host.emit_delta(&StreamDelta::text("x")).unwrap();
        host.emit_delta(&StreamDelta::default()).unwrap();
        host.emit_delta(&StreamDelta::text("y")).unwrap();
        assert_eq!(host.text(), "xy");
        assert_eq!(host.deltas.len(), 3);
    }
}
