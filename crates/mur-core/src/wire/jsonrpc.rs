//! JSON-RPC 2.0 framing for the door (docs/reference/door.md#request-pipeline steps 7–10,
//! docs/reference/door.md#errors): decoding a request body, the `A2A-Version` rule, method
//! resolution, and the reply and error bodies.
//!
//! Pure: bytes and `serde_json` only, so it is tested table-driven without a server. Every body is
//! compact with keys in ascending byte order at every depth (docs/reference/cli.md#conventions);
//! `serde_json`'s `Map` is a `BTreeMap` in this build (no `preserve_order`), which gives exactly
//! that order.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// A request that passed steps 7 and 8.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// A string, a number or null, echoed in the reply.
    pub id: Value,
    pub method: String,
    /// As sent; `None` when the member was absent (JSON-RPC lets a client omit `params`).
    pub params: Option<Value>,
}

/// A JSON-RPC error reply: the code, its message, and for A2A errors the `ErrorInfo` data.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const METHOD_NOT_FOUND: i32 = -32601;
pub const INVALID_PARAMS: i32 = -32602;
pub const INTERNAL_ERROR: i32 = -32603;

/// The A2A errors a door emits (docs/reference/door.md#errors), with their code, message and
/// `ErrorInfo` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum A2aError {
    TaskNotFound,
    TaskNotCancelable,
    UnsupportedOperation,
    ContentTypeNotSupported,
    VersionNotSupported,
}

impl A2aError {
    pub fn code(self) -> i32 {
        match self {
            A2aError::TaskNotFound => -32001,
            A2aError::TaskNotCancelable => -32002,
            A2aError::UnsupportedOperation => -32004,
            A2aError::ContentTypeNotSupported => -32005,
            A2aError::VersionNotSupported => -32009,
        }
    }

    /// `Task not found` is fixed by docs/reference/door.md#errors; the other texts are ours.
    pub fn message(self) -> &'static str {
        match self {
            A2aError::TaskNotFound => "Task not found",
            A2aError::TaskNotCancelable => "Task cannot be canceled",
            A2aError::UnsupportedOperation => "This operation is not supported",
            A2aError::ContentTypeNotSupported => "Incompatible content types: a media type is not supported",
            A2aError::VersionNotSupported => "A2A protocol version not supported",
        }
    }

    /// The A2A error name in UPPER_SNAKE_CASE without `Error`, as A2A's ErrorInfo reasons are.
    pub fn reason(self) -> &'static str {
        match self {
            A2aError::TaskNotFound => "TASK_NOT_FOUND",
            A2aError::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            A2aError::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            A2aError::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            A2aError::VersionNotSupported => "VERSION_NOT_SUPPORTED",
        }
    }

    /// The error with `data:[ErrorInfo]`; `metadata` pairs are strings, as ErrorInfo's are.
    pub fn with(self, metadata: &[(&str, &str)]) -> RpcError {
        let meta: Map<String, Value> = metadata
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::String((*v).to_string())))
            .collect();
        RpcError {
            code: self.code(),
            message: self.message().to_string(),
            data: Some(json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "domain": "a2a-protocol.org",
                "metadata": meta,
                "reason": self.reason(),
            }])),
        }
    }

    /// `TaskNotFound` naming the id asked for.
    pub fn task_not_found(task_id: &str) -> RpcError {
        A2aError::TaskNotFound.with(&[("taskId", task_id)])
    }
}

impl RpcError {
    /// A plain JSON-RPC error (no data).
    pub fn plain(code: i32) -> RpcError {
        let message = match code {
            PARSE_ERROR => "Parse error",
            INVALID_REQUEST => "Invalid Request",
            METHOD_NOT_FOUND => "Method not found",
            _ => "Invalid params",
        };
        RpcError {
            code,
            message: message.to_string(),
            data: None,
        }
    }

    /// `-32603`: the door holds as many open replies and streams as it may [ours]; the same
    /// request may succeed once some have ended.
    pub fn too_many_open() -> RpcError {
        RpcError {
            code: INTERNAL_ERROR,
            message: "the door holds as many open replies and streams as it may; retry later".into(),
            data: None,
        }
    }

    pub fn invalid_params() -> RpcError {
        RpcError::plain(INVALID_PARAMS)
    }

