//! Every protocol value survives the trip into the guest's wit-bindgen
//! types and back, exactly: what the engine sends is what the agent reads,
//! and what the agent decides is what the engine records.
//!
//! The engine runs the same property against its wasmtime types; together
//! they cover both halves of the component boundary.

use std::fmt::Debug;

use proptest::prelude::*;
use subs_protocol::arbitrary;
use subs_protocol::wit::FromWit;
use subs_sdk::bindings::wit;

/// protocol → WIT → protocol.
fn round_trip<P, W>(value: &P) -> P
where
    P: Clone + Debug + Into<W> + FromWit<W>,
{
    let wit: W = value.clone().into();
    P::from_wit(wit).unwrap_or_else(|e| panic!("{value:?} did not come back: {e}"))
}

macro_rules! round_trips {
    ($($name:ident: $strategy:expr => $wit:ty;)+) => {
        proptest! {
            $(
                #[test]
                fn $name(value in $strategy) {
                    prop_assert_eq!(round_trip::<_, $wit>(&value), value);
                }
            )+
        }
    };
}

round_trips! {
    decision_request: arbitrary::decision_request() => wit::DecisionRequest;
    decision_response: arbitrary::decision_response() => wit::DecisionResponse;
    trigger: arbitrary::trigger() => wit::Trigger;
    action: arbitrary::action() => wit::Action;
    client_input: arbitrary::client_input() => wit::ClientInput;
    stream_delta: arbitrary::stream_delta() => wit::StreamDelta;
    message: arbitrary::message() => wit::Message;
    draft_message: arbitrary::draft_message() => wit::DraftMessage;
    agent_config: arbitrary::agent_config() => wit::AgentConfig;
    llm_request: arbitrary::llm_request() => wit::LlmRequest;
    llm_response: arbitrary::llm_response() => wit::LlmResponse;
}

/// JSON text that does not parse is refused with the field's path, never
/// read as something else.
#[test]
fn unparsable_json_text_names_the_field() {
    let mut request: wit::DecisionRequest =
        subs_protocol::DecisionRequest::for_trigger(subs_protocol::Trigger::SessionStart).into();
    request.proposed.state = Some("{".to_owned());
    let err = subs_protocol::DecisionRequest::from_wit(request).unwrap_err();
    assert_eq!(err.field(), Some("proposed.state"));
}
