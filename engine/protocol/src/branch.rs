//! [`Messages`]: a decision's branch (the active path and the session's
//! message tree), held in memory or read on demand.
//!
//! The engine holds every message of a session and builds each request from
//! them, sharing rather than copying ([`SharedMessage`]); an HTTP worker
//! reads the whole branch from the request's JSON. A component built
//! against `subs:agent@0.2.0` gets the branch as a host resource instead,
//! and its SDK wraps that resource in a [`Messages`] that reads only what
//! the agent's code asks for: `len`, `last`, [`Messages::at`],
//! [`Messages::range`], [`Messages::last_n`], [`Messages::after`] and
//! [`Messages::position`] each read just their answer. Reading the branch
//! as a whole (iterating, indexing, slicing: anything through `Deref`)
//! reads it once and keeps it.
//!
//! [`ClientView`]: a `client.messages` trigger's view of the conversation,
//! whose leading messages are the branch's, shared rather than copied.

use std::borrow::Cow;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize, Serializer};

use crate::{DraftMessage, Message, RequestTree, SharedMessage};

/// Where a lazy [`Messages`] reads the branch from: in a component, the
/// engine's `messages` resource.
///
/// The methods cannot fail: a source that cannot answer (the engine refused
/// the read) panics with the reason, which in a component fails the
/// delivery with that message.
pub trait MessageSource: Send + Sync {
    /// How many messages the active path has.
    fn count(&self) -> usize;
    /// The messages of the active path from `start` up to `end` (clipped to
    /// the path).
    fn range(&self, start: usize, end: usize) -> Vec<SharedMessage>;
    /// The index on the active path of the message whose id is `id`.
    fn position(&self, id: &str) -> Option<usize>;
    /// The session's message tree; its active nodes refer to the path by
    /// index.
    fn tree(&self) -> RequestTree;
}

/// The branch a decision is about: the active path's messages, oldest
/// first, and the session's message tree (every message, edits fork it).
///
/// Reads as the `Vec` of the path (`for m in request.messages.iter()`,
/// `request.messages[0]`), and answers the usual questions without reading
/// the rest of a lazy branch: [`len`](Messages::len),
/// [`last`](Messages::last), [`at`](Messages::at),
/// [`range`](Messages::range), [`last_n`](Messages::last_n),
/// [`after`](Messages::after), [`position`](Messages::position). Serializes
/// as the path, a JSON array of messages.
#[derive(Clone, Default)]
pub struct Messages {
    /// The active path, once read (at once when the branch is held);
    /// shared with whatever else holds it (the session the engine keeps).
    path: OnceLock<Arc<Vec<SharedMessage>>>,
    /// The tree, once read; shared likewise.
    tree: OnceLock<Arc<RequestTree>>,
    /// Where a lazy branch is read from; `None` once the branch is held.
    source: Option<Arc<dyn MessageSource>>,
    /// The path's length, once asked.
    len: OnceLock<usize>,
    /// The last message, once asked.
    last: OnceLock<Option<SharedMessage>>,
}

impl Messages {
    /// A branch held in memory: `path` and the `tree` whose active nodes
    /// refer to it.
    pub fn new(path: Vec<SharedMessage>, tree: RequestTree) -> Self {
        Self::shared(Arc::new(path), Arc::new(tree))
    }

    /// A branch held in memory and shared: building it copies nothing, so
    /// the engine can hand every decision the branch it keeps. Changing it
    /// (through `DerefMut` or [`tree_mut`](Messages::tree_mut)) copies
    /// what is shared first.
    pub fn shared(path: Arc<Vec<SharedMessage>>, tree: Arc<RequestTree>) -> Self {
        Self { path: OnceLock::from(path), tree: OnceLock::from(tree), ..Self::default() }
    }

    /// A branch read from `source` as it is asked for.
    pub fn lazy(source: Arc<dyn MessageSource>) -> Self {
        Self { source: Some(source), ..Self::default() }
    }

    /// The path, read whole from the source on first use.
    fn path(&self) -> &Vec<SharedMessage> {
        self.path.get_or_init(|| {
            Arc::new(match &self.source {
                Some(source) => source.range(0, self.len()),
                None => Vec::new(),
            })
        })
    }

    /// The source, while the path is still unread.
    fn unread(&self) -> Option<&dyn MessageSource> {
        match (&self.source, self.path.get()) {
            (Some(source), None) => Some(&**source),
            _ => None,
        }
    }

