//! The door against the A2A v1.0 specification (a2aproject/A2A `specification/a2a.proto` and
//! `docs/specification.md`) where it goes beyond docs/reference/door.md: parts other than text, a
//! complete agent card, the card's security scheme, and streaming methods refused before their
//! stream, with the official Python and JS SDKs' clients. Each test names the A2A sections it checks; docs/a2a.md says where the door goes beyond
//! docs/reference/door.md because of them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::door::{AUTH, Door, install, serve};
use crate::support::provider::{Provider, Reply, openai};
use crate::support::python::python_with;
use crate::support::toolchains::node_with;
use crate::support::{Sandbox, repo_root, stderr};

/// The pins the interop scripts are written against.
use crate::support::pins::{A2A_JS, A2A_PY as A2A_SDK, JSONSCHEMA};

const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";

/// A text part then a data part, as SendMessage params.
fn text_and_data(text: &str, data: Value) -> Value {
    json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [
        {"text": text},
        {"data": data, "mediaType": "application/json"},
    ]}})
}

/// A model capsule with a door, answering through `provider`.
fn install_model(sb: &Sandbox, name: &str, provider: &Provider, extra: &str) {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n{AUTH}{}{extra}",
        provider.url(),
        serve(2)
    );
    sb.install_manifest(name, &manifest);
}

/// A2A v1.0 §4.1.6 `Part` (a2a.proto `Part.content`: `data` is "arbitrary structured data as a
/// JSON value") and §3.1.1 SendMessage: a data part is accepted and reaches the capsule. A
/// component receives it in its task text as a fenced JSON block after the text parts (the echo
/// actor answers with exactly its task text); a model capsule sees the same block in its user
/// turn.
#[test]
fn data_parts_reach_a_component_and_a_model_as_fenced_json() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let data = json!({"b": [1, 2.5, null], "a": "x\n```", "nested": {"t": true}});
    let params = text_and_data("sum these", data.clone());
    let reply = d.rpc(Some(&d.op()), "SendMessage", params.clone());
    let task = &reply["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{reply}");
    let block = "```json\n{\"a\":\"x\\n```\",\"b\":[1,2.5,null],\"nested\":{\"t\":true}}\n```";
    let want = format!("sum these\n{block}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], want.as_str());
    // A data part alone, any JSON value.
    let only = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"data": [1, "two"]}]}});
    let reply = d.rpc(Some(&d.op()), "SendMessage", only);
    assert_eq!(
        reply["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        "```json\n[1,\"two\"]\n```"
    );

    let provider = Provider::start(vec![Reply::json(openai::text("six")).into()]);
    install_model(&sb, "adder", &provider, "");
    let m = Door::start(&sb, "adder", &[(KEY_VAR, "sk-it-0123456789")]);
    let reply = m.rpc(Some(&m.op()), "SendMessage", params);
    assert_eq!(
        reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{reply}"
    );
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].last_user_text().as_deref(), Some(want.as_str()));
}

