//! What a caller can make a session write into its records (issue 29, item 4), through the real
//! `mur` binary and its door: a field a caller controls reaches `trace.jsonl` only within its cap,
//! a malformed `traceparent` not at all, and a session's trace stops growing at its byte bound
//! (docs/reference/formation.md#trace-records).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::door::{Door, install, serve};
use crate::support::{Sandbox, wait_until};

/// Every record a door request makes fits in this many bytes: ids, names and statuses, and each
/// caller-controlled field within its 256-byte cap.
const LINE_BOUND: usize = 2048;

fn trace_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace.jsonl")
}

fn records(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn send_params(message_id: &str, text: &str) -> Value {
    json!({
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": true},
    })
}

/// The `a2a_task_received` record of `task_id`, once written.
fn received(d: &Door, task_id: &str) -> Value {
    let mut rec = Value::Null;
    let found = wait_until(Duration::from_secs(20), || {
        rec = records(&trace_text(&d.records_dir()))
            .into_iter()
            .find(|r| r["event_type"] == "a2a_task_received" && r["task_id"] == task_id)
            .unwrap_or(Value::Null);
        !rec.is_null()
    });
    assert!(found.is_some(), "no a2a_task_received for {task_id}");
    rec
}

#[test]
fn a_huge_message_id_or_a_malformed_traceparent_never_reaches_the_trace() {
    let sb = Sandbox::new();
    install(&sb, "echo", "rec", &serve(4));
    let d = Door::start(&sb, "rec", &[]);

    // 1 MiB of messageId, well under the 8 MiB body limit.
    let huge = "m".repeat(1 << 20);
    let h = d.call(None, "SendMessage", send_params(&huge, "x"));
    assert_eq!(h.status, 200, "{}", &h.body[..h.body.len().min(300)]);
    let text = trace_text(&d.records_dir());
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest <= LINE_BOUND,
        "a trace line of {longest} bytes after a 1 MiB messageId"
    );
    let reply = h.json();
    assert_eq!(reply["error"]["code"], -32602, "{}", &h.body[..h.body.len().min(300)]);
    assert!(
        h.body.len() < 1024,
        "the refusal does not echo the id: {} bytes",
        h.body.len()
    );
    assert!(
        h.body.contains("message.messageId") && h.body.contains("at most 256 bytes"),
        "{}",
        h.body
    );

    // A messageId at the cap is taken and recorded as sent.
    let at_cap = "i".repeat(256);
    let t = d.call(None, "SendMessage", send_params(&at_cap, "y")).json();
    let id = t["result"]["task"]["id"].as_str().expect("a task").to_string();
    assert_eq!(received(&d, &id)["message_id"], Value::from(at_cap));

    // A malformed traceparent (20 KB of it) is not recorded; a well-formed one is.
    let body =
        json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": send_params("m2", "z")}).to_string();
    let bad = format!("00-{}", "a".repeat(20_000));
    let t = d.post(None, &[("traceparent", &bad)], &body).json();
    let id = t["result"]["task"]["id"].as_str().expect("a task").to_string();
    assert_eq!(received(&d, &id)["traceparent_from_caller"], Value::Null);
    let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let t = d.post(None, &[("traceparent", good)], &body).json();
    let id = t["result"]["task"]["id"].as_str().expect("a task").to_string();
    assert_eq!(received(&d, &id)["traceparent_from_caller"], good);

    let text = trace_text(&d.records_dir());
    assert!(
        !text.contains("aaaaaaaaaaaaaaaa"),
        "the malformed traceparent was recorded"
    );
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= LINE_BOUND, "a trace line of {longest} bytes");
}

/// A session's trace stops at its byte bound (shrunk here by the test-only
/// `MURMUR_TEST_TRACE_BYTES`): one `trace_truncated` record, nothing more until `session_end`,
/// which is still written; the door goes on taking tasks.
#[test]
fn a_trace_at_its_bound_stops_growing_and_still_ends() {
    const BOUND: u64 = 16 * 1024;
    let sb = Sandbox::new();
    install(&sb, "echo", "rec", &serve(4));
    let mut d = Door::start(&sb, "rec", &[("MURMUR_TEST_TRACE_BYTES", &BOUND.to_string())]);
    // Each task writes three records of a few hundred bytes: 60 of them are ten times the bound.
    let mut last = String::new();
    for i in 0..60 {
        let t = d.send(None, &format!("task {i} {}", "t".repeat(200)), false);
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
        last = t["id"].as_str().expect("id").to_string();
    }
    assert_eq!(d.task(None, &last)["status"]["state"], "TASK_STATE_COMPLETED");
    d.terminate();
    assert_eq!(d.wait(Duration::from_secs(30)), Some(0), "{}", d.stderr());

    let dir = d.records_dir();
    let len = std::fs::metadata(dir.join("trace.jsonl")).expect("trace").len();
    assert!(
        len <= BOUND + 1024,
        "the trace grew to {len} bytes past its bound of {BOUND}"
    );
    let recs = records(&trace_text(&dir));
    let marks: Vec<&Value> = recs.iter().filter(|r| r["event_type"] == "trace_truncated").collect();
    assert_eq!(marks.len(), 1, "one marker: {recs:?}");
    assert_eq!(marks[0]["limit_bytes"], BOUND);
    assert_eq!(recs[0]["event_type"], "session_start");
    let end = recs.last().expect("records");
    assert_eq!(end["event_type"], "session_end", "{end}");
    assert_eq!(
        recs[recs.len() - 2]["event_type"],
        "trace_truncated",
        "nothing between marker and end"
    );
    assert!(
        d.stderr().contains("warning[W-ENV-001]: MURMUR_TEST_TRACE_BYTES"),
        "the switch is announced: {}",
        d.stderr()
    );
}
