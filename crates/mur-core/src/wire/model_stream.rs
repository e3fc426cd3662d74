//! Reading a streamed provider reply (server-sent events), pure: bytes in, answer-text deltas out
//! as they arrive, and at the end the same [`Reply`] the whole reply would have given. No actix or
//! HTTP code: `mur`'s `model::client` moves the bytes.
//!
//! This module frames the events and bounds them; what an event means is the provider's
//! [`StreamEvents`] (`wire::provider`), which assembles the events into the provider's
//! non-streamed reply shape and reads it as an unstreamed reply, so a streamed turn means exactly
//! what the same turn unstreamed means (tool calls, stop reasons, usage, the echo sent back).

use serde_json::Value;

use super::model::{self as wire, Reply};
use super::provider::Provider;
use super::provider::{Event, StreamEvents, dialect};
use super::sse::SseReader;

/// Longest single provider event kept while waiting for its end. A delta is a few tokens; a
/// `message_start` or a last chunk carries usage. Far below this.
pub const MAX_EVENT: usize = 1 << 20;

/// Most bytes one streamed reply may accumulate: answer text, reasoning, tool-call inputs. The
/// same order as the largest unstreamed reply read.
pub const MAX_REPLY: usize = 16 << 20;

/// One streamed reply being read.
#[derive(Debug)]
pub struct StreamReader {
    sse: SseReader,
    /// The end marker (`[DONE]`, `message_stop`) has arrived.
    done: bool,
    held: Held,
    /// The answer text so far.
    text: String,
    events: Box<dyn StreamEvents>,
}

/// Bytes a streamed reply has accumulated so far, against [`MAX_REPLY`].
#[derive(Debug, Default)]
pub struct Held(usize);

impl Held {
    /// Counts `n` more accumulated bytes against the bound.
    pub fn hold(&mut self, n: usize) -> Result<(), String> {
        self.0 = self.0.saturating_add(n);
        if self.0 > MAX_REPLY {
            return Err(format!("the streamed reply grew past {MAX_REPLY} bytes"));
        }
        Ok(())
    }
}

impl StreamReader {
    pub fn new(provider: Provider) -> StreamReader {
        StreamReader {
            sse: SseReader::new(MAX_EVENT),
            done: false,
            held: Held::default(),
            text: String::new(),
            events: dialect(provider).stream(),
        }
    }

    /// Adds bytes as they arrive; returns the answer-text deltas they completed, in order, and
    /// `Err` when the stream cannot be read on (malformed event, error event, over a bound): the
    /// deltas before the bad event are still handed out.
    pub fn push(&mut self, bytes: &[u8]) -> (Vec<String>, Result<(), String>) {
        let mut out = Vec::new();
        let Ok(events) = self.sse.push_data(bytes) else {
            return (
                out,
                Err(format!("one event of the stream is longer than {MAX_EVENT} bytes")),
            );
        };
        for data in events {
            if self.done {
                // Nothing belongs after the end marker.
                continue;
            }
            match self.events.event(&data, &mut self.held) {
                Ok(Event::Text(delta)) if !delta.is_empty() => {
                    self.text.push_str(&delta);
                    out.push(delta);
                }
                Ok(Event::End) => self.done = true,
                Ok(Event::Text(_) | Event::Skip) => {}
                Err(why) => return (out, Err(why)),
            }
        }
        (out, Ok(()))
    }

    /// Whether the stream's end marker has arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The answer text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The whole reply, once the end marker has arrived. `Err` when it has not (the stream
    /// stopped short) or the assembled reply cannot be read.
    pub fn finish(&self) -> Result<Reply, String> {
        if !self.done {
            return Err(format!("the stream ended before {}", self.events.end_marker()));
        }
        self.events.finish()
    }
}

/// One event's data as a JSON object, or why it is not one.
pub(crate) fn event_object(data: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(data).map_err(|_| format!("an event is not JSON: {}", quote(data)))?;
    if !v.is_object() {
        return Err(format!("an event is not a JSON object: {}", quote(data)));
    }
    Ok(v)
}

