//! The component side: the [`export!`](crate::export) macro, which makes an
//! [`Agent`] the `decide` export of a component, and the [`Host`] that
//! calls the engine's `subs:agent/host` imports.

use subs_protocol::wit::FromWit;
use subs_protocol::{DecisionRequest, StreamDelta};

use crate::bindings::host as imports;
use crate::bindings::wit;
use crate::{Agent, Context, DecideError, Host, Level};

/// Exports an agent as the component's `decide` function.
///
/// Call it once, at the top level of the agent crate (`crate-type =
/// ["cdylib"]`), with an expression of a type that implements
/// [`Agent`](crate::Agent). The expression is evaluated for every decision,
/// which costs nothing for a unit struct and matches how the engine runs
/// components: a fresh instance per decision, so no state survives between
/// decisions anyway (keep it in the session's `state`). What only some
/// decisions use, such as a [`ToolRouter`](crate::ToolRouter) and its
/// schemas, is better built when a decision first needs it (the `tools`
/// example keeps its router in a `OnceLock`).
///
/// ```
/// use subs_sdk::prelude::*;
///
/// struct Passthrough;
/// impl Agent for Passthrough {}
///
/// subs_sdk::export!(Passthrough);
/// ```
///
/// The generated glue converts the engine's request into a
/// [`DecisionRequest`](crate::DecisionRequest), calls the agent with a
/// [`Context`](crate::Context) over the engine's imports, and converts the
/// decision or [`DecideError`](crate::DecideError) back. A request the SDK
/// cannot read fails the delivery terminally.
///
/// Only a `wasm32` build exports anything; elsewhere (the agent's native
/// unit tests, `cargo check` of a workspace) the macro just checks that the
/// expression is an agent, so several agent crates can link into one test
/// binary.
#[macro_export]
macro_rules! export {
    ($agent:expr $(,)?) => {
        const _: () = {
            struct SubsAgentExport;

            impl $crate::bindings::Guest for SubsAgentExport {
                $crate::__decide_export!($agent);
            }

            // Natively nothing calls the glue; naming it keeps the agent's
            // type "used" there, as it is in the component.
            #[cfg(not(target_arch = "wasm32"))]
            const _: () = {
                let _ = <SubsAgentExport as $crate::bindings::Guest>::decide;
            };

            // wit-bindgen's export glue is `unsafe` (raw ABI pointers,
            // `export_name`). rustc does not report lints inside another
            // crate's macros today; should it start, agent crates that deny
            // unsafe code keep building without an `allow` of their own.
            #[cfg(target_arch = "wasm32")]
            #[allow(unsafe_code)]
            const _: () = {
                $crate::bindings::export_agent! { SubsAgentExport with_types_in $crate::bindings }
            };
        };
    };
}

/// The `decide` function of the export glue, for `subs:agent@0.2.0`: the
/// branch arrives as a `messages` resource the request reads on demand.
#[cfg(not(feature = "wit-0-1-0"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __decide_export {
    ($agent:expr) => {
        fn decide(
            request: $crate::bindings::DecisionRequest,
            messages: $crate::bindings::Messages,
        ) -> ::core::result::Result<$crate::bindings::DecisionResponse, $crate::bindings::DecideError> {
            $crate::__report_panics();
            $crate::__decide_wit(&$agent, request, messages, &mut $crate::__ComponentHost)
        }
    };
}

/// The `decide` function of the export glue, for `subs:agent@0.1.0`: the
/// request carries the whole branch.
#[cfg(feature = "wit-0-1-0")]
#[doc(hidden)]
#[macro_export]
macro_rules! __decide_export {
    ($agent:expr) => {
        fn decide(
            request: $crate::bindings::DecisionRequest,
        ) -> ::core::result::Result<$crate::bindings::DecisionResponse, $crate::bindings::DecideError> {
            $crate::__report_panics();
            $crate::__decide_wit_0_1_0(&$agent, request, &mut $crate::__ComponentHost)
        }
    };
}

/// The [`Host`] of an agent running as a component: the engine's
/// `subs:agent/host` imports. Outside `wasm32` the imports do not exist and
/// calling them panics; native tests use a
/// [`RecordingHost`](crate::RecordingHost).
#[derive(Debug, Default)]
pub struct ComponentHost;

impl Host for ComponentHost {
    fn emit_delta(&mut self, delta: &StreamDelta) -> Result<(), String> {
        imports::emit_delta(&delta.clone().into())
    }

    fn log(&mut self, level: Level, message: &str) {
        imports::log(level.into(), message);
    }
}

/// Makes a panic's message reach the engine before the instance traps.
///
/// An agent built for `wasm32-wasip2` prints it to stderr, which the
/// engine captures. One built for `wasm32-unknown-unknown` has no stderr
/// (and no WASI at all), so there the hook sends it to the engine's logs at
/// error level; the engine quotes it in the failed delivery's error. The
/// export glue calls this at the start of every decision (an instance makes
/// only one); it does nothing on other targets.
pub fn report_panics() {
    #[cfg(all(target_arch = "wasm32", not(target_os = "wasi")))]
    std::panic::set_hook(Box::new(|info| imports::log(imports::Level::Error, &info.to_string())));
}

/// The body of `0.1.0`'s `decide` export: WIT request in, WIT decision
/// out. Takes the host as a parameter so that the conversions are tested
/// natively.
///
/// # Errors
/// A request that does not convert (JSON text that does not parse), and
/// whatever the agent returns.
pub fn decide_wit_0_1_0<A: Agent + ?Sized>(
    agent: &A,
    request: wit::DecisionRequest,
    host: &mut dyn Host,
) -> Result<wit::DecisionResponse, wit::DecideError> {
    decide_read(agent, DecisionRequest::from_wit(request), host)
}