    /// How many messages the active path has.
    pub fn len(&self) -> usize {
        match self.unread() {
            Some(source) => *self.len.get_or_init(|| source.count()),
            None => self.path().len(),
        }
    }

    /// Whether the active path is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newest message of the active path.
    pub fn last(&self) -> Option<&SharedMessage> {
        match self.unread() {
            Some(_) => self.last.get_or_init(|| self.last_n(1).pop()).as_ref(),
            None => self.path().last(),
        }
    }

    /// The message at `index` (0 is the oldest).
    pub fn at(&self, index: usize) -> Option<SharedMessage> {
        match self.unread() {
            Some(source) if index < self.len() => source.range(index, index + 1).pop(),
            Some(_) => None,
            None => self.path().get(index).cloned(),
        }
    }

    /// The messages of `range`, clipped to the path.
    pub fn range(&self, range: impl RangeBounds<usize>) -> Vec<SharedMessage> {
        let len = self.len();
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .min(len);
        let end = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => len,
        }
        .clamp(start, len);
        match self.unread() {
            Some(_) if start == end => Vec::new(),
            Some(source) => source.range(start, end),
            None => self.path()[start..end].to_vec(),
        }
    }

    /// The last `n` messages (all of them when there are fewer), oldest
    /// first.
    pub fn last_n(&self, n: usize) -> Vec<SharedMessage> {
        self.range(self.len().saturating_sub(n)..)
    }

    /// The index of the message whose id is `id` on the active path.
    pub fn position(&self, id: &str) -> Option<usize> {
        match self.unread() {
            Some(source) => source.position(id),
            None => self.path().iter().position(|m| m.id == id),
        }
    }

    /// The messages after the one whose id is `id`; `None` when no message
    /// of the active path has that id.
    pub fn after(&self, id: &str) -> Option<Vec<SharedMessage>> {
        self.position(id).map(|i| self.range(i + 1..))
    }

    /// The session's message tree; its active nodes refer to this path by
    /// index (see [`RequestTree::nodes_with`]).
    pub fn tree(&self) -> &RequestTree {
        self.tree.get_or_init(|| Arc::new(self.source.as_ref().map(|s| s.tree()).unwrap_or_default()))
    }

    /// The tree, to change (read first if the branch is lazy, copied first
    /// if it is shared).
    pub fn tree_mut(&mut self) -> &mut RequestTree {
        self.tree();
        Arc::make_mut(self.tree.get_mut().expect("read just above"))
    }

    /// Whether the whole path has been read (always, for a held branch):
    /// what lets a test tell that an agent read only what it asked for.
    pub fn is_read(&self) -> bool {
        self.path.get().is_some()
    }

    /// The path and the tree, read whole.
    pub fn into_parts(mut self) -> (Vec<SharedMessage>, RequestTree) {
        self.path();
        self.tree();
        let (path, tree) = (self.path.take().unwrap_or_default(), self.tree.take().unwrap_or_default());
        (Arc::unwrap_or_clone(path), Arc::unwrap_or_clone(tree))
    }
}

impl Deref for Messages {
    type Target = Vec<SharedMessage>;

    fn deref(&self) -> &Vec<SharedMessage> {
        self.path()
    }
}

/// Reads the branch whole, then lets it be changed like any `Vec`.
impl DerefMut for Messages {
    fn deref_mut(&mut self) -> &mut Vec<SharedMessage> {
        self.path();
        self.tree();
        self.source = None;
        self.len = OnceLock::new();
        self.last = OnceLock::new();
        Arc::make_mut(self.path.get_mut().expect("read just above"))
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a SharedMessage;
    type IntoIter = std::slice::Iter<'a, SharedMessage>;

    fn into_iter(self) -> Self::IntoIter {
        self.path().iter()
    }
}

/// A path with an empty tree.
impl From<Vec<SharedMessage>> for Messages {
    fn from(path: Vec<SharedMessage>) -> Self {
        Self::new(path, RequestTree::default())
    }
}

/// A path of messages the branch owns, with an empty tree.
impl From<Vec<Message>> for Messages {
    fn from(path: Vec<Message>) -> Self {
        path.into_iter().map(SharedMessage::from).collect::<Vec<_>>().into()
    }
}

/// Equal when the paths and the trees are (both read whole).
impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.path() == other.path() && self.tree() == other.tree()
    }
}

