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

/// A request whose tree holds its active path, as the engine sends it.
fn request_with_tree() -> subs_protocol::DecisionRequest {
    use subs_protocol::{Content, Message, MessageTree, RequestTree, Role, TreeNode};
    let message = |id: &str, role, text: &str| Message {
        id: id.into(),
        role,
        content: Some(Content::Text(text.into())),
        tool_calls: None,
        tool_call_id: None,
        name: None,
    };
    let first = message("m1", Role::User, "hi");
    let reply = message("m2", Role::Assistant, "hello");
    let branch = message("m3", Role::Assistant, "hello, again");
    let mut request = subs_protocol::DecisionRequest::for_trigger(subs_protocol::Trigger::SessionStart);
    let path = vec![first.clone().into(), reply.clone().into()];
    let tree = MessageTree {
        nodes: vec![
            TreeNode { message: first, parent_id: None },
            TreeNode { message: branch, parent_id: Some("m1".into()) },
            TreeNode { message: reply, parent_id: Some("m1".into()) },
        ],
        head_id: Some("m2".into()),
    };
    request.messages = subs_protocol::Messages::new(path.clone(), RequestTree::new(tree, &path));
    request
}

/// The active path crosses once: the tree's nodes on it name their index
/// in `messages`, and parents name their node, so a tree adds indices, not
/// a second copy of the conversation, to what a guest must receive.
#[test]
fn the_active_path_crosses_once() {
    let request = request_with_tree();
    let lowered: wit::DecisionRequest = request.clone().into();
    let shapes: Vec<String> = lowered
        .message_tree
        .nodes
        .iter()
        .map(|n| {
            let message = match &n.message {
                wit::TreeMessage::Active(i) => format!("active {i}"),
                wit::TreeMessage::Other(m) => format!("other {}", m.id),
            };
            let parent = match &n.parent {
                wit::TreeParent::Root => "root".to_owned(),
                wit::TreeParent::Node(j) => format!("node {j}"),
                wit::TreeParent::Id(id) => format!("id {id}"),
            };
            format!("{message}, {parent}")
        })
        .collect();
    assert_eq!(shapes, ["active 0, root", "other m3, node 0", "active 1, node 0"]);
    assert_eq!(subs_protocol::DecisionRequest::from_wit(lowered).unwrap(), request);
}

/// Indices that point nowhere are refused with the node that holds them.
#[test]
fn tree_indices_that_point_nowhere_name_the_node() {
    let mut lowered: wit::DecisionRequest = request_with_tree().into();
    lowered.message_tree.nodes[2].message = wit::TreeMessage::Active(7);
    let err = subs_protocol::DecisionRequest::from_wit(lowered).unwrap_err();
    assert_eq!(err.field(), Some("message_tree.nodes[2].message"));
    assert!(err.to_string().contains("message 7, which does not exist"), "{err}");

    let mut lowered: wit::DecisionRequest = request_with_tree().into();
    lowered.message_tree.nodes[1].parent = wit::TreeParent::Node(3);
    let err = subs_protocol::DecisionRequest::from_wit(lowered).unwrap_err();
    assert_eq!(err.field(), Some("message_tree.nodes[1].parent"));
}
