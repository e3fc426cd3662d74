//! Model capsules against the providers as they are today: every request body the agent loop
//! sends, captured at the scripted provider and validated with the providers' official Python
//! SDKs; and the providers' retry signals (`retry-after`, 429, 529, 5xx) followed and traced.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Request, Step, anthropic, openai};
use crate::support::{PLANNER_CALLS_CODER, Sandbox, repo_root, stderr, stdout};

const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
const KEY: &str = "sk-it-providers-0123456789";

use crate::support::pins::PROVIDER_SDKS as SDKS;

/// Short provider waits, so retries take milliseconds.
const FAST_RETRIES: &str = "inference_retry=10ms,inference_retry_after_cap=30ms";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    OpenAi,
    Compatible,
    Anthropic,
}

impl Api {
    fn word(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Compatible => "openai-compatible",
            Api::Anthropic => "anthropic",
        }
    }

    /// A final answer, with the fields the provider returns today (thinking for Anthropic),
    /// streamed as the provider streams it.
    fn text(self, text: &str) -> Reply {
        self.streamed(match self {
            Api::OpenAi | Api::Compatible => openai_reply(
                json!({"role": "assistant", "content": text, "refusal": null, "annotations": []}),
                "stop",
            ),
            Api::Anthropic => anthropic_reply(
                vec![
                    json!({"type": "thinking", "thinking": "Nothing left to do.", "signature": "c2lnLTI="}),
                    json!({"type": "text", "text": text, "citations": null}),
                ],
                "end_turn",
            ),
        })
    }

    /// `call-member` tool calls `(id, member, task)`, streamed.
    fn calls(self, calls: &[(&str, &str, &str)]) -> Reply {
        self.streamed(match self {
            Api::OpenAi | Api::Compatible => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, m, t)| {
                        json!({"id": id, "type": "function", "function": {"name": "call-member",
                           "arguments": json!({"member": m, "task": t}).to_string()}})
                    })
                    .collect();
                openai_reply(
                    json!({"role": "assistant", "content": null, "refusal": null, "annotations": [],
                           "tool_calls": calls}),
                    "tool_calls",
                )
            }
            Api::Anthropic => {
                let mut blocks = vec![
                    json!({"type": "thinking", "thinking": "Split the work.", "signature": "c2lnLTE="}),
                    json!({"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="}),
                    json!({"type": "text", "text": "Handing out the work.", "citations": null}),
                ];
                blocks.extend(calls.iter().map(|(id, m, t)| {
                    json!({"type": "tool_use", "id": id, "name": "call-member",
                           "input": {"member": m, "task": t}, "caller": {"type": "direct"}})
                }));
                anthropic_reply(blocks, "tool_use")
            }
        })
    }

    /// `reply` as the events that stream it: what the loop sends back (the echo, thinking
    /// included) is then rebuilt from a stream, and checked below like any body.
    fn streamed(self, reply: Value) -> Reply {
        Reply::sse(&match self {
            Api::OpenAi | Api::Compatible => openai::stream_of(&reply),
            Api::Anthropic => anthropic::stream_of(&reply),
        })
    }
}

/// A Chat Completions reply with the usage details the API returns today.
fn openai_reply(message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-it", "object": "chat.completion", "created": 1_764_530_000, "model": "gpt-5.5",
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": null, "message": message}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140,
                  "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 32, "audio_tokens": 0,
                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default", "system_fingerprint": "fp_it",
    })
}

/// A Messages reply with the usage fields the API returns today.
fn anthropic_reply(content: Vec<Value>, stop: &str) -> Value {
    json!({
        "id": "msg_it", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
        "content": content, "stop_reason": stop, "stop_sequence": null, "container": null,
        "usage": {"input_tokens": 30, "output_tokens": 40, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 70, "service_tier": "standard"},
    })
}

/// A model capsule `name` pointed at `endpoint`; `extra` is appended under `inference:`, `tail`
/// at the top level.
fn install_model(sb: &Sandbox, name: &str, api: Api, endpoint: &str, extra: &str, tail: &str) {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: {}\n  endpoint: {endpoint}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You plan.\n{extra}{tail}",
        api.word()
    );
    sb.install_manifest(name, &manifest);
}

const PLANNER_TAIL: &str =
    "capabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n";