    /// `-32602` naming the parameter at fault and why (A2A v1.0 §3.3.2 "Validation Errors":
    /// servers SHOULD say which parameter failed and why), as a `google.rpc.BadRequest` field
    /// violation, the shape A2A's gRPC binding uses for the same error.
    pub fn invalid_param(field: &str, description: &str) -> RpcError {
        RpcError {
            data: Some(json!([{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"description": description, "field": field}],
            }])),
            ..RpcError::plain(INVALID_PARAMS)
        }
    }
}

/// Steps 7 and 8. On failure the id to answer with (null unless the request carried a usable
/// one) comes with the error.
///
/// A well-formed request is read straight into its fields; anything else, and anything the
/// direct reading is unsure of, is decided by [`decode_via_value`], which is the definition.
/// The two agree on every input (a unit table and the `jsonrpc_decode` fuzz target check it).
pub fn decode(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    match decode_direct(body) {
        Some(request) => Ok(request),
        None => decode_via_value(body),
    }
}

/// The common case without a `Value` tree for the envelope. `None` whenever the answer is not
/// plainly an accepted request: a refusal's exact code and id are left to `decode_via_value`.
fn decode_direct(body: &[u8]) -> Option<Request> {
    // Unknown members are refused, not skipped: serde skips a value without checking it as
    // closely as it reads one (invalid UTF-8 inside passed), and the Value reading checks all.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope<'a> {
        #[serde(default, deserialize_with = "present")]
        id: Option<Value>,
        // Borrowed: an escaped "2.0" fails here and is read by the slow path.
        jsonrpc: Option<&'a str>,
        method: Option<String>,
        #[serde(default, deserialize_with = "present")]
        params: Option<Value>,
    }
    /// Tells a member sent as `null` (`Some(Null)`) from an absent one (`None`).
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
        <Value as serde::Deserialize>::deserialize(d).map(Some)
    }
    // A derived struct would also accept an array, read by position; a request is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    // Duplicate members, wrong types, trailing bytes: all errors here, all left to the slow path.
    let envelope: Envelope<'_> = serde_json::from_str(text).ok()?;
    let id = envelope
        .id
        .filter(|id| matches!(id, Value::String(_) | Value::Number(_) | Value::Null))?;
    if envelope.jsonrpc != Some("2.0") {
        return None;
    }
    Some(Request {
        id,
        method: envelope.method?,
        params: envelope.params,
    })
}

/// Steps 7 and 8 over a `serde_json::Value`: the definition [`decode`] answers by.
pub fn decode_via_value(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(body).map_err(|_| (Value::Null, RpcError::plain(PARSE_ERROR)))?;
    let invalid = |id: Value| (id, RpcError::plain(INVALID_REQUEST));
    let Value::Object(mut obj) = value else {
        return Err(invalid(Value::Null));
    };
    // Echo the id in the refusal when it is itself well-formed.
    let id = match obj.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => Some(id),
        Some(_) => return Err(invalid(Value::Null)),
        // A notification: A2A has none and HTTP needs a reply, so it is refused [ours].
        None => None,
    };
    let Some(id) = id else {
        return Err(invalid(Value::Null));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id));
    }
    let Some(Value::String(method)) = obj.remove("method") else {
        return Err(invalid(id));
    };
    Ok(Request {
        id,
        method,
        params: obj.remove("params"),
    })
}

/// Step 9: exactly one `A2A-Version` header, equal to `1.0` or `1.0.<digits>`.
pub fn version_ok(values: &[&[u8]]) -> bool {
    let [v] = values else {
        return false;
    };
    match v.strip_prefix(b"1.0") {
        Some([]) => true,
        Some([b'.', digits @ ..]) => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// Who must hold a method's scope (docs/reference/door.md#methods). A method's scope, when it has
/// one, is its wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeRule {
    /// A valid token suffices; the method is checked by no scope.
    TokenOnly,
    /// Held by formation tokens (`token::FORMATION_SCOPES`) and the operator token.
    Formation,
    /// Held by the operator token alone (`token::OPERATOR_SCOPES`).
    Operator,
}

/// Declares `Method` and its one table: each variant's wire name and scope rule sit on one line,
/// so a method cannot be recognised, served or called without both.
macro_rules! door_methods {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $rule:ident; )*) => {
        /// The methods a door recognises (step 10).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Method {
            $( $(#[$doc])* $variant, )*
        }

        impl Method {
            /// Every method, in declaration order.
            pub const ALL: &'static [Method] = &[$(Method::$variant),*];

            /// The wire name, as a request's `method` carries it and clients send it.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Method::$variant => $name, )*
                }
            }

            /// Who must hold the method's scope.
            pub const fn scope_rule(self) -> ScopeRule {
                match self {
                    $( Method::$variant => ScopeRule::$rule, )*
                }
            }
        }
    };
}

