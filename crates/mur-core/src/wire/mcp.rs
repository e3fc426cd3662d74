//! The Model Context Protocol as a model capsule's runtime speaks it to a tool server: the
//! JSON-RPC bodies of the lifecycle (`initialize`, `notifications/initialized`) and of tools
//! (`tools/list`, `tools/call`), and the reading of what the server answers. Pure (`serde_json`
//! only): `mur`'s `tools::mcp` moves the bytes over Streamable HTTP, this module decides what they
//! are.
//!
//! Invariants:
//! - **Every size the server controls is bounded in bytes** before it is kept: a tool's name
//!   ([`MAX_TOOL_NAME`]: longer ones are not listed, since a cut name would call nothing), its
//!   description (cut to [`MAX_DESCRIPTION`]), its input schema (a tool with one over
//!   [`MAX_SCHEMA`] is listed as unusable, never cut), a cursor ([`MAX_CURSOR`]), an error's
//!   message ([`MAX_ERROR_TEXT`]) and a call's result text (the caller's bound, with a note
//!   saying how much was cut).
//! - **Only the protocol versions in [`SUPPORTED_VERSIONS`] are accepted.** A server that answers
//!   `initialize` with another is refused with both sides' versions named, as the lifecycle asks
//!   of a client that does not speak the server's version.
//! - A response counts only when its `id` is exactly the request's: notifications, requests from
//!   the server and responses to other requests are not ours to read.

use serde_json::{Value, json};

use crate::text::head;

/// The version `initialize` offers: the newest this client implements.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The versions a server may answer `initialize` with. All three use Streamable HTTP (new in
/// 2025-03-26); 2024-11-05's HTTP+SSE transport is another protocol and is not spoken. What
/// changed between them for a tools-only client (`structuredContent`, the `MCP-Protocol-Version`
/// header) is read or sent either way, harmlessly to a server that predates it.
pub const SUPPORTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// Longest tool name listed. The specification asks names of 1 to 128 characters; this bounds
/// bytes, so a name of 128 wide characters is not listed.
pub const MAX_TOOL_NAME: usize = 128;
/// A tool's description is cut to this many bytes: it goes into every model turn.
pub const MAX_DESCRIPTION: usize = 4 << 10;
/// Longest input schema (its compact JSON) of a usable tool. It goes into every model turn too,
/// and a cut schema would be invalid, so a longer one makes the tool unusable.
pub const MAX_SCHEMA: usize = 64 << 10;
/// Longest `nextCursor` followed: a cursor is an opaque token, not a payload.
pub const MAX_CURSOR: usize = 1 << 10;
/// An error message, a server's name or a content item's label is cut to this many bytes.
pub const MAX_ERROR_TEXT: usize = 512;
/// A call result's text is cut to this many bytes unless the caller says otherwise.
pub const MAX_RESULT_TEXT: usize = 64 << 10;
/// Longest `Mcp-Session-Id` kept; the specification asks visible ASCII only.
pub const MAX_SESSION_ID: usize = 1 << 10;

/// The stateless revision (2026-07-28): no `initialize` and no session; every request carries
/// its version and the client's capabilities in `params._meta`, and says its method (and, for a
/// call, the tool's name) in headers as well. Spoken when `server/discover` lists it.
pub const STATELESS_VERSION: &str = "2026-07-28";

/// `params._meta` keys of a stateless request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The `server/discover` request, proposing [`STATELESS_VERSION`]: what a client sends first.
pub fn discover_request(id: u64, client_version: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {}}).to_string();
    stateless_request(&body, client_version).map_or(body, |s| s.body)
}

/// Whether a `server/discover` result lists [`STATELESS_VERSION`] (`supportedVersions`). `Err`
/// when it is not a discover result at all.
pub fn discover_result(result: &Value) -> Result<bool, String> {
    let Some(versions) = result.get("supportedVersions").and_then(Value::as_array) else {
        return Err("the server/discover result lists no supportedVersions".to_string());
    };
    Ok(versions.iter().any(|v| v.as_str() == Some(STATELESS_VERSION)))
}

