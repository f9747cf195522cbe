//! The component side: the [`export!`](crate::export) macro, which makes an
//! [`Agent`] the `decide` export of a component, and the [`Host`] that
//! calls the engine's `subs:agent/host` imports.

use subs_protocol::wit::FromWit;
use subs_protocol::{DecisionRequest, StreamDelta};

use crate::bindings::subs::agent::host as imports;
use crate::bindings::wit;
use crate::{Agent, Context, DecideError, Host, Level};

/// Exports an agent as the component's `decide` function.
///
/// Call it once, at the top level of the agent crate (`crate-type =
/// ["cdylib"]`), with an expression of a type that implements
/// [`Agent`](crate::Agent). The expression is evaluated for every decision,
/// which costs nothing for a unit struct and matches how the engine runs
/// components: a fresh instance per decision, so no state survives between
/// decisions anyway (keep it in the session's `state`).
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
                fn decide(
                    request: $crate::bindings::DecisionRequest,
                ) -> ::core::result::Result<$crate::bindings::DecisionResponse, $crate::bindings::DecideError> {
                    $crate::__report_panics();
                    $crate::__decide_wit(&$agent, request, &mut $crate::__ComponentHost)
                }
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

/// The body of the `decide` export: WIT request in, WIT decision out.
/// Takes the host as a parameter so that the conversions are tested
/// natively.
///
/// # Errors
/// A request that does not convert (JSON text that does not parse), and
/// whatever the agent returns.
pub fn decide_wit<A: Agent + ?Sized>(
    agent: &A,
    request: wit::DecisionRequest,
    host: &mut dyn Host,
) -> Result<wit::DecisionResponse, wit::DecideError> {
    let request = DecisionRequest::from_wit(request)
        .map_err(|e| DecideError::terminal(format!("the engine sent a request the agent cannot read: {e}")))?;
    agent.decide(request, &mut Context::new(host)).map(Into::into).map_err(Into::into)
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
        let decision = decide_wit(&Echo, wit_request(json!({ "n": 1.5 })), &mut host).unwrap();
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
        let err = decide_wit(&Echo, wit_request(json!("fail")), &mut RecordingHost::new()).unwrap_err();
        assert_eq!(DecideError::from(err), DecideError::retryable("asked to fail"));
    }

    #[test]
    fn host_errors_fail_the_decision_terminally() {
        let err = decide_wit(&Echo, wit_request(json!(null)), &mut RecordingHost::refusing_deltas()).unwrap_err();
        assert!(!err.retryable);
        assert!(err.message.contains("llm.execute"), "{}", err.message);
    }

    #[test]
    fn unreadable_requests_fail_terminally_naming_the_field() {
        let mut request = wit_request(json!(null));
        request.state = "{not json".to_owned();
        let err = decide_wit(&Echo, request, &mut RecordingHost::new()).unwrap_err();
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
