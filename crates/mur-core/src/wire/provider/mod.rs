//! One seam per model provider (docs/reference/capsules.md#model-capsules): whatever differs
//! between the provider APIs is a method of [`Dialect`], and each provider's answers are one file
//! here: `openai` (both Chat Completions providers, `openai` and `openai-compatible`) and
//! `anthropic`.
//!
//! The invariant: [`dialect`] is the one `match` that tells providers apart, and it is
//! exhaustive. Nothing else decides behaviour by comparing a [`Provider`] with a variant (`==`,
//! `!=`, `matches!`) or by a catch-all arm, and [`Dialect`] has no default methods. A new variant
//! therefore does not compile until it has an arm here, nor that arm until its file answers every
//! method: a provider can never silently behave like another. Besides this module, a variant
//! needs its word ([`Provider::as_str`], exhaustive too) and its place in [`Provider::ALL`], the
//! one list the compiler cannot check; the table test below walks that list, and its row for
//! each provider is again an exhaustive match.
//!
//! Left outside, because it is the same for every provider today: the retry signals
//! (`retry-after-ms`, `retry-after`, `x-should-retry`), the failure text of a non-2xx reply (its
//! body quoted as is), and the event-stream framing and bounds of [`super::model_stream`].

use serde_json::{Map, Value};

use super::model::{Msg, Reply, Request};
use super::model_stream::Held;

pub mod anthropic;
pub mod openai;

/// What one provider API does differently from the others.
pub trait Dialect: Sync {
    // What the manifest and `mur new` need to know.

    /// The base URL used when `inference.endpoint` is absent
    /// (docs/reference/capsules.md#model-capsules).
    fn default_endpoint(&self) -> &'static str;
    /// Whether requests carry `inference.reasoning_effort`; a manifest that sets it for a
    /// provider that does not take it is refused (E-MAN-003).
    fn takes_reasoning_effort(&self) -> bool;
    /// The API's name, as that refusal says it.
    fn api_name(&self) -> &'static str;
    /// The model `mur new` names when the configuration names none: a current model of the
    /// official SDK's model list. Any model of the provider works; the operator is expected to
    /// choose.
    fn default_model(&self) -> &'static str;
    /// The environment variable `mur new`'s members name for their key.
    fn key_var(&self) -> &'static str;

    // The request.

    /// The request URL's path after `/v1/` (see [`super::model::url`]).
    fn path(&self) -> &'static str;
    /// The credential header for `key`: its name and value.
    fn credential(&self, key: &str) -> (&'static str, String);
    /// The headers every request carries besides the credential, in order.
    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)];
    /// The body of one turn, as a JSON object (see [`super::model::request_body`]).
    fn request_body(&self, req: &Request<'_>, messages: &[Msg]) -> Map<String, Value>;

    // The reply.

    /// Reads a successful reply, already known to be a JSON object.
    fn parse_reply(&self, reply: &Value) -> Result<Reply, String>;
    /// A reader for the events of one streamed reply.
    fn stream(&self) -> Box<dyn StreamEvents>;
}

/// `inference.provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI's Chat Completions API as it is today (`max_completion_tokens`, `developer`).
    OpenAi,
    /// A server that speaks the older Chat Completions fields (`max_tokens`, `system`): llama.cpp,
    /// vLLM, Ollama and the like.
    OpenAiCompatible,
    Anthropic,
}

impl Provider {
    /// Every provider, in the order the reference lists them: the words `inference.provider`
    /// takes. A new variant goes here too (the compiler cannot check this list; the seam's tests
    /// in this module walk it).
    pub const ALL: [Provider; 3] = [Provider::OpenAi, Provider::OpenAiCompatible, Provider::Anthropic];

    /// The manifest's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::OpenAiCompatible => "openai-compatible",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The base URL used when `inference.endpoint` is absent
    /// (docs/reference/capsules.md#model-capsules).
    pub fn default_endpoint(self) -> &'static str {
        dialect(self).default_endpoint()
    }
}