/// A2A v1.0 §3.1.1 SendMessage errors: `ContentTypeNotSupportedError` "A Media Type provided in
/// the request's message parts is not supported by the agent" (-32005,
/// docs/reference/codes.md#w-ros-001), and §4.4.1 AgentCard `defaultInputModes`: file parts (`raw`,
/// `url`) are refused unless the manifest declares their media type in `exports.input_modes`, and
/// the card lists exactly what is accepted.
#[test]
fn file_parts_are_refused_unless_their_media_type_is_declared() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    install(
        &sb,
        "echo",
        "pix",
        &format!("{AUTH}{}exports:\n  input_modes: ['image/*']\n", serve(4)),
    );
    let png = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [
        {"text": "look"},
        {"url": "https://example.invalid/a.png", "mediaType": "image/png", "filename": "a.png"},
        {"raw": "iVBORw0K", "mediaType": "image/png"},
    ]}});
    let pdf = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [
        {"url": "https://example.invalid/a.pdf", "mediaType": "application/pdf"},
    ]}});
    let refused = |mt: &str| {
        format!(
            r#"{{"error":{{"code":-32005,"data":[{{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"a2a-protocol.org","metadata":{{"mediaType":"{mt}"}},"reason":"CONTENT_TYPE_NOT_SUPPORTED"}}],"message":"Incompatible content types: a media type is not supported"}},"id":1,"jsonrpc":"2.0"}}"#
        )
    };

    let p = Door::start(&sb, "pix", &[]);
    let op = p.op();
    let card = p.get("/.well-known/agent-card.json", None).json();
    assert_eq!(
        card["defaultInputModes"],
        json!(["text/plain", "application/json", "image/*"])
    );
    let reply = p.rpc(Some(&op), "SendMessage", png.clone());
    assert_eq!(
        reply["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        "look\n```image/png;url a.png\nhttps://example.invalid/a.png\n```\n```image/png;base64\niVBORw0K\n```",
        "{reply}"
    );
    assert_eq!(
        p.call(Some(&op), "SendMessage", pdf.clone()).body,
        refused("application/pdf")
    );

    // A door that declares nothing accepts text and data only.
    let d = Door::start(&sb, "echo", &[]);
    let card = d.get("/.well-known/agent-card.json", None).json();
    assert_eq!(card["defaultInputModes"], json!(["text/plain", "application/json"]));
    assert_eq!(d.call(Some(&d.op()), "SendMessage", png).body, refused("image/png"));
    let tasks = d.rpc(Some(&d.op()), "ListTasks", json!({}));
    assert_eq!(tasks["result"]["totalSize"], 0, "a refused part made no task");
}

/// Writes `card` to `dir/<name>.json`.
fn save(dir: &Path, name: &str, card: &Value) -> String {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, card.to_string()).expect("write card");
    path.to_string_lossy().into_owned()
}

/// Runs tests/interop/a2a_card_check.py over `cards`: its exit code and output.
fn check_cards(py: &Path, cards: &[String]) -> (Option<i32>, String) {
    let out = Command::new(py)
        .arg(repo_root().join("tests/interop/a2a_card_check.py"))
        .arg(repo_root().join("tests/interop/a2a_agent_card.schema.json"))
        .args(cards)
        .stdin(Stdio::null())
        .output()
        .expect("run the card check");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    (out.status.code(), text)
}

/// A2A v1.0 §4.4.1 AgentCard (docs/reference/roster.md#admission-in-order Agent Discovery):
/// a2a.proto marks `skills` REQUIRED, with `AgentSkill.id`, `name`, `description` and `tags`
/// REQUIRED. Every card the runtime can produce validates against the AgentCard JSON Schema of the
/// A2A v1.0.0 release (tests/interop/a2a_agent_card.schema.json): public and authenticated doors
/// (public and extended card), a model capsule and a component, with and without declared skills. A
/// card with no skill is shown to fail, so the check can fail.
#[test]
fn every_card_a_door_serves_is_a_valid_a2a_card() {
    let py = python_with(JSONSCHEMA, "jsonschema");
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let skills = concat!(
        "exports:\n  input_modes: [application/pdf]\n  skills:\n",
        "    - id: echo\n      name: Echo\n      description: answers with its task\n",
        "      tags: [test]\n      examples: [say hello]\n",
        "    - {id: plain, name: Plain, description: no tags or examples}\n",
    );
    install(&sb, "echo", "open", &format!("{}{skills}", serve(1)));
    let provider = Provider::start(vec![]);
    install_model(&sb, "planner", &provider, "");

    let authed = Door::start(&sb, "echo", &[]);
    let open = Door::start(&sb, "open", &[]);
    let model = Door::start(&sb, "planner", &[(KEY_VAR, "sk-it-0123456789")]);
    let public = |d: &Door| d.get("/.well-known/agent-card.json", None).json();
    let extended = |d: &Door| d.rpc(Some(&d.op()), "GetExtendedAgentCard", json!({}))["result"].clone();

    let dir = sb.path("cards");
    let cards = vec![
        save(&dir, "component-authenticated-public", &public(&authed)),
        save(&dir, "component-authenticated-extended", &extended(&authed)),
        save(&dir, "component-public-declared-skills", &public(&open)),
        save(&dir, "model-authenticated-public", &public(&model)),
        save(&dir, "model-authenticated-extended", &extended(&model)),
    ];
    let (code, out) = check_cards(&py, &cards);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("5 of 5 cards valid"), "{out}");

    // Declared skills are carried as written; without them one is derived from the capsule.
    assert_eq!(
        public(&open)["skills"],
        json!([
            {"description": "answers with its task", "examples": ["say hello"], "id": "echo", "name": "Echo", "tags": ["test"]},
            {"description": "no tags or examples", "id": "plain", "name": "Plain", "tags": []},
        ])
    );
    assert_eq!(
        public(&model)["skills"],
        json!([{"description": "local/planner@0.1.0", "id": "planner", "name": "local/planner", "tags": ["planner"]}])
    );

    // The validator refuses a card without skills, as the runtime's cards once were.
    let mut bare = public(&authed);
    bare["skills"] = json!([]);
    let (code, out) = check_cards(&py, &[save(&dir, "no-skills", &bare)]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("skills"), "{out}");
}