/// A request as the stateless revision sends it: its body with `params._meta` (version, the
/// client capabilities, our client info), and the method and tool name its headers repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stateless {
    pub body: String,
    pub method: String,
    /// `params.name` of a `tools/call`.
    pub name: Option<String>,
}

/// Makes `body` (one of this module's requests) a stateless one. `Err` when it is not a request
/// with an object `params`.
pub fn stateless_request(body: &str, client_version: &str) -> Result<Stateless, String> {
    let mut v: Value = serde_json::from_str(body).map_err(|_| "not a JSON request".to_string())?;
    let method = v
        .get("method")
        .and_then(Value::as_str)
        .ok_or("a request without a method")?
        .to_string();
    let params = v
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .ok_or("a request without params")?;
    let name = (method == "tools/call")
        .then(|| params.get("name").and_then(Value::as_str).map(str::to_string))
        .flatten();
    // Keys the request already carries (its trace context) stay beside the revision's own.
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(META_PROTOCOL_VERSION.into(), json!(STATELESS_VERSION));
        meta.insert(META_CLIENT_CAPABILITIES.into(), client_capabilities());
        meta.insert(
            META_CLIENT_INFO.into(),
            json!({"name": "mur", "version": client_version}),
        );
    }
    Ok(Stateless {
        body: v.to_string(),
        method,
        name,
    })
}

/// The tasks extension's identifier, declared in each stateless request's client capabilities
/// (`wire::mcp_tasks` reads what it brings).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// What a stateless request says the client can do: the tasks extension (a call may be
/// answered with a task handle, polled until it ends), and form elicitation (a question for a
/// person, asked the way a member asks one).
pub fn client_capabilities() -> Value {
    json!({
        "elicitation": {"form": {}},
        "extensions": {TASKS_EXTENSION: {}},
    })
}

/// The `initialize` request: our [`PROTOCOL_VERSION`], `clientInfo` `{name: "mur", version}`,
/// and no capabilities (no sampling, roots or elicitation are offered to the server).
pub fn initialize_request(id: u64, client_version: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mur", "version": client_version},
        },
    })
    .to_string()
}

/// The `notifications/initialized` notification that ends the handshake.
pub fn initialized_notification() -> String {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()
}

/// A `tools/list` request, from the start or from a page's `nextCursor`.
pub fn tools_list_request(id: u64, cursor: Option<&str>) -> String {
    let params = match cursor {
        Some(c) => json!({"cursor": c}),
        None => json!({}),
    };
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}).to_string()
}

/// A `tools/call` request. `arguments` must be a JSON object (a tool's input schema is an object
/// schema); `null` stands for no arguments. `Err` says what else it was.
pub fn tools_call_request(id: u64, name: &str, arguments: &Value) -> Result<String, String> {
    let arguments = match arguments {
        Value::Null => json!({}),
        Value::Object(_) => arguments.clone(),
        other => return Err(format!("the arguments must be a JSON object, not {}", kind(other))),
    };
    Ok(json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    })
    .to_string())
}

/// `notifications/cancelled` for request `id`: sent when a call is given up on, so the server
/// may stop working on it.
pub fn cancelled_notification(id: u64, reason: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": reason},
    })
    .to_string()
}

/// The response to request `id` in `message`, a JSON-RPC message or a batch of them: `None` when
/// it holds none (a notification, a request from the server, another request's response);
/// `Some(Err)` for an error response, as `error <code>: <message>`.
pub fn response_for(message: &Value, id: u64) -> Option<Result<Value, String>> {
    if let Value::Array(batch) = message {
        // 2025-03-26 let a server batch messages; later versions dropped batching.
        // One level: a batch holds messages, not batches.
        return batch.iter().filter(|m| m.is_object()).find_map(|m| response_for(m, id));
    }
    let m = message.as_object()?;
    if m.get("id").and_then(Value::as_u64) != Some(id) || m.contains_key("method") {
        return None;
    }
    if let Some(result) = m.get("result") {
        return Some(Ok(result.clone()));
    }
    let error = m.get("error")?;
    Some(Err(error_text(error)))
}

