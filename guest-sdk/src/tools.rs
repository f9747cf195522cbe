//! [`ToolRouter`]: an agent's own tools, run for `tool.execute` and
//! declared in its config.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use subs_protocol::trigger::ToolExecute;
use subs_protocol::{Action, AgentTool, DecisionRequest, DecisionResponse, ToolInput, Trigger};

/// A tool's code: parsed arguments in, result JSON or error text out.
type Handler = dyn Fn(Value, &ToolExecute) -> Result<Value, String> + Send + Sync;

/// The tools an agent runs itself, by name: each an [`AgentTool`]
/// declaration (what the model sees) and a handler.
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
/// let config = AgentConfig::new("openai/gpt-4o-mini").with_tools(router.tools());
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
}

/// One tool: what the model is told, and the code that runs it.
struct Route {
    tool: AgentTool,
    handler: Box<Handler>,
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
    pub fn tool_with_call<T, R, E, F>(mut self, tool: AgentTool, handler: F) -> Self
    where
        T: DeserializeOwned,
        R: Serialize,
        E: fmt::Display,
        F: Fn(T, &ToolExecute) -> Result<R, E> + Send + Sync + 'static,
    {
        assert!(!self.handles(&tool.name), "the tool `{}` was added to the ToolRouter twice", tool.name);
        let name = tool.name.clone();
        let handler = move |value: Value, call: &ToolExecute| {
            let args: T =
                subs_protocol::from_value(value).map_err(|e| format!("invalid arguments for `{name}`: {e}"))?;
            let result = handler(args, call).map_err(|e| e.to_string())?;
            serde_json::to_value(result).map_err(|e| format!("the result of `{name}` is not JSON: {e}"))
        };
        self.routes.push(Route { tool, handler: Box::new(handler) });
        self
    }

    /// The declarations of all tools, in the order they were added: what
    /// the agent puts in its config
    /// ([`AgentConfig::with_tools`](subs_protocol::AgentConfig::with_tools)).
    pub fn tools(&self) -> Vec<AgentTool> {
        self.routes.iter().map(|r| r.tool.clone()).collect()
    }

    /// The declaration of the tool named `name`.
    pub fn get(&self, name: &str) -> Option<&AgentTool> {
        self.find(name).map(|r| &r.tool)
    }

    /// Whether the router runs a tool named `name`.
    pub fn handles(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Runs the tool `call` names and returns the `tool.result` or
    /// `tool.error` that settles the call (see the type's docs for which).
    /// The action leaves `id` and `attempt` out: the engine takes them from
    /// the `tool.execute` being answered.
    pub fn execute(&self, call: &ToolExecute) -> Action {
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
        match (route.handler)(value, call) {
            Ok(result) => Action::tool_result(result),
            Err(error) => Action::tool_error(error),
        }
    }

    /// The decision for `request` when its trigger is `tool.execute`: the
    /// settling action of [`execute`](Self::execute) (added to `proposed`,
    /// which the engine leaves empty for `tool.execute`). `None` for every
    /// other trigger.
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
        let Trigger::ToolExecute(call) = &request.trigger else {
            return None;
        };
        Some(request.proposed.clone().with_action(self.execute(call)))
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
