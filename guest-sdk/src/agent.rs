//! The [`Agent`] trait: what an agent is to the engine.

use std::rc::Rc;
use std::sync::Arc;

use subs_protocol::{DecisionRequest, DecisionResponse};

use crate::{Context, DecideError};

/// An agent: decides what happens next whenever the engine asks.
///
/// The default [`decide`](Agent::decide) accepts the engine's proposal, so
/// an empty impl is a complete chat agent:
///
/// ```
/// use subs_sdk::prelude::*;
///
/// struct Passthrough;
/// impl Agent for Passthrough {}
///
/// let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
/// request.proposed = DecisionResponse::new().with_agent(AgentConfig::new("openai/gpt-4o-mini"));
/// let decision = RecordingHost::new().decide(&Passthrough, request.clone()).unwrap();
/// assert_eq!(decision, request.proposed);
/// ```
///
/// Nothing here depends on WebAssembly: the same impl is exported as a
/// component with [`export!`](crate::export) and can serve an HTTP worker.
pub trait Agent {
    /// Decides what happens next for `request.trigger`.
    ///
    /// `request.proposed` is what an ordinary agent loop would do; return
    /// it, change it, or decide something else. It is empty when only the
    /// agent knows what to do (`tool.execute`, `llm.execute`,
    /// `client.action`, `interrupt.resumed`).
    ///
    /// # Errors
    /// A [`DecideError`] fails this delivery; the engine redelivers the
    /// same request when the error is retryable.
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let _ = cx;
        Ok(request.proposed)
    }
}

// Agents are often shared (an HTTP worker's handlers) or boxed (a host that
// serves several); forwarding keeps `A: Agent` bounds usable for those.
macro_rules! forward_agent {
    ($($ptr:ident),+) => {
        $(impl<A: Agent + ?Sized> Agent for $ptr<A> {
            fn decide(
                &self,
                request: DecisionRequest,
                cx: &mut Context<'_>,
            ) -> Result<DecisionResponse, DecideError> {
                (**self).decide(request, cx)
            }
        })+
    };
}
forward_agent!(Box, Rc, Arc);

impl<A: Agent + ?Sized> Agent for &A {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        (**self).decide(request, cx)
    }
}

#[cfg(test)]
mod tests {
    use subs_protocol::{Action, Trigger};

    use super::*;
    use crate::RecordingHost;

    struct Finish;
    impl Agent for Finish {
        fn decide(&self, _request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
            cx.info("finishing");
            Ok(DecisionResponse::new().with_action(Action::done()))
        }
    }

    #[test]
    fn pointers_forward_to_the_agent() {
        let request = DecisionRequest::for_trigger(Trigger::SessionStart);
        let boxed: Box<dyn Agent> = Box::new(Finish);
        let shared = Arc::new(Finish);
        let mut host = RecordingHost::new();
        for agent in [&boxed as &dyn Agent, &shared, &Rc::new(Finish), &&Finish] {
            let decision = host.decide(agent, request.clone()).unwrap();
            assert_eq!(decision.actions(), [Action::done()]);
        }
        assert_eq!(host.logs.len(), 4);
    }
}
