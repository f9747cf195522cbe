//! Messages, their content, and the tree a session keeps them in.

use std::sync::Arc;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::json::tagged_union;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person (or program) the agent talks to.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering an assistant's `tool_calls`.
    Tool,
}

/// A message body: plain text, or a list of typed parts (text, images,
/// files, audio, video).
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text; on the wire a JSON string.
    Text(String),
    /// Typed parts; on the wire a JSON array.
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text of this content: the string itself, or the `text` parts
    /// joined with newlines (other parts are skipped).
    pub fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::Text(text)
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(text) => serializer.serialize_str(text),
            Content::Parts(parts) => parts.serialize(serializer),
        }
    }
}

/// A string or an array of parts, as the hand-written serde impls read and
/// write it.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Content {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Content".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let parts = generator.subschema_for::<Vec<ContentPart>>();
        schemars::json_schema!({
            "description": "A message body: plain text, or a list of typed parts (text, images, files, audio, video).",
            "anyOf": [{"type": "string"}, parts],
        })
    }
}

// Hand-written rather than `#[serde(untagged)]`, whose only error is "did
// not match any variant": this one says what was expected and keeps the
// path into the parts list.
impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;

        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content parts")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content::Text(text.to_owned()))
            }

            fn visit_string<E: de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content::Text(text))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::Parts(parts))
            }
        }

        deserializer.deserialize_any(ContentVisitor)
    }
}

tagged_union! {
    /// One typed part of a message's content (OpenAI's content-part shapes).
    #[derive(Debug, Clone, PartialEq)]
    pub enum ContentPart in "type" {
        /// A run of text.
        "text" => Text {
            /// The text.
            text: String,
        },
        /// An image, by URL or `data:` URL.
        "image_url" => ImageUrl {
            /// Where the image is.
            image_url: UrlRef,
        },
        /// A file, inline.
        "file" => File {
            /// The file's name and data.
            file: FileData,
        },
        /// Audio, inline.
        "input_audio" => InputAudio {
            /// The audio data and its format.
            input_audio: AudioData,
        },
        /// A video, by URL.
        "video_url" => VideoUrl {
            /// Where the video is.
            video_url: UrlRef,
        },
    }
}

/// `{ url }`: where an image or video is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UrlRef {
    /// An `https:` or `data:` URL.
    pub url: String,
}

/// An inline file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileData {
    /// The file's name.
    pub filename: String,
    /// The file's bytes, base64 (or a `data:` URL).
    pub file_data: String,
}

/// Inline audio.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AudioData {
    /// The audio's bytes, base64.
    pub data: String,
    /// Its format (`wav`, `mp3`, …).
    pub format: String,
}

/// A model's request to call a tool, as recorded on an assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolCall {
    /// The call id; the answering `tool` message carries it as
    /// `tool_call_id`.
    pub id: String,
    /// The call's type; `"function"` for every tool call models make today.
    #[serde(rename = "type")]
    pub kind: String,
    /// Which tool, with what arguments.
    pub function: FunctionCall,
}

impl ToolCall {
    /// A `function` tool call.
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            kind: "function".to_owned(),
            function: FunctionCall { name: name.into(), arguments: arguments.into() },
        }
    }
}

/// The tool and arguments of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not always valid.
    pub arguments: String,
}

/// A recorded message: it has an id and a place in the session's tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Message {
    /// The message's id, unique within its session.
    pub id: String,
    /// Who wrote it.
    pub role: Role,
    /// Its body; absent on an assistant message that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// The tools an assistant message calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An optional author name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A message not yet recorded: a [`Message`] whose id is optional (the