/// The body of `0.2.0`'s `decide` export: the request without its branch,
/// and the `messages` resource the branch is read from as the agent's code
/// asks for it.
///
/// # Errors
/// As [`decide_wit_0_1_0`].
#[cfg(not(feature = "wit-0-1-0"))]
pub fn decide_wit<A: Agent + ?Sized>(
    agent: &A,
    request: crate::bindings::branch::DecisionRequest,
    messages: crate::bindings::branch::Messages,
    host: &mut dyn Host,
) -> Result<wit::DecisionResponse, wit::DecideError> {
    use subs_protocol::wit::BranchRequest;
    let messages = subs_protocol::Messages::lazy(std::sync::Arc::new(GuestBranch(messages)));
    decide_read(agent, request.join(messages), host)
}

/// Asks `agent` about a request read from WIT.
fn decide_read<A: Agent + ?Sized>(
    agent: &A,
    request: Result<DecisionRequest, subs_protocol::ProtocolError>,
    host: &mut dyn Host,
) -> Result<wit::DecisionResponse, wit::DecideError> {
    let request =
        request.map_err(|e| DecideError::terminal(format!("the engine sent a request the agent cannot read: {e}")))?;
    agent.decide(request, &mut Context::new(host)).map(Into::into).map_err(Into::into)
}

/// The engine's `messages` resource as the source of a lazy
/// [`Messages`](subs_protocol::Messages).
///
/// A read the engine refuses (the resource outlived its decision) or a
/// message that does not convert panics with the reason: the delivery then
/// fails with that message, as the agent cannot go on without the branch
/// it asked for.
#[cfg(not(feature = "wit-0-1-0"))]
struct GuestBranch(crate::bindings::branch::Messages);

#[cfg(not(feature = "wit-0-1-0"))]
impl subs_protocol::MessageSource for GuestBranch {
    fn count(&self) -> usize {
        read(self.0.len(), "its length") as usize
    }

    fn range(&self, start: usize, end: usize) -> Vec<subs_protocol::SharedMessage> {
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        read(self.0.range(index(start), index(end)), "a range")
            .into_iter()
            .map(|m| {
                let message = subs_protocol::Message::from_wit(m);
                subs_protocol::SharedMessage::from(read(message, "a message"))
            })
            .collect()
    }

    fn position(&self, id: &str) -> Option<usize> {
        read(self.0.position(id), "a message's position").map(|i| i as usize)
    }

    fn tree(&self) -> subs_protocol::RequestTree {
        use subs_protocol::wit::BranchRequest;
        let tree = read(self.0.tree(), "the message tree");
        let tree = crate::bindings::branch::DecisionRequest::tree_from_wit(tree, self.count());
        read(tree, "the message tree")
    }
}

/// The answer of a read of the branch; panics with the engine's reason.
#[cfg(not(feature = "wit-0-1-0"))]
fn read<T>(answer: Result<T, impl std::fmt::Display>, what: &str) -> T {
    answer.unwrap_or_else(|e| panic!("reading the branch ({what}) failed: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use subs_protocol::{Action, AgentConfig, DecisionResponse, DraftMessage, Trigger};

    use super::*;
    use crate::RecordingHost;

    struct Echo;
    impl Agent for Echo {
        fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
            cx.info(request.trigger.kind());
            cx.emit_text("streamed")?;
            if request.state == json!("fail") {
                return Err(DecideError::retryable("asked to fail"));
            }
            Ok(request
                .proposed
                .with_message(DraftMessage::assistant("hello"))
                .with_action(Action::done_with(json!({ "state": request.state }))))
        }
    }

    fn wit_request(state: serde_json::Value) -> wit::DecisionRequest {
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        request.state = state;
        request.proposed = DecisionResponse::new().with_agent(AgentConfig::new("m/x"));
        request.into()
    }

    #[test]
    fn a_decision_crosses_the_boundary_both_ways() {
        let mut host = RecordingHost::new();
        let decision = decide_wit_0_1_0(&Echo, wit_request(json!({ "n": 1.5 })), &mut host).unwrap();
        let decision = DecisionResponse::from_wit(decision).unwrap();
        assert_eq!(
            decision,
            DecisionResponse::new()
                .with_agent(AgentConfig::new("m/x"))
                .with_message(DraftMessage::assistant("hello"))
                .with_action(Action::done_with(json!({ "state": { "n": 1.5 } })))
        );
        assert_eq!(host.logs, [(Level::Info, "session.start".to_owned())]);
        assert_eq!(host.text(), "streamed");
    }

    #[test]
    fn agent_errors_keep_their_retryability() {
        let err = decide_wit_0_1_0(&Echo, wit_request(json!("fail")), &mut RecordingHost::new()).unwrap_err();
        assert_eq!(DecideError::from(err), DecideError::retryable("asked to fail"));
    }

    #[test]
    fn host_errors_fail_the_decision_terminally() {
        let err = decide_wit_0_1_0(&Echo, wit_request(json!(null)), &mut RecordingHost::refusing_deltas()).unwrap_err();
        assert!(!err.retryable);
        assert!(err.message.contains("llm.execute"), "{}", err.message);
    }

    #[test]
    fn unreadable_requests_fail_terminally_naming_the_field() {
        let mut request = wit_request(json!(null));
        request.state = "{not json".to_owned();
        let err = decide_wit_0_1_0(&Echo, request, &mut RecordingHost::new()).unwrap_err();
        assert!(!err.retryable);
        assert!(
            err.message.starts_with("the engine sent a request the agent cannot read: state: invalid JSON text"),
            "{}",
            err.message
        );
    }

    // The macro type-checks natively: the agent expression must be an Agent.
    struct Exported;
    impl Agent for Exported {}
    crate::export!(Exported);
}
