//! `mur::tools::mcp`, the MCP client a model capsule's runtime uses for its `tools:` servers
//! (issue #31), against the official MCP Python SDK's server (`tests/interop/mcp_server.py`,
//! provisioned by `support::mcp`) and against hostile servers scripted by hand on 127.0.0.1
//! (`support::provider`): garbage, huge, endless and silent answers, a protocol version not
//! spoken, a redirect. Each hostile case must end in a clear `Err` within a bounded time.
//!
//! The client runs on an actix system of the test's own, as a member's executor arbiter runs it.

use std::future::Future;
use std::time::{Duration, Instant};

use mur::tools::mcp::{McpEndpoint, McpLimits, McpServer, Revisions};
use serde_json::{Value, json};

use crate::support::mcp::SdkServer;
use crate::support::provider::{Gate, Piece, Provider, Reply, Request, Step};

/// The bearer the SDK server requires (long enough for `scrub` to look for it).
const KEY: &str = "mcp-test-key-5f2c9a17d3";

/// The handshake revisions (2025-11-25 and before), which the tests below pin; the stateless one
/// (2026-07-28) has its own tests at the end.
async fn connect(ep: McpEndpoint, limits: McpLimits) -> Result<McpServer, String> {
    McpServer::connect_as(ep, limits, Revisions::Handshake).await
}

fn run<F: Future>(f: F) -> F::Output {
    actix_rt::System::new().block_on(f)
}

fn endpoint(url: &str, key: Option<&str>, allow: &[&str]) -> McpEndpoint {
    McpEndpoint {
        name: "calc".to_string(),
        url: url.to_string(),
        bearer: key.map(|k| mur::secret::Secret::new(k.to_string())),
        allow: allow.iter().map(|s| s.to_string()).collect(),
    }
}

/// Limits small enough that a hostile case ends in well under a second or two.
fn quick() -> McpLimits {
    McpLimits {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(2),
        idle: Duration::from_millis(300),
        max_body: 64 << 10,
        max_event: 16 << 10,
        max_pages: 4,
        max_list_bytes: 256 << 10,
        max_result_text: 4 << 10,
    }
}

fn names(server: &McpServer) -> Vec<&str> {
    server.tools().iter().map(|t| t.name.as_str()).collect()
}

/// No error or Debug text may hold a key, ours or a wrong one.
fn assert_no_key(text: &str) {
    assert!(
        !text.contains(KEY) && !text.contains("wrong-key"),
        "a key leaked: {text}"
    );
}

#[test]
fn the_sdk_server_offers_only_the_allowed_tools_and_answers_their_calls() {
    // Event-stream answers (the SDK's default) and plain JSON ones.
    for json_mode in ["0", "1"] {
        let sdk = SdkServer::start(KEY, &[("MCP_TEST_JSON", json_mode)]);
        run(async {
            let server = connect(
                endpoint(&sdk.url(), Some(KEY), &["fail", "add", "word_count"]),
                McpLimits::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("connect (json {json_mode}): {e}\n{}", sdk.stderr()));
            assert_eq!(
                names(&server),
                ["fail", "add", "word_count"],
                "the server also lists echo"
            );
            assert_eq!(server.protocol_version(), "2025-11-25");
            let add = &server.tools()[1];
            assert_eq!(add.description, "Adds two integers.");
            assert_eq!(add.input_schema["properties"]["a"]["type"], "integer");
            assert_eq!(add.input_schema["required"], json!(["a", "b"]));
            assert_no_key(&format!("{server:?}"));

            let t = Duration::from_secs(10);
            let sum = server.call("add", json!({"a": 1, "b": 2}), t).await.unwrap();
            assert_eq!((sum.text.as_str(), sum.is_error), ("3", false));
            let words = server
                .call("word_count", json!({"text": "one two three"}), t)
                .await
                .unwrap();
            assert_eq!(words.text, "3");
            let failed = server.call("fail", Value::Null, t).await.unwrap();
            assert!(failed.is_error, "{failed:?}");
            assert!(failed.text.contains("Error executing tool fail"), "{}", failed.text);
            // Arguments the tool's schema refuses: the SDK reports a tool error, not a transport one.
            let bad = server.call("add", json!({"a": "x"}), t).await.unwrap();
            assert!(bad.is_error && bad.text.contains("validation error"), "{bad:?}");

            // `echo` is the server's, but not allowed: refused here, never sent.
            let e = server.call("echo", json!({"text": "hi"}), t).await.unwrap_err();
            assert_eq!(
                e,
                "MCP server 'calc': 'echo' is not a tool this capsule may use; it may use fail, add, word_count"
            );
            let e = server.call("add", json!([1, 2]), t).await.unwrap_err();
            assert_eq!(
                e,
                "MCP server 'calc': the arguments must be a JSON object, not an array"
            );
            server.close().await;
        });
        let log = sdk.log();
        let calls: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("call ")).collect();
        // The refused arguments never reached the function.
        assert_eq!(calls, ["add", "word_count", "fail"], "json {json_mode}: {log:?}");
        // initialize, initialized, tools/list, four calls, and the DELETE that closed the session.
        let methods: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("http ")).collect();
        assert_eq!(
            methods,
            ["POST"; 7].iter().copied().chain(["DELETE"]).collect::<Vec<_>>()
        );
        let auths: Vec<&String> = log.iter().filter(|l| l.starts_with("auth ")).collect();
        assert_eq!(auths.len(), 8);
        assert!(auths.iter().all(|a| *a == &format!("auth Bearer {KEY}")), "{auths:?}");
    }
}