door_methods! {
    SendMessage = "SendMessage", Formation;
    SendStreamingMessage = "SendStreamingMessage", Operator;
    GetTask = "GetTask", Formation;
    CancelTask = "CancelTask", Formation;
    ListTasks = "ListTasks", Formation;
    SubscribeToTask = "SubscribeToTask", Formation;
    GetExtendedAgentCard = "GetExtendedAgentCard", TokenOnly;
    /// Recognised for scope purposes only; answers `-32601` once in scope [ours].
    WatchSession = "murmur.WatchSession", Operator;
    /// As `WatchSession`.
    StopSession = "murmur.StopSession", Operator;
    /// A2A v1.0 §3.1.7–3.1.10, the push-notification configuration methods.
    CreatePushConfig = "CreateTaskPushNotificationConfig", Operator;
    GetPushConfig = "GetTaskPushNotificationConfig", Operator;
    ListPushConfigs = "ListTaskPushNotificationConfigs", Operator;
    DeletePushConfig = "DeleteTaskPushNotificationConfig", Operator;
}

impl Method {
    pub fn resolve(name: &str) -> Option<Method> {
        // The singular spelling is an earlier name of the method, which the JS SDK still maps.
        if name == "ListTaskPushNotificationConfig" {
            return Some(Method::ListPushConfigs);
        }
        Method::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// The scope a credential needs (docs/reference/door.md#methods: the method's name); `None` for
    /// methods that need only a valid token, or that are refused before the scope step.
    pub fn scope(self) -> Option<&'static str> {
        match self.scope_rule() {
            ScopeRule::TokenOnly => None,
            ScopeRule::Formation | ScopeRule::Operator => Some(self.name()),
        }
    }
}

/// `{"id":…,"jsonrpc":"2.0","result":…}`.
pub fn result_value(id: &Value, result: Value) -> Value {
    envelope(id, "result", result)
}

/// `{"error":{"code":…,"data"?:…,"message":…},"id":…,"jsonrpc":"2.0"}`.
pub fn error_value(id: &Value, err: &RpcError) -> Value {
    let mut e = Map::new();
    e.insert("code".into(), Value::from(err.code));
    if let Some(d) = &err.data {
        e.insert("data".into(), d.clone());
    }
    e.insert("message".into(), Value::String(err.message.clone()));
    envelope(id, "error", Value::Object(e))
}

/// `{"id":…,"jsonrpc":"2.0","result":…}` written straight from a typed result: the same bytes as
/// [`to_bytes`] of [`result_value`], without building a `Value` tree first.
pub fn result_bytes<T: Serialize>(id: &Value, result: &T) -> Vec<u8> {
    #[derive(Serialize)]
    struct Envelope<'a, T> {
        id: &'a Value,
        jsonrpc: &'static str,
        result: &'a T,
    }
    let reply = Envelope {
        id,
        jsonrpc: "2.0",
        result,
    };
    // Room for a typical task reply, so the buffer is not regrown while writing.
    let mut out = Vec::with_capacity(512);
    // The results written this way are plain structs with string keys: serialising cannot fail.
    let _ = serde_json::to_writer(&mut out, &reply);
    out
}

/// The JSON-RPC envelope around `body`.
fn envelope(id: &Value, key: &str, body: Value) -> Value {
    object([("id", id.clone()), ("jsonrpc", Value::from("2.0")), (key, body)])
}