/// `error <code>: <message>` of a JSON-RPC error object, the message cut to [`MAX_ERROR_TEXT`].
pub(crate) fn error_text(error: &Value) -> String {
    let code = error.get("code").and_then(Value::as_i64);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let mut text = match code {
        Some(c) => format!("error {c}"),
        None => "an error without a code".to_string(),
    };
    if !message.is_empty() {
        text.push_str(": ");
        text.push_str(head(message, MAX_ERROR_TEXT));
    }
    text
}

/// The response to request `id` in a whole `application/json` body. `Err` when the body is not
/// JSON or holds no response to `id`.
pub fn read_json_body(body: &[u8], id: u64) -> Result<Value, String> {
    let message: Value = serde_json::from_slice(body).map_err(|_| {
        let text = String::from_utf8_lossy(body);
        format!("the reply is not JSON: {:?}", head(&text, 200))
    })?;
    match response_for(&message, id) {
        Some(r) => r,
        None => Err(format!("the reply holds no response to request {id}")),
    }
}

/// What `initialize` settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialized {
    /// One of [`SUPPORTED_VERSIONS`]: sent as `MCP-Protocol-Version` from then on.
    pub protocol_version: &'static str,
    /// `serverInfo.name`, cut to [`MAX_ERROR_TEXT`]; empty when absent.
    pub server_name: String,
    /// Whether the server declared the `tools` capability.
    pub has_tools: bool,
}

/// Reads an `initialize` result. `Err` when the server answered a version this client does not
/// speak (naming both), or no version at all.
pub fn initialize_result(result: &Value) -> Result<Initialized, String> {
    let Some(version) = result.get("protocolVersion").and_then(Value::as_str) else {
        return Err("the initialize result names no protocolVersion".to_string());
    };
    let Some(&ours) = SUPPORTED_VERSIONS.iter().find(|v| **v == version) else {
        return Err(format!(
            "the server speaks MCP version {:?}; this client speaks {}",
            head(version, 64),
            SUPPORTED_VERSIONS.join(", ")
        ));
    };
    let server_name = result
        .pointer("/serverInfo/name")
        .and_then(Value::as_str)
        .map(|n| head(n, MAX_ERROR_TEXT).to_string())
        .unwrap_or_default();
    Ok(Initialized {
        protocol_version: ours,
        server_name,
        has_tools: result.pointer("/capabilities/tools").is_some(),
    })
}

/// A tool the server lists, bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    pub name: String,
    /// Cut to [`MAX_DESCRIPTION`]; empty when the server gave none.
    pub description: String,
    /// A JSON object of at most [`MAX_SCHEMA`] bytes (compact).
    pub input_schema: Value,
}

/// A listed tool that cannot be offered to a model, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    pub name: String,
    pub why: String,
}

/// One page of `tools/list`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolsPage {
    pub tools: Vec<McpTool>,
    pub unusable: Vec<Unusable>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Reads a `tools/list` result. Entries without a string name, or with a name over
