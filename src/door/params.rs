//! The params of the A2A methods, validated before anything touches the board: SendMessage's
//! message as an [`Offer`], its parts framed in order as the task text (docs/a2a.md, "Parts");
//! ListTasks's query; `historyLength`; a task id. Pure: a refusal is the `RpcError` to answer.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::jsonrpc::{self, A2aError, RpcError};
use crate::tasks::{ListQuery, TaskState};

/// ListTasks page size when none is asked for (A2A v1.0 `ListTasksRequest.page_size`).
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Largest ListTasks page; `pageSize` outside 1..=100 is `-32602` (A2A v1.0 `a2a.proto`
/// `ListTasksRequest.page_size`: "The minimum value is 1. The maximum value is 100.").
pub const MAX_PAGE_SIZE: usize = 100;

/// Longest `contextId` a message may name [ours]: a task repeats it in every history message
/// it shows, so an unbounded one would multiply a reply's size.
pub const MAX_CONTEXT_ID_BYTES: usize = 256;

/// Longest `messageId` a message may carry [ours]: it is written to the trace on every offer, a
/// refused one too, and kept in the task's history.
pub const MAX_MESSAGE_ID_BYTES: usize = 256;

/// The `message` of SendMessage, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    pub text: String,
    pub message_id: String,
    pub context_id: Option<String>,
    /// The task the message names; SendMessage refuses it (the door runs no multi-turn tasks).
    pub task_id: Option<String>,
    pub return_immediately: bool,
    /// `configuration.historyLength`: `None` = unset.
    pub history_length: Option<usize>,
}

/// `historyLength` (A2A v1.0 §3.2.4): unset or null → `None`; a negative or non-integer value
/// is `-32602` naming the field.
pub(super) fn history_length(params: &Map<String, Value>, field: &str) -> Result<Option<usize>, RpcError> {
    match params.get("historyLength") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) if n >= 0 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(RpcError::invalid_param(field, "must be an integer of 0 or more")),
        },
        Some(_) => Err(RpcError::invalid_param(field, "must be an integer of 0 or more")),
    }
}

/// The most bytes of task text an offer may carry once its parts are framed [ours]: the body
/// limit, so a task never holds more text than the request that brought it.
pub const MAX_TASK_TEXT: usize = super::BODY_LIMIT;

/// Validates SendMessage params: shape → `-32602`, a part the capsule does not accept → `-32005` (A2A v1.0 §3.1.1: "A Media Type provided
/// in the request's message parts is not supported by the agent"). `file_modes` are the media
/// ranges of `exports.input_modes`.
///
/// The task text frames the parts in order, joined with `\n` (so text-only messages read as
/// before):
/// - a `text` part (`text/plain`, or a declared input mode) is its text;
/// - a `data` part (structured JSON, A2A v1.0 §4.1.6) is a fenced block
///   `` ```json\n<compact JSON>\n``` ``;
/// - a `raw` part of a declared media type is `` ```<mediaType>;base64[ <filename>]\n<base64>\n``` ``;
/// - a `url` part of a declared media type is `` ```<mediaType>;url[ <filename>]\n<url>\n``` ``.
///
/// A model capsule sees this text as its user turn; a component receives it as its task text
/// (docs/a2a.md, "Parts").
pub fn parse_offer(params: &Map<String, Value>, file_modes: &[String]) -> Result<Offer, RpcError> {
    let bad = RpcError::invalid_params;
    let Some(Value::Object(msg)) = params.get("message") else {
        return Err(bad());
    };
    let message_id = match msg.get("messageId") {
        // Recorded in the trace and kept in the task's history: capped like contextId, so a
        // caller cannot grow either by the size of a request body.
        Some(Value::String(s)) if s.len() > MAX_MESSAGE_ID_BYTES => {
            return Err(RpcError::invalid_param(
                "message.messageId",
                "must be at most 256 bytes",
            ));
        }
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(bad()),
    };
    let context_id = match msg.get("contextId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) if s.len() > MAX_CONTEXT_ID_BYTES => {
            return Err(RpcError::invalid_param(
                "message.contextId",
                "must be at most 256 bytes",
            ));
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad()),
    };
    let Some(Value::Array(parts)) = msg.get("parts") else {
        return Err(bad());
    };
    if parts.is_empty() {
        return Err(bad());
    }
    let (return_immediately, history_length) = match params.get("configuration") {
        None | Some(Value::Null) => (false, None),
        Some(Value::Object(c)) => {
            accepts_our_output(c)?;
            (
                match c.get("returnImmediately") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(bad()),
                },
                history_length(c, "configuration.historyLength")?,
            )
        }
        Some(_) => return Err(bad()),
    };
    let task_id = match msg.get("taskId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad()),
    };
    let mut framed: Vec<String> = Vec::with_capacity(parts.len());
    let mut bytes = 0usize;
    for p in parts {
        let Value::Object(p) = p else {
            return Err(bad());
        };
        let part = read_part(p, file_modes)?;
        bytes = bytes.saturating_add(part.len() + 1);
        if bytes > MAX_TASK_TEXT {
            return Err(bad());
        }
        framed.push(part);
    }
    Ok(Offer {
        text: framed.join("\n"),
        message_id,
        context_id,
        task_id,
        return_immediately,
        history_length,
    })
}

