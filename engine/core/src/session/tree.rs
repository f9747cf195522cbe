//! A session's message tree in memory: every message once, each with its
//! parent; the active path is the chain from `head` back to a root.
//!
//! Messages are shared ([`Arc`]): a decision request, a snapshot or a
//! replayed request holds handles to the tree's messages, never copies, so
//! what a session costs in memory is its messages once, however many
//! requests and reads are under way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use subs_protocol::{DraftMessage, Message, NodeMessage, NodeParent, RequestNode, RequestTree, SharedMessage};

use crate::store::MessageRecord;

/// The message tree of one session.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    /// Messages in the order they were recorded.
    nodes: Vec<MessageRecord>,
    /// Message id → index into `nodes`.
    index: HashMap<String, usize>,
    /// Each node's parent as an index into `nodes`, when the parent was
    /// recorded before it (always, for what the engine records): paths are
    /// walked several times a step, and following an index costs nothing
    /// where looking an id up costs a hash of it.
    parents: Vec<Option<usize>>,
    /// Whether some id was recorded twice (only a damaged store holds
    /// such): the index then names the later message, which an index
    /// resolved earlier would not follow, so walks look every id up.
    duplicates: bool,
    /// Whether some message names a parent not recorded before it (a
    /// client's fork may; the engine's messages never do): recording that
    /// parent later changes the path through it.
    late_parents: bool,
    /// The branch last handed to a decision, extended by what is recorded
    /// after it rather than built again (see [`Tree::shared_branch`]).
    kept: Kept,
}

/// A decision's branch as [`Tree::for_request`] builds it, shared, with
/// where the tree stood when it was built.
#[derive(Debug, Clone)]
struct Branch {
    /// The node at the end of the path; `None` for the empty path.
    head: Option<usize>,
    /// How many nodes the tree had.
    nodes: usize,
    path: Arc<Vec<SharedMessage>>,
    tree: Arc<RequestTree>,
}

/// The kept [`Branch`], behind a lock so that a request can be built from
/// a shared session (the lock is never contended: one actor owns it).
#[derive(Debug, Default)]
struct Kept(Mutex<Option<Branch>>);