/// [`MAX_TOOL_NAME`] bytes, are left out: nothing could call them by name. `Err` when there is no
/// `tools` array or the cursor is over [`MAX_CURSOR`] bytes.
pub fn tools_page(result: &Value) -> Result<ToolsPage, String> {
    let Some(entries) = result.get("tools").and_then(Value::as_array) else {
        return Err("the tools/list result has no tools array".to_string());
    };
    let mut page = ToolsPage::default();
    for entry in entries {
        let Some(name) = entry.get("name").and_then(Value::as_str) else {
            continue;
        };
        if name.is_empty() || name.len() > MAX_TOOL_NAME {
            continue;
        }
        let unusable = |why: String| Unusable {
            name: name.to_string(),
            why,
        };
        let input_schema = match entry.get("inputSchema") {
            Some(s @ Value::Object(_)) => s,
            Some(other) => {
                page.unusable
                    .push(unusable(format!("its input schema is {}, not an object", kind(other))));
                continue;
            }
            None => {
                page.unusable.push(unusable("it has no input schema".to_string()));
                continue;
            }
        };
        let schema_bytes = input_schema.to_string().len();
        if schema_bytes > MAX_SCHEMA {
            page.unusable.push(unusable(format!(
                "its input schema is {schema_bytes} bytes, more than {MAX_SCHEMA}"
            )));
            continue;
        }
        let description = entry.get("description").and_then(Value::as_str).unwrap_or("");
        page.tools.push(McpTool {
            name: name.to_string(),
            description: head(description, MAX_DESCRIPTION).to_string(),
            input_schema: input_schema.clone(),
        });
    }
    page.next_cursor = match result.get("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if c.len() > MAX_CURSOR => {
            return Err(format!(
                "the tools/list cursor is {} bytes, more than {MAX_CURSOR}",
                c.len()
            ));
        }
        // An empty cursor would restart the listing: read as the last page.
        Some(Value::String(c)) if c.is_empty() => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(other) => return Err(format!("the tools/list cursor is {}, not a string", kind(other))),
    };
    Ok(page)
}

/// A `tools/call` result as a model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// The text content items, one per line; other kinds in brackets (`[image/png, 1234
    /// bytes]`); `structuredContent` as JSON when there is no text. Cut to the bound the reader
    /// was given, with a last line saying so.
    pub text: String,
    /// The tool reported a failure (`isError`): the text says what went wrong.
    pub is_error: bool,
}