/// engine mints one when it is omitted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DraftMessage {
    /// The id to record the message under; omitted: the engine mints one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Its body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// The tools an assistant message calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An optional author name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl DraftMessage {
    /// A message with `role` and text content, everything else omitted.
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            id: None,
            role,
            content: Some(Content::Text(text.into())),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    /// A `user` message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, text)
    }

    /// An `assistant` message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, text)
    }

    /// A `system` message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, text)
    }

    /// A `tool` message answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self { tool_call_id: Some(tool_call_id.into()), ..Self::new(Role::Tool, text) }
    }

    /// Sets the id to record the message under.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The message's text (see [`Content::text`]); empty without content.
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }
}

impl Message {
    /// The message's text (see [`Content::text`]); empty without content.
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }

    /// Whether `sent`, a client's copy of this message under its id, is
    /// this message unchanged: the same role and, for the messages a client
    /// writes (`user`, `system`), the same content. Text and a single text
    /// part are the same content, as are no content and empty text.
    /// Assistant and tool messages are matched by role alone: a client
    /// keeps its own rendering of them (streamed text, a result it
    /// formatted), which need not be what the engine recorded.
    pub fn sent_unchanged(&self, sent: &DraftMessage) -> bool {
        if self.role != sent.role {
            return false;
        }
        match self.role {
            Role::User | Role::System => parts_of(self.content.as_ref()) == parts_of(sent.content.as_ref()),
            Role::Assistant | Role::Tool => true,
        }
    }
}

/// Content as a list of parts, for comparing: no content and empty text
/// are no parts, text is one text part.
fn parts_of(content: Option<&Content>) -> std::borrow::Cow<'_, [ContentPart]> {
    use std::borrow::Cow;
    match content {
        None => Cow::Borrowed(&[]),
        Some(Content::Text(text)) if text.is_empty() => Cow::Borrowed(&[]),
        Some(Content::Text(text)) => Cow::Owned(vec![ContentPart::Text { text: text.clone() }]),
        Some(Content::Parts(parts)) => Cow::Borrowed(parts),
    }
}

impl From<Message> for DraftMessage {
    fn from(m: Message) -> Self {
        Self {
            id: Some(m.id),
            role: m.role,
            content: m.content,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            name: m.name,
        }
    }
}

/// A request's message as a draft: moved out when nothing else holds it,
/// copied otherwise.
impl From<SharedMessage> for DraftMessage {
    fn from(m: SharedMessage) -> Self {
        m.into_message().into()
    }
}

/// A message as a [`DecisionRequest`](crate::DecisionRequest) holds it: its
/// own, or shared with the session it came from. The engine builds a
/// request from the messages it keeps in memory and hands out shared ones
/// ([`Arc`]), so a request costs a pointer per message however large the
/// messages are; a request read from JSON or WIT (as a worker or a guest
/// reads it) holds its own, boxed. Either way it is two words: a session
/// keeps the branch it last handed out, and a list of messages held inline
/// would cost every session the size of a message per slot. Either reads
/// as the [`Message`] it dereferences to, and both are the message itself
/// on the wire.
#[derive(Debug, Clone)]
pub enum SharedMessage {
    /// The request's own message.
    Own(Box<Message>),
    /// A message shared with whatever else holds it.
    Shared(Arc<Message>),
}

// Two words whatever a message holds (see above).
const _: () = assert!(std::mem::size_of::<SharedMessage>() == 2 * std::mem::size_of::<usize>());

impl SharedMessage {
    /// The message, moved out when nothing else holds it, copied
    /// otherwise.
    pub fn into_message(self) -> Message {
        match self {
            Self::Own(message) => *message,
            Self::Shared(message) => Arc::unwrap_or_clone(message),
        }
    }

    /// The shared allocation, when the message is shared.
    pub fn shared(&self) -> Option<&Arc<Message>> {
        match self {
            Self::Own(_) => None,
            Self::Shared(message) => Some(message),
        }
    }
}

impl std::ops::Deref for SharedMessage {
    type Target = Message;

    fn deref(&self) -> &Message {
        match self {
            Self::Own(message) => message,
            Self::Shared(message) => message,
        }
    }
}