impl Clone for Kept {
    fn clone(&self) -> Self {
        Self(Mutex::new(self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()))
    }
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
        let parent = record.parent_id.as_deref().and_then(|id| self.index.get(id).copied());
        if parent.is_none() && record.parent_id.is_some() {
            self.late_parents = true;
        }
        if self.index.insert(record.message.id.clone(), self.nodes.len()).is_some() {
            self.duplicates = true;
        }
        self.parents.push(parent);
        self.nodes.push(record);
    }

    /// The node the parent id of node `k` names now: the index resolved
    /// when `k` was recorded, or else (a parent recorded later, or a
    /// duplicated id somewhere) a lookup of the id.
    fn parent_of(&self, k: usize) -> Option<usize> {
        match self.parents[k] {
            Some(parent) if !self.duplicates => Some(parent),
            _ => self.index.get(self.nodes[k].parent_id.as_deref()?).copied(),
        }
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
        self.path_nodes(head).into_iter().map(|k| &*self.nodes[k].message).collect()
    }

    /// The path to `head` newest first, read as far as it is asked: a
    /// search for a recent message costs what it passes, not the path.
    pub fn path_back(&self, head: Option<&str>) -> impl Iterator<Item = &Message> {
        let mut cursor = head.and_then(|id| self.index.get(id).copied());
        let mut walked = 0;
        std::iter::from_fn(move || {
            let k = cursor?;
            // A cycle of parents (only a damaged store could hold one)
            // ends the walk, as in `path_nodes`.
            if walked == self.nodes.len() {
                return None;
            }
            walked += 1;
            cursor = self.parent_of(k);
            Some(&*self.nodes[k].message)
        })
    }

    /// How many messages are recorded.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Every recorded message, in recording order.
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.nodes.iter().map(|r| &*r.message)
    }

    /// The indices in `nodes` of the path from a root to `head`, oldest
    /// first (so increasing: a parent is recorded before its children).
    fn path_nodes(&self, head: Option<&str>) -> Vec<usize> {
        let mut path = Vec::new();
        let mut cursor = head.and_then(|id| self.index.get(id).copied());
        while let Some(k) = cursor {
            // A cycle of parents (only a damaged store could hold one)
            // ends the walk rather than looping for ever.
            if path.len() == self.nodes.len() {
                break;
            }
            path.push(k);
            cursor = self.parent_of(k);
        }
        path.reverse();
        path
    }

    /// The whole tree in the protocol's shape, every message copied: what
    /// [`for_request`](Self::for_request) stands for.
    #[cfg(test)]
    pub fn to_protocol(&self, head: Option<&str>) -> subs_protocol::MessageTree {
        use subs_protocol::TreeNode;
        subs_protocol::MessageTree {
            nodes: self
                .nodes
                .iter()
                .map(|r| TreeNode { message: Message::clone(&r.message), parent_id: r.parent_id.clone() })
                .collect(),
            head_id: head.map(str::to_owned),
        }
    }

    /// The active path to `head` and the tree as a decision request carries
    /// them: handles to the path's messages, the tree's path nodes
    /// referring to them and its other nodes holding handles to theirs.
    /// The same as [`RequestTree::new`] of [`Tree::to_protocol`] and
    /// [`Tree::path`], without copying a message or comparing them: what
    /// it costs is a pointer per message and a node per message of the
    /// tree, whatever the messages hold.
    pub fn for_request(&self, head: Option<&str>) -> (Vec<SharedMessage>, RequestTree) {
        let path = self.path_nodes(head);
        let mut on_path = path.iter().copied().enumerate().peekable();
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(k, record)| {
                let message = match on_path.next_if(|&(_, node)| node == k) {
                    Some((i, _)) => NodeMessage::Active(i),
                    None => NodeMessage::Other(SharedMessage::Shared(Arc::clone(&record.message))),
                };
                RequestNode { message, parent: self.node_parent(k) }
            })
            .collect();
        let messages = path.iter().map(|&k| SharedMessage::Shared(Arc::clone(&self.nodes[k].message))).collect();
        (messages, RequestTree { nodes, head_id: head.map(str::to_owned) })
    }

    /// Node `k`'s parent as a request tree names it.
    fn node_parent(&self, k: usize) -> NodeParent {
        match self.nodes[k].parent_id.as_deref() {
            None => NodeParent::Root,
            Some(id) => match self.parent_of(k) {
                Some(j) if j < k => NodeParent::Node(j),
                _ => NodeParent::Id(id.to_owned()),
            },
        }
    }

    /// [`for_request`](Self::for_request), shared: the same path and tree,
    /// which the tree keeps and the next call extends by the messages
    /// recorded since, when the head only moved on along them (each step
    /// of a conversation). Handing a decision its branch then costs what
    /// the step added, not what the branch holds. A head moved anywhere
    /// else (an edit's fork, a shorter view) builds the branch again, as
    /// does a tree whose walks are not certain (a duplicated id, a parent
    /// recorded after its child). A kept branch a request still holds is
    /// copied before it is extended, never changed under it.
    pub fn shared_branch(&self, head: Option<&str>) -> (Arc<Vec<SharedMessage>>, Arc<RequestTree>) {
        let mut kept = self.kept.0.lock().unwrap_or_else(PoisonError::into_inner);
        let head_node = head.and_then(|id| self.index.get(id).copied());
        let certain = !self.duplicates && !self.late_parents && head_node.is_some() == head.is_some();
        if !certain {
            *kept = None;
            let (path, tree) = self.for_request(head);
            return (Arc::new(path), Arc::new(tree));
        }
        let extended = kept.take().and_then(|mut branch| self.extend(&mut branch, head_node).then_some(branch));
        let branch = extended.unwrap_or_else(|| {
            let (path, tree) = self.for_request(head);
            Branch { head: head_node, nodes: self.nodes.len(), path: Arc::new(path), tree: Arc::new(tree) }
        });
        let shared = (Arc::clone(&branch.path), Arc::clone(&branch.tree));
        *kept = Some(branch);
        shared
    }

    /// Extends `branch` to the path to `head` and the nodes recorded since
    /// it was built; `false` when the path to `head` does not continue
    /// the branch's path through those nodes.
    fn extend(&self, branch: &mut Branch, head: Option<usize>) -> bool {
        let (from, to) = (branch.nodes, self.nodes.len());
        // The new part of the path, newest first: nodes recorded since.
        let mut added = Vec::new();
        let mut cursor = head;
        while let Some(k) = cursor.filter(|&k| k >= from) {
            if added.len() == to - from {
                return false;
            }
            added.push(k);
            cursor = self.parent_of(k);
        }
        if cursor != branch.head {
            return false;
        }
        if from == to {
            // Nothing recorded since: the branch is handed out as it is,
            // the same `Arc`s (a client's view shares them with the
            // request), not copied because something else holds them.
            return true;
        }
        let path = Arc::make_mut(&mut branch.path);
        let tree = Arc::make_mut(&mut branch.tree);
        let mut on_path = added.into_iter().rev().peekable();
        for k in from..to {
            let message = Arc::clone(&self.nodes[k].message);
            let message = if on_path.next_if_eq(&k).is_some() {
                path.push(SharedMessage::Shared(message));
                NodeMessage::Active(path.len() - 1)
            } else {
                NodeMessage::Other(SharedMessage::Shared(message))
            };
            tree.nodes.push(RequestNode { message, parent: self.node_parent(k) });
        }
        if on_path.next().is_some() {
            // A path out of recording order: only a parent recorded after
            // its child makes one, which `late_parents` rules out.
            return false;
        }
        tree.head_id = head.map(|k| self.nodes[k].message.id.clone());
        branch.head = head;
        branch.nodes = to;
        true
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

    /// [`reconcile`](Self::reconcile) of the active path to `head` followed
    /// by `message` (a `client.message`), and whether `message` is new,
    /// without copying the path into a view: the path matches the tree by
    /// construction, so only `message` needs looking up. Returns `None`
    /// (match the whole view instead) where that is not certain: when ids
    /// repeat in the tree, or the path does not start at a root (its first
    /// message's parent is unknown, as only a damaged store could have it).
    pub fn reconcile_appended(&self, head: Option<&str>, message: &DraftMessage) -> Option<(Reconciled, bool)> {
        if self.duplicates {
            return None;
        }
        let path = self.path_nodes(head);
        if path.first().is_some_and(|&k| self.nodes[k].parent_id.is_some()) {
            return None;
        }
        let end = path.last().map(|&k| self.nodes[k].message.id.as_str());
        let recorded = message.id.as_deref().and_then(|id| self.get(id));
        Some(match recorded {
            // Already the next message on the path: nothing is new.
            Some(record) if record.parent_id.as_deref() == end => {
                (Reconciled { fork_id: message.id.clone(), new_from: path.len() + 1 }, false)
            }
            _ => (Reconciled { fork_id: end.map(str::to_owned), new_from: path.len() }, true),
        })
    }
}

