//! Messages, their content, and the tree a session keeps them in.

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::json::tagged_union;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// One typed part of a message's content (OpenAI's content-part shapes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum ContentPart {
    /// A run of text.
    #[serde(rename = "text")]
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL or `data:` URL.
    #[serde(rename = "image_url")]
    ImageUrl {
        /// Where the image is.
        image_url: UrlRef,
    },
    /// A file, inline.
    #[serde(rename = "file")]
    File {
        /// The file's name and data.
        file: FileData,
    },
    /// Audio, inline.
    #[serde(rename = "input_audio")]
    InputAudio {
        /// The audio data and its format.
        input_audio: AudioData,
    },
    /// A video, by URL.
    #[serde(rename = "video_url")]
    VideoUrl {
        /// Where the video is.
        video_url: UrlRef,
    },
}

/// The variant payloads of [`ContentPart`] as plain structs, so the tagged
/// union reader can deserialize each with field paths.
mod part {
    use super::{AudioData, FileData, UrlRef};
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub(super) struct Text {
        pub text: String,
    }
    #[derive(Deserialize)]
    pub(super) struct ImageUrl {
        pub image_url: UrlRef,
    }
    #[derive(Deserialize)]
    pub(super) struct File {
        pub file: FileData,
    }
    #[derive(Deserialize)]
    pub(super) struct InputAudio {
        pub input_audio: AudioData,
    }
    #[derive(Deserialize)]
    pub(super) struct VideoUrl {
        pub video_url: UrlRef,
    }
}

/// Internal enum whose variants wrap the payload structs, so
/// [`tagged_union!`] can read it; converted into [`ContentPart`].
enum PartWire {
    Text(part::Text),
    ImageUrl(part::ImageUrl),
    File(part::File),
    InputAudio(part::InputAudio),
    VideoUrl(part::VideoUrl),
}

tagged_union!(PartWire, "type", {
    "text" => Text(part::Text),
    "image_url" => ImageUrl(part::ImageUrl),
    "file" => File(part::File),
    "input_audio" => InputAudio(part::InputAudio),
    "video_url" => VideoUrl(part::VideoUrl),
});

impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match PartWire::deserialize(deserializer)? {
            PartWire::Text(p) => ContentPart::Text { text: p.text },
            PartWire::ImageUrl(p) => ContentPart::ImageUrl { image_url: p.image_url },
            PartWire::File(p) => ContentPart::File { file: p.file },
            PartWire::InputAudio(p) => ContentPart::InputAudio { input_audio: p.input_audio },
            PartWire::VideoUrl(p) => ContentPart::VideoUrl { video_url: p.video_url },
        })
    }
}

/// `{ url }`: where an image or video is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlRef {
    /// An `https:` or `data:` URL.
    pub url: String,
}

/// An inline file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileData {
    /// The file's name.
    pub filename: String,
    /// The file's bytes, base64 (or a `data:` URL).
    pub file_data: String,
}

/// Inline audio.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AudioData {
    /// The audio's bytes, base64.
    pub data: String,
    /// Its format (`wav`, `mp3`, …).
    pub format: String,
}

/// A model's request to call a tool, as recorded on an assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not always valid.
    pub arguments: String,
}

/// A recorded message: it has an id and a place in the session's tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// A session's messages as a tree: editing or truncating history forks a
/// branch; `head_id` is the end of the active path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageTree {
    /// Every message, each with its parent.
    pub nodes: Vec<TreeNode>,
    /// The last message of the active path; absent while the tree is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_id: Option<String>,
}

/// One message of a [`MessageTree`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeNode {
    /// The message.
    pub message: Message,
    /// The message before it; absent for a root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}