/// Reads a `tools/call` result, its text cut to `max_text` bytes (plus the note that says so).
pub fn call_result(result: &Value, max_text: usize) -> Result<CallResult, String> {
    if !result.is_object() {
        return Err(format!("the tools/call result is {}, not an object", kind(result)));
    }
    let mut text = Bounded::new(max_text);
    if let Some(items) = result.get("content").and_then(Value::as_array) {
        for item in items {
            text.item(&content_text(item));
        }
    }
    if text.total == 0
        && let Some(s) = result.get("structuredContent").filter(|s| !s.is_null())
    {
        text.item(&s.to_string());
    }
    Ok(CallResult {
        text: text.finish(),
        is_error: result.get("isError").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// One content item as text: a text item's text, an embedded text resource's text, or a short
/// bracketed description of anything else.
fn content_text(item: &Value) -> String {
    let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
    let label = |s: &str| head(s, 128).to_string();
    match field("type") {
        "text" => field("text").to_string(),
        kind @ ("image" | "audio") => {
            let mime = if field("mimeType").is_empty() {
                kind.to_string()
            } else {
                label(field("mimeType"))
            };
            format!("[{mime}, {} bytes]", base64_decoded_len(field("data")))
        }
        "resource_link" => format!("[resource link: {}]", label(field("uri"))),
        "resource" => {
            let r = item.get("resource").unwrap_or(&Value::Null);
            let get = |k: &str| r.get(k).and_then(Value::as_str);
            match (get("text"), get("blob")) {
                (Some(t), _) => t.to_string(),
                (None, Some(b)) => format!(
                    "[resource {}, {}, {} bytes]",
                    label(get("uri").unwrap_or("")),
                    label(get("mimeType").unwrap_or("binary")),
                    base64_decoded_len(b)
                ),
                (None, None) => format!("[resource {}]", label(get("uri").unwrap_or(""))),
            }
        }
        "" => "[content without a type]".to_string(),
        other => format!("[{} content]", label(other)),
    }
}

/// Bytes that `data` (base64) decodes to, without decoding it.
fn base64_decoded_len(data: &str) -> usize {
    let data = data.trim_end_matches('=');
    data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1)
}

/// Text built from items, one per line, never holding more than its bound.
struct Bounded {
    text: String,
    max: usize,
    /// Bytes the whole text would have had.
    total: usize,
}

impl Bounded {
    fn new(max: usize) -> Bounded {
        Bounded {
            text: String::new(),
            max,
            total: 0,
        }
    }

    fn item(&mut self, s: &str) {
        let sep = if self.total > 0 { "\n" } else { "" };
        self.total += sep.len() + s.len();
        for piece in [sep, s] {
            let room = self.max - self.text.len();
            let kept = head(piece, room);
            self.text.push_str(kept);
            if kept.len() < piece.len() {
                // Cut (maybe short of the bound, at a character): nothing after it may follow,
                // or the text would not be the result's first bytes.
                self.max = self.text.len();
            }
        }
    }

    fn finish(mut self) -> String {
        if self.total > self.text.len() {
            self.text.push_str(&format!(
                "\n[the result was {} bytes; cut to the first {}]",
                self.total,
                self.text.len()
            ));
        }
        self.text
    }
}

/// Whether `id` may be kept and sent back as `Mcp-Session-Id`: 1 to [`MAX_SESSION_ID`] visible
/// ASCII characters, as the specification asks.
pub fn session_id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_SESSION_ID && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// A JSON value's kind, for error texts (never its content).
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bodies() {
        let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let table: &[(String, Value)] = &[
            (
                initialize_request(1, "0.1.0"),
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "mur", "version": "0.1.0"}}}),
            ),
            (
                initialized_notification(),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            ),
            (
                tools_list_request(2, None),
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
            ),
            (
                tools_list_request(3, Some("p2")),
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "p2"}}),
            ),
            (
                tools_call_request(4, "add", &json!({"a": 1})).unwrap(),
                json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "add", "arguments": {"a": 1}}}),
            ),
            (
                tools_call_request(5, "fail", &Value::Null).unwrap(),
                json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "fail", "arguments": {}}}),
            ),
            (
                cancelled_notification(6, "timed out"),
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 6, "reason": "timed out"}}),
            ),
        ];
        for (body, want) in table {
            assert_eq!(&parse(body), want, "{body}");
        }
        for bad in [json!([1]), json!("x"), json!(3), json!(true)] {
            let e = tools_call_request(1, "add", &bad).unwrap_err();
            assert!(e.starts_with("the arguments must be a JSON object, not "), "{e}");
        }
    }

    #[test]
    fn responses_are_matched_by_id() {
        let table: &[(Value, Option<Result<Value, &str>>)] = &[
            (
                json!({"jsonrpc": "2.0", "id": 7, "result": {"x": 1}}),
                Some(Ok(json!({"x": 1}))),
            ),
            (
                json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "Unknown tool"}}),
                Some(Err("error -32602: Unknown tool")),
            ),
            (
                json!({"jsonrpc": "2.0", "id": 7, "error": {"message": "odd"}}),
                Some(Err("an error without a code: odd")),
            ),
            (
                json!({"jsonrpc": "2.0", "id": 7, "error": {"code": 1}}),
                Some(Err("error 1")),
            ),
            // Another request's response, a notification, a request from the server with our id.
            (json!({"jsonrpc": "2.0", "id": 8, "result": {}}), None),
            (
                json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}),
                None,
            ),
            (json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}), None),
            // A string id is another request's, even when it spells ours.
            (json!({"jsonrpc": "2.0", "id": "7", "result": {}}), None),
            (json!({"jsonrpc": "2.0", "id": 7}), None),
            (
                json!([{"id": 1, "result": 1}, {"id": 7, "result": 2}]),
                Some(Ok(json!(2))),
            ),
            (json!("garbage"), None),
            // A batch inside a batch is not one.
            (json!([[{"id": 7, "result": 1}]]), None),
        ];
        for (message, want) in table {
            let got = response_for(message, 7);
            let want = want.clone().map(|r| r.map_err(str::to_string));
            assert_eq!(got, want, "{message}");
        }
        let long = "e".repeat(MAX_ERROR_TEXT * 3);
        let e = response_for(&json!({"id": 7, "error": {"code": -1, "message": long}}), 7)
            .unwrap()
            .unwrap_err();
        assert_eq!(e.len(), "error -1: ".len() + MAX_ERROR_TEXT);
    }

    #[test]
    fn json_bodies() {
        assert_eq!(
            read_json_body(br#"{"id":3,"result":{"ok":true}}"#, 3),
            Ok(json!({"ok": true}))
        );
        let table: &[(&[u8], &str)] = &[
            (b"<html>oops</html>", "the reply is not JSON: \"<html>oops</html>\""),
            (b"", "the reply is not JSON: \"\""),
            (br#"{"id":4,"result":{}}"#, "the reply holds no response to request 3"),
            (
                br#"{"id":3,"error":{"code":-32600,"message":"no"}}"#,
                "error -32600: no",
            ),
        ];
        for (body, want) in table {
            assert_eq!(read_json_body(body, 3), Err(want.to_string()));
        }
        let huge = vec![b'x'; 10_000];
        assert!(read_json_body(&huge, 3).unwrap_err().len() < 260);
    }

    #[test]
    fn initialize_accepts_only_the_versions_spoken() {
        for v in SUPPORTED_VERSIONS {
            let got = initialize_result(&json!({"protocolVersion": v, "capabilities": {"tools": {}},
                "serverInfo": {"name": "calc", "version": "1"}}))
            .unwrap();
            assert_eq!(
                got,
                Initialized {
                    protocol_version: v,
                    server_name: "calc".into(),
                    has_tools: true
                }
            );
        }
        let table: &[(Value, &str)] = &[
            (
                json!({"protocolVersion": "2024-11-05"}),
                "the server speaks MCP version \"2024-11-05\"; this client speaks 2025-11-25, 2025-06-18, 2025-03-26",
            ),
            (
                json!({"protocolVersion": "2026-07-28"}),
                "the server speaks MCP version \"2026-07-28\"; this client speaks 2025-11-25, 2025-06-18, 2025-03-26",
            ),
            (
                json!({"protocolVersion": 5}),
                "the initialize result names no protocolVersion",
            ),
            (json!({}), "the initialize result names no protocolVersion"),
        ];
        for (result, want) in table {
            assert_eq!(initialize_result(result), Err(want.to_string()), "{result}");
        }
        let long = initialize_result(&json!({"protocolVersion": "v".repeat(5000)})).unwrap_err();
        assert!(long.len() < 200, "{long}");
        let bare = initialize_result(&json!({"protocolVersion": "2025-06-18"})).unwrap();
        assert_eq!((bare.server_name.as_str(), bare.has_tools), ("", false));
    }

    #[test]
    fn tool_pages_are_bounded() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let big_schema = json!({"type": "object", "description": "s".repeat(MAX_SCHEMA)});
        let page = tools_page(&json!({
            "tools": [
                {"name": "add", "description": "Adds.", "inputSchema": schema},
                {"name": "bare", "inputSchema": {}},
                {"name": "long_desc", "description": "d".repeat(MAX_DESCRIPTION + 10), "inputSchema": {}},
                {"name": "n".repeat(MAX_TOOL_NAME + 1), "inputSchema": {}},
                {"name": "", "inputSchema": {}},
                {"description": "no name", "inputSchema": {}},
                {"name": 5, "inputSchema": {}},
                "not an object",
                {"name": "huge", "inputSchema": big_schema},
                {"name": "no_schema"},
                {"name": "list_schema", "inputSchema": []},
            ],
            "nextCursor": "page-2",
        }))
        .unwrap();
        let names: Vec<&str> = page.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["add", "bare", "long_desc"]);
        assert_eq!(page.tools[0].description, "Adds.");
        assert_eq!(page.tools[0].input_schema, schema);
        assert_eq!(page.tools[1].description, "");
        assert_eq!(page.tools[2].description.len(), MAX_DESCRIPTION);
        let unusable: Vec<(&str, &str)> = page
            .unusable
            .iter()
            .map(|u| (u.name.as_str(), u.why.as_str()))
            .collect();
        let huge_why = format!(
            "its input schema is {} bytes, more than {MAX_SCHEMA}",
            big_schema.to_string().len()
        );
        assert_eq!(
            unusable,
            [
                ("huge", huge_why.as_str()),
                ("no_schema", "it has no input schema"),
                ("list_schema", "its input schema is an array, not an object"),
            ]
        );
        assert_eq!(page.next_cursor.as_deref(), Some("page-2"));

        // (result, next cursor or the error)
        let table: &[(Value, Result<Option<&str>, String>)] = &[
            (json!({"tools": []}), Ok(None)),
            (json!({"tools": [], "nextCursor": null}), Ok(None)),
            (json!({"tools": [], "nextCursor": ""}), Ok(None)),
            (json!({"tools": [], "nextCursor": "c"}), Ok(Some("c"))),
            (
                json!({"tools": [], "nextCursor": 2}),
                Err("the tools/list cursor is a number, not a string".into()),
            ),
            (
                json!({"tools": [], "nextCursor": "c".repeat(MAX_CURSOR + 1)}),
                Err(format!("the tools/list cursor is 1025 bytes, more than {MAX_CURSOR}")),
            ),
            (json!({}), Err("the tools/list result has no tools array".into())),
            (
                json!({"tools": {"add": {}}}),
                Err("the tools/list result has no tools array".into()),
            ),
        ];
        for (result, want) in table {
            let got = tools_page(result).map(|p| p.next_cursor);
            assert_eq!(got, want.clone().map(|c| c.map(str::to_string)), "{result}");
        }
    }

    #[test]
    fn call_results_read_as_text() {
        // (result, text, is_error)
        let table: &[(Value, &str, bool)] = &[
            (
                json!({"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}, "isError": false}),
                "3",
                false,
            ),
            (
                json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
                "boom",
                true,
            ),
            (
                json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
                "a\nb",
                false,
            ),
            (
                json!({"content": [{"type": "image", "mimeType": "image/png", "data": "AAAA"}]}),
                "[image/png, 3 bytes]",
                false,
            ),
            (
                json!({"content": [{"type": "audio", "mimeType": "audio/wav", "data": "AAAAAA=="}]}),
                "[audio/wav, 4 bytes]",
                false,
            ),
            (
                json!({"content": [{"type": "image", "data": "AAA="}]}),
                "[image, 2 bytes]",
                false,
            ),
            (
                json!({"content": [{"type": "resource_link", "uri": "file:///a.txt", "name": "a"}]}),
                "[resource link: file:///a.txt]",
                false,
            ),
            (
                json!({"content": [{"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}}]}),
                "inside",
                false,
            ),
            (
                json!({"content": [{"type": "resource", "resource": {"uri": "file:///b", "mimeType": "application/pdf", "blob": "AAAAAAAA"}}]}),
                "[resource file:///b, application/pdf, 6 bytes]",
                false,
            ),
            (json!({"content": [{"type": "hologram"}]}), "[hologram content]", false),
            (
                json!({"content": [{"text": "untyped"}]}),
                "[content without a type]",
                false,
            ),
            // No text: the structured content, as JSON.
            (
                json!({"content": [], "structuredContent": {"b": [1, 2], "a": "x"}}),
                r#"{"a":"x","b":[1,2]}"#,
                false,
            ),
            (json!({"structuredContent": {"n": 1}}), r#"{"n":1}"#, false),
            (json!({}), "", false),
            (json!({"content": "nope", "isError": "yes"}), "", false),
        ];
        for (result, text, is_error) in table {
            let got = call_result(result, MAX_RESULT_TEXT).unwrap();
            assert_eq!((got.text.as_str(), got.is_error), (*text, *is_error), "{result}");
        }
        assert_eq!(
            call_result(&json!([1]), 10),
            Err("the tools/call result is an array, not an object".into())
        );
    }

    #[test]
    fn call_result_text_is_cut_at_the_bound() {
        // (items, bound, text)
        let table: &[(&[&str], usize, &str)] = &[
            (&["abcdef"], 6, "abcdef"),
            (&["abcdef"], 4, "abcd\n[the result was 6 bytes; cut to the first 4]"),
            (&["ab", "cd"], 4, "ab\nc\n[the result was 5 bytes; cut to the first 4]"),
            (&["ab", "cd"], 2, "ab\n[the result was 5 bytes; cut to the first 2]"),
            // A cut never splits a character: "é" is two bytes.
            (&["aé"], 2, "a\n[the result was 3 bytes; cut to the first 1]"),
            (&["x"], 0, "\n[the result was 1 bytes; cut to the first 0]"),
            // A character that does not fit ends the text: a shorter item after it does not follow.
            (
                &["a", "😀", "b"],
                4,
                "a\n\n[the result was 8 bytes; cut to the first 2]",
            ),
        ];
        for (items, max, want) in table {
            let content: Vec<Value> = items.iter().map(|t| json!({"type": "text", "text": t})).collect();
            let got = call_result(&json!({ "content": content }), *max).unwrap();
            assert_eq!(got.text, *want, "{items:?} at {max}");
        }
        let many: Vec<Value> = (0..10_000).map(|_| json!({"type": "text", "text": "word"})).collect();
        let got = call_result(&json!({ "content": many }), 100).unwrap();
        assert!(got.text.len() < 160, "{}", got.text);
    }

    #[test]
    fn session_ids() {
        let table: &[(&str, bool)] = &[
            ("b2159affacc94b4b8d372d7c6b096ca6", true),
            ("a-b_c.d~!", true),
            ("", false),
            ("has space", false),
            ("tab\t", false),
            ("é", false),
            ("line\nbreak", false),
        ];
        for (id, ok) in table {
            assert_eq!(session_id_ok(id), *ok, "{id:?}");
        }
        assert!(session_id_ok(&"a".repeat(MAX_SESSION_ID)));
        assert!(!session_id_ok(&"a".repeat(MAX_SESSION_ID + 1)));
    }

    #[test]
    fn stateless_requests_carry_their_version_in_meta_and_name_their_method() {
        let call = tools_call_request(7, "add", &json!({"a": 1})).unwrap();
        let st = stateless_request(&call, "1.2.3").unwrap();
        assert_eq!((st.method.as_str(), st.name.as_deref()), ("tools/call", Some("add")));
        let v: Value = serde_json::from_str(&st.body).unwrap();
        assert_eq!(v["params"]["_meta"][META_PROTOCOL_VERSION], STATELESS_VERSION);
        assert_eq!(
            v["params"]["_meta"][META_CLIENT_CAPABILITIES],
            json!({"elicitation": {"form": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
        );
        // A trace context already in _meta stays.
        let mut traced: Value = serde_json::from_str(&call).unwrap();
        traced["params"]["_meta"] = json!({"traceparent": "00-a-b-01"});
        let v: Value = serde_json::from_str(&stateless_request(&traced.to_string(), "1.2.3").unwrap().body).unwrap();
        assert_eq!(v["params"]["_meta"]["traceparent"], "00-a-b-01");
        assert_eq!(v["params"]["_meta"][META_PROTOCOL_VERSION], STATELESS_VERSION);
        assert_eq!(
            v["params"]["_meta"][META_CLIENT_INFO],
            json!({"name": "mur", "version": "1.2.3"})
        );
        assert_eq!(
            (&v["params"]["name"], &v["params"]["arguments"], &v["id"]),
            (&json!("add"), &json!({"a": 1}), &json!(7))
        );
        let list = stateless_request(&tools_list_request(8, Some("c")), "1").unwrap();
        assert_eq!((list.method.as_str(), list.name), ("tools/list", None));
        let discover: Value = serde_json::from_str(&discover_request(1, "1")).unwrap();
        assert_eq!(discover["method"], "server/discover");
        assert_eq!(discover["params"]["_meta"][META_PROTOCOL_VERSION], STATELESS_VERSION);
        assert!(
            stateless_request(&initialized_notification(), "1").is_err(),
            "a notification has no params"
        );
        assert_eq!(
            discover_result(&json!({"supportedVersions": ["2025-11-25", "2026-07-28"]})),
            Ok(true)
        );
        assert_eq!(
            discover_result(&json!({"supportedVersions": ["2025-11-25"]})),
            Ok(false)
        );
        assert!(discover_result(&json!({"protocolVersion": "2025-11-25"})).is_err());
    }
}