#[cfg(test)]
mod tests {
    use subs_protocol::Role;

    use super::*;

    fn record(id: &str, parent: Option<&str>) -> MessageRecord {
        MessageRecord {
            message: Arc::new(Message {
                id: id.to_owned(),
                role: Role::User,
                content: Some(id.into()),
                tool_calls: None,
                tool_call_id: None,
                name: None,
            }),
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
    fn an_appended_message_reconciles_as_the_whole_view_would() {
        let tree = tree();
        let heads = [None, Some("a"), Some("b"), Some("c"), Some("d"), Some("nowhere")];
        let messages = [None, Some("new"), Some("a"), Some("b"), Some("c"), Some("d")];
        for head in heads {
            for id in messages {
                let message = draft(id);
                let mut view: Vec<DraftMessage> = tree.path(head).into_iter().map(|m| m.clone().into()).collect();
                view.push(message.clone());
                let reconciled = tree.reconcile(&view);
                let is_new = reconciled.new_from < view.len();
                assert_eq!(
                    tree.reconcile_appended(head, &message),
                    Some((reconciled, is_new)),
                    "head {head:?}, message {id:?}"
                );
            }
        }
        // The next message on the path, sent again: nothing new.
        assert_eq!(
            tree.reconcile_appended(Some("b"), &draft(Some("c"))),
            Some((Reconciled { fork_id: Some("c".to_owned()), new_from: 3 }, false))
        );
        let mut orphaned = tree.clone();
        orphaned.insert(record("g", Some("nowhere")));
        assert_eq!(orphaned.reconcile_appended(Some("g"), &draft(None)), None);
        assert!(orphaned.reconcile_appended(Some("c"), &draft(None)).is_some());
        let mut repeated = tree;
        repeated.insert(record("c", Some("a")));
        assert_eq!(repeated.reconcile_appended(Some("c"), &draft(None)), None);
    }

    #[test]
    fn a_request_tree_is_the_tree_without_a_second_copy_of_the_path() {
        let mut tree = tree();
        // A parent recorded after its child (as a client may fork) and an
        // unknown parent cross by id.
        tree.insert(record("e", Some("f")));
        tree.insert(record("f", Some("d")));
        tree.insert(record("g", Some("nowhere")));
        for head in [None, Some("a"), Some("c"), Some("d"), Some("e"), Some("f"), Some("g")] {
            let (messages, compact) = tree.for_request(head);
            let path: Vec<SharedMessage> = tree.path(head).into_iter().cloned().map(SharedMessage::from).collect();
            assert_eq!(messages, path);
            let full = tree.to_protocol(head);
            assert_eq!(compact.to_tree(&messages).unwrap(), full, "head {head:?}");
            assert_eq!(compact, RequestTree::new(full, &path), "head {head:?}");
            // Every message of the request is the tree's own, shared.
            let shared =
                |m: &SharedMessage| m.shared().is_some_and(|m| tree.nodes.iter().any(|r| Arc::ptr_eq(&r.message, m)));
            assert!(messages.iter().all(shared), "head {head:?}");
            for node in &compact.nodes {
                if let NodeMessage::Other(m) = &node.message {
                    assert!(shared(m), "head {head:?}");
                }
            }
            // Where the path runs in recording order (always, for messages
            // the engine records), only messages off it are carried.
            if matches!(head, Some("c" | "d")) {
                let copies = compact.nodes.iter().filter(|n| matches!(n.message, NodeMessage::Other(_))).count();
                assert_eq!(copies, tree.nodes.len() - path.len(), "head {head:?}");
            }
        }
    }

    #[test]
    fn a_shared_branch_is_the_request_branch_whatever_the_tree_did() {
        // A conversation that goes on, forks, moves its head back and on
        // again, with requests held across some of the changes.
        let mut tree = Tree::default();
        let mut head: Option<String> = None;
        let mut held = Vec::new();
        let mut seed = 7_u64;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(seed >> 33).unwrap() % n
        };
        for i in 0..400 {
            match next(10) {
                // Mostly a message after the head, which becomes the head.
                0..=5 => {
                    let id = format!("m{i}");
                    tree.insert(record(&id, head.as_deref()));
                    head = Some(id);
                }
                // A message elsewhere: the head stays or moves to it.
                6 | 7 if tree.len() > 0 => {
                    let parent = tree.nodes[next(tree.len())].message.id.clone();
                    let id = format!("m{i}");
                    tree.insert(record(&id, Some(&parent)));
                    if next(2) == 0 {
                        head = Some(id);
                    }
                }
                // The head moves back, or to no message at all.
                8 if tree.len() > 0 => head = (next(8) > 0).then(|| tree.nodes[next(tree.len())].message.id.clone()),
                _ => {}
            }
            let (path, compact) = tree.shared_branch(head.as_deref());
            let (expected_path, expected) = tree.for_request(head.as_deref());
            assert_eq!(*path, expected_path, "step {i}");
            assert_eq!(*compact, expected, "step {i}");
            if next(3) == 0 {
                held.push((path, compact, expected_path, expected));
            }
        }
        // What a request held was never changed under it.
        for (path, compact, expected_path, expected) in held {
            assert_eq!((&*path, &*compact), (&expected_path, &expected));
        }
    }

    #[test]
    fn a_conversation_going_on_extends_its_branch_without_building_it_again() {
        let mut tree = Tree::default();
        let mut head = None;
        for i in 0..50 {
            let id = format!("m{i}");
            tree.insert(record(&id, head.as_deref()));
            head = Some(id);
        }
        let (path, compact) = tree.shared_branch(head.as_deref());
        let (path_at, tree_at) = (Arc::as_ptr(&path), Arc::as_ptr(&compact));
        drop((path, compact));
        // Each step: a message recorded, then a request. The kept branch is
        // extended in place: the same allocation, however long it is.
        for i in 50..60 {
            let id = format!("m{i}");
            tree.insert(record(&id, head.as_deref()));
            head = Some(id);
            let (path, compact) = tree.shared_branch(head.as_deref());
            assert_eq!(path.len(), i + 1);
            assert!(std::ptr::eq(Arc::as_ptr(&path), path_at) && std::ptr::eq(Arc::as_ptr(&compact), tree_at));
        }
        // A tree a client forked under a parent recorded later is built
        // anew each time, and still right.
        tree.insert(record("late", Some("parent-later")));
        tree.insert(record("parent-later", head.as_deref()));
        let (path, compact) = tree.shared_branch(Some("late"));
        assert_eq!((&*path, &*compact), (&tree.for_request(Some("late")).0, &tree.for_request(Some("late")).1));
    }

    #[test]
    fn a_duplicated_id_names_its_later_message_as_before() {
        // a ─ b ─ c, then a second `b` under a second root `x`: `c`'s
        // parent id now names the later `b`, as a lookup by id would.
        let mut tree = tree();
        tree.insert(record("x", None));
        tree.insert(record("b", Some("x")));
        let ids = |head| tree.path(head).iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(Some("c")), ["x", "b", "c"]);
        for head in [Some("c"), Some("d"), Some("b")] {
            let (messages, compact) = tree.for_request(head);
            let full = tree.to_protocol(head);
            assert_eq!(compact.to_tree(&messages).unwrap(), full, "head {head:?}");
        }
    }

    #[test]
    fn a_cycle_of_parents_ends_the_path() {
        let tree = Tree::from_records([record("a", Some("b")), record("b", Some("a"))]);
        assert_eq!(tree.path(Some("a")).len(), 2);
        let (messages, compact) = tree.for_request(Some("b"));
        assert_eq!(messages.len(), 2);
        assert_eq!(compact.nodes.len(), 2);
    }

    #[test]
    fn paths_follow_parents() {
        let tree = tree();
        let ids = |head| tree.path(head).iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        for head in [None, Some("a"), Some("c"), Some("d"), Some("nowhere")] {
            let mut back: Vec<&Message> = tree.path_back(head).collect();
            back.reverse();
            assert_eq!(back, tree.path(head), "head {head:?}");
        }
        let cycle = Tree::from_records([record("a", Some("b")), record("b", Some("a"))]);
        assert_eq!(cycle.path_back(Some("a")).count(), 2);
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