/// Runs a formation whose model entry calls `coder` (and a member it may not call), is refused
/// once with a 429, waits for coder's answer and continues with it: every kind of body the loop
/// sends. Returns the bodies the provider received.
fn formation_bodies(api: Api, extra: &str) -> Vec<Value> {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let script: Vec<Step> = vec![
        api.calls(&[("c1", "coder", "write the parser"), ("c2", "reviewer", "review it")])
            .into(),
        Reply::status(429, r#"{"error":{"type":"rate_limit_error"}}"#)
            .header("retry-after", "1")
            .into(),
        api.text("Waiting for coder.").into(),
        Step::func(move |req: &Request| {
            let cont = req.last_user_text().unwrap_or_default();
            api.text(if cont.contains("write the parser") {
                "Done."
            } else {
                "No answer."
            })
        }),
    ];
    let provider = Provider::start(script);
    install_model(&sb, "planner", api, provider.url(), extra, PLANNER_TAIL);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), PLANNER_CALLS_CODER).expect("roster");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env("MURMUR_TEST_TIMING", FAST_RETRIES)
        .args(["run", "--roster", "--task", "Ship a parser"])
        .output()
        .expect("mur run --roster");
    assert_eq!(out.status.code(), Some(0), "{api:?}: {}", stderr(&out));
    assert_eq!(stdout(&out), "Done.\n", "{api:?}");
    let bodies: Vec<Value> = provider.requests().iter().map(Request::json).collect();
    assert_eq!(bodies.len(), 4, "{api:?}");
    // The body after the 429 is the same request again.
    assert_eq!(bodies[1], bodies[2]);
    bodies
}

/// Runs the interop check on `entries`; panics with its output when it refuses one.
fn check_with_sdks(entries: &[Value]) -> String {
    let py = crate::support::python::python_with(SDKS, "openai, anthropic, pydantic");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), serde_json::to_vec(entries).unwrap()).expect("write bodies");
    let out = std::process::Command::new(py)
        .arg(repo_root().join("tests/interop/provider_bodies_check.py"))
        .arg(file.path())
        .output()
        .expect("run the check");
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "the providers' SDK types refuse a body:\n{text}");
    text
}

#[test]
fn every_request_body_validates_against_the_providers_sdks() {
    let mut entries = Vec::new();
    let configs = [
        (Api::OpenAi, ""),
        (Api::OpenAi, "  reasoning_effort: high\n"),
        (Api::Compatible, ""),
        (Api::Compatible, "  reasoning_effort: low\n"),
        (Api::Anthropic, ""),
    ];
    for (api, extra) in configs {
        let bodies = formation_bodies(api, extra);
        let first = &bodies[0];
        // What each provider's current API asks for.
        match api {
            Api::OpenAi => {
                assert_eq!(first["max_completion_tokens"], 4096);
                assert!(first.get("max_tokens").is_none());
                assert_eq!(first["messages"][0]["role"], "developer");
            }
            Api::Compatible => {
                assert_eq!(first["max_tokens"], 4096);
                assert!(first.get("max_completion_tokens").is_none());
                assert_eq!(first["messages"][0]["role"], "system");
            }
            Api::Anthropic => assert_eq!(first["max_tokens"], 4096),
        }
        let effort = extra.strip_prefix("  reasoning_effort: ").map(str::trim);
        for b in &bodies {
            // Every turn is streamed; the Chat Completions APIs then put the usage last.
            assert_eq!(b["stream"], true, "{api:?}");
            let options = (api != Api::Anthropic).then(|| json!({"include_usage": true}));
            assert_eq!(b.get("stream_options"), options.as_ref(), "{api:?}");
            assert_eq!(b.get("reasoning_effort").and_then(Value::as_str), effort, "{api:?}");
        }
        // The tool results: one started call, one refused (a member it may not call).
        let second = bodies[1].to_string();
        assert!(second.contains("Called coder: started"), "{second}");
        assert!(
            second.contains("'reviewer' is not a member this capsule may call"),
            "{second}"
        );
        if api == Api::Anthropic {
            // The assistant turn went back whole: thinking blocks before the tool calls.
            let turn = &bodies[1]["messages"][1]["content"];
            assert_eq!(turn[0]["type"], "thinking");
            assert_eq!(turn[1]["type"], "redacted_thinking");
            assert_eq!(turn[3]["type"], "tool_use");
        }
        entries.extend(
            bodies
                .into_iter()
                .map(|body| json!({"provider": api.word(), "body": body})),
        );
    }
    let report = check_with_sdks(&entries);
    assert_eq!(report.matches(" ok: ").count(), entries.len(), "{report}");
}

// ---------------------------------------------------------------------------------------------
// Retries, through `mur run --capsule`.

/// `mur run --capsule local/<name> --json --task hi` with fast retries: exit code, records
/// directory, stderr.
fn run_solo(sb: &Sandbox, timing: &str) -> (Option<i32>, PathBuf, String) {
    let dir = sb.path("work");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env("MURMUR_TEST_TIMING", timing)
        .args(["run", "--capsule", "local/solo", "--capsule-version", "0.1.0", "--json"])
        .args(["--task", "What is six times seven?"])
        .output()
        .expect("mur run");
    let ready: Value = stdout(&out)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    let records = PathBuf::from(ready["records_dir"].as_str().unwrap_or_default());
    (out.status.code(), records, stderr(&out))
}

