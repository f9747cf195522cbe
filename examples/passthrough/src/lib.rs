//! The smallest complete subs agent: it accepts every decision the engine
//! proposes, so it chats with the engine's default model and finishes turns
//! as an ordinary agent loop would.

use subs_sdk::Agent;

/// Returns `proposed` for every trigger (the [`Agent`] default).
pub struct Passthrough;

impl Agent for Passthrough {}

subs_sdk::export!(Passthrough);

#[cfg(test)]
mod tests {
    use subs_sdk::prelude::*;

    use super::*;

    #[test]
    fn every_decision_is_the_proposal() {
        let mut start = DecisionRequest::for_trigger(Trigger::SessionStart);
        start.proposed = DecisionResponse::new().with_agent(AgentConfig::new("subs/offline"));
        let mut finished = DecisionRequest::for_trigger(Trigger::SessionStart);
        finished.proposed =
            DecisionResponse::new().with_message(DraftMessage::assistant("hi")).with_action(Action::done());
        let empty = DecisionRequest::for_trigger(Trigger::SessionStart);

        let mut host = RecordingHost::new();
        for request in [start, finished, empty] {
            let decision = host.decide(&Passthrough, request.clone()).unwrap();
            assert_eq!(decision, request.proposed);
        }
        assert!(host.logs.is_empty());
    }
}