/// A JSON object of values moved in. `json!` with a `Value` inside copies that whole tree
/// through `to_value`; replies that wrap a task (or a page of them) use this instead.
pub fn object<const N: usize>(members: [(&str, Value); N]) -> Value {
    Value::Object(members.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// Compact bytes of a JSON value.
pub fn to_bytes(v: &Value) -> Vec<u8> {
    // Serialising a `Value` to memory cannot fail (its map keys are strings).
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_refuses_in_step_order() {
        let table: &[(&str, Value, i32)] = &[
            ("", Value::Null, -32700),
            ("{", Value::Null, -32700),
            ("nul", Value::Null, -32700),
            ("[]", Value::Null, -32600),
            (
                "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"GetTask\"}]",
                Value::Null,
                -32600,
            ),
            ("\"x\"", Value::Null, -32600),
            ("{\"jsonrpc\":\"2.0\",\"method\":\"GetTask\"}", Value::Null, -32600),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"GetTask\"}",
                Value::Null,
                -32600,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"GetTask\"}",
                Value::Null,
                -32600,
            ),
            (
                "{\"jsonrpc\":\"1.0\",\"id\":7,\"method\":\"GetTask\"}",
                json!(7),
                -32600,
            ),
            ("{\"id\":\"a\",\"method\":\"GetTask\"}", json!("a"), -32600),
            ("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":5}", json!("a"), -32600),
            ("{\"jsonrpc\":\"2.0\",\"id\":\"a\"}", json!("a"), -32600),
        ];
        for (body, id, code) in table {
            let (got_id, err) = decode(body.as_bytes()).expect_err(body);
            assert_eq!((&got_id, err.code), (id, *code), "{body}");
        }
        let r = decode(br#"{"jsonrpc":"2.0","id":null,"method":"GetTask","params":[1]}"#).expect("ok");
        assert_eq!(
            r,
            Request {
                id: Value::Null,
                method: "GetTask".into(),
                params: Some(json!([1]))
            }
        );
        let r = decode(br#"{"jsonrpc":"2.0","id":1.5,"method":"X"}"#).expect("ok");
        assert_eq!((r.id, r.params), (json!(1.5), None));
    }

    #[test]
    fn version_header_rule() {
        let table: &[(&[&[u8]], bool)] = &[
            (&[b"1.0"], true),
            (&[b"1.0.0"], true),
            (&[b"1.0.12"], true),
            (&[], false),
            (&[b"1.0", b"1.0"], false),
            (&[b"1.0."], false),
            (&[b"1.0.x"], false),
            (&[b"1.0.1.2"], false),
            (&[b"1.1"], false),
            (&[b"0.3"], false),
            (&[b"1"], false),
            (&[b" 1.0"], false),
            (&[b"1.00"], false),
        ];
        for (values, ok) in table {
            assert_eq!(version_ok(values), *ok, "{values:?}");
        }
    }

    #[test]
    fn the_direct_reading_agrees_with_the_value_reading() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"tsk_1"}}"#,
            r#"  {"id":"a","jsonrpc":"2.0","method":"ListTasks"}"#,
            r#"{"id":null,"jsonrpc":"2.0","method":"ListTasks","params":null}"#,
            r#"{"id":1.5e3,"jsonrpc":"2.0","method":"X","params":[1,2],"extra":{"deep":[[]]}}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"GetTask"}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"GetTask"}"#,
            r#"{"id":1,"id":2,"jsonrpc":"2.0","method":"GetTask"}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"A","method":"B"}"#,
            r#"{"id":true,"jsonrpc":"2.0","method":"GetTask"}"#,
            r#"{"id":{},"jsonrpc":"2.0","method":"GetTask"}"#,
            r#"{"jsonrpc":"2.0","method":"GetTask"}"#,
            r#"{"id":1,"jsonrpc":"1.0","method":"GetTask"}"#,
            r#"{"id":1,"jsonrpc":null,"method":"GetTask"}"#,
            r#"{"id":1,"jsonrpc":2,"method":"GetTask"}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":null}"#,
            r#"{"id":1,"jsonrpc":"2.0","method":7}"#,
            r#"{"id":1,"jsonrpc":"2.0"}"#,
            r#"[1,"2.0","GetTask",{}]"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"GetTask"} x"#,
            r#"{"id":1,"jsonrpc":"2.0","method":"GetTask""#,
            "\u{c}{}",
            "",
            "null",
        ];
        // The well-formed ones take the direct path (else it would be dead weight).
        for body in &bodies[..3] {
            assert!(decode_direct(body.as_bytes()).is_some(), "{body}");
        }
        for body in bodies {
            let via_value = decode_via_value(body.as_bytes()).map_err(|(id, e)| (id, e.code));
            let direct = decode(body.as_bytes()).map_err(|(id, e)| (id, e.code));
            assert_eq!(direct, via_value, "{body}");
        }
        // Found by the fuzz target: bytes inside a member the direct reading does not know.
        let mut invalid_utf8 = br#"{"jsonrpc":"2.0","id":"a","method":"ListTasks","x":{"k"#.to_vec();
        invalid_utf8.extend_from_slice(&[0xff; 10]);
        invalid_utf8.extend_from_slice(br#"e":1}}"#);
        let lone_surrogate = br#"{"jsonrpc":"2.0","id":"a","method":"ListTasks","x":"\ud800"}"#.to_vec();
        for body in [invalid_utf8, lone_surrogate] {
            assert_eq!(
                decode(&body).map_err(|(id, e)| (id, e.code)),
                decode_via_value(&body).map_err(|(id, e)| (id, e.code)),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        let deep = format!(
            "{{\"id\":1,\"jsonrpc\":\"2.0\",\"method\":\"X\",\"params\":{}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(
            decode(deep.as_bytes()).map_err(|(_, e)| e.code),
            decode_via_value(deep.as_bytes()).map_err(|(_, e)| e.code)
        );
    }

    #[test]
    fn typed_results_are_written_as_value_results_are() {
        for id in [json!("r"), json!(7), Value::Null] {
            let result = json!({"b": 1, "a": [true, null], "c": {"z": "ü\n", "y": 1.5}});
            assert_eq!(result_bytes(&id, &result), to_bytes(&result_value(&id, result.clone())));
        }
    }

    #[test]
    fn bodies_are_compact_and_sorted() {
        let e = A2aError::task_not_found("tsk_x");
        assert_eq!(
            String::from_utf8(to_bytes(&error_value(&json!(3), &e))).expect("utf8"),
            r#"{"error":{"code":-32001,"data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"a2a-protocol.org","metadata":{"taskId":"tsk_x"},"reason":"TASK_NOT_FOUND"}],"message":"Task not found"},"id":3,"jsonrpc":"2.0"}"#
        );
        assert_eq!(
            String::from_utf8(to_bytes(&error_value(&Value::Null, &RpcError::plain(PARSE_ERROR)))).expect("utf8"),
            r#"{"error":{"code":-32700,"message":"Parse error"},"id":null,"jsonrpc":"2.0"}"#
        );
        assert_eq!(
            String::from_utf8(to_bytes(&result_value(&json!("r"), json!({"b":1,"a":2})))).expect("utf8"),
            r#"{"id":"r","jsonrpc":"2.0","result":{"a":2,"b":1}}"#
        );
    }

    #[test]
    fn methods_and_scopes() {
        let table: &[(&str, Option<Method>, Option<&str>)] = &[
            ("SendMessage", Some(Method::SendMessage), Some("SendMessage")),
            (
                "SendStreamingMessage",
                Some(Method::SendStreamingMessage),
                Some("SendStreamingMessage"),
            ),
            ("GetTask", Some(Method::GetTask), Some("GetTask")),
            ("CancelTask", Some(Method::CancelTask), Some("CancelTask")),
            ("ListTasks", Some(Method::ListTasks), Some("ListTasks")),
            (
                "SubscribeToTask",
                Some(Method::SubscribeToTask),
                Some("SubscribeToTask"),
            ),
            ("GetExtendedAgentCard", Some(Method::GetExtendedAgentCard), None),
            (
                "murmur.WatchSession",
                Some(Method::WatchSession),
                Some("murmur.WatchSession"),
            ),
            (
                "murmur.StopSession",
                Some(Method::StopSession),
                Some("murmur.StopSession"),
            ),
            (
                "CreateTaskPushNotificationConfig",
                Some(Method::CreatePushConfig),
                Some("CreateTaskPushNotificationConfig"),
            ),
            (
                "GetTaskPushNotificationConfig",
                Some(Method::GetPushConfig),
                Some("GetTaskPushNotificationConfig"),
            ),
            (
                "ListTaskPushNotificationConfigs",
                Some(Method::ListPushConfigs),
                Some("ListTaskPushNotificationConfigs"),
            ),
            (
                "ListTaskPushNotificationConfig",
                Some(Method::ListPushConfigs),
                Some("ListTaskPushNotificationConfigs"),
            ),
            (
                "DeleteTaskPushNotificationConfig",
                Some(Method::DeletePushConfig),
                Some("DeleteTaskPushNotificationConfig"),
            ),
            ("tasks/pushNotificationConfig/set", None, None),
            ("message/send", None, None),
            ("sendMessage", None, None),
        ];
        for (name, m, scope) in table {
            assert_eq!(Method::resolve(name), *m, "{name}");
            assert_eq!(m.and_then(Method::scope), *scope, "{name}");
        }
    }
}