/// A2A v1.0 §4.4.1 AgentCard `securitySchemes` (a2a.proto `map<string, SecurityScheme>
/// security_schemes = 8`) and `securityRequirements` (`repeated SecurityRequirement
/// security_requirements = 9`), docs/reference/door.md (authentication: the client learns the
/// scheme from the card): a door that requires a token publishes an HTTP bearer scheme
/// (`HTTPAuthSecurityScheme.scheme` "Bearer") and requires it; a public door publishes neither. The
/// scheme is what the door takes: `Authorization: Bearer <operator token>` is served.
#[test]
fn an_authenticating_door_publishes_its_bearer_scheme_and_a_public_door_none() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    install(&sb, "echo", "open", &serve(1));
    let authed = Door::start(&sb, "echo", &[]);
    let card = authed.get("/.well-known/agent-card.json", None).json();
    let scheme = &card["securitySchemes"]["bearer"];
    assert_eq!(scheme["httpAuthSecurityScheme"]["scheme"], "Bearer", "{card}");
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"bearer": {"list": []}}}])
    );
    // The card says how to authenticate, never with what.
    let token = authed.op().trim_start_matches("Bearer ").to_string();
    let served = authed.get("/.well-known/agent-card.json", None).body;
    assert!(!served.contains(&token), "the public card shows the operator token");
    let extended = authed.rpc(Some(&authed.op()), "GetExtendedAgentCard", json!({}));
    assert!(
        !extended.to_string().contains(&token),
        "the extended card shows the operator token"
    );
    assert_eq!(extended["result"]["securitySchemes"], card["securitySchemes"]);
    assert_eq!(extended["result"]["securityRequirements"], card["securityRequirements"]);
    // What the card names is what the door takes, and without it the door refuses.
    assert_eq!(
        authed.send(Some(&authed.op()), "hi", false)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(authed.call(None, "ListTasks", json!({})).status, 401);

    let open = Door::start(&sb, "open", &[]);
    let card = open.get("/.well-known/agent-card.json", None).json();
    assert!(card.get("securitySchemes").is_none(), "{card}");
    assert!(card.get("securityRequirements").is_none(), "{card}");
}