/// Shows what has been read, reading nothing more.
impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path.get() {
            Some(path) => f.debug_struct("Messages").field("path", path).field("tree", &self.tree.get()).finish(),
            None => f.debug_struct("Messages").field("lazy", &true).field("len", &self.len.get()).finish(),
        }
    }
}

/// The path, as a JSON array of messages.
impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.path().serialize(serializer)
    }
}

impl Messages {
    /// Whether `self` and `other` read the same branch: the same shared
    /// path, or the same source. What a [`ClientView`] checks before it
    /// counts on a branch holding its leading messages.
    pub fn same_branch(&self, other: &Messages) -> bool {
        match (&self.source, &other.source) {
            (Some(a), Some(b)) => std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)),
            (None, None) => match (self.path.get(), other.path.get()) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            },
            _ => false,
        }
    }
}

/// A `client.messages` trigger's view of the conversation: the client's
/// messages, oldest first.
///
/// The engine builds it from the branch it already holds: the view's
/// first [`shared`](ClientView::shared) messages are the decision's
/// active path's first ones (the view is that path up to where the new
/// messages attach, then the new messages), so only the
/// [`rest`](ClientView::rest) is the view's own. A component of
/// `subs:agent@0.2.0` gets the shared part as a count, and its SDK reads
/// those messages from the branch only when the agent's code does:
/// [`len`](ClientView::len), [`last`](ClientView::last),
/// [`get`](ClientView::get) and
/// [`messages_from`](ClientView::messages_from) read just their answer.
/// Reading the view as a whole (iterating, indexing, slicing: anything
/// through `Deref`) reads it once and keeps it.
///
/// A view read from JSON or built from a `Vec` holds all of its messages
/// (`shared` is 0). It serializes as the whole view, a JSON array of
/// messages, as every worker reads it.
#[derive(Clone, Default)]
pub struct ClientView {
    /// The messages after the shared ones: the client's own.
    rest: Vec<DraftMessage>,
    /// The shared part, when there is one (boxed: a trigger holding a view
    /// stays as small as the others).
    shared: Option<Box<Shared>>,
}

/// The part of a [`ClientView`] that its branch holds.
#[derive(Clone)]
struct Shared {
    /// The branch whose first `count` messages begin the view.
    branch: Messages,
    /// How many (never 0).
    count: usize,
    /// The whole view, once read.
    whole: OnceLock<Vec<DraftMessage>>,
    /// The view's last message, once asked, when it is a shared one.
    last: OnceLock<Option<DraftMessage>>,
}

impl ClientView {
    /// A view that holds all of `messages`.
    pub fn new(messages: Vec<DraftMessage>) -> Self {
        Self { rest: messages, shared: None }
    }

    /// The first `shared` messages of `branch`, then `rest`. `shared` is
    /// not checked against the branch's length (that would read a lazy
    /// one): a branch shorter than it ends the shared part early.
    pub fn sharing(branch: Messages, shared: usize, rest: Vec<DraftMessage>) -> Self {
        if shared == 0 {
            return Self::new(rest);
        }
        let shared = Shared { branch, count: shared, whole: OnceLock::new(), last: OnceLock::new() };
        Self { rest, shared: Some(Box::new(shared)) }
    }

    /// How many messages the view has.
    pub fn len(&self) -> usize {
        match self.unread() {
            Some(shared) => shared.count + self.rest.len(),
            None => self.whole().len(),
        }
    }

    /// Whether the view has no message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many leading messages the view shares with its branch.
    pub fn shared(&self) -> usize {
        self.shared.as_ref().map_or(0, |s| s.count)
    }

    /// The messages after the shared ones.
    pub fn rest(&self) -> &[DraftMessage] {
        &self.rest
    }

    /// The shared part, while the view has not been read whole.
    fn unread(&self) -> Option<&Shared> {
        self.shared.as_deref().filter(|s| s.whole.get().is_none())
    }

    /// The newest message of the view (the client's, unless the view
    /// ends at a shared one).
    pub fn last(&self) -> Option<&DraftMessage> {
        match (self.unread(), self.rest.last()) {
            (None, _) => self.whole().last(),
            (Some(_), Some(last)) => Some(last),
            (Some(shared), None) => {
                shared.last.get_or_init(|| shared.branch.at(shared.count - 1).map(Into::into)).as_ref()
            }
        }
    }