/// The failure of a stream whose provider sent the error object `e`.
pub(crate) fn sent_error(e: &Value) -> String {
    format!("the provider sent an error: {}", error_text(e))
}

/// A provider error object as one short line.
fn error_text(e: &Value) -> String {
    let kind = e.get("type").and_then(Value::as_str);
    let message = e.get("message").and_then(Value::as_str);
    let text = match (kind, message) {
        (Some(k), Some(m)) => format!("{k}: {m}"),
        (None, Some(m)) => m.to_string(),
        _ => e.to_string(),
    };
    quote(&text)
}

/// The first bytes of `s`, cut at a character boundary.
fn quote(s: &str) -> String {
    let shown = crate::text::head(s, wire::FAILURE_BODY_BYTES);
    if shown.len() < s.len() {
        format!("{shown}…")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::model::{Stop, Usage};

    /// The SSE text of events, each `data:` one (Anthropic's `event:` lines added).
    fn sse(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| match e.get("type").and_then(Value::as_str) {
                Some(t) if !t.is_empty() && e.get("choices").is_none() => format!("event: {t}\ndata: {e}\n\n"),
                _ => format!("data: {e}\n\n"),
            })
            .collect()
    }

    /// Feeds `stream` in chunks of `size`: the deltas, then the reply or the first error.
    fn read(provider: Provider, stream: &str, size: usize) -> (Vec<String>, Result<Reply, String>) {
        let mut r = StreamReader::new(provider);
        let mut deltas = Vec::new();
        for chunk in stream.as_bytes().chunks(size.max(1)) {
            let (d, r) = r.push(chunk);
            deltas.extend(d);
            if let Err(e) = r {
                return (deltas, Err(e));
            }
        }
        let reply = r.finish();
        if reply.is_ok() {
            assert_eq!(deltas.concat(), r.text(), "the deltas are the text");
        }
        (deltas, reply)
    }

    fn oa(delta: Value) -> Value {
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    }

    fn oa_finish(reason: &str) -> Value {
        json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    }

    fn oa_usage() -> Value {
        json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    }

    const DONE: &str = "data: [DONE]\n\n";

    fn an_start() -> Value {
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
               "model": "x", "stop_reason": null,
               "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4}}})
    }

    fn an_block(i: u64, block: Value) -> Value {
        json!({"type": "content_block_start", "index": i, "content_block": block})
    }

    fn an_delta(i: u64, delta: Value) -> Value {
        json!({"type": "content_block_delta", "index": i, "delta": delta})
    }

    fn an_text(i: u64, t: &str) -> Value {
        an_delta(i, json!({"type": "text_delta", "text": t}))
    }

    fn an_stop(i: u64) -> Value {
        json!({"type": "content_block_stop", "index": i})
    }

    fn an_end(reason: &str) -> Vec<Value> {
        vec![
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                   "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ]
    }

    /// What a good stream comes to: deltas, text, tool calls `(id, name, input)`, stop, usage.
    struct Want {
        deltas: &'static [&'static str],
        text: &'static str,
        calls: Vec<(&'static str, &'static str, Value)>,
        stop: Stop,
        usage: (u64, u64),
    }

    fn good_streams() -> Vec<(&'static str, Provider, String, Want)> {
        let openai_text = [
            sse(&[
                oa(json!({"role": "assistant", "content": ""})),
                oa(json!({"content": "Hel"})),
                // Reasoning text of a compatible server: never answer text.
                oa(json!({"reasoning_content": "thinking…"})),
                oa(json!({"content": "lo"})),
                oa_finish("stop"),
                oa_usage(),
            ]),
            DONE.into(),
        ]
        .concat();
        let openai_tools = [
            sse(&[
                oa(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"index": 0, "id": "c1", "type": "function", "function": {"name": "call-member", "arguments": ""}}]})),
                oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"member\":\"co"}}]})),
                oa(json!({"tool_calls": [
                    {"index": 1, "id": "c2", "type": "function", "function": {"name": "end-without-answer", "arguments": "{}"}}]})),
                oa(json!({"tool_calls": [{"index": 0, "function": {"arguments": "der\",\"task\":\"t\"}"}}]})),
                oa_finish("tool_calls"),
                oa_usage(),
            ]),
            DONE.into(),
        ]
        .concat();
        let openai_cut = [sse(&[oa(json!({"content": "Par"})), oa_finish("length")]), DONE.into()].concat();
        let openai_refused = [
            sse(&[
                oa(json!({"refusal": "I can"})),
                oa(json!({"refusal": "not."})),
                oa_finish("stop"),
            ]),
            // A comment line, as some servers send for keep-alive.
            ": keep-alive\n\n".into(),
            DONE.into(),
        ]
        .concat();
        let mut anthropic_text = vec![
            an_start(),
            json!({"type": "ping"}),
            an_block(0, json!({"type": "text", "text": ""})),
            an_text(0, "Hel"),
            an_text(0, "lo"),
            an_stop(0),
            // An event kind added later, and a delta kind added later: skipped.
            json!({"type": "future_event", "x": 1}),
        ];
        anthropic_text.extend(an_end("end_turn"));
        let mut anthropic_tools = vec![
            an_start(),
            an_block(0, json!({"type": "thinking", "thinking": ""})),
            an_delta(0, json!({"type": "thinking_delta", "thinking": "Split the "})),
            an_delta(0, json!({"type": "thinking_delta", "thinking": "work."})),
            an_delta(0, json!({"type": "signature_delta", "signature": "c2ln"})),
            an_stop(0),
            an_block(1, json!({"type": "text", "text": ""})),
            an_text(1, "Asking."),
            an_delta(1, json!({"type": "some_new_delta", "x": 1})),
            an_stop(1),
            an_block(
                2,
                json!({"type": "tool_use", "id": "t1", "name": "call-member", "input": {}}),
            ),
            an_delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
            an_delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"member\": \"co"}),
            ),
            an_delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "der\", \"task\": \"t\"}"}),
            ),
            an_stop(2),
            an_block(
                3,
                json!({"type": "tool_use", "id": "t2", "name": "end-without-answer", "input": {}}),
            ),
            an_stop(3),
        ];
        anthropic_tools.extend(an_end("tool_use"));
        let mut anthropic_cut = vec![
            an_start(),
            an_block(0, json!({"type": "text", "text": ""})),
            an_text(0, "Par"),
        ];
        anthropic_cut.extend(an_end("max_tokens"));
        vec![
            (
                "openai text",
                Provider::OpenAi,
                openai_text.clone(),
                Want {
                    deltas: &["Hel", "lo"],
                    text: "Hello",
                    calls: vec![],
                    stop: Stop::Done,
                    usage: (10, 5),
                },
            ),
            (
                "openai-compatible text, CRLF framing",
                Provider::OpenAiCompatible,
                openai_text.replace("\n\n", "\r\n\r\n"),
                Want {
                    deltas: &["Hel", "lo"],
                    text: "Hello",
                    calls: vec![],
                    stop: Stop::Done,
                    usage: (10, 5),
                },
            ),
            (
                "openai tool calls by index",
                Provider::OpenAi,
                openai_tools,
                Want {
                    deltas: &[],
                    text: "",
                    calls: vec![
                        ("c1", "call-member", json!({"member": "coder", "task": "t"})),
                        ("c2", "end-without-answer", json!({})),
                    ],
                    stop: Stop::Done,
                    usage: (10, 5),
                },
            ),
            (
                "openai cut at max tokens",
                Provider::OpenAi,
                openai_cut,
                Want {
                    deltas: &["Par"],
                    text: "Par",
                    calls: vec![],
                    stop: Stop::Truncated,
                    usage: (0, 0),
                },
            ),
            (
                "openai refusal",
                Provider::OpenAi,
                openai_refused,
                Want {
                    deltas: &[],
                    text: "",
                    calls: vec![],
                    stop: Stop::Refused("I cannot.".into()),
                    usage: (0, 0),
                },
            ),
            (
                "anthropic text, ping and unknown events",
                Provider::Anthropic,
                sse(&anthropic_text),
                Want {
                    deltas: &["Hel", "lo"],
                    text: "Hello",
                    calls: vec![],
                    stop: Stop::Done,
                    usage: (14, 7),
                },
            ),
            (
                "anthropic thinking, text and tool calls",
                Provider::Anthropic,
                sse(&anthropic_tools),
                Want {
                    deltas: &["Asking."],
                    text: "Asking.",
                    calls: vec![
                        ("t1", "call-member", json!({"member": "coder", "task": "t"})),
                        ("t2", "end-without-answer", json!({})),
                    ],
                    stop: Stop::Done,
                    usage: (14, 7),
                },
            ),
            (
                "anthropic cut at max tokens",
                Provider::Anthropic,
                sse(&anthropic_cut),
                Want {
                    deltas: &["Par"],
                    text: "Par",
                    calls: vec![],
                    stop: Stop::Truncated,
                    usage: (14, 7),
                },
            ),
        ]
    }

    #[test]
    fn streams_are_read_into_deltas_and_a_reply_however_they_are_chunked() {
        for (name, provider, stream, want) in good_streams() {
            for size in [stream.len(), 1, 2, 3, 7, 64] {
                let (deltas, reply) = read(provider, &stream, size);
                let reply = reply.unwrap_or_else(|e| panic!("{name} in chunks of {size}: {e}"));
                if size == stream.len() {
                    assert_eq!(deltas, want.deltas, "{name}");
                }
                assert_eq!(deltas.concat(), want.deltas.concat(), "{name} in chunks of {size}");
                assert_eq!(reply.text, want.text, "{name}");
                let calls: Vec<(&str, &str, Value)> = reply
                    .tool_calls
                    .iter()
                    .map(|c| (c.id.as_str(), c.name.as_str(), c.input.clone().unwrap_or(Value::Null)))
                    .collect();
                assert_eq!(calls, want.calls, "{name}");
                assert_eq!(reply.stop, want.stop, "{name}");
                // (0, 0): the stream carried no usage, which stays unreported.
                let reported = |n: u64| (n > 0).then_some(n);
                assert_eq!(
                    reply.usage,
                    Usage {
                        input_tokens: reported(want.usage.0),
                        output_tokens: reported(want.usage.1)
                    },
                    "{name}"
                );
            }
        }
    }

    /// The echo sent back is what the unstreamed reply's would be: thinking kept in place with
    /// its signature, tool inputs as objects (Anthropic) or argument strings (OpenAI).
    #[test]
    fn a_streamed_turn_is_echoed_as_the_whole_reply_would_be() {
        let streams = good_streams();
        let echo = |name: &str| {
            let (_, provider, stream, _) = streams.iter().find(|s| s.0 == name).unwrap();
            read(*provider, stream, 5).1.unwrap().echo.unwrap()
        };
        assert_eq!(
            echo("anthropic thinking, text and tool calls"),
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Split the work.", "signature": "c2ln"},
                {"type": "text", "text": "Asking."},
                {"type": "tool_use", "id": "t1", "name": "call-member", "input": {"member": "coder", "task": "t"}},
                {"type": "tool_use", "id": "t2", "name": "end-without-answer", "input": {}},
            ]})
        );
        assert_eq!(
            echo("openai tool calls by index"),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "call-member",
                    "arguments": "{\"member\":\"coder\",\"task\":\"t\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "end-without-answer", "arguments": "{}"}},
            ]})
        );
        assert_eq!(echo("openai text"), json!({"role": "assistant", "content": "Hello"}));
    }

    #[test]
    fn broken_streams_are_refused_with_the_text_so_far() {
        let anthropic_head = sse(&[
            an_start(),
            an_block(0, json!({"type": "text", "text": ""})),
            an_text(0, "Half an"),
        ]);
        let openai_head = sse(&[oa(json!({"content": "Half an"}))]);
        // (name, provider, stream, what the failure says)
        let table: Vec<(&str, Provider, String, &str)> = vec![
            (
                "openai without [DONE]",
                Provider::OpenAi,
                openai_head.clone(),
                "before [DONE]",
            ),
            (
                "openai malformed event",
                Provider::OpenAi,
                format!("{openai_head}data: {{\"choices\": [\n\n"),
                "not JSON",
            ),
            (
                "openai error event",
                Provider::OpenAi,
                format!("{openai_head}data: {{\"error\": {{\"type\": \"server_error\", \"message\": \"boom\"}}}}\n\n"),
                "server_error: boom",
            ),
            (
                "openai content not text",
                Provider::OpenAi,
                format!("{openai_head}{}", sse(&[oa(json!({"content": 5}))])),
                "not text",
            ),
            (
                "openai event not an object",
                Provider::OpenAiCompatible,
                format!("{openai_head}data: [1]\n\n"),
                "not a JSON object",
            ),
            (
                "anthropic without message_stop",
                Provider::Anthropic,
                anthropic_head.clone(),
                "before message_stop",
            ),
            (
                "anthropic error event",
                Provider::Anthropic,
                format!(
                    "{anthropic_head}{}",
                    sse(&[json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})])
                ),
                "overloaded_error: Overloaded",
            ),
            (
                "anthropic delta to a block never started",
                Provider::Anthropic,
                format!("{anthropic_head}{}", sse(&[an_text(4, "x")])),
                "never started",
            ),
            (
                "anthropic tool input not JSON",
                Provider::Anthropic,
                format!(
                    "{anthropic_head}{}",
                    sse(&[
                        an_block(
                            1,
                            json!({"type": "tool_use", "id": "t", "name": "call-member", "input": {}})
                        ),
                        an_delta(1, json!({"type": "input_json_delta", "partial_json": "{\"mem"})),
                        an_stop(1),
                    ])
                ),
                "not JSON",
            ),
            (
                "anthropic malformed event",
                Provider::Anthropic,
                format!("{anthropic_head}event: content_block_delta\ndata: {{\"type\": \"content_block_delta\"\n\n"),
                "not JSON",
            ),
            (
                "anthropic stop without start",
                Provider::Anthropic,
                sse(&[json!({"type": "message_stop"})]),
                "never started",
            ),
        ];
        for (name, provider, stream, says) in table {
            for size in [stream.len(), 3] {
                let (deltas, reply) = read(provider, &stream, size);
                let err = reply.expect_err(name);
                assert!(err.contains(says), "{name}: {err}");
                if name != "anthropic stop without start" {
                    assert_eq!(deltas.concat(), "Half an", "{name}: the text so far was handed out");
                }
            }
        }
    }

    #[test]
    fn an_event_or_a_reply_over_its_bound_is_refused() {
        let mut r = StreamReader::new(Provider::OpenAi);
        let long = format!(
            "data: {{\"choices\": [{{\"delta\": {{\"content\": \"{}\"}}}}]}}",
            "x".repeat(MAX_EVENT)
        );
        assert!(r.push(long.as_bytes()).1.unwrap_err().contains("longer than"));
        // Many events within the event bound, adding up past the reply bound.
        let mut r = StreamReader::new(Provider::OpenAi);
        let piece = sse(&[oa(json!({"content": "y".repeat(MAX_EVENT / 2)}))]);
        let mut refused = None;
        for _ in 0..(MAX_REPLY / (MAX_EVENT / 2) + 2) {
            if let Err(e) = r.push(piece.as_bytes()).1 {
                refused = Some(e);
                break;
            }
        }
        assert!(refused.is_some_and(|e| e.contains("grew past")));
        assert!(r.text().len() <= MAX_REPLY);
    }

    #[test]
    fn nothing_after_the_end_marker_is_read() {
        let stream = [
            sse(&[oa(json!({"content": "A"}))]),
            DONE.into(),
            sse(&[oa(json!({"content": "B"}))]),
        ]
        .concat();
        let (deltas, reply) = read(Provider::OpenAi, &stream, stream.len());
        assert_eq!(deltas, ["A"]);
        assert_eq!(reply.unwrap().text, "A");
    }
}