#[test]
fn an_allowed_tool_the_server_lacks_fails_the_connection_and_names_it() {
    let sdk = SdkServer::start(KEY, &[]);
    let e = run(async {
        connect(
            endpoint(&sdk.url(), Some(KEY), &["add", "mul", "div"]),
            McpLimits::default(),
        )
        .await
        .unwrap_err()
    });
    assert_eq!(
        e,
        "MCP server 'calc': the server has no tool 'mul', 'div' that the manifest allows \
         (it lists: add, word_count, fail, echo)"
    );
    // The session the failed connection had begun was ended before it returned.
    assert!(sdk.log().iter().any(|l| l == "http DELETE"), "{:?}", sdk.log());
}

#[test]
fn the_bearer_reaches_the_server_and_a_wrong_or_missing_one_is_refused_401() {
    let sdk = SdkServer::start(KEY, &[]);
    for key in [Some("wrong-key-0123456789"), None] {
        let started = Instant::now();
        let e = run(async {
            connect(endpoint(&sdk.url(), key, &["add"]), McpLimits::default())
                .await
                .unwrap_err()
        });
        assert_eq!(
            e,
            r#"MCP server 'calc': initialize failed: the server refused the credentials (401): {"error": "invalid_token"}"#
        );
        assert_no_key(&e);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let log = sdk.log();
    let auths: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("auth ")).collect();
    assert_eq!(auths, ["Bearer wrong-key-0123456789", ""], "{log:?}");
}