/// The whole HTTP response to `body` POSTed to `/` of `d`: head and body as sent.
fn raw_exchange(d: &Door, auth: &str, body: &str) -> String {
    let addr = d.local_url().replace("localhost", "127.0.0.1");
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let request = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\na2a-version: 1.0\r\n\
         authorization: {auth}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A streaming method refused before its stream starts (docs/a2a.md, "Streaming errors") answers
/// as every other method does: `application/json`, the JSON-RPC error response (A2A v1.0 §9.5), as
/// the official Python SDK's server does, so every SDK's client maps it to its typed error (the
/// JS SDK 1.3 raises only a generic error for an error inside an event stream).
#[test]
fn streaming_methods_refused_before_the_stream_answer_with_a_json_error() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let done = d.send(Some(&op), "over", false)["id"].as_str().expect("id").to_string();
    let info = |code: i32, message: &str, reason: &str, meta: &str| {
        format!(
            r#"{{"error":{{"code":{code},"data":[{{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"a2a-protocol.org","metadata":{meta},"reason":"{reason}"}}],"message":"{message}"}},"id":"s1","jsonrpc":"2.0"}}"#
        )
    };
    let cases = [
        (
            json!({"id": "s1", "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {"id": "tsk_nope"}}),
            info(-32001, "Task not found", "TASK_NOT_FOUND", r#"{"taskId":"tsk_nope"}"#),
        ),
        (
            json!({"id": "s1", "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {"id": done}}),
            info(
                -32004,
                "This operation is not supported",
                "UNSUPPORTED_OPERATION",
                &format!(r#"{{"taskId":"{done}"}}"#),
            ),
        ),
        (
            json!({"id": "s1", "jsonrpc": "2.0", "method": "SubscribeToTask", "params": {}}),
            r#"{"error":{"code":-32602,"message":"Invalid params"},"id":"s1","jsonrpc":"2.0"}"#.to_string(),
        ),
        (
            json!({"id": "s1", "jsonrpc": "2.0", "method": "SendStreamingMessage", "params": {"message": {
                "messageId": "m", "parts": [{"url": "https://example.invalid/x.png", "mediaType": "image/png"}]}}}),
            info(
                -32005,
                "Incompatible content types: a media type is not supported",
                "CONTENT_TYPE_NOT_SUPPORTED",
                r#"{"mediaType":"image/png"}"#,
            ),
        ),
        (
            json!({"id": "s1", "jsonrpc": "2.0", "method": "SendStreamingMessage", "params": {
                "message": {"messageId": "m", "parts": [{"text": "draw it"}]},
                "configuration": {"acceptedOutputModes": ["image/png", "image/svg+xml"]}}}),
            info(
                -32005,
                "Incompatible content types: a media type is not supported",
                "CONTENT_TYPE_NOT_SUPPORTED",
                r#"{"acceptedOutputModes":"image/png, image/svg+xml","mediaType":"text/plain"}"#,
            ),
        ),
    ];
    for (request, error) in cases {
        let response = raw_exchange(&d, &op, &request.to_string());
        let (head, body) = response.split_once("\r\n\r\n").expect("a head");
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200 ok\r\n"), "{request}: {head}");
        assert!(
            head.contains("\r\ncontent-type: application/json\r\n"),
            "{request}: {head}"
        );
        assert_eq!(body, error, "{request}");
    }

    // The same refusal of a non-streaming method is the same reply.
    let get = json!({"id": "s1", "jsonrpc": "2.0", "method": "GetTask", "params": {"id": "tsk_nope"}});
    let response = raw_exchange(&d, &op, &get.to_string());
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\ncontent-type: application/json\r\n"),
        "{head}"
    );
    assert_eq!(
        body,
        info(-32001, "Task not found", "TASK_NOT_FOUND", r#"{"taskId":"tsk_nope"}"#)
    );
}

/// The official A2A Python SDK client (a2a-sdk 1.3.0) against a real door: it discovers the
/// bearer scheme from the card (§4.4.1), sends a data part and a declared file part (§4.1.6) and
/// sees the framed task text come back, and raises the mapped error type
/// (docs/reference/codes.md#w-ros-001) for streaming methods refused before their stream starts
/// (docs/a2a.md, "Streaming errors"): ContentTypeNotSupportedError, TaskNotFoundError,
/// UnsupportedOperationError.
#[test]
fn the_official_sdk_sends_parts_and_reads_refused_streams() {
    let py = python_with(A2A_SDK, "a2a.client, a2a.types.a2a_pb2, httpx");
    let sb = Sandbox::new();
    install(
        &sb,
        "echo",
        "pix",
        &format!("{AUTH}{}exports:\n  input_modes: [image/png]\n", serve(4)),
    );
    let d = Door::start(&sb, "pix", &[]);
    let token = d.op().trim_start_matches("Bearer ").to_string();
    let out = Command::new(&py)
        .arg(repo_root().join("tests/interop/a2a_parts_check.py"))
        .arg(format!("http://{}", d.local_url()))
        .arg(token)
        .stdin(Stdio::null())
        .output()
        .expect("run the SDK parts check");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a2a_parts_check.py failed\n--- stdout\n{so}\n--- stderr\n{se}"
    );
    assert!(so.contains("checks passed"), "{so}");
}

/// The official A2A JS SDK client (@a2a-js/sdk 1.3.0) against a real door (docs/a2a.md,
/// "Streaming errors"): `resubscribeTask` on a task that just finished raises the SDK's
/// `UnsupportedOperationError`, on an unknown task its `TaskNotFoundError`, and a stream whose
/// events carry ids reads to its end.
#[test]
fn the_js_sdk_raises_its_typed_errors_for_refused_streams() {
    let prefix = node_with(A2A_JS);
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let token = d.op().trim_start_matches("Bearer ").to_string();
    // ES modules resolve packages from the script's own directory: a copy of it beside the
    // provisioned node_modules, named for this sandbox.
    let script = prefix.join(format!("a2a_js_streams_check.{}.mjs", std::process::id()));
    std::fs::copy(repo_root().join("tests/interop/a2a_js_streams_check.mjs"), &script).expect("copy the script");
    let out = Command::new("node")
        .arg(&script)
        .arg(format!("http://{}", d.local_url()))
        .arg(token)
        .stdin(Stdio::null())
        .output()
        .expect("run node");
    let _ = std::fs::remove_file(&script);
    let (so, se) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a2a_js_streams_check.mjs failed\n--- stdout\n{so}\n--- stderr\n{se}"
    );
    assert!(so.contains("checks passed"), "{so}");
}

/// A2A v1.0 §3.1.1 SendMessage continuing a task and §4.1.3 `TASK_STATE_INPUT_REQUIRED`, with
/// the official SDK client: a component capsule asks its caller (`ask.request-input`,
/// docs/reference/door.md#asking), the client sees the question as the task's status message, and
/// continues the task with a message carrying its taskId and contextId, blocking and streamed;
/// CancelTask ends a task that waits. (The A2A TCK's `test_message_send_continue_task` continues a
/// task that already completed instead, which §3.1.1 refuses: docs/a2a.md#the-a2a-tck.)
#[test]
fn the_official_sdk_continues_a_task_that_asks() {
    let py = python_with(A2A_SDK, "a2a.client, a2a.types.a2a_pb2, httpx");
    let sb = Sandbox::new();
    install_asker(&sb, 60);
    let d = Door::start(&sb, "asker", &[]);
    let token = d.op().trim_start_matches("Bearer ").to_string();
    let out = Command::new(&py)
        .arg(repo_root().join("tests/interop/a2a_ask_check.py"))
        .arg(format!("http://{}", d.local_url()))
        .arg(token)
        .stdin(Stdio::null())
        .output()
        .expect("run the SDK asking check");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a2a_ask_check.py failed\n--- stdout\n{so}\n--- stderr\n{se}"
    );
    assert!(so.contains("checks passed"), "{so}");

    // What the client did is what the door holds: three answered, one cancelled, none waiting.
    let count =
        |status: &str| d.rpc(Some(&d.op()), "ListTasks", json!({"status": status}))["result"]["totalSize"].clone();
    assert_eq!(
        [
            count("TASK_STATE_COMPLETED"),
            count("TASK_STATE_CANCELED"),
            count("TASK_STATE_INPUT_REQUIRED")
        ],
        [json!(3), json!(1), json!(0)]
    );
}

/// The test component that asks its task text as its question and answers with the answer
/// (src/capsule/testdata/ask.wat), installed as `local/asker` with `input_timeout_secs`.
fn install_asker(sb: &Sandbox, input_timeout_secs: u64) {
    let dir = sb.path("src/asker");
    std::fs::copy(
        repo_root().join("src/capsule/testdata/ask.wat"),
        dir.join("capsule.wat"),
    )
    .expect("copy wat");
    let manifest = format!(
        "name: asker\nversion: 0.1.0\ncomponent: capsule.wat\n{AUTH}{}  input_timeout_secs: {input_timeout_secs}\n",
        serve(4)
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("manifest");
    let out = sb.run(&dir, &["build", "."]);
    assert!(out.status.success(), "build: {}", stderr(&out));
    let zip = dir.join("asker-0.1.0.mur.zip");
    let out = sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "install: {}", stderr(&out));
}

/// A2A v1.0 §3.1.1: a message to a terminal task is UnsupportedOperationError. A component's
/// question left unanswered for `lifecycle.input_timeout_secs` (its least, 1 s) fails the task with
/// E-ASK-001, in the real member; the late answer is refused and starts nothing.
#[test]
fn an_unanswered_component_question_fails_its_task_with_e_ask_001() {
    let sb = Sandbox::new();
    install_asker(&sb, 1);
    let d = Door::start(&sb, "asker", &[]);
    let op = d.op();
    let task = d.send(Some(&op), "which colour?", false);
    let id = task["id"].as_str().expect("id").to_string();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{task}");
    let failed = d.wait_state(Some(&op), &id, "TASK_STATE_FAILED");
    let text = failed["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with(
            "error[E-ASK-001]: the task asked for input and no answer came within lifecycle.input_timeout_secs (1 s)"
        ),
        "{failed}"
    );
    let late = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "blue"}]}});
    let r = d.rpc(Some(&op), "SendMessage", late);
    assert_eq!(
        (&r["error"]["code"], &r["error"]["data"][0]["metadata"]["state"]),
        (&json!(-32004), &json!("TASK_STATE_FAILED")),
        "{r}"
    );
    assert_eq!(
        d.rpc(Some(&op), "ListTasks", json!({}))["result"]["totalSize"],
        1,
        "the late answer started nothing"
    );
}

