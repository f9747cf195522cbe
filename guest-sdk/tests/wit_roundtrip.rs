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

/// In `0.2.0` a `client.messages` view that begins with the request's own
/// branch crosses as the count of those messages and the rest, and reads
/// back as the same view, sharing the branch it is joined with; any other
/// view crosses whole.
#[test]
fn a_client_view_crosses_as_its_shared_count_and_the_rest() {
    use subs_protocol::wit::BranchRequest;
    use subs_protocol::{ClientView, DraftMessage, Messages, Trigger, trigger::ClientMessages};
    use subs_sdk::bindings::branch;

    let path: Vec<subs_protocol::Message> = (0..3)
        .map(|i| subs_protocol::from_value(serde_json::json!({"id": format!("m{i}"), "role": "user", "content": "hi"})))
        .collect::<Result<_, _>>()
        .unwrap();
    let branch_of = |request: &subs_protocol::DecisionRequest| request.messages.clone();
    for shares in [true, false] {
        let mut request = subs_protocol::DecisionRequest::for_trigger(Trigger::SessionStart);
        request.messages = Messages::from(path.clone());
        let base = if shares { branch_of(&request) } else { Messages::from(path.clone()) };
        let view = ClientView::sharing(base, 2, vec![DraftMessage::user("new")]);
        request.trigger =
            Trigger::ClientMessages(ClientMessages { messages: view, new_from: 2, client: Default::default() });
        let (wit, messages) = branch::DecisionRequest::split(request.clone());
        let branch::Trigger::ClientMessages(crossed) = &wit.trigger else { panic!("{:?}", wit.trigger) };
        let expected = if shares { (2, 1) } else { (0, 3) };
        assert_eq!((crossed.shared, crossed.rest.len()), expected, "shares: {shares}");
        let back = wit.join(messages).unwrap();
        assert_eq!(back, request, "shares: {shares}");
        let Trigger::ClientMessages(view) = &back.trigger else { unreachable!() };
        assert_eq!(view.messages.shared_with(&back.messages).is_some(), shares);
    }
}
