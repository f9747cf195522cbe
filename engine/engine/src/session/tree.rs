//! A session's message tree in memory: every message once, each with its
//! parent; the active path is the chain from `head` back to a root.

use std::collections::HashMap;

use subs_protocol::{DraftMessage, Message, MessageTree, TreeNode};

use crate::store::MessageRecord;

/// The message tree of one session.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    /// Messages in the order they were recorded.
    nodes: Vec<MessageRecord>,
    /// Message id → index into `nodes`.
    index: HashMap<String, usize>,
}

/// How a client's view of the conversation relates to the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reconciled {
    /// The last message of the view that is in the tree, where the new
    /// messages attach; `None` when the view shares nothing with the tree.
    pub fork_id: Option<String>,
    /// Index of the first new message in the view.
    pub new_from: usize,
}

impl Tree {
    /// A tree of the given records, in recording order.
    pub fn from_records(records: impl IntoIterator<Item = MessageRecord>) -> Self {
        let mut tree = Self::default();
        for record in records {
            tree.insert(record);
        }
        tree
    }

    /// Records a message.
    pub fn insert(&mut self, record: MessageRecord) {
        self.index.insert(record.message.id.clone(), self.nodes.len());
        self.nodes.push(record);
    }

    /// Whether a message with this id is recorded.
    pub fn contains(&self, id: &str) -> bool {
        self.index.contains_key(id)
    }

    /// The record of message `id`.
    pub fn get(&self, id: &str) -> Option<&MessageRecord> {
        self.index.get(id).map(|&i| &self.nodes[i])
    }

    /// The path from a root to `head`, oldest first.
    pub fn path(&self, head: Option<&str>) -> Vec<&Message> {
        let mut path = Vec::new();
        let mut cursor = head;
        while let Some(id) = cursor {
            let Some(record) = self.get(id) else { break };
            path.push(&record.message);
            cursor = record.parent_id.as_deref();
        }
        path.reverse();
        path
    }

    /// The whole tree in the protocol's shape.
    pub fn to_protocol(&self, head: Option<&str>) -> MessageTree {
        MessageTree {
            nodes: self
                .nodes
                .iter()
                .map(|r| TreeNode { message: r.message.clone(), parent_id: r.parent_id.clone() })
                .collect(),
            head_id: head.map(str::to_owned),
        }
    }

    /// Finds where a client's view of the conversation leaves the tree.
    ///
    /// The view's messages are matched by id, from the first: each must be
    /// in the tree with the previous one as its parent (the first, a root).
    /// The first message that is not (no id, an unknown id, or another
    /// parent) starts the new part. So a view that is the active path plus
    /// new messages appends; a view that edits or drops messages forks a
    /// branch from the last message it shares; a shorter view moves the
    /// head back.
    pub fn reconcile(&self, view: &[DraftMessage]) -> Reconciled {
        let mut fork_id: Option<&str> = None;
        for (i, message) in view.iter().enumerate() {
            let parent_matches = message
                .id
                .as_deref()
                .and_then(|id| self.get(id))
                .is_some_and(|record| record.parent_id.as_deref() == fork_id);
            if !parent_matches {
                return Reconciled { fork_id: fork_id.map(str::to_owned), new_from: i };
            }
            fork_id = message.id.as_deref();
        }
        Reconciled { fork_id: fork_id.map(str::to_owned), new_from: view.len() }
    }
}

#[cfg(test)]
mod tests {
    use subs_protocol::Role;

    use super::*;

    fn record(id: &str, parent: Option<&str>) -> MessageRecord {
        MessageRecord {
            message: Message {
                id: id.to_owned(),
                role: Role::User,
                content: Some(id.into()),
                tool_calls: None,
                tool_call_id: None,
                name: None,
            },
            parent_id: parent.map(str::to_owned),
        }
    }

    fn draft(id: Option<&str>) -> DraftMessage {
        let message = DraftMessage::user("x");
        match id {
            Some(id) => message.with_id(id),
            None => message,
        }
    }

    fn tree() -> Tree {
        // a ─ b ─ c
        //      └─ d
        Tree::from_records([record("a", None), record("b", Some("a")), record("c", Some("b")), record("d", Some("b"))])
    }

    #[test]
    fn paths_follow_parents() {
        let tree = tree();
        let ids = |head| tree.path(head).iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(Some("c")), ["a", "b", "c"]);
        assert_eq!(ids(Some("d")), ["a", "b", "d"]);
        assert!(ids(None).is_empty());
    }

    #[test]
    fn appending_keeps_the_whole_path() {
        let r = tree().reconcile(&[draft(Some("a")), draft(Some("b")), draft(Some("c")), draft(None)]);
        assert_eq!(r, Reconciled { fork_id: Some("c".into()), new_from: 3 });
    }

    #[test]
    fn an_edit_forks_from_the_last_shared_message() {
        let r = tree().reconcile(&[draft(Some("a")), draft(None)]);
        assert_eq!(r, Reconciled { fork_id: Some("a".into()), new_from: 1 });
        // An id from another branch does not continue this one.
        let r = tree().reconcile(&[draft(Some("a")), draft(Some("c"))]);
        assert_eq!(r, Reconciled { fork_id: Some("a".into()), new_from: 1 });
    }

    #[test]
    fn a_truncated_view_moves_the_head_back() {
        let r = tree().reconcile(&[draft(Some("a")), draft(Some("b"))]);
        assert_eq!(r, Reconciled { fork_id: Some("b".into()), new_from: 2 });
    }

    #[test]
    fn a_view_sharing_nothing_starts_over() {
        let r = tree().reconcile(&[draft(None)]);
        assert_eq!(r, Reconciled { fork_id: None, new_from: 0 });
        let r = tree().reconcile(&[draft(Some("b"))]);
        assert_eq!(r, Reconciled { fork_id: None, new_from: 0 });
    }
}