/// Equal when the messages are, however each is held.
impl PartialEq for SharedMessage {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl From<Message> for SharedMessage {
    fn from(message: Message) -> Self {
        Self::Own(Box::new(message))
    }
}

impl From<Arc<Message>> for SharedMessage {
    fn from(message: Arc<Message>) -> Self {
        Self::Shared(message)
    }
}

impl Serialize for SharedMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Message::deserialize(deserializer).map(Self::from)
    }
}

/// The message itself on the wire, however it is held.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for SharedMessage {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        Message::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<Message>()
    }
}

/// A session's messages as a tree: editing or truncating history forks a
/// branch; `head_id` is the end of the active path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MessageTree {
    /// Every message, each with its parent.
    pub nodes: Vec<TreeNode>,
    /// The last message of the active path; absent while the tree is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_id: Option<String>,
}

/// One message of a [`MessageTree`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TreeNode {
    /// The message.
    pub message: Message,
    /// The message before it; absent for a root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}

/// A [`TreeNode`] by reference, written out as the node itself.
#[derive(Serialize)]
pub(crate) struct TreeNodeRef<'a> {
    pub message: &'a Message,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<&'a str>,
}

/// A decision request's [`MessageTree`], held without a second copy of the
/// active path.
///
/// Most of a session's tree is its active path, which the request already
/// carries in `messages`; a node on that path names its message by index
/// there ([`NodeMessage::Active`]) and a node's parent is named by the
/// index of an earlier node ([`NodeParent::Node`]). Messages off the path
/// are [`SharedMessage`]s, as the path's are: the engine builds a request
/// from the messages it keeps in memory without copying one. On the wire (JSON) the tree is the full [`MessageTree`]:
/// [`DecisionRequest`](crate::DecisionRequest) writes every node out and,
/// reading, folds the active path back in.
///
/// Read it with [`RequestTree::nodes_with`] or
/// [`DecisionRequest::tree_nodes`](crate::DecisionRequest::tree_nodes), or
/// materialize a [`MessageTree`] with [`RequestTree::to_tree`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestTree {
    /// Every message, in recording order, each with its parent.
    pub nodes: Vec<RequestNode>,
    /// The last message of the active path; absent while the tree is empty.
    pub head_id: Option<String>,
}

/// One node of a [`RequestTree`].
#[derive(Debug, Clone, PartialEq)]
pub struct RequestNode {
    /// Its message.
    pub message: NodeMessage,
    /// The message before it.
    pub parent: NodeParent,
}

/// Where a [`RequestNode`]'s message is.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeMessage {
    /// `messages[i]` of the request: the node is on the active path.
    Active(usize),
    /// Off the active path: the message itself (shared, in a request the
    /// engine built).
    Other(SharedMessage),
}

/// A [`RequestNode`]'s parent.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeParent {
    /// None: the node is a root.
    Root,
    /// The message of the earlier node at this index in `nodes`.
    Node(usize),
    /// A message by id that no earlier node has.
    Id(String),
}

impl RequestTree {
    /// `tree` without the copies of `path` it holds: each node whose
    /// message equals the next message of `path` (in order) refers to it,
    /// and each parent id that an earlier node has refers to that node. The
    /// matching is exact, so [`RequestTree::to_tree`] gives `tree` back for
    /// any tree and path.
    pub fn new(tree: MessageTree, path: &[SharedMessage]) -> Self {
        let parents: Vec<NodeParent> = {
            // A repeated id keeps naming its first node.
            let mut seen = std::collections::HashMap::with_capacity(tree.nodes.len());
            tree.nodes
                .iter()
                .enumerate()
                .map(|(k, node)| {
                    let parent = match node.parent_id.as_deref() {
                        None => NodeParent::Root,
                        Some(id) => {
                            seen.get(id).map_or_else(|| NodeParent::Id(id.to_owned()), |&j| NodeParent::Node(j))
                        }
                    };
                    seen.entry(node.message.id.as_str()).or_insert(k);
                    parent
                })
                .collect()
        };
        let mut next = 0;
        let nodes = tree
            .nodes
            .into_iter()
            .zip(parents)
            .map(|(node, parent)| {
                let message = match path.get(next) {
                    Some(m) if **m == node.message => {
                        next += 1;
                        NodeMessage::Active(next - 1)
                    }
                    _ => NodeMessage::Other(node.message.into()),
                };
                RequestNode { message, parent }
            })
            .collect();
        Self { nodes, head_id: tree.head_id }
    }