    /// The message at `index`, read from the branch when it is a shared
    /// one.
    pub fn get(&self, index: usize) -> Option<Cow<'_, DraftMessage>> {
        let Some(shared) = self.unread() else { return self.whole().get(index).map(Cow::Borrowed) };
        match index.checked_sub(shared.count) {
            Some(i) => self.rest.get(i).map(Cow::Borrowed),
            None => shared.branch.at(index).map(|m| Cow::Owned(m.into())),
        }
    }

    /// The messages from `start` on, copied; only those of them that are
    /// shared are read from the branch.
    pub fn messages_from(&self, start: usize) -> Vec<DraftMessage> {
        let Some(shared) = self.unread() else { return self.whole().get(start..).unwrap_or_default().to_vec() };
        let mut out: Vec<DraftMessage> = match start < shared.count {
            true => shared.branch.range(start..shared.count).into_iter().map(Into::into).collect(),
            false => Vec::new(),
        };
        out.extend_from_slice(self.rest.get(start.saturating_sub(shared.count)..).unwrap_or_default());
        out
    }

    /// How many leading messages the view shares with `branch`, and its
    /// other messages: what a component of `subs:agent@0.2.0` whose branch
    /// is `branch` is sent. A view built on another branch (or none) sends
    /// all of its messages.
    pub fn split_for(self, branch: &Messages) -> (usize, Vec<DraftMessage>) {
        match self.shared_with(branch) {
            Some((count, _)) => (count, self.rest),
            None => (0, self.into_vec()),
        }
    }

    /// [`split_for`](Self::split_for) without taking the view: the shared
    /// count and the rest, when the view shares with `branch`.
    pub fn shared_with(&self, branch: &Messages) -> Option<(usize, &[DraftMessage])> {
        let shared = self.shared.as_deref()?;
        shared.branch.same_branch(branch).then_some((shared.count, self.rest.as_slice()))
    }

    /// Whether the whole view has been read (always, for a view that
    /// holds its messages): what lets a test tell that an agent read only
    /// what it asked for.
    pub fn is_read(&self) -> bool {
        self.unread().is_none()
    }

    /// The whole view.
    pub fn into_vec(self) -> Vec<DraftMessage> {
        self.whole();
        let Self { rest, shared } = self;
        shared.and_then(|s| s.whole.into_inner()).unwrap_or(rest)
    }

    /// The whole view, read once.
    fn whole(&self) -> &Vec<DraftMessage> {
        let Some(shared) = self.shared.as_deref() else { return &self.rest };
        shared.whole.get_or_init(|| {
            let mut whole: Vec<DraftMessage> =
                shared.branch.range(..shared.count).into_iter().map(Into::into).collect();
            whole.extend_from_slice(&self.rest);
            whole
        })
    }
}

impl Deref for ClientView {
    type Target = Vec<DraftMessage>;

    fn deref(&self) -> &Vec<DraftMessage> {
        self.whole()
    }
}

/// Reads the view whole, then lets it be changed like any `Vec`.
impl DerefMut for ClientView {
    fn deref_mut(&mut self) -> &mut Vec<DraftMessage> {
        if self.shared.is_some() {
            *self = Self::new(std::mem::take(self).into_vec());
        }
        &mut self.rest
    }
}

impl<'a> IntoIterator for &'a ClientView {
    type Item = &'a DraftMessage;
    type IntoIter = std::slice::Iter<'a, DraftMessage>;

    fn into_iter(self) -> Self::IntoIter {
        self.whole().iter()
    }
}

impl IntoIterator for ClientView {
    type Item = DraftMessage;
    type IntoIter = std::vec::IntoIter<DraftMessage>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl From<Vec<DraftMessage>> for ClientView {
    fn from(messages: Vec<DraftMessage>) -> Self {
        Self::new(messages)
    }
}

/// Equal when the whole views are (both read whole).
impl PartialEq for ClientView {
    fn eq(&self, other: &Self) -> bool {
        self.whole() == other.whole()
    }
}

/// Shows what has been read, reading nothing more.
impl std::fmt::Debug for ClientView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.unread() {
            None => f.debug_list().entries(self.whole()).finish(),
            Some(shared) => {
                f.debug_struct("ClientView").field("shared", &shared.count).field("rest", &self.rest).finish()
            }
        }
    }
}