/// What every answer's artifact is: text (the card's `defaultOutputModes`).
const OUTPUT_MODE: &str = "text/plain";

/// `configuration.acceptedOutputModes` (A2A v1.0 `SendMessageConfiguration`): a client whose
/// list names only media types that exclude text could not take any answer, so the task is
/// refused before it runs with `ContentTypeNotSupportedError` (-32005; §3.3.2: "a Media Type …
/// implied for an artifact is not supported by the agent"). An entry that is not a media range
/// (an older client's `"text"`) is no refusal: the door cannot tell what it excludes.
fn accepts_our_output(c: &Map<String, Value>) -> Result<(), RpcError> {
    let modes = match c.get("acceptedOutputModes") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(m)) => m,
        Some(_) => {
            return Err(RpcError::invalid_param(
                "configuration.acceptedOutputModes",
                "must be a list of media types",
            ));
        }
    };
    let mut ranges = Vec::with_capacity(modes.len());
    for m in modes {
        let Value::String(m) = m else {
            return Err(RpcError::invalid_param(
                "configuration.acceptedOutputModes",
                "must be a list of media types",
            ));
        };
        let essence = m.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if !crate::manifest::media_range_ok(&essence) {
            return Ok(());
        }
        ranges.push(essence);
    }
    if ranges.is_empty() || crate::manifest::accepts_media(&ranges, OUTPUT_MODE) {
        return Ok(());
    }
    Err(A2aError::ContentTypeNotSupported
        .with(&[("acceptedOutputModes", &ranges.join(", ")), ("mediaType", OUTPUT_MODE)]))
}

/// One part as task text (see [`parse_offer`]).
fn read_part(p: &Map<String, Value>, file_modes: &[String]) -> Result<String, RpcError> {
    let bad = RpcError::invalid_params;
    let media = match p.get("mediaType") {
        None | Some(Value::Null) => "",
        Some(Value::String(m)) => m.as_str(),
        Some(_) => return Err(bad()),
    };
    let filename = match p.get("filename") {
        None | Some(Value::Null) => "",
        Some(Value::String(f)) => f.as_str(),
        Some(_) => return Err(bad()),
    };
    // `Part.content` is a oneof (a2a.proto): exactly one of text, raw, url, data.
    let contents: Vec<&str> = ["text", "raw", "url", "data"]
        .into_iter()
        .filter(|k| p.get(*k).is_some())
        .collect();
    let unsupported = |media: &str| A2aError::ContentTypeNotSupported.with(&[("mediaType", media)]);
    let declared = |media: &str| !media.is_empty() && crate::manifest::accepts_media(file_modes, media);
    match contents.as_slice() {
        ["text"] => {
            let Some(Value::String(t)) = p.get("text") else {
                return Err(bad());
            };
            let plain = media.is_empty()
                || media
                    .split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/plain"));
            if plain || declared(media) {
                Ok(t.clone())
            } else {
                Err(unsupported(media))
            }
        }
        ["data"] => {
            // Any JSON value, re-serialised compactly: one line (newlines inside strings are
            // escaped), so nothing in it can close the fence.
            let data = p.get("data").map(jsonrpc::to_bytes).unwrap_or_default();
            let data = String::from_utf8(data).map_err(|_| bad())?;
            Ok(format!("```json\n{data}\n```"))
        }
        [kind @ ("raw" | "url")] => {
            let Some(Value::String(content)) = p.get(*kind) else {
                return Err(bad());
            };
            if !declared(media) {
                return Err(unsupported(if media.is_empty() { "" } else { media }));
            }
            // The info string is one line: a media type or file name with a newline or a
            // backtick could end the fence early.
            let one_line = |s: &str| !s.contains(['\n', '\r', '`']);
            // Raw bytes are base64 (standard or URL-safe alphabet): nothing that could end a fence.
            let base64 = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=-_".contains(&b));
            let content_ok = if *kind == "raw" {
                base64(content)
            } else {
                one_line(content)
            };
            if !one_line(media) || !one_line(filename) || !content_ok {
                return Err(bad());
            }
            let encoding = if *kind == "raw" { "base64" } else { "url" };
            let name = if filename.is_empty() {
                String::new()
            } else {
                format!(" {filename}")
            };
            Ok(format!("```{media};{encoding}{name}\n{content}\n```"))
        }
        _ => Err(bad()),
    }
}