    /// Each node's message and parent id, resolved against `path` (the
    /// request's `messages`); an error names the first index that points
    /// nowhere.
    pub fn nodes_with<'a>(
        &'a self,
        path: &'a [SharedMessage],
    ) -> impl Iterator<Item = Result<(&'a Message, Option<&'a str>), crate::ProtocolError>> + 'a {
        self.nodes.iter().enumerate().map(move |(k, node)| {
            let message = self.message_at(k, path)?;
            let parent = match &node.parent {
                NodeParent::Root => None,
                NodeParent::Id(id) => Some(id.as_str()),
                NodeParent::Node(j) if *j < k => Some(self.message_at(*j, path)?.id.as_str()),
                NodeParent::Node(j) => return Err(crate::wit::bad_tree_index(k, "parent", "an earlier node", *j)),
            };
            Ok((message, parent))
        })
    }

    /// The message of node `k`.
    fn message_at<'a>(&'a self, k: usize, path: &'a [SharedMessage]) -> Result<&'a Message, crate::ProtocolError> {
        match &self.nodes[k].message {
            NodeMessage::Other(m) => Ok(m),
            NodeMessage::Active(i) => {
                path.get(*i).map(|m| &**m).ok_or_else(|| crate::wit::bad_tree_index(k, "message", "message", *i))
            }
        }
    }

    /// The full tree, every message copied out of `path` or the node.
    ///
    /// # Errors
    /// An index that points nowhere.
    pub fn to_tree(&self, path: &[SharedMessage]) -> Result<MessageTree, crate::ProtocolError> {
        let nodes = self
            .nodes_with(path)
            .map(|node| node.map(|(m, p)| TreeNode { message: m.clone(), parent_id: p.map(str::to_owned) }))
            .collect::<Result<_, _>>()?;
        Ok(MessageTree { nodes, head_id: self.head_id.clone() })
    }
}

/// A [`RequestTree`] and the path its active nodes refer to, written out
/// as the [`MessageTree`] they stand for (`{nodes: [{message, parent_id?}],
/// head_id?}`) without copying it first: how a request's tree goes out as
/// JSON, and how a session read from shared messages is.
#[derive(Debug, Clone, Copy)]
pub struct FullTree<'a> {
    tree: &'a RequestTree,
    path: &'a [SharedMessage],
}

impl<'a> FullTree<'a> {
    /// `tree`, its active nodes resolved against `path`.
    pub fn new(tree: &'a RequestTree, path: &'a [SharedMessage]) -> Self {
        Self { tree, path }
    }
}

impl Serialize for FullTree<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap, SerializeSeq};
        /// The nodes, each as `{ message, parent_id? }`.
        struct Nodes<'a>(&'a FullTree<'a>);
        impl Serialize for Nodes<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.tree.nodes.len()))?;
                for node in self.0.tree.nodes_with(self.0.path) {
                    let (message, parent_id) = node.map_err(|e| S::Error::custom(e.in_field("message_tree")))?;
                    seq.serialize_element(&TreeNodeRef { message, parent_id })?;
                }
                seq.end()
            }
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("nodes", &Nodes(self))?;
        if let Some(head) = &self.tree.head_id {
            map.serialize_entry("head_id", head)?;
        }
        map.end()
    }
}