/// The whole view, as a JSON array of messages; the shared part is written
/// from the branch's messages (a recorded message reads as a draft with
/// its id), not copied first.
impl Serialize for ClientView {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let Some(shared) = self.unread() else { return self.whole().serialize(serializer) };
        let messages = shared.branch.range(..shared.count);
        let mut seq = serializer.serialize_seq(Some(messages.len() + self.rest.len()))?;
        for message in &messages {
            seq.serialize_element(&**message)?;
        }
        for message in &self.rest {
            seq.serialize_element(message)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for ClientView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<DraftMessage>::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::MessageTree;

    fn message(i: usize) -> Message {
        crate::from_value(serde_json::json!({"id": format!("m{i}"), "role": "user", "content": format!("m{i}")}))
            .unwrap()
    }

    /// A source that records each read.
    struct Counting {
        path: Vec<Message>,
        reads: Mutex<Vec<String>>,
    }

    impl MessageSource for Counting {
        fn count(&self) -> usize {
            self.reads.lock().unwrap().push("len".into());
            self.path.len()
        }
        fn range(&self, start: usize, end: usize) -> Vec<SharedMessage> {
            self.reads.lock().unwrap().push(format!("range {start}..{end}"));
            self.path[start.min(self.path.len())..end.min(self.path.len())]
                .iter()
                .cloned()
                .map(SharedMessage::from)
                .collect()
        }
        fn position(&self, id: &str) -> Option<usize> {
            self.reads.lock().unwrap().push(format!("position {id}"));
            self.path.iter().position(|m| m.id == id)
        }
        fn tree(&self) -> RequestTree {
            self.reads.lock().unwrap().push("tree".into());
            let nodes = self
                .path
                .iter()
                .enumerate()
                .map(|(i, m)| crate::TreeNode {
                    message: m.clone(),
                    parent_id: i.checked_sub(1).map(|p| format!("m{p}")),
                })
                .collect();
            let path: Vec<SharedMessage> = self.path.iter().cloned().map(SharedMessage::from).collect();
            RequestTree::new(MessageTree { nodes, head_id: self.path.last().map(|m| m.id.clone()) }, &path)
        }
    }

    fn lazy(n: usize) -> (Messages, Arc<Counting>) {
        let source = Arc::new(Counting { path: (0..n).map(message).collect(), reads: Mutex::default() });
        (Messages::lazy(source.clone()), source)
    }

    fn reads(source: &Counting) -> Vec<String> {
        source.reads.lock().unwrap().clone()
    }

    #[test]
    fn a_lazy_branch_reads_only_what_is_asked() {
        let (messages, source) = lazy(4000);
        assert_eq!(messages.len(), 4000);
        assert_eq!(messages.last().unwrap().id, "m3999");
        assert_eq!(messages.last().unwrap().id, "m3999", "the last message is kept once read");
        assert_eq!(messages.at(7).unwrap().id, "m7");
        assert!(messages.at(4000).is_none());
        assert_eq!(messages.last_n(2).iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["m3998", "m3999"]);
        assert_eq!(messages.after("m3997").unwrap().len(), 2);
        assert!(messages.after("nope").is_none());
        assert!(!messages.is_read());
        assert_eq!(
            reads(&source),
            [
                "len",
                "range 3999..4000",
                "range 7..8",
                "range 3998..4000",
                "position m3997",
                "range 3998..4000",
                "position nope"
            ]
        );
    }

    #[test]
    fn reading_a_lazy_branch_whole_reads_it_once() {
        let (messages, source) = lazy(5);
        assert_eq!(messages.iter().count(), 5);
        assert_eq!(messages[4].id, "m4");
        assert_eq!(messages.range(1..3).len(), 2);
        assert!(messages.is_read());
        assert_eq!(reads(&source), ["len", "range 0..5"]);
        let (path, tree) = messages.clone().into_parts();
        assert_eq!(path.len(), 5);
        assert_eq!(tree.nodes.len(), 5);
        assert_eq!(messages, Messages::new(path, tree));
    }

    #[test]
    fn ranges_are_clipped_to_the_path() {
        let held: Messages = (0..3).map(message).collect::<Vec<_>>().into();
        let (lazy, _) = lazy(3);
        for messages in [&held, &lazy] {
            assert_eq!(messages.range(2..10).len(), 1);
            assert!(messages.range(5..).is_empty());
            assert_eq!(messages.range(..=1).len(), 2);
            assert_eq!(messages.last_n(10).len(), 3);
        }
    }

    #[test]
    fn a_shared_branch_is_copied_only_when_changed() {
        let path: Arc<Vec<SharedMessage>> = Arc::new((0..3).map(|i| SharedMessage::from(message(i))).collect());
        let mut messages = Messages::shared(path.clone(), Arc::default());
        assert_eq!(Arc::strong_count(&path), 2, "held, not copied");
        assert_eq!(messages.last().unwrap().id, "m2");
        messages.push(SharedMessage::from(message(3)));
        assert_eq!((messages.len(), path.len()), (4, 3), "the change went to a copy");
        assert_eq!(Arc::strong_count(&path), 1);
    }

    #[test]
    fn changing_a_lazy_branch_reads_it_first() {
        let (mut messages, _) = lazy(2);
        messages.push(SharedMessage::from(message(9)));
        assert_eq!(messages.len(), 3);
        assert_eq!(messages.last().unwrap().id, "m9");
        assert_eq!(crate::to_value(&messages).as_array().unwrap().len(), 3);
    }

    fn ids(view: &[DraftMessage]) -> Vec<Option<&str>> {
        view.iter().map(|m| m.id.as_deref()).collect()
    }

    #[test]
    fn a_view_reads_of_its_shared_part_only_what_is_asked() {
        let (branch, source) = lazy(4000);
        let view = ClientView::sharing(branch.clone(), 4000, vec![DraftMessage::user("new")]);
        assert_eq!(view.len(), 4001);
        assert_eq!(view.get(4000).unwrap().text(), "new");
        assert_eq!(view.last().map(DraftMessage::text).as_deref(), Some("new"));
        assert_eq!(ids(&view.messages_from(4000)), [None]);
        assert!(reads(&source).is_empty(), "the new part reads nothing of the branch");
        assert_eq!(view.get(0).unwrap().id.as_deref(), Some("m0"));
        assert_eq!(ids(&view.messages_from(3999)), [Some("m3999"), None]);
        assert!(!view.is_read());
        assert_eq!(reads(&source), ["len", "range 0..1", "range 3999..4000"]);

        assert_eq!(view.iter().count(), 4001, "read whole");
        assert_eq!(view[1].id.as_deref(), Some("m1"));
        assert!(view.is_read());
        assert_eq!(reads(&source).len(), 4, "once");
        let json = crate::to_value(&view);
        assert_eq!(json.as_array().unwrap().len(), 4001);
        assert_eq!(json[4000], serde_json::json!({"role": "user", "content": "new"}));
    }

    #[test]
    fn a_view_is_its_whole_conversation_to_every_reader() {
        let branch: Messages = (0..3).map(message).collect::<Vec<_>>().into();
        let view = ClientView::sharing(branch.clone(), 2, vec![DraftMessage::user("new")]);
        let whole: Vec<DraftMessage> = vec![message(0).into(), message(1).into(), DraftMessage::user("new")];
        assert_eq!(crate::to_value(&view), crate::to_value(&whole), "written without reading it whole first");
        assert!(!view.is_read());
        assert_eq!(view, ClientView::new(whole.clone()));
        let read: ClientView = crate::from_value(crate::to_value(&view)).unwrap();
        assert_eq!((read.shared(), read.len()), (0, 3), "read back, it holds its messages");
        assert_eq!(view.clone().into_vec(), whole);
        let ending = ClientView::sharing(branch, 2, Vec::new());
        assert_eq!(ending.last().and_then(|m| m.id.as_deref()), Some("m1"), "a view may end in the branch");
        assert!(!ending.is_read());
    }

    #[test]
    fn a_view_crosses_as_a_count_only_to_the_branch_it_shares() {
        let branch: Messages = (0..3).map(message).collect::<Vec<_>>().into();
        let other: Messages = (0..3).map(message).collect::<Vec<_>>().into();
        let view = ClientView::sharing(branch.clone(), 3, vec![DraftMessage::user("new")]);
        assert!(view.shared_with(&branch).is_some());
        assert!(view.shared_with(&other).is_none(), "equal messages, another branch");
        let (shared, rest) = view.clone().split_for(&branch);
        assert_eq!((shared, ids(&rest)), (3, vec![None]));
        let (shared, rest) = view.clone().split_for(&other);
        assert_eq!((shared, ids(&rest)), (0, vec![Some("m0"), Some("m1"), Some("m2"), None]));

        let mut changed = view;
        changed.push(DraftMessage::user("more"));
        assert_eq!((changed.shared(), changed.len()), (0, 5), "a changed view holds its messages");
        assert!(changed.shared_with(&branch).is_none());
    }
}