#[test]
fn tools_are_listed_across_pages() {
    // The SDK's server lists everything at once; the test server's subclass pages it one by one.
    let sdk = SdkServer::start(KEY, &[("MCP_TEST_PAGE", "1")]);
    run(async {
        let server = connect(endpoint(&sdk.url(), Some(KEY), &["echo", "add"]), McpLimits::default())
            .await
            .unwrap();
        assert_eq!(names(&server), ["echo", "add"]);
        let r = server
            .call("echo", json!({"text": "last page"}), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(r.text, "last page");
        server.close().await;
        // Four pages of one tool: more than three is refused.
        let limits = McpLimits {
            max_pages: 3,
            ..McpLimits::default()
        };
        let e = connect(endpoint(&sdk.url(), Some(KEY), &["add"]), limits)
            .await
            .unwrap_err();
        assert_eq!(e, "MCP server 'calc': its tools/list has more than 3 pages");
    });
    let posts = sdk.log().iter().filter(|l| *l == "http POST").count();
    // (initialize, initialized, 4 pages, 1 call) + (initialize, initialized, 3 pages)
    assert_eq!(posts, 7 + 5);
}

#[test]
fn a_stateless_sdk_server_is_served_without_a_session() {
    let sdk = SdkServer::start(KEY, &[("MCP_TEST_STATELESS", "1"), ("MCP_TEST_JSON", "1")]);
    run(async {
        let server = connect(endpoint(&sdk.url(), Some(KEY), &["add"]), McpLimits::default())
            .await
            .unwrap();
        let r = server
            .call("add", json!({"a": 40, "b": 2}), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(r.text, "42");
        server.close().await;
    });
    // No session, so nothing to DELETE.
    assert!(!sdk.log().iter().any(|l| l == "http DELETE"), "{:?}", sdk.log());
}

#[test]
fn a_restarted_server_that_forgot_the_session_gets_a_new_one() {
    let first = SdkServer::start(KEY, &[]);
    let port = first.port().to_string();
    let url = first.url();
    run(async move {
        let server = connect(endpoint(&url, Some(KEY), &["add"]), McpLimits::default())
            .await
            .unwrap();
        drop(first);
        // The same address, a server that never heard of the session: 404, then a new one.
        let second = SdkServer::start(KEY, &[("MCP_TEST_PORT", &port)]);
        let r = server
            .call("add", json!({"a": 2, "b": 2}), Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", second.stderr()));
        assert_eq!(r.text, "4");
        let log = second.log();
        // The refused call, initialize, initialized, the call again.
        let posts = log.iter().filter(|l| *l == "http POST").count();
        assert_eq!(posts, 4, "{log:?}");
        assert_eq!(log.iter().filter(|l| *l == "call add").count(), 1);
        server.close().await;
    });
}

#[test]
fn dropping_the_client_ends_the_session() {
    let sdk = SdkServer::start(KEY, &[]);
    run(async {
        let server = connect(endpoint(&sdk.url(), Some(KEY), &["add"]), McpLimits::default())
            .await
            .unwrap();
        drop(server);
        // The DELETE is spawned on this arbiter: give it a moment to run.
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !sdk.log().iter().any(|l| l == "http DELETE") {
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(sdk.log().iter().any(|l| l == "http DELETE"), "{:?}", sdk.log());
}

// ---- Hostile servers, scripted by hand ----

/// A JSON-RPC response to `req` with `result`.
fn rpc(req: &Request, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req.json()["id"].clone(), "result": result})
}

fn initialize_as(version: &'static str) -> Step {
    Step::func(move |r| {
        Reply::json(rpc(
            r,
            json!({"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "hand"}}),
        ))
        .header("mcp-session-id", "hand-session-1")
    })
}

fn accepted() -> Step {
    Reply::status(202, "").into()
}

fn listing(tools: &'static [&'static str]) -> Step {
    Step::func(move |r| {
        let tools: Vec<Value> = tools
            .iter()
            .map(|n| json!({"name": n, "inputSchema": {"type": "object"}}))
            .collect();
        Reply::json(rpc(r, json!({ "tools": tools })))
    })
}

/// A server that completes the handshake and lists `go`, then answers with `rest`.
fn scripted(rest: Vec<Step>) -> Provider {
    let mut script = vec![initialize_as("2025-11-25"), accepted(), listing(&["go"])];
    script.extend(rest);
    Provider::start(script)
}

fn event(v: &Value) -> String {
    format!("event: message\ndata: {v}\n\n")
}

fn progress() -> String {
    event(
        &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 0.5}}),
    )
}

/// Connects to `p` and calls `go` once with `timeout`; the error, and how long the connection and
/// the call took. A call given up on (`cancelled`) is cancelled at the server: that notice is
/// spawned, not awaited, so the system is kept until `p` has it.
fn call_fails(p: &Provider, timeout: Duration, cancelled: bool) -> (String, Duration) {
    let url = format!("{}/mcp", p.url());
    let started = Instant::now();
    let (e, took) = run(async {
        let server = connect(endpoint(&url, Some(KEY), &["go"]), quick()).await.unwrap();
        let e = server.call("go", json!({}), timeout).await.unwrap_err();
        let took = started.elapsed();
        if cancelled {
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until
                && !p
                    .requests()
                    .iter()
                    .any(|r| r.json()["method"] == "notifications/cancelled")
            {
                actix_rt::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // No DELETE: the script is not written for one.
        std::mem::forget(server);
        (e, took)
    });
    assert_no_key(&e);
    (e, took)
}

#[test]
fn a_scripted_server_is_spoken_to_as_the_transport_asks() {
    let p = scripted(vec![
        Step::func(|r| {
            Reply::pieces(vec![
                Piece::Bytes(progress()),
                // A request from the server, with the very id of ours: not our response.
                Piece::Bytes(event(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))),
                Piece::Bytes(": a comment\n\n".into()),
                Piece::Bytes(event(&rpc(r, json!({"content": [{"type": "text", "text": "went"}]})))),
            ])
        }),
        Reply::status(200, "").into(),
    ]);
    let url = format!("{}/mcp", p.url());
    run(async {
        let server = connect(endpoint(&url, Some(KEY), &["go"]), quick()).await.unwrap();
        let r = server
            .call("go", json!({"x": 1}), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!((r.text.as_str(), r.is_error), ("went", false));
        server.close().await;
    });
    let reqs = p.requests();
    let methods: Vec<String> = reqs
        .iter()
        .map(|r| format!("{} {}", r.method, r.json()["method"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        methods,
        [
            "POST initialize",
            "POST notifications/initialized",
            "POST tools/list",
            "POST tools/call",
            "DELETE "
        ]
    );
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(r.path, "/mcp");
        assert_eq!(r.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
        if r.method == "POST" {
            assert_eq!(r.header("accept"), Some("application/json, text/event-stream"));
            assert_eq!(r.header("content-type"), Some("application/json"));
        }
        // The session and version go on every request after initialize, and only then.
        let (session, version) = if i == 0 {
            (None, None)
        } else {
            (Some("hand-session-1"), Some("2025-11-25"))
        };
        assert_eq!(r.header("mcp-session-id"), session, "request {i}");
        assert_eq!(r.header("mcp-protocol-version"), version, "request {i}");
    }
    assert_eq!(reqs[3].json()["params"], json!({"name": "go", "arguments": {"x": 1}}));
    assert_eq!(reqs[0].json()["params"]["clientInfo"]["name"], "mur");
}

#[test]
fn a_forgotten_session_is_begun_again_without_the_old_id() {
    let p = scripted(vec![
        Reply::status(
            404,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}"#,
        )
        .into(),
        Step::func(|r| {
            Reply::json(rpc(r, json!({"protocolVersion": "2025-06-18", "capabilities": {}})))
                .header("mcp-session-id", "hand-session-2")
        }),
        accepted(),
        Step::func(|r| Reply::json(rpc(r, json!({"content": [{"type": "text", "text": "again"}]})))),
    ]);
    let url = format!("{}/mcp", p.url());
    run(async {
        let server = connect(endpoint(&url, Some(KEY), &["go"]), quick()).await.unwrap();
        let r = server.call("go", json!({}), Duration::from_secs(2)).await.unwrap();
        assert_eq!(r.text, "again");
        assert_eq!(server.protocol_version(), "2025-06-18");
        std::mem::forget(server);
    });
    let reqs = p.requests();
    let seen: Vec<(String, Option<&str>)> = reqs
        .iter()
        .map(|r| {
            (
                r.json()["method"].as_str().unwrap_or("").to_string(),
                r.header("mcp-session-id"),
            )
        })
        .collect();
    let want: Vec<(String, Option<&str>)> = [
        ("initialize", None),
        ("notifications/initialized", Some("hand-session-1")),
        ("tools/list", Some("hand-session-1")),
        ("tools/call", Some("hand-session-1")),
        ("initialize", None),
        ("notifications/initialized", Some("hand-session-2")),
        ("tools/call", Some("hand-session-2")),
    ]
    .iter()
    .map(|(m, s)| (m.to_string(), *s))
    .collect();
    assert_eq!(seen, want);
    assert_eq!(reqs[6].header("mcp-protocol-version"), Some("2025-06-18"));
}

#[test]
fn garbage_answers_are_clear_errors() {
    // (the call's answer, the error after `MCP server 'calc': go: `)
    let table: Vec<(Step, &str)> = vec![
        (
            Reply::status(200, "<html>not json</html>").into(),
            r#"the reply is not JSON: "<html>not json</html>""#,
        ),
        (
            Reply::json(json!({"jsonrpc": "2.0", "id": 99, "result": {}})).into(),
            "the reply holds no response to request 3",
        ),
        (
            Reply::pieces(vec![
                Piece::Bytes("data: garbage\n\n".into()),
                Piece::Bytes("\u{0}\u{1}\n\n".into()),
            ])
            .into(),
            "the event stream ended without a response to request 3",
        ),
        (
            Step::func(|r| {
                Reply::json(
                    json!({"jsonrpc": "2.0", "id": r.json()["id"], "error": {"code": -32602, "message": "Unknown tool: go"}}),
                )
            }),
            "error -32602: Unknown tool: go",
        ),
        (
            Reply::status(500, &format!("internal error near {KEY}")).into(),
            "the server answered 500: internal error near [redacted]",
        ),
        (
            Reply::pieces(vec![Piece::Drop]).into(),
            "the event stream ended without a response to request 3",
        ),
    ];
    for (answer, want) in table {
        let p = scripted(vec![answer]);
        let (e, took) = call_fails(&p, Duration::from_secs(2), false);
        assert_eq!(e, format!("MCP server 'calc': go: {want}"));
        assert!(took < Duration::from_secs(3), "{want}: {took:?}");
    }
}

#[test]
fn huge_endless_and_silent_answers_end_within_their_bounds() {
    let big_event = format!("data: {{\"pad\":\"{}\"}}\n\n", "x".repeat(20 << 10));
    let many_events: Vec<Piece> = (0..100)
        .map(|_| Piece::Bytes(format!("{}\n", progress().repeat(20))))
        .collect();
    let endless: Vec<Piece> = (0..400)
        .flat_map(|_| [Piece::Bytes(progress()), Piece::Pause(Duration::from_millis(50))])
        .collect();
    let gate = Gate::new();
    // (the call's answer, the call's timeout, the error after `go: `, the time it may take)
    let table: Vec<(Reply, Duration, &str, Duration)> = vec![
        (
            Reply::status(200, &"x".repeat(100 << 10)),
            Duration::from_secs(5),
            "the answer is longer than 65536 bytes",
            Duration::from_secs(3),
        ),
        (
            Reply::pieces(vec![Piece::Bytes(big_event)]),
            Duration::from_secs(5),
            "an event is longer than 16384 bytes",
            Duration::from_secs(3),
        ),
        (
            Reply::pieces(many_events),
            Duration::from_secs(5),
            "the event stream passed 65536 bytes without a response to request 3",
            Duration::from_secs(3),
        ),
        // Events that never answer: the call's own bound ends it.
        (
            Reply::pieces(endless),
            Duration::from_secs(1),
            "no response to request 3 within 1s",
            Duration::from_secs(3),
        ),
        // A stream that goes silent: the idle bound (300 ms) ends it long before the call's.
        (
            Reply::pieces(vec![Piece::Bytes(progress()), Piece::Wait(gate.clone())]),
            Duration::from_secs(20),
            "the event stream was silent for 300ms",
            Duration::from_secs(3),
        ),
        // No answer at all: the call's bound.
        (
            Reply::json(json!({})).delayed(Duration::from_secs(10)),
            Duration::from_millis(500),
            "no answer within 500ms",
            Duration::from_secs(3),
        ),
    ];
    for (answer, timeout, want, bound) in table {
        let p = scripted(vec![answer.into(), accepted()]);
        let (e, took) = call_fails(&p, timeout, want.starts_with("no "));
        assert_eq!(e, format!("MCP server 'calc': go: {want}"));
        assert!(took < bound, "{want}: took {took:?}");
        if want.starts_with("no ") {
            // A call given up on is cancelled at the server.
            assert!(p.wait_requests(5, Duration::from_secs(3)), "no cancellation came");
            let cancel = p.requests()[4].json();
            assert_eq!(cancel["method"], "notifications/cancelled");
            assert_eq!(cancel["params"]["requestId"], 3);
        }
    }
    gate.open();
}

#[test]
fn a_server_speaking_another_protocol_version_is_refused() {
    for version in ["2024-11-05", "2026-07-28", "1.0"] {
        let p = Provider::start(vec![initialize_as(version), accepted()]);
        let url = format!("{}/mcp", p.url());
        let e = run(async { connect(endpoint(&url, Some(KEY), &["go"]), quick()).await.unwrap_err() });
        assert_eq!(
            e,
            format!(
                "error[E-MCP-001]: MCP server 'calc': the server speaks MCP version \"{version}\"; \
                 this client speaks 2025-11-25, 2025-06-18, 2025-03-26\n  hint: {}",
                mur::diag::E_MCP_001.default_hint.unwrap()
            )
        );
        // Refused after initialize: no initialized notification, nothing more.
        assert_eq!(p.requests().len(), 1);
    }
}

#[test]
fn a_redirect_is_not_followed_so_the_bearer_goes_nowhere_else() {
    let elsewhere = Provider::start(vec![]);
    let p = Provider::start(vec![
        Reply::status(307, "")
            .header("location", &format!("{}/mcp", elsewhere.url()))
            .into(),
    ]);
    let url = format!("{}/mcp", p.url());
    let e = run(async { connect(endpoint(&url, Some(KEY), &["go"]), quick()).await.unwrap_err() });
    assert_eq!(e, "MCP server 'calc': initialize failed: the server answered 307");
    assert!(elsewhere.requests().is_empty());
}

#[test]
fn plain_http_beyond_loopback_and_bad_listings_are_refused() {
    let e = run(async {
        connect(endpoint("http://192.0.2.1/mcp", Some(KEY), &["go"]), quick())
            .await
            .unwrap_err()
    });
    assert_eq!(
        e,
        "MCP server 'calc': its url must be https://, or plain http:// to loopback (localhost, 127.0.0.1, [::1])"
    );
    // A listing that loops on its cursor, and an allowed tool whose schema is far too large.
    let looping = Step::func(|r| Reply::json(rpc(r, json!({"tools": [], "nextCursor": "again"}))));
    let looping2 = Step::func(|r| Reply::json(rpc(r, json!({"tools": [], "nextCursor": "again"}))));
    let huge = Step::func(|r| {
        Reply::json(rpc(
            r,
            json!({"tools": [{"name": "go", "inputSchema": {"type": "object", "description": "d".repeat(70_000)}}]}),
        ))
    });
    let limits = McpLimits {
        max_body: 1 << 20,
        ..quick()
    };
    for (steps, want) in [
        (vec![looping, looping2], "its tools/list gave the same cursor twice"),
        (
            vec![huge],
            "tool 'go' cannot be used: its input schema is 70034 bytes, more than 65536",
        ),
    ] {
        let mut script = vec![initialize_as("2025-11-25"), accepted()];
        script.extend(steps);
        script.push(accepted());
        let p = Provider::start(script);
        let url = format!("{}/mcp", p.url());
        let e = run(async {
            connect(endpoint(&url, Some(KEY), &["go"]), limits.clone())
                .await
                .unwrap_err()
        });
        assert_eq!(e, format!("MCP server 'calc': {want}"));
    }
}

// ---- The stateless revision (2026-07-28) ----

#[test]
fn the_sdk_server_is_spoken_to_in_the_stateless_revision_when_it_lists_it() {
    for json_mode in ["0", "1"] {
        let sdk = SdkServer::start(KEY, &[("MCP_TEST_JSON", json_mode)]);
        run(async {
            let server = McpServer::connect(endpoint(&sdk.url(), Some(KEY), &["fail", "add"]), McpLimits::default())
                .await
                .unwrap_or_else(|e| panic!("connect (json {json_mode}): {e}\n{}", sdk.stderr()));
            assert_eq!(server.protocol_version(), "2026-07-28");
            assert_eq!(names(&server), ["fail", "add"]);
            assert_eq!(server.tools()[1].description, "Adds two integers.");
            let t = Duration::from_secs(10);
            let sum = server.call("add", json!({"a": 20, "b": 22}), t).await.unwrap();
            assert_eq!((sum.text.as_str(), sum.is_error), ("42", false));
            let failed = server.call("fail", Value::Null, t).await.unwrap();
            assert!(failed.is_error, "{failed:?}");
            let e = server.call("echo", json!({"text": "hi"}), t).await.unwrap_err();
            assert!(e.contains("'echo' is not a tool this capsule may use"), "{e}");
            server.close().await;
        });
        let log = sdk.log();
        // server/discover, tools/list, two calls; no session, so nothing to DELETE.
        let methods: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("http ")).collect();
        assert_eq!(methods, ["POST"; 4], "json {json_mode}: {log:?}");
        let calls: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix("call ")).collect();
        assert_eq!(calls, ["add", "fail"]);
        assert!(
            log.iter()
                .filter(|l| l.starts_with("auth "))
                .all(|a| a == &format!("auth Bearer {KEY}")),
            "{log:?}"
        );
    }
}

/// A server of the earlier revisions does not know `server/discover`: the client goes on with
/// the handshake, and says the stateless revision's headers only on the probe.
#[test]
fn a_server_without_discover_is_spoken_to_with_the_handshake() {
    let unknown = Step::func(|r| {
        Reply::json(
            json!({"jsonrpc": "2.0", "id": r.json()["id"].clone(), "error": {"code": -32601, "message": "Method not found"}}),
        )
    });
    let p = Provider::start(vec![
        unknown,
        initialize_as("2025-11-25"),
        accepted(),
        listing(&["go"]),
        Step::func(|r| Reply::json(rpc(r, json!({"content": [{"type": "text", "text": "went"}]})))),
        Reply::status(200, "").into(),
    ]);
    let url = format!("{}/mcp", p.url());
    run(async {
        let server = McpServer::connect(endpoint(&url, Some(KEY), &["go"]), quick())
            .await
            .unwrap();
        assert_eq!(server.protocol_version(), "2025-11-25");
        let r = server.call("go", json!({}), Duration::from_secs(2)).await.unwrap();
        assert_eq!(r.text, "went");
        server.close().await;
    });
    let reqs = p.requests();
    let methods: Vec<String> = reqs
        .iter()
        .map(|r| r.json()["method"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        methods,
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            ""
        ]
    );
    let discover = &reqs[0];
    assert_eq!(discover.header("mcp-protocol-version"), Some("2026-07-28"));
    assert_eq!(discover.header("mcp-method"), Some("server/discover"));
    assert_eq!(
        discover.json()["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    // After the probe, nothing of the stateless revision: no _meta, no method header.
    for r in &reqs[1..] {
        assert_eq!(r.header("mcp-method"), None);
        assert!(r.json()["params"].get("_meta").is_none(), "{}", r.text());
    }
}

/// A server that lists the stateless revision but then answers as another would: a clear error
/// within the bounds, never a hang; and each stateless request carries its method, its tool's
/// name and the version in `_meta`.
#[test]
fn a_server_that_lies_about_its_revision_is_a_clear_error() {
    let discover = Step::func(|r| {
        Reply::json(rpc(
            r,
            json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}, "resultType": "complete"}),
        ))
    });
    let p = Provider::start(vec![
        discover,
        listing(&["go"]),
        // The call is answered as if a session were needed.
        Reply::status(
            400,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request: Missing session ID"}}"#,
        )
        .into(),
    ]);
    let url = format!("{}/mcp", p.url());
    let started = Instant::now();
    let e = run(async {
        let server = McpServer::connect(endpoint(&url, Some(KEY), &["go"]), quick())
            .await
            .unwrap();
        assert_eq!(server.protocol_version(), "2026-07-28");
        server
            .call("go", json!({"x": 1}), Duration::from_secs(2))
            .await
            .unwrap_err()
    });
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        e,
        format!(
            "error[E-MCP-001]: MCP server 'calc': go: it listed MCP 2026-07-28 in server/discover, yet refused a request \
             of that revision: the server answered 400: {}\n  hint: {}",
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request: Missing session ID"}}"#,
            mur::diag::E_MCP_001.default_hint.unwrap()
        )
    );
    let reqs = p.requests();
    let call = &reqs[2];
    assert_eq!(call.header("mcp-method"), Some("tools/call"));
    assert_eq!(call.header("mcp-name"), Some("go"));
    assert_eq!(call.header("mcp-protocol-version"), Some("2026-07-28"));
    assert_eq!(call.header("mcp-session-id"), None);
    assert_eq!(
        call.json()["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(reqs[1].header("mcp-method"), Some("tools/list"));
    assert_eq!(reqs[1].header("mcp-name"), None);
}