/// The [`Dialect`] of `provider`: the one match on providers (see the module doc).
pub fn dialect(provider: Provider) -> &'static dyn Dialect {
    match provider {
        Provider::OpenAi => &openai::OPENAI,
        Provider::OpenAiCompatible => &openai::COMPATIBLE,
        Provider::Anthropic => &anthropic::ANTHROPIC,
    }
}

/// The events of one streamed reply, read into the provider's unstreamed reply shape so that a
/// streamed turn means exactly what the same turn unstreamed means.
pub trait StreamEvents: std::fmt::Debug + Send {
    /// One event's `data`. Every byte it keeps is counted against `held` first.
    fn event(&mut self, data: &str, held: &mut Held) -> Result<Event, String>;
    /// The end marker, as the failure of a stream that stopped short names it.
    fn end_marker(&self) -> &'static str;
    /// The whole reply, once [`Event::End`] has come: the events assembled into the unstreamed
    /// reply and read by the provider's [`Dialect::parse_reply`].
    fn finish(&self) -> Result<Reply, String>;
}

/// What one event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Nothing for the reader of answer text.
    Skip,
    /// A piece of answer text (possibly empty).
    Text(String),
    /// The end marker: nothing after it is read.
    End,
}

fn count(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// A short word the provider sent (`model`, a finish reason), bounded: a peer controls it.
fn word(v: Option<&Value>) -> Option<String> {
    const MAX: usize = 200;
    Some(crate::text::head(v?.as_str()?, MAX).to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::model::{ToolOutput, ToolSpec};
    use crate::wire::model_stream::StreamReader;

    /// What one provider answers, as a table row.
    struct Want {
        word: &'static str,
        endpoint: &'static str,
        path: &'static str,
        /// For the key `k`.
        credential: (&'static str, &'static str),
        fixed_headers: &'static [(&'static str, &'static str)],
        reasoning_effort: bool,
        model: &'static str,
        key_var: &'static str,
        /// The body of [`turn`]'s request.
        body: Value,
        /// A whole reply whose answer is `hi`.
        reply: Value,
        /// A streamed reply whose answer is `hi`, then its end marker's event.
        stream: (&'static str, &'static str),
        end_marker: &'static str,
    }

    /// The row of each provider. The match is exhaustive: a new provider does not compile here
    /// until its row says what it sends and reads.
    fn want(provider: Provider) -> Want {
        let chat_body = |bound: &str, instructions: &str| {
            json!({
                "model": "m",
                bound: 10,
                "stream": true,
                "stream_options": {"include_usage": true},
                "reasoning_effort": "low",
                "messages": [
                    {"role": instructions, "content": "S"},
                    {"role": "user", "content": "T"},
                    {"role": "assistant", "content": "A"},
                    {"role": "tool", "tool_call_id": "c1", "content": "R"},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "t", "description": "D", "parameters": {"type": "object"},
                }}],
            })
        };
        let chat_reply = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi"}}]});
        let chat_stream = (
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
            "data: [DONE]\n\n",
        );
        match provider {
            Provider::OpenAi => Want {
                word: "openai",
                endpoint: "https://api.openai.com",
                path: "chat/completions",
                credential: ("authorization", "Bearer k"),
                fixed_headers: &[],
                reasoning_effort: true,
                model: "gpt-5.5",
                key_var: "OPENAI_API_KEY",
                body: chat_body("max_completion_tokens", "developer"),
                reply: chat_reply,
                stream: chat_stream,
                end_marker: "[DONE]",
            },
            Provider::OpenAiCompatible => Want {
                word: "openai-compatible",
                endpoint: "https://api.openai.com",
                path: "chat/completions",
                credential: ("authorization", "Bearer k"),
                fixed_headers: &[],
                reasoning_effort: true,
                model: "gpt-5.5",
                key_var: "OPENAI_API_KEY",
                body: chat_body("max_tokens", "system"),
                reply: chat_reply,
                stream: chat_stream,
                end_marker: "[DONE]",
            },
            Provider::Anthropic => Want {
                word: "anthropic",
                endpoint: "https://api.anthropic.com",
                path: "messages",
                credential: ("x-api-key", "k"),
                fixed_headers: &[("anthropic-version", "2026-10-21")],
                reasoning_effort: false,
                model: "claude-sonnet-5-5",
                key_var: "ANTHROPIC_API_KEY",
                // No reasoning_effort: the Messages API has no such field (and the manifest
                // refuses it).
                body: json!({
                    "model": "m",
                    "max_tokens": 10,
                    "stream": true,
                    "system": "S",
                    "messages": [
                        {"role": "user", "content": "T"},
                        {"role": "assistant", "content": "A"},
                        {"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": "c1", "content": "R", "is_error": true},
                        ]},
                    ],
                    "tools": [{"name": "t", "description": "D", "input_schema": {"type": "object"}}],
                }),
                reply: json!({"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}),
                stream: (
                    concat!(
                        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\n",
                        "event: content_block_start\n",
                        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"hi\"}}\n\n",
                    ),
                    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
                ),
                end_marker: "message_stop",
            },
        }
    }

    /// A turn with every kind of message and a tool, streamed, with a reasoning effort.
    fn turn(provider: Provider) -> Value {
        let tools = [ToolSpec {
            name: "t".into(),
            description: "D".into(),
            schema: json!({"type": "object"}),
        }];
        let req = Request {
            provider,
            model: "m",
            max_tokens: 10,
            reasoning_effort: Some("low"),
            system: "S",
            tools: &tools,
            stream: true,
        };
        let messages = [
            Msg::User("T".into()),
            Msg::Assistant(json!({"role": "assistant", "content": "A"})),
            Msg::ToolResults(vec![ToolOutput {
                id: "c1".into(),
                text: "R".into(),
                is_error: true,
            }]),
        ];
        Value::Object(dialect(provider).request_body(&req, &messages))
    }

    #[test]
    fn each_provider_sends_and_reads_what_its_row_says() {
        for provider in Provider::ALL {
            let (w, d) = (want(provider), dialect(provider));
            let name = w.word;
            assert_eq!(provider.as_str(), w.word);
            assert_eq!(
                Provider::ALL.into_iter().filter(|p| p.as_str() == w.word).count(),
                1,
                "{name}: its word names it alone"
            );
            assert_eq!(d.default_endpoint(), w.endpoint, "{name}");
            assert_eq!(d.path(), w.path, "{name}");
            let (header, value) = d.credential("k");
            assert_eq!((header, value.as_str()), w.credential, "{name}");
            assert_eq!(d.fixed_headers(), w.fixed_headers, "{name}");
            assert_eq!(d.takes_reasoning_effort(), w.reasoning_effort, "{name}");
            assert!(!d.api_name().is_empty(), "{name}");
            assert_eq!(d.default_model(), w.model, "{name}");
            assert_eq!(d.key_var(), w.key_var, "{name}");
            assert_eq!(turn(provider), w.body, "{name}");
            assert_eq!(d.parse_reply(&w.reply).map(|r| r.text), Ok("hi".to_string()), "{name}");

            let (events, end) = w.stream;
            let mut cut = StreamReader::new(provider);
            assert_eq!(cut.push(events.as_bytes()), (vec!["hi".to_string()], Ok(())), "{name}");
            assert_eq!(
                cut.finish(),
                Err(format!("the stream ended before {}", w.end_marker)),
                "{name}"
            );
            let mut whole = StreamReader::new(provider);
            assert_eq!(whole.push(format!("{events}{end}").as_bytes()).1, Ok(()), "{name}");
            assert!(whole.is_done(), "{name}");
            assert_eq!(whole.finish().map(|r| r.text), Ok("hi".to_string()), "{name}");
        }
    }
}
