//! What a model capsule's trace says about its work: `task_start`, one `inference` record per
//! model turn (provider, model, time, the tokens the provider reported, finish reason, retries),
//! `task_end` with `duration_ms`; never the prompt, the answer or the key. `mur trace show`
//! sums it.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Step, openai};
use crate::support::{Sandbox, stderr, stdout};

const KEY_VAR: &str = "MUR_IT_USAGE_KEY";
const KEY: &str = "sk-it-usage-0123456789";
const TASK: &str = "What is six times seven?";
const SYSTEM: &str = "You answer in riddles only.";

/// A solo model capsule whose provider answers `script`; runs `--task TASK` and returns the
/// exit code, the session id, the trace records, the raw trace and stderr.
fn run_solo(sb: &Sandbox, script: Vec<Step>) -> (Option<i32>, String, Vec<Value>, String, String) {
    let provider = Provider::start(script);
    let manifest = format!(
        "name: solo\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: {SYSTEM}\n",
        provider.url()
    );
    sb.install_manifest("solo", &manifest);
    let dir = sb.path("work");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env(
            "MURMUR_TEST_TIMING",
            "inference_retry=10ms,inference_retry_after_cap=30ms",
        )
        .args(["run", "--capsule", "local/solo", "--capsule-version", "0.1.0", "--json"])
        .args(["--task", TASK])
        .output()
        .expect("mur run");
    let ready: Value = stdout(&out)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    let records = PathBuf::from(ready["records_dir"].as_str().unwrap_or_default());
    let text = std::fs::read_to_string(records.join("trace.jsonl")).unwrap_or_default();
    let recs = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a trace line"))
        .collect();
    let session = ready["session_id"].as_str().unwrap_or_default().to_string();
    (out.status.code(), session, recs, text, stderr(&out))
}

fn of<'a>(recs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["event_type"] == kind).collect()
}

#[test]
fn model_turns_tasks_and_their_durations_are_traced_without_any_text() {
    let sb = Sandbox::new();
    let (code, session, recs, text, err) = run_solo(
        &sb,
        vec![
            Reply::status(429, r#"{"error":{"type":"rate_limit_error"}}"#)
                .header("retry-after", "1")
                .into(),
            Reply::sse(&openai::stream_of(&openai::text("forty-two"))).into(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let kinds: Vec<&str> = recs.iter().filter_map(|r| r["event_type"].as_str()).collect();
    let pos = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k} in {kinds:?}"))
    };
    assert!(pos("a2a_task_received") < pos("task_start"), "{kinds:?}");
    assert!(pos("task_start") < pos("inference_retry"), "{kinds:?}");
    assert!(pos("inference_retry") < pos("inference"), "{kinds:?}");
    assert!(pos("inference") < pos("task_end"), "{kinds:?}");

    let start = of(&recs, "task_start");
    let turn = of(&recs, "inference");
    let end = of(&recs, "task_end");
    assert_eq!((start.len(), turn.len(), end.len()), (1, 1, 1), "{kinds:?}");
    let task_id = &start[0]["task_id"];
    assert_eq!(&end[0]["task_id"], task_id);
    let t = turn[0];
    assert_eq!(&t["task_id"], task_id);
    // The record's own fields, in order: what the request was and how it went, nothing else.
    let line = text
        .lines()
        .find(|l| l.starts_with(r#"{"event_type":"inference","#))
        .expect("the inference line");
    let mut keys: Vec<(usize, &str)> = t
        .as_object()
        .expect("object")
        .keys()
        .map(|k| (line.find(&format!("\"{k}\":")).expect("key in line"), k.as_str()))
        .collect();
    keys.sort_unstable();
    let keys: Vec<&str> = keys.into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        keys,
        [
            "event_type",
            "event_id",
            "parent_id",
            "session_id",
            "timestamp",
            "task_id",
            "turn",
            "provider",
            "model",
            "response_model",
            "duration_ms",
            "input_tokens",
            "output_tokens",
            "finish_reason",
            "retries",
            "streamed",
            "status",
            // The default guard keeps a token budget for a session run without one.
            "budget_reserved",
            "budget_charged",
            "budget_left"
        ]
    );
    assert_eq!(
        (&t["turn"], &t["provider"], &t["model"], &t["response_model"]),
        (&json!(1), &json!("openai"), &json!("test-model"), &json!("scripted"))
    );
    assert_eq!(
        (&t["input_tokens"], &t["output_tokens"], &t["finish_reason"]),
        (&json!(10), &json!(5), &json!("stop"))
    );
    assert_eq!(
        (&t["retries"], &t["streamed"], &t["status"]),
        (&json!(1), &json!(true), &json!("ok"))
    );
    let turn_ms = t["duration_ms"].as_u64().expect("duration_ms");
    let task_ms = end[0]["duration_ms"].as_u64().expect("task_end.duration_ms");
    assert!(turn_ms >= 10, "the retry's wait is part of the turn: {turn_ms}");
    assert!(task_ms >= turn_ms, "{task_ms} < {turn_ms}");

    for secret in [KEY, TASK, SYSTEM, "forty-two"] {
        assert!(!text.contains(secret), "the trace holds {secret:?}");
    }

    // `mur trace show ses_… --json` sums the same records.
    let shown = sb.run(&sb.path("work"), &["trace", "show", &session, "--json"]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let v: Value = serde_json::from_str(stdout(&shown).trim()).expect("one JSON object");
    assert_eq!(v["session_id"], session.as_str());
    let u = &v["usage"];
    assert_eq!(
        (
            &u["tasks"],
            &u["model_turns"],
            &u["input_tokens"],
            &u["output_tokens"],
            &u["calls"]
        ),
        (&json!(1), &json!(1), &json!(10), &json!(5), &json!(0))
    );
    assert_eq!(u["model_ms"], turn_ms);
    assert_eq!(u["task_ms"], task_ms);
    assert_eq!(u["other_ms"], task_ms - turn_ms);
}

#[test]
fn a_turn_whose_provider_reports_no_usage_has_no_token_counts() {
    let sb = Sandbox::new();
    let mut reply = openai::text("forty-two");
    reply.as_object_mut().expect("object").remove("usage");
    let (code, _session, recs, _text, err) = run_solo(&sb, vec![Reply::json(reply).into()]);
    assert_eq!(code, Some(0), "{err}");
    let t = of(&recs, "inference");
    assert_eq!(t.len(), 1);
    assert!(t[0].get("input_tokens").is_none(), "{}", t[0]);
    assert!(t[0].get("output_tokens").is_none(), "{}", t[0]);
    assert_eq!(t[0]["streamed"], false);
    // session_end still counts what was reported: nothing.
    let end = of(&recs, "session_end");
    assert_eq!(end[0]["total_input_tokens"], 0);
}

#[test]
fn a_failed_turn_is_traced_as_failed() {
    let sb = Sandbox::new();
    let (code, _session, recs, text, err) = run_solo(
        &sb,
        vec![Reply::status(400, r#"{"error":{"message":"bad request"}}"#).into()],
    );
    assert_eq!(code, Some(1), "{err}");
    let t = of(&recs, "inference");
    assert_eq!(t.len(), 1, "{text}");
    assert_eq!((&t[0]["status"], &t[0]["retries"]), (&json!("failed"), &json!(0)));
    assert!(t[0].get("input_tokens").is_none());
    let end = of(&recs, "task_end");
    assert_eq!(end[0]["exit_status"], "failed");
    assert!(end[0]["duration_ms"].is_u64());
}