/// The A2A TCK's binary part (`test_binary_data_handling`: a text part and a `raw` part of
/// `application/octet-stream`), as §3.1.1 and §4.1.6 judge it: accepted, and framed into the task
/// text, by a capsule that declares the media type in `exports.input_modes`; `-32005`
/// ContentTypeNotSupportedError from one that does not.
#[test]
fn the_tck_binary_part_is_accepted_where_its_media_type_is_declared() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    install(
        &sb,
        "echo",
        "bytes",
        &format!(
            "{AUTH}{}exports:\n  input_modes: ['application/octet-stream']\n",
            serve(4)
        ),
    );
    // base64 of "This is test binary data", as the TCK sends it.
    let raw = "VGhpcyBpcyB0ZXN0IGJpbmFyeSBkYXRh";
    let msg = json!({"message": {"messageId": "m-bin", "role": "ROLE_USER", "parts": [
        {"text": "Processing binary data"},
        {"raw": raw, "mediaType": "application/octet-stream"},
    ]}});
    let b = Door::start(&sb, "bytes", &[]);
    let reply = b.rpc(Some(&b.op()), "SendMessage", msg.clone());
    assert_eq!(
        reply["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        format!("Processing binary data\n```application/octet-stream;base64\n{raw}\n```"),
        "{reply}"
    );
    let d = Door::start(&sb, "echo", &[]);
    let refused = d.rpc(Some(&d.op()), "SendMessage", msg);
    assert_eq!(refused["error"]["code"], -32005, "{refused}");
}

