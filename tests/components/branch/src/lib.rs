//! Test component: reads its decision's branch on demand, through the
//! `messages` resource of `subs:agent@0.2.0`, and reports what it read in
//! its `state`, so a test can hold each answer against what the engine
//! stored. It answers with its `proposed` decision otherwise.
//!
//! `state.read` reports, without reading the branch whole: `len`, the
//! `last` message (id, role, text), `first` (the message at index 0),
//! `after_first` (how many messages follow the first), `position_last`
//! (the last message's index, by id), the last two ids (`last_2`),
//! whether that read the path whole (`whole`: it must not), and the tree
//! (`tree`: each node's id and parent id).
//! `state.path` is every id of the path read whole, when the client asked
//! for it (`client.action` named `whole`).
//! `state.view` reports what it read of a `client.messages` trigger's view
//! of the conversation: `len`, `new_from`, the `first` and `last`
//! messages, the `new` ones (from `new_from` on), whether those reads read
//! the view whole (`whole`: they must not), then every id of the view
//! (`ids`, read whole). Other triggers carry the last report over.
//!
//! It keeps each decision's branch in a global. When one instance is asked
//! again (the engine never does; a test of the host does), it reads the
//! kept branch first: that read must fail, as the branch belongs to a
//! decision that is over, and the failure (a panic that quotes the
//! engine's refusal) fails the decision.

use std::cell::RefCell;

use subs_sdk::prelude::*;

thread_local! {
    /// The branch of this instance's previous decision.
    static KEPT: RefCell<Option<subs_sdk::Messages>> = const { RefCell::new(None) };
}

struct Branch;

fn summary(message: &Message) -> Value {
    json!({ "id": message.id, "role": message.role, "text": message.text() })
}

fn draft_summary(message: &DraftMessage) -> Value {
    json!({ "id": message.id, "role": message.role, "text": message.text() })
}

/// What the agent reads of a `client.messages` trigger's view, or the
/// report of an earlier one.
fn view(request: &DecisionRequest) -> Value {
    let Trigger::ClientMessages(trigger) = &request.trigger else {
        return request.state.get("view").cloned().unwrap_or(Value::Null);
    };
    let view = &trigger.messages;
    let len = view.len();
    let new_from = usize::try_from(trigger.new_from).unwrap_or(usize::MAX);
    let mut report = json!({
        "len": len,
        "new_from": trigger.new_from,
        "first": view.get(0).map(|m| draft_summary(&m)),
        "last": view.last().map(draft_summary),
        "new": view.messages_from(new_from).iter().map(draft_summary).collect::<Vec<_>>(),
    });
    report["whole"] = json!(view.is_read());
    report["ids"] = json!(view.iter().map(|m| m.id.clone()).collect::<Vec<_>>());
    report
}

impl Agent for Branch {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        // Kept before anything is read, so that reading the kept copy later
        // asks the engine rather than what this decision already read.
        let kept = KEPT.with(|k| k.borrow_mut().replace(request.messages.clone()));
        if let Some(kept) = kept {
            // Reads the earlier decision's branch: the engine refuses.
            let _ = kept.at(0);
        }
        let messages = &request.messages;
        let first = messages.at(0);
        let mut read = json!({
            "len": messages.len(),
            "last": messages.last().map(|m| summary(m)),
            "first": first.as_ref().map(|m| summary(m)),
            "after_first": first.as_ref().and_then(|m| messages.after(&m.id)).map(|after| after.len()),
            "position_last": messages.last().and_then(|m| messages.position(&m.id)),
            "last_2": messages.last_n(2).iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
        });
        // None of the reads above read the path whole; resolving the
        // tree's active nodes below does.
        read["whole"] = json!(messages.is_read());
        let tree: Vec<Value> = request
            .tree_nodes()
            .map(|node| match node {
                Ok((message, parent)) => json!({ "id": message.id, "parent": parent }),
                Err(e) => json!({ "error": e.to_string() }),
            })
            .collect();
        read["tree"] = json!(tree);
        let mut state = json!({ "read": read, "view": view(&request) });
        if matches!(&request.trigger, Trigger::ClientAction(a) if a.name == "whole") {
            state["path"] = json!(messages.iter().map(|m| m.id.clone()).collect::<Vec<_>>());
        }
        let mut decision = request.proposed;
        decision.state = Some(state);
        Ok(decision)
    }
}

subs_sdk::export!(Branch);