fn retries_traced(records: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(records.join("trace.jsonl")).expect("trace.jsonl");
    assert!(!text.contains(KEY), "the trace holds the key");
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("trace line"))
        .filter(|r| r["event_type"] == "inference_retry")
        .collect()
}

#[test]
fn a_429_with_retry_after_then_200_completes_and_the_retry_is_traced() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Reply::status(429, r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#)
            .header("retry-after", "20")
            .into(),
        Api::OpenAi.text("forty-two").into(),
    ]);
    install_model(&sb, "solo", Api::OpenAi, provider.url(), "", "");
    let (code, records, err) = run_solo(&sb, FAST_RETRIES);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(provider.requests().len(), 2);
    let retries = retries_traced(&records);
    assert_eq!(retries.len(), 1, "{retries:?}");
    let r = &retries[0];
    // The provider asked for 20 s; test timing caps it at 30 ms.
    assert_eq!(
        (&r["attempt"], &r["status"], &r["delay_ms"], &r["wait"]),
        (&json!(1), &json!(429), &json!(30), &json!("retry-after"))
    );
    // Nothing of the request or the key: only these fields.
    let mut keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "attempt",
            "delay_ms",
            "event_id",
            "event_type",
            "parent_id",
            "session_id",
            "status",
            "task_id",
            "timestamp",
            "wait"
        ]
    );
}

#[test]
fn an_anthropic_529_overloaded_is_retried() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Reply::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .into(),
        Api::Anthropic.text("forty-two").into(),
    ]);
    install_model(&sb, "solo", Api::Anthropic, provider.url(), "", "");
    let (code, records, err) = run_solo(&sb, FAST_RETRIES);
    assert_eq!(code, Some(0), "{err}");
    let out = std::fs::read_to_string(records.join("out/result.txt")).unwrap_or_default();
    assert!(out.contains("forty-two"), "{out}");
    let retries = retries_traced(&records);
    assert_eq!(retries.len(), 1);
    assert_eq!(
        (&retries[0]["status"], &retries[0]["wait"]),
        (&json!(529), &json!("backoff"))
    );
}

#[test]
fn a_spent_retry_budget_fails_the_task_with_a_clear_message() {
    let sb = Sandbox::new();
    let busy = || Reply::status(503, r#"{"error":"busy"}"#).into();
    let provider = Provider::start(vec![
        busy(),
        busy(),
        busy(),
        busy(),
        busy(),
        Api::OpenAi.text("never").into(),
    ]);
    install_model(&sb, "solo", Api::OpenAi, provider.url(), "", "");
    let (code, records, err) = run_solo(&sb, FAST_RETRIES);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(provider.requests().len(), 5, "the first attempt and four retries");
    assert_eq!(
        std::fs::read_to_string(records.join("out/result.txt")).unwrap(),
        r#"failed: inference failed: 503 {"error":"busy"} (gave up after 4 retries)"#
    );
    let retries = retries_traced(&records);
    let attempts: Vec<&Value> = retries.iter().map(|r| &r["attempt"]).collect();
    assert_eq!(attempts, [&json!(1), &json!(2), &json!(3), &json!(4)]);
    assert!(retries.iter().all(|r| r["status"] == 503 && r["wait"] == "backoff"));
}

#[test]
fn reasoning_effort_is_refused_for_anthropic() {
    let sb = Sandbox::new();
    let src = sb.write(
        "src/murmur.yaml",
        "name: solo\nversion: 0.1.0\ninference:\n  provider: anthropic\n  model: m\n  reasoning_effort: high\n",
    );
    let dir = src.parent().expect("source dir");
    let out = sb.run(dir, &["build", dir.to_str().expect("utf-8 path")]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("error[E-MAN-003]: inference.reasoning_effort: cannot be declared together with inference.provider: anthropic"),
        "{err}"
    );
}

#[test]
fn no_retry_waits_past_the_sessions_deadline() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Reply::status(429, "slow down").header("retry-after", "30").into(),
        Api::OpenAi.text("too late").into(),
    ]);
    install_model(&sb, "solo", Api::OpenAi, provider.url(), "", "");
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 20_000;
    let dir = sb.path("work");
    let start = std::time::Instant::now();
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .args(["run", "--capsule", "local/solo", "--capsule-version", "0.1.0", "--json"])
        .args(["--task", "hi", "--inherited-deadline", &at.to_string()])
        .output()
        .expect("mur run");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(provider.requests().len(), 1, "no retry was made");
    let ready: Value = serde_json::from_str(stdout(&out).lines().next().unwrap_or("null")).unwrap_or(Value::Null);
    let records = PathBuf::from(ready["records_dir"].as_str().expect("records_dir"));
    assert_eq!(
        std::fs::read_to_string(records.join("out/result.txt")).unwrap(),
        "failed: inference failed: 429 slow down (gave up: a retry after 30s would end past the task's deadline)"
    );
    assert!(retries_traced(&records).is_empty());
}