pub(super) fn task_id(params: &Map<String, Value>) -> Result<&str, RpcError> {
    match params.get("id") {
        Some(Value::String(s)) => Ok(s),
        _ => Err(RpcError::invalid_params()),
    }
}

/// ListTasks params → a query and whether to include artifacts (A2A v1.0 §3.1.4,
/// `ListTasksRequest`). Empty strings are the protobuf defaults a client may send for "unset";
/// a value out of range or of the wrong type is `-32602` naming the field (§3.3.2).
pub fn parse_list(params: &Map<String, Value>) -> Result<(ListQuery, bool), RpcError> {
    let string = |key: &str| -> Result<Option<&str>, RpcError> {
        match params.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(RpcError::invalid_param(key, "must be a string")),
        }
    };
    let context_id = string("contextId")?.map(str::to_string);
    let state =
        match string("status")? {
            None | Some("TASK_STATE_UNSPECIFIED") => None,
            Some(s) => Some(TaskState::from_wire(s).ok_or_else(|| {
                RpcError::invalid_param("status", "must be a TaskState name, e.g. TASK_STATE_WORKING")
            })?),
        };
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
        Some(Value::Number(n)) => match n.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if (1..=MAX_PAGE_SIZE).contains(&n) => n,
            _ => return Err(RpcError::invalid_param("pageSize", "must be an integer from 1 to 100")),
        },
        Some(_) => return Err(RpcError::invalid_param("pageSize", "must be an integer from 1 to 100")),
    };
    let bad_token = || RpcError::invalid_param("pageToken", "must be a nextPageToken this door returned");
    let before = match string("pageToken")? {
        None => None,
        Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => Some(t.parse::<u64>().map_err(|_| bad_token())?),
        Some(_) => return Err(bad_token()),
    };
    let history = history_length(params, "historyLength")?;
    // Inclusive: "a status timestamp time greater than or equal to this value" (a2a.proto).
    let after = match string("statusTimestampAfter")? {
        None => None,
        Some(t) => Some(
            DateTime::parse_from_rfc3339(t)
                .map_err(|_| {
                    RpcError::invalid_param(
                        "statusTimestampAfter",
                        "must be an RFC 3339 timestamp, e.g. 2025-01-02T03:04:05.678Z",
                    )
                })?
                .with_timezone(&Utc),
        ),
    };
    let include_artifacts = match params.get("includeArtifacts") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(RpcError::invalid_param("includeArtifacts", "must be a boolean")),
    };
    Ok((
        ListQuery {
            context_id,
            state,
            after,
            page_size,
            before,
            history,
        },
        include_artifacts,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn msg(parts: Value) -> Value {
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts}})
    }

    #[test]
    fn offers_are_validated() {
        let ok = parse_offer(
            &obj(msg(json!([{"text": "a", "mediaType": "text/plain"}, {"text": "b"}]))),
            &[],
        )
        .expect("ok");
        assert_eq!(
            ok,
            Offer {
                text: "a\nb".into(),
                message_id: "m".into(),
                context_id: None,
                task_id: None,
                return_immediately: false,
                history_length: None,
            }
        );
        let table: &[(Value, i32)] = &[
            (json!({}), -32602),
            (json!({"message": "x"}), -32602),
            (json!({"message": {"parts": [{"text": "a"}]}}), -32602),
            (json!({"message": {"messageId": "m", "parts": []}}), -32602),
            (json!({"message": {"messageId": "m", "parts": {}}}), -32602),
            (json!({"message": {"messageId": "m", "parts": [{"text": 1}]}}), -32602),
            (
                json!({"message": {"messageId": "m", "contextId": 3, "parts": [{"text": "a"}]}}),
                -32602,
            ),
            (
                json!({"message": {"messageId": "m", "parts": [{"text": "a"}]}, "configuration": {"returnImmediately": "yes"}}),
                -32602,
            ),
            (
                json!({"message": {"messageId": "m", "taskId": 7, "parts": [{"text": "a"}]}}),
                -32602,
            ),
            (
                json!({"message": {"messageId": "m", "contextId": "c".repeat(MAX_CONTEXT_ID_BYTES + 1), "parts": [{"text": "a"}]}}),
                -32602,
            ),
            (
                json!({"message": {"messageId": "m".repeat(MAX_MESSAGE_ID_BYTES + 1), "parts": [{"text": "a"}]}}),
                -32602,
            ),
            (
                json!({"message": {"messageId": "m", "parts": [{"text": "a"}]}, "configuration": {"historyLength": -1}}),
                -32602,
            ),
            (msg(json!([{"text": "a", "mediaType": "text/markdown"}])), -32005),
            (msg(json!([{"url": "http://x", "mediaType": "image/png"}])), -32005),
            (msg(json!([{"raw": "AAAA", "mediaType": "application/pdf"}])), -32005),
            (msg(json!([{"raw": "AAAA"}])), -32005),
            (msg(json!([{"mediaType": "text/plain"}])), -32602),
            (
                json!({"message": {"messageId": "m", "parts": [{"text": "a"}]}, "configuration": {"acceptedOutputModes": ["image/png", "application/x-unknown"]}}),
                -32005,
            ),
            (
                json!({"message": {"messageId": "m", "parts": [{"text": "a"}]}, "configuration": {"acceptedOutputModes": "text/plain"}}),
                -32602,
            ),
            (
                json!({"message": {"messageId": "m", "parts": [{"text": "a"}]}, "configuration": {"acceptedOutputModes": [7]}}),
                -32602,
            ),
            (msg(json!([{"text": "a", "data": 1}])), -32602),
            (msg(json!([{"data": 1, "filename": 7}])), -32602),
        ];
        for (params, code) in table {
            assert_eq!(
                parse_offer(&obj(params.clone()), &[]).map_err(|e| e.code),
                Err(*code),
                "{params}"
            );
        }
        // Output modes that take text, or that the door cannot read as media types, are no refusal.
        for modes in [
            json!([]),
            json!(["text/plain"]),
            json!(["image/png", "TEXT/Plain; charset=utf-8"]),
            json!(["text/*"]),
            json!(["*/*"]),
            json!(["text"]),
            json!(["application/json", "data"]),
        ] {
            let params = json!({"message": {"messageId": "m", "parts": [{"text": "a"}]}, "configuration": {"acceptedOutputModes": modes}});
            assert!(parse_offer(&obj(params), &[]).is_ok(), "{modes}");
        }
        let o = parse_offer(&obj(json!({"message": {"messageId": "m", "contextId": "ctx_a", "taskId": "tsk_1", "parts": [{"text": "x"}]}, "configuration": {"returnImmediately": true, "historyLength": 3}})), &[]).expect("ok");
        assert_eq!(
            (
                o.context_id.as_deref(),
                o.task_id.as_deref(),
                o.return_immediately,
                o.history_length
            ),
            (Some("ctx_a"), Some("tsk_1"), true, Some(3))
        );
    }

    /// A2A v1.0 §4.1.6 `Part` (a2a.proto `Part.content` oneof text/raw/url/data, `media_type`):
    /// data parts always reach the capsule, framed as fenced JSON; file parts only of a declared
    /// media type, else `ContentTypeNotSupportedError` (-32005, §3.1.1,
    /// docs/reference/codes.md#w-ros-001).
    #[test]
    fn parts_are_framed_into_the_task_text() {
        let text = |parts: Value, modes: &[&str]| {
            let modes: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
            parse_offer(&obj(msg(parts)), &modes)
                .map(|o| o.text)
                .map_err(|e| e.code)
        };
        assert_eq!(
            text(
                json!([{"text": "sum these"}, {"data": {"b": [1, 2], "a": "x\n```"}}]),
                &[]
            ),
            Ok("sum these\n```json\n{\"a\":\"x\\n```\",\"b\":[1,2]}\n```".into())
        );
        assert_eq!(
            text(json!([{"data": null, "mediaType": "application/json"}]), &[]),
            Ok("```json\nnull\n```".into())
        );
        assert_eq!(
            text(
                json!([{"raw": "iVBORw==", "mediaType": "image/png", "filename": "a.png"}]),
                &["image/*"]
            ),
            Ok("```image/png;base64 a.png\niVBORw==\n```".into())
        );
        assert_eq!(
            text(
                json!([{"url": "https://x/y.pdf", "mediaType": "application/pdf"}]),
                &["application/pdf"]
            ),
            Ok("```application/pdf;url\nhttps://x/y.pdf\n```".into())
        );
        assert_eq!(
            text(
                json!([{"text": "# h", "mediaType": "text/markdown"}]),
                &["text/markdown"]
            ),
            Ok("# h".into())
        );
        let table: &[(Value, &[&str], i32)] = &[
            (
                json!([{"url": "https://x", "mediaType": "image/png"}]),
                &["image/jpeg"],
                -32005,
            ),
            (
                json!([{"url": "https://x", "mediaType": "image/png"}]),
                &["text/*"],
                -32005,
            ),
            (json!([{"url": "https://x"}]), &["*/*"], -32005),
            (
                json!([{"raw": "not base64!", "mediaType": "image/png"}]),
                &["image/png"],
                -32602,
            ),
            (
                json!([{"raw": "AA\n```", "mediaType": "image/png"}]),
                &["image/png"],
                -32602,
            ),
            (
                json!([{"url": "https://x\n```", "mediaType": "image/png"}]),
                &["image/png"],
                -32602,
            ),
            (
                json!([{"url": "https://x", "mediaType": "image/png", "filename": "a`b"}]),
                &["image/png"],
                -32602,
            ),
        ];
        for (parts, modes, code) in table {
            assert_eq!(text(parts.clone(), modes), Err(*code), "{parts} {modes:?}");
        }
    }

    #[test]
    fn list_params() {
        let q = |v: Value| {
            parse_list(&obj(v))
                .map(|(q, a)| (q.page_size, q.state, q.before, q.context_id, a))
                .map_err(|e| e.code)
        };
        assert_eq!(q(json!({})), Ok((50, None, None, None, false)));
        assert_eq!(q(json!({"pageSize": 1})), Ok((1, None, None, None, false)));
        assert_eq!(q(json!({"pageSize": 7})), Ok((7, None, None, None, false)));
        assert_eq!(q(json!({"pageSize": 100})), Ok((100, None, None, None, false)));
        assert_eq!(
            q(json!({"status": "TASK_STATE_WORKING"})),
            Ok((50, Some(TaskState::Working), None, None, false))
        );
        assert_eq!(
            q(json!({"pageToken": "12", "contextId": "c", "includeArtifacts": true})),
            Ok((50, None, Some(12), Some("c".into()), true))
        );
        let (lq, _) = parse_list(&obj(json!({"statusTimestampAfter": "2023-11-14T22:13:20.123+01:00"}))).expect("ok");
        assert_eq!(lq.after.map(|t| t.timestamp_millis()), Some(1_699_996_400_123));
        let history = |v: Value| parse_list(&obj(v)).map(|(q, _)| q.history).map_err(|e| e.code);
        assert_eq!(history(json!({})), Ok(None));
        assert_eq!(history(json!({"historyLength": 0})), Ok(Some(0)));
        assert_eq!(history(json!({"historyLength": 2})), Ok(Some(2)));
    }

    /// A2A v1.0 §3.3.2 "Validation Errors" and `a2a.proto` `ListTasksRequest`: each bad
    /// parameter is `-32602` naming itself in a `google.rpc.BadRequest` field violation.
    #[test]
    fn list_params_refused_name_their_field() {
        let table: &[(Value, &str)] = &[
            (json!({"pageSize": 0}), "pageSize"),
            (json!({"pageSize": 101}), "pageSize"),
            (json!({"pageSize": 1000}), "pageSize"),
            (json!({"pageSize": -1}), "pageSize"),
            (json!({"pageSize": 1.5}), "pageSize"),
            (json!({"pageSize": "5"}), "pageSize"),
            (json!({"historyLength": -1}), "historyLength"),
            (json!({"historyLength": 0.5}), "historyLength"),
            (json!({"historyLength": "2"}), "historyLength"),
            (json!({"status": "working"}), "status"),
            (json!({"pageToken": "x"}), "pageToken"),
            (json!({"includeArtifacts": 1}), "includeArtifacts"),
            (json!({"statusTimestampAfter": "yesterday"}), "statusTimestampAfter"),
            (
                json!({"statusTimestampAfter": "2023-11-14 22:13:20"}),
                "statusTimestampAfter",
            ),
            (json!({"contextId": 3}), "contextId"),
        ];
        for (params, field) in table {
            let e = parse_list(&obj(params.clone())).map(|_| ()).expect_err("refused");
            assert_eq!(e.code, -32602, "{params}");
            let data = e.data.unwrap_or_default();
            assert_eq!(
                data[0]["@type"], "type.googleapis.com/google.rpc.BadRequest",
                "{params}"
            );
            assert_eq!(data[0]["fieldViolations"][0]["field"], *field, "{params}");
        }
    }
}