/// A2A v1.0 §3.2.4 and a2a.proto `SendMessageConfiguration.history_length`: a message that
/// continues a task (here answering the question it asked, §3.1.1) gets its reply's `history`
/// limited by `configuration.historyLength` as a new task's reply is: the newest n messages, none
/// for 0, all when unset.
#[test]
fn a_continuation_reply_honours_history_length() {
    let sb = Sandbox::new();
    install_asker(&sb, 60);
    let d = Door::start(&sb, "asker", &[]);
    let op = d.op();
    let answer = |id: &str, n: Option<u64>| {
        let mut params = json!({"message": {"messageId": format!("a-{id}"), "taskId": id, "role": "ROLE_USER",
            "parts": [{"text": "blue"}]}});
        if let Some(n) = n {
            params["configuration"] = json!({"historyLength": n});
        }
        let r = d.rpc(Some(&op), "SendMessage", params);
        assert_eq!(r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        r["result"]["task"].clone()
    };
    let ask = |text: &str| {
        let t = d.send(Some(&op), text, false);
        assert_eq!(t["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{t}");
        t["id"].as_str().expect("id").to_string()
    };

    let whole = answer(&ask("which colour?"), None);
    let history = whole["history"].as_array().cloned().unwrap_or_default();
    assert!(history.len() >= 3, "the question, the answer, the final word: {whole}");
    let one = answer(&ask("which colour?"), Some(1));
    let kept = one["history"].as_array().cloned().unwrap_or_default();
    assert_eq!(kept.len(), 1, "{one}");
    assert_eq!(kept[0]["role"], "ROLE_AGENT", "{one}");
    assert_eq!(
        kept[0]["parts"],
        history[history.len() - 1]["parts"],
        "the newest message"
    );
    let none = answer(&ask("which colour?"), Some(0));
    assert!(none.get("history").is_none(), "{none}");
}
