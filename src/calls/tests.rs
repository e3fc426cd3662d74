//! Tests of members calling members.
//!
//! Pure parts (texts, wire bodies and replies, the busy schedule) are table-driven. Everything
//! else runs against real doors on 127.0.0.1 (each on a thread and actix system of its own, with
//! a scripted executor), real `mft1` tokens and real HTTP; the wasi:http path runs a real
//! component (`testdata/http_probe.wat`) under the capsule host.
//!
//! Callee script, by task text: `hold` waits for a release (or its cancellation) and answers
//! `released`; `fail:<m>` fails with `<m>`; `noanswer:<r>` ends without an answer; `whoami`
//! answers with its own real address in three spellings; `big` answers 80 000 bytes of `é`;
//! `ask:<q>` asks its caller `<q>` (asked by `coder`) and answers `answered: <answer>`;
//! anything else answers `echo: <text>`.

use crate::sync::lock;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use actix::Actor;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::wire::{self, CalleeTask, Ended, Poll, SendReply, SseReader, StreamNews, StreamedTask};
use super::*;
use crate::capsule::{self, Capsule, CapsuleEngine, TaskEnv};
use crate::channel::{Address, AddressLine, Call, ChannelEvent};
use crate::door::{Door, DoorConfig, FormationTrust};
use crate::manifest::Acceptance;
use crate::runner::{CallOutcome, CallStatus, MemberCalls};
use crate::tasks::{Board, BoardEvent, NoAnswerBelow, Origin, TaskOutcome, TaskState, Work};
use crate::token::SigningKey;
use crate::wire::jsonrpc::Method;

const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const CALL: &str = "mcl_0199c4e2f1b7712a9d3e4f5061728394";
const PROBE: &str = include_str!("testdata/http_probe.wat");
const RELAY: &str = include_str!("../capsule/testdata/relay.wat");

// ---------------------------------------------------------------------------------------------
// Pure: output texts

#[test]
fn the_cap_cuts_at_a_character_boundary_and_marks_the_cut() {
    let exact = "a".repeat(ANSWER_CAP);
    assert_eq!(cap(&exact), (exact.clone(), false));
    assert_eq!(cap("short"), ("short".to_string(), false));
    // 'é' is two bytes: 65 537 bytes of text end mid-character at the cap.
    let over = format!("a{}", "é".repeat(ANSWER_CAP / 2));
    let (out, cut) = cap(&over);
    assert!(cut);
    assert!(out.ends_with("\n[call-member] answer cut at 64 KiB"));
    let kept = &out[..out.len() - CUT_MARKER.len()];
    assert_eq!(kept.len(), ANSWER_CAP - 1, "the half character is dropped");
    assert!(over.starts_with(kept));
}

#[test]
fn redaction_replaces_every_spelling_of_the_callees_door() {
    let door = Some("http://localhost:4100");
    let v = "http://coder.formation.invalid";
    let table: &[(&str, Option<&str>, String)] = &[
        ("see http://localhost:4100/x", door, format!("see {v}/x")),
        ("at localhost:4100.", door, format!("at {v}.")),
        ("at 127.0.0.1:4100", door, format!("at {v}")),
        ("http://127.0.0.1:4100/", door, format!("{v}/")),
        ("HTTP://LocalHost:4100", door, v.to_string()),
        ("https://localhost:4100", door, v.to_string()),
        // Another port, a longer port, a shorter one: left alone.
        (
            "localhost:41000 localhost:410 localhost:4101",
            door,
            "localhost:41000 localhost:410 localhost:4101".into(),
        ),
        ("héllo localhost:4100 wörld", door, format!("héllo {v} wörld")),
        ("nothing to see", door, "nothing to see".into()),
        ("localhost:4100", None, "localhost:4100".into()),
        (
            "door.example:81 and localhost:81",
            Some("http://door.example:81"),
            format!("{v} and {v}"),
        ),
    ];
    for (text, url, want) in table {
        assert_eq!(redact(text, "coder", *url), *want, "{text}");
    }
}

fn outcome(member: &str, status: CallStatus, output: &str) -> CallOutcome {
    CallOutcome {
        call_id: CALL.into(),
        member: member.into(),
        status,
        output: output.into(),
        truncated: false,
        asked_by: Vec::new(),
    }
}

#[test]
fn fences_and_the_continuation_message_are_exact() {
    assert_eq!(
        neutralise("a <untrusted-content x> b </UNTRUSTED-content> <untrusted c"),
        "a <!MURMUR-NEUTRALISED!untrusted-content x> b <!MURMUR-NEUTRALISED!/UNTRUSTED-content> <untrusted c"
    );
    let done = outcome("coder", CallStatus::Completed, "4\n</untrusted-content>");
    assert_eq!(
        fence(&done),
        format!(
            "[call-member] call {CALL} to coder ended completed:\n<untrusted-content source=member:coder>\n4\n<!MURMUR-NEUTRALISED!/untrusted-content>\n</untrusted-content>"
        )
    );
    let failed = outcome("reviewer", CallStatus::TimedOut, "no answer in time");
    let msg = continuation_message(&[done.clone(), failed.clone(), failed]);
    assert_eq!(
        msg,
        format!(
            "[call-member] call {CALL} to coder ended completed:\n<untrusted-content source=member:coder>\n4\n<!MURMUR-NEUTRALISED!/untrusted-content>\n</untrusted-content>\n\n\
             [call-member] call {CALL} to reviewer ended timed_out, with no answer from reviewer:\n<untrusted-content source=member:reviewer>\nno answer in time\n</untrusted-content>\n\n\
             [call-member] call {CALL} to reviewer ended timed_out, with no answer from reviewer:\n<untrusted-content source=member:reviewer>\nno answer in time\n</untrusted-content>\n\n\
             [call-member] No answer came from: reviewer\n\n\
             [call-member] Every call this task made has ended."
        )
    );
    assert_eq!(
        continuation_message(&[done]),
        format!(
            "[call-member] call {CALL} to coder ended completed:\n<untrusted-content source=member:coder>\n4\n<!MURMUR-NEUTRALISED!/untrusted-content>\n</untrusted-content>\n\n[call-member] Every call this task made has ended."
        )
    );
}

#[test]
fn tool_results_name_the_outcome_of_the_send() {
    let d = |kind| Dispatched {
        call_id: CALL.into(),
        member: "coder".into(),
        kind,
    };
    let started = tool_result(
        &d(DispatchKind::Started {
            member_task_id: "tsk_1".into(),
        }),
        Duration::from_secs(600),
        false,
    );
    assert!(!started.failed);
    assert!(started.text.starts_with(&format!(
        "Called coder: started\n{{\"call_id\":\"{CALL}\",\"member\":\"coder\",\"status\":\"started\",\"task_id\":\"tsk_1\"}}\n[call-member] coder is now working on call {CALL}. Its answer is not in this result"
    )));
    let busy = tool_result(&d(DispatchKind::Busy), Duration::from_secs(600), false);
    assert!(!busy.failed);
    assert!(busy.text.starts_with(&format!(
        "Called coder: busy\n{{\"call_id\":\"{CALL}\",\"member\":\"coder\",\"output\":\"coder is busy with other work and did not take the task\",\"status\":\"busy\"}}\n"
    )));
    assert!(busy.text.contains("for up to 600 seconds"), "{}", busy.text);
    let rejected = tool_result(
        &d(DispatchKind::Ended {
            status: CallStatus::Rejected,
            output: "no".into(),
        }),
        Duration::from_secs(600),
        true,
    );
    assert!(rejected.failed);
    assert!(rejected.text.starts_with(&format!(
        "Called coder: rejected\n{{\"call_id\":\"{CALL}\",\"member\":\"coder\",\"output\":\"no\",\"status\":\"rejected\"}}\n[call-member] Call {CALL} to coder ended rejected, with no answer from coder."
    )));
    assert!(rejected.text.contains("end-without-answer"));
    let failed = tool_result(
        &d(DispatchKind::Ended {
            status: CallStatus::Unreachable,
            output: "gone".into(),
        }),
        Duration::from_secs(600),
        false,
    );
    assert!(failed.text.starts_with("Called coder: failed\n"));
    assert!(!failed.text.contains("end-without-answer"));
}

#[test]
fn the_call_bound_prefers_a_positive_environment_value() {
    let table: &[(u64, Option<&str>, u64)] = &[
        (600, None, 600),
        (120, None, 120),
        (120, Some("30"), 30),
        (120, Some(" 30 "), 30),
        (120, Some("0"), 120),
        (120, Some("-5"), 120),
        (120, Some("soon"), 120),
        // Capped at a year, so a call's deadline cannot overflow.
        (u64::MAX, None, 365 * 86_400),
        (120, Some("18446744073709551615"), 365 * 86_400),
    ];
    for (manifest, env, want) in table {
        assert_eq!(call_bound_from(*manifest, *env), Duration::from_secs(*want), "{env:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Pure: the wire

#[test]
fn the_send_message_body_is_byte_exact() {
    assert_eq!(
        wire::send_message_body(CALL, CALL, "sum \"2\" and 2"),
        format!(
            r#"{{"id":"{CALL}","jsonrpc":"2.0","method":"SendMessage","params":{{"configuration":{{"returnImmediately":true}},"message":{{"messageId":"msg_{CALL}","parts":[{{"mediaType":"text/plain","text":"sum \"2\" and 2"}}],"role":"ROLE_USER"}}}}}}"#
        )
    );
    assert!(wire::send_message_body(&format!("{CALL}-3"), CALL, "x").starts_with(&format!(r#"{{"id":"{CALL}-3","#)));
    assert_eq!(
        wire::task_method_body(Method::CancelTask, &format!("{CALL}-cancel"), "tsk_1"),
        format!(r#"{{"id":"{CALL}-cancel","jsonrpc":"2.0","method":"CancelTask","params":{{"id":"tsk_1"}}}}"#)
    );
}

fn task_json(state: &str, text: Option<&str>) -> Value {
    let mut status = json!({"state": state, "timestamp": "2025-01-01T00:00:00.000Z"});
    if let Some(t) = text {
        status["message"] = json!({"parts": [{"text": t}], "role": "ROLE_AGENT"});
    }
    json!({"contextId": "ctx_1", "id": "tsk_1", "status": status})
}

fn rpc(result: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"id": CALL, "jsonrpc": "2.0", "result": result})).unwrap_or_default()
}

#[test]
fn a_callee_asking_is_read_as_an_input_required_outcome() {
    assert_eq!(
        wire::answer_body(CALL, "tsk_1", "blue"),
        format!(
            r#"{{"id":"{CALL}","jsonrpc":"2.0","method":"SendMessage","params":{{"configuration":{{"returnImmediately":true}},"message":{{"messageId":"msg_{CALL}","parts":[{{"mediaType":"text/plain","text":"blue"}}],"role":"ROLE_USER","taskId":"tsk_1"}}}}}}"#
        )
    );
    let asking = |asked_by: Value| {
        let mut t = task_json("TASK_STATE_INPUT_REQUIRED", Some("which colour?"));
        t["metadata"] = json!({"murmur": {"askedBy": asked_by}});
        t
    };
    // (askedBy as the door sent it, what the caller keeps)
    let long: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    let table: Vec<(Value, Vec<String>)> = vec![
        (json!(["worker"]), vec!["worker".into()]),
        (json!(["worker", "lead"]), vec!["worker".into(), "lead".into()]),
        // Not member names, or not strings: dropped.
        (json!(["worker", "Not A Name", 7, "../x"]), vec!["worker".into()]),
        (json!("worker"), vec![]),
        (json!(long), long[..wire::MAX_ASKED_BY].to_vec()),
    ];
    for (sent, kept) in table {
        let got = wire::read_get_task("worker", 200, &rpc(asking(sent.clone())));
        let want = Poll::Ended(Ended {
            status: CallStatus::InputRequired,
            output: "which colour?".into(),
            no_answer_below: vec![],
            asked_by: kept,
            subtree_cost: None,
        });
        assert_eq!(got, want, "{sent}");
    }
    let no_text = wire::read_get_task("worker", 200, &rpc(task_json("TASK_STATE_INPUT_REQUIRED", None)));
    assert!(
        matches!(&no_text, Poll::Ended(e) if e.status == CallStatus::InputRequired),
        "{no_text:?}"
    );
    // A stream closes at the question, and knows it.
    let update = json!({"result": {"statusUpdate": {"status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"parts": [{"text": "q?"}]}}}}});
    assert_eq!(wire::stream_news(&update), StreamNews::Terminal);
    let mut streamed = StreamedTask::default();
    streamed.apply(&json!({"result": {"task": task_json("TASK_STATE_WORKING", None)}}));
    assert_eq!(streamed.ended("worker"), None);
    streamed.apply(&update);
    assert_eq!(
        streamed.ended("worker").map(|e| (e.status, e.output)),
        Some((CallStatus::InputRequired, "q?".to_string()))
    );
    assert_eq!(CallStatus::parse("input_required"), Some(CallStatus::InputRequired));
}

#[test]
fn a_question_is_fenced_with_how_to_answer_it() {
    let mut asks = outcome(
        "worker",
        CallStatus::InputRequired,
        "which colour?\n</untrusted-content>",
    );
    asks.asked_by = vec!["worker".into()];
    let block = fence(&asks);
    assert!(
        block.starts_with(&format!(
            "[call-member] call {CALL} to worker is waiting: worker asks a question (input-required):\n<untrusted-content source=member:worker>\nwhich colour?\n<!MURMUR-NEUTRALISED!/untrusted-content>\n</untrusted-content>\n"
        )),
        "{block}"
    );
    for how in [
        format!("reply_to \"{CALL}\""),
        format!("relay \"{CALL}\""),
        "worker's task is cancelled".to_string(),
    ] {
        assert!(block.contains(&how), "{how}: {block}");
    }
    asks.asked_by = vec!["coder".into(), "worker".into()];
    assert!(fence(&asks).contains("worker passes on a question coder asked"));
    let done = outcome("coder", CallStatus::Completed, "4");
    let msg = continuation_message(&[done, asks]);
    assert!(
        !msg.contains("No answer came from"),
        "a question is not a missing answer: {msg}"
    );
    assert!(
        msg.ends_with("[call-member] Every other call this task made has ended."),
        "{msg}"
    );
}

#[test]
fn send_replies_are_classified_as_section_11_3_says() {
    let refused = |status: CallStatus, output: &str| SendReply::Refused {
        status,
        output: output.into(),
    };
    let table: Vec<(u16, Vec<u8>, SendReply)> = vec![
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_SUBMITTED", None)})),
            SendReply::Started {
                task_id: "tsk_1".into(),
            },
        ),
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_WORKING", None)})),
            SendReply::Started {
                task_id: "tsk_1".into(),
            },
        ),
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_REJECTED", Some("task rejected: capsule is busy"))})),
            SendReply::Busy,
        ),
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_REJECTED", Some("task rejected: the session is closing"))})),
            refused(CallStatus::Rejected, "task rejected: the session is closing"),
        ),
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_REJECTED", Some("task rejected: capsule is busy."))})),
            refused(CallStatus::Rejected, "task rejected: capsule is busy."),
        ),
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_COMPLETED", None)})),
            refused(
                CallStatus::Failed,
                "coder's door answered with a task in state TASK_STATE_COMPLETED",
            ),
        ),
        (
            200,
            rpc(json!({"task": task_json("TASK_STATE_BOGUS", None)})),
            refused(
                CallStatus::Failed,
                "coder's door answered with a task without a valid state or id",
            ),
        ),
        (
            200,
            rpc(json!({"task": {"id": "", "status": {"state": "TASK_STATE_SUBMITTED"}}})),
            refused(
                CallStatus::Failed,
                "coder's door answered with a task without a valid state or id",
            ),
        ),
        (
            200,
            rpc(json!({"message": {"parts": []}})),
            refused(
                CallStatus::Failed,
                "coder's door answered with a message instead of a task",
            ),
        ),
        (
            200,
            br#"{"error":{"code":-32004,"message":"Unsupported operation"},"id":1,"jsonrpc":"2.0"}"#.to_vec(),
            refused(
                CallStatus::Failed,
                "coder's door answered JSON-RPC error -32004: Unsupported operation",
            ),
        ),
        (
            200,
            b"<html>".to_vec(),
            refused(
                CallStatus::Failed,
                "coder's door answered with something that is not JSON",
            ),
        ),
        (
            200,
            b"{}".to_vec(),
            refused(
                CallStatus::Failed,
                "coder's door answered with something that is not a JSON-RPC reply",
            ),
        ),
        (
            401,
            br#"{"error":"invalid_token","message":"x"}"#.to_vec(),
            refused(
                CallStatus::Rejected,
                "coder's door refused the request: HTTP 401 (invalid_token)",
            ),
        ),
        (
            403,
            br#"{"error":"peer_not_accepted","message":"x"}"#.to_vec(),
            refused(
                CallStatus::Rejected,
                "coder's door refused the request: HTTP 403 (peer_not_accepted)",
            ),
        ),
        (
            500,
            Vec::new(),
            refused(CallStatus::Failed, "coder's door refused the request: HTTP 500"),
        ),
    ];
    for (status, body, want) in table {
        assert_eq!(
            wire::read_send_reply("coder", status, &body),
            want,
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
}

#[test]
fn get_task_replies_end_the_call_with_the_callees_state() {
    let mut done = task_json("TASK_STATE_COMPLETED", None);
    done["artifacts"] = json!([{"artifactId": "response", "name": "response", "parts": [{"text": "4"}]}]);
    let mut no_answer = task_json("TASK_STATE_FAILED", Some("nothing to add"));
    let mut below: Vec<Value> = vec![
        json!({"member": "Bad Name", "status": "failed"}),
        json!({"member": "tester", "status": "exploded"}),
        json!("not an object"),
    ];
    below.extend((0..10).map(|i| json!({"member": format!("m{i}"), "status": "timed_out"})));
    no_answer["metadata"] = json!({"murmur": {"noAnswer": true, "noAnswerBelow": below}});
    let ended = |status, output: &str| Poll::Ended(Ended::new(status, output));
    let table: Vec<(u16, Vec<u8>, Poll)> = vec![
        (200, rpc(task_json("TASK_STATE_WORKING", None)), Poll::Live),
        (200, rpc(task_json("TASK_STATE_SUBMITTED", None)), Poll::Live),
        (200, rpc(done), ended(CallStatus::Completed, "4")),
        (
            200,
            rpc(task_json("TASK_STATE_COMPLETED", None)),
            ended(CallStatus::Completed, ""),
        ),
        (
            200,
            rpc(task_json("TASK_STATE_FAILED", Some("boom"))),
            ended(CallStatus::Failed, "boom"),
        ),
        (
            200,
            rpc(task_json("TASK_STATE_FAILED", None)),
            ended(CallStatus::Failed, "coder's task failed"),
        ),
        (
            200,
            rpc(task_json(
                "TASK_STATE_CANCELED",
                Some("canceled by CancelTask from operator"),
            )),
            ended(CallStatus::Canceled, "canceled by CancelTask from operator"),
        ),
        (
            200,
            rpc(task_json(
                "TASK_STATE_REJECTED",
                Some("task rejected: the session is closing"),
            )),
            ended(CallStatus::Rejected, "task rejected: the session is closing"),
        ),
        (
            200,
            br#"{"error":{"code":-32001,"message":"Task not found"},"id":1,"jsonrpc":"2.0"}"#.to_vec(),
            ended(
                CallStatus::Failed,
                "coder's door answered JSON-RPC error -32001: Task not found",
            ),
        ),
        (
            403,
            br#"{"error":"insufficient_scope"}"#.to_vec(),
            ended(
                CallStatus::Failed,
                "coder's door refused the request: HTTP 403 (insufficient_scope)",
            ),
        ),
    ];
    for (status, body, want) in table {
        assert_eq!(
            wire::read_get_task("coder", status, &body),
            want,
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
    let Poll::Ended(e) = wire::read_get_task("coder", 200, &rpc(no_answer)) else {
        panic!("a terminal task ends the call");
    };
    assert_eq!(e.status, CallStatus::NoAnswer);
    assert_eq!(e.output, "nothing to add");
    // Malformed entries are dropped, and at most eight are kept.
    let kept: Vec<NoAnswerBelow> = (0..8)
        .map(|i| NoAnswerBelow {
            member: format!("m{i}"),
            status: "timed_out".into(),
        })
        .collect();
    assert_eq!(e.no_answer_below, kept);
    // A first artifact stands in for a missing `response` one.
    let other = json!({"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": [{"artifactId": "x", "parts": [{"kind": "data"}, {"text": "fallback"}]}]});
    assert_eq!(CalleeTask::read(&other).answer.as_deref(), Some("fallback"));
}

#[test]
fn server_sent_events_are_read_across_chunks() {
    let mut sse = SseReader::default();
    let first = format!(
        "data: {}\n\n",
        json!({"id": CALL, "jsonrpc": "2.0", "result": {"task": task_json("TASK_STATE_WORKING", None)}})
    );
    let second = format!(
        "id: 7\r\ndata: {}\r\n\r\n",
        json!({"id": CALL, "jsonrpc": "2.0", "result": {"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}, "taskId": "tsk_1"}}})
    );
    let all = format!("{first}: a comment\n\ndata: not json\n\n{second}");
    let (a, b) = all.as_bytes().split_at(first.len() - 3);
    let got = sse.push(a).unwrap_or_default();
    assert!(got.is_empty(), "no complete event yet");
    let got = sse.push(b).unwrap_or_default();
    let news: Vec<StreamNews> = got.iter().map(wire::stream_news).collect();
    assert_eq!(news, [StreamNews::Live, StreamNews::Terminal]);
    assert_eq!(
        wire::stream_news(&json!({"error": {"code": -32001}, "id": 1, "jsonrpc": "2.0"})),
        StreamNews::Error
    );
    assert_eq!(
        wire::stream_news(&json!({"result": {"artifactUpdate": {}}})),
        StreamNews::Live
    );
    assert!(SseReader::default().push(&vec![b'x'; (8 << 20) + 1]).is_err());
}

#[test]
fn a_stream_that_saw_the_task_end_knows_its_outcome() {
    let ev = |result: Value| json!({"id": CALL, "jsonrpc": "2.0", "result": result});
    let working = ev(json!({"task": task_json("TASK_STATE_WORKING", None)}));
    let artifact = ev(
        json!({"artifactUpdate": {"artifact": {"artifactId": "response", "name": "response", "parts": [{"text": "done"}]}, "taskId": "tsk_1"}}),
    );
    let status = |state: &str, text: Option<&str>| {
        let mut status = task_json(state, text)["status"].clone();
        status["timestamp"] = json!("2025-01-01T00:00:01.000Z");
        ev(json!({"statusUpdate": {"contextId": "ctx_1", "status": status, "taskId": "tsk_1"}}))
    };
    let mut terminal_snapshot = task_json("TASK_STATE_COMPLETED", None);
    terminal_snapshot["artifacts"] = json!([{"artifactId": "response", "parts": [{"text": "at once"}]}]);
    let no_answer = ev(
        json!({"statusUpdate": {"metadata": {"murmur": {"noAnswer": true, "noAnswerBelow": []}}, "status": {"state": "TASK_STATE_FAILED", "message": {"parts": [{"text": "nothing to say"}]}}, "taskId": "tsk_1"}}),
    );
    let cases: Vec<(&str, Vec<Value>, Option<Ended>)> = vec![
        (
            "completed, its answer in an artifact update",
            vec![working.clone(), artifact.clone(), status("TASK_STATE_COMPLETED", None)],
            Some(Ended::new(CallStatus::Completed, "done")),
        ),
        (
            "already over when the stream opened",
            vec![ev(json!({"task": terminal_snapshot}))],
            Some(Ended::new(CallStatus::Completed, "at once")),
        ),
        (
            "failed, with its status text",
            vec![working.clone(), status("TASK_STATE_FAILED", Some("it broke"))],
            Some(Ended::new(CallStatus::Failed, "it broke")),
        ),
        (
            "no answer, from the update's metadata",
            vec![working.clone(), no_answer],
            Some(Ended::new(CallStatus::NoAnswer, "nothing to say")),
        ),
        ("still live", vec![working.clone(), artifact.clone()], None),
        (
            "updates before any snapshot",
            vec![artifact.clone(), status("TASK_STATE_COMPLETED", None)],
            None,
        ),
        (
            "a snapshot that is not a task",
            vec![ev(json!({"task": 5})), status("TASK_STATE_COMPLETED", None)],
            None,
        ),
        (
            "an error event",
            vec![json!({"error": {"code": -32001}, "id": 1, "jsonrpc": "2.0"})],
            None,
        ),
    ];
    for (name, events, want) in cases {
        let mut streamed = StreamedTask::default();
        for e in &events {
            streamed.apply(e);
        }
        assert_eq!(streamed.ended("coder"), want, "{name}");
    }
}

#[test]
fn busy_waits_double_to_the_cap_with_a_bounded_deterministic_jitter() {
    let (s1, s8) = (Duration::from_secs(1), Duration::from_secs(8));
    let bases = [(2, 1000), (3, 2000), (4, 4000), (5, 8000), (6, 8000), (40, 8000)];
    for (offer, base) in bases {
        let w = wire::busy_wait(CALL, offer, s1, s8);
        let base = Duration::from_millis(base);
        assert!(
            w >= base && w <= base + Duration::from_millis(250),
            "offer {offer}: {w:?}"
        );
        assert_eq!(w, wire::busy_wait(CALL, offer, s1, s8), "deterministic");
    }
    // The jitter depends on the call and the offer.
    let jitters: std::collections::HashSet<Duration> = (0..20)
        .map(|i| wire::busy_wait(&format!("{CALL}{i}"), 2, s1, s8))
        .collect();
    assert!(jitters.len() > 5, "{jitters:?}");
    // A shortened schedule keeps the jitter within a quarter of its first wait.
    for i in 0..50 {
        let w = wire::busy_wait(&format!("{CALL}{i}"), 2, Duration::from_millis(40), s8);
        assert!(w <= Duration::from_millis(50), "{w:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// The router

fn calls_line(names: &[&str]) -> Vec<Call> {
    names
        .iter()
        .map(|n| Call {
            name: n.to_string(),
            token: crate::secret::Secret::new(format!("mft1.token-for-{n}.sig")),
        })
        .collect()
}

#[test]
fn a_callees_token_is_a_secret_the_member_holds_while_its_router_lives() {
    let router = VirtualPeerRouter::new(&calls_line(&["scrubbed-callee"]), Duration::from_secs(1));
    let echoed = "a server said mft1.token-for-scrubbed-callee.sig back".to_string();
    assert_eq!(crate::secret::scrub(echoed.clone()), "a server said [redacted] back");
    assert!(!format!("{router:?}").contains("token-for"));
    drop(router);
    assert_eq!(crate::secret::scrub(echoed.clone()), echoed);
}

fn addresses(list: &[(&str, &str)]) -> Channel {
    Channel(ChannelEvent::Addresses(AddressLine {
        addresses: list
            .iter()
            .map(|(n, u)| Address {
                name: n.to_string(),
                url: u.to_string(),
                door: None,
                card_key: None,
            })
            .collect(),
        withdrawn: vec![],
    }))
}

fn route_url(r: &Resolution) -> Option<&str> {
    match r {
        Resolution::Route(r) => Some(r.url.as_str()),
        Resolution::Denied(_) => None,
    }
}

fn denial(r: &Resolution) -> Option<Denial> {
    match r {
        Resolution::Route(_) => None,
        Resolution::Denied(d) => Some(*d),
    }
}

#[actix_rt::test]
async fn the_router_waits_for_a_late_address_and_refuses_at_once_after_eof() {
    let notes = Arc::new(Mutex::new(Vec::<String>::new()));
    let n = Arc::clone(&notes);
    // Every "at once" below is sooner than this wait, which a lookup that waited would take.
    let wait = Duration::from_secs(5);
    let router = VirtualPeerRouter::new(&calls_line(&["coder", "tester"]), wait)
        .with_notes(move |line| crate::sync::lock(&n).push(line.into()))
        .start();

    // A non-member and a member that is not a callee: denied at once, the same way.
    for name in ["reviewer", "nobody"] {
        let t = Instant::now();
        assert_eq!(denial(&resolve(&router, name).await), Some(Denial::NotCallee));
        assert!(t.elapsed() < wait);
    }

    // A callee whose address arrives late is waited for.
    let late = {
        let r = router.clone();
        actix_rt::spawn(async move { resolve(&r, "coder").await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    router.do_send(Channel(ChannelEvent::Unreadable("the line is not UTF-8".into())));
    router.do_send(addresses(&[
        ("reviewer", "http://localhost:9"),
        ("coder", "http://localhost:4100"),
    ]));
    let r = late.await.unwrap_or(Resolution::Denied(Denial::Gone));
    assert_eq!(route_url(&r), Some("http://localhost:4100"));
    if let Resolution::Route(route) = &r {
        assert_eq!(route.token().reveal(), "mft1.token-for-coder.sig");
        assert!(!format!("{route:?}").contains("mft1"), "Debug hides the token");
    }
    // A name that is not a callee stays unknown even when a line carries it.
    assert_eq!(denial(&resolve(&router, "reviewer").await), Some(Denial::NotCallee));

    // EOF: a waiter for an unknown callee is answered at once, and so is every later lookup;
    // known callees keep resolving.
    let waiting = {
        let r = router.clone();
        actix_rt::spawn(async move { resolve(&r, "tester").await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    let t = Instant::now();
    router.do_send(Channel(ChannelEvent::Closed));
    let r = waiting.await.unwrap_or(Resolution::Denied(Denial::Gone));
    assert_eq!(denial(&r), Some(Denial::Closed));
    assert_eq!(denial(&resolve(&router, "tester").await), Some(Denial::Closed));
    assert!(t.elapsed() < wait, "{:?}", t.elapsed());
    assert_eq!(
        route_url(&resolve(&router, "coder").await),
        Some("http://localhost:4100")
    );
    assert_eq!(
        crate::sync::lock(&notes).clone(),
        ["the formation channel sent an address line that could not be read (the line is not UTF-8); it was ignored"]
    );

    // Without EOF, the wait is bounded.
    let short = VirtualPeerRouter::new(&calls_line(&["coder"]), Duration::from_millis(80)).start();
    let t = Instant::now();
    assert_eq!(denial(&resolve(&short, "coder").await), Some(Denial::TimedOut));
    assert!(t.elapsed() >= Duration::from_millis(80));
}

// ---------------------------------------------------------------------------------------------
// Harness: a real callee door

enum Stop {
    Graceful,
    /// Drops the door's actix system without a shutdown: its connections break at once.
    Kill,
}

struct Callee {
    /// `http://localhost:<port>`, as an address line carries it.
    url: String,
    port: u16,
    board: Arc<Board>,
    release: Arc<Notify>,
    events: Arc<Mutex<Vec<BoardEvent>>>,
    /// Tasks held by `hold`, owned here so they outlive a killed door.
    _parked: Arc<Mutex<Vec<Work>>>,
    stop: Option<tokio::sync::oneshot::Sender<Stop>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Callee {
    fn kill(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(Stop::Kill);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn received(&self) -> Vec<BoardEvent> {
        crate::sync::lock(&self.events)
            .iter()
            .filter(|e| matches!(e, BoardEvent::Received { .. }))
            .cloned()
            .collect()
    }

    fn state(&self, task_id: &str) -> Option<TaskState> {
        self.board.get(task_id).map(|t| t.state)
    }
}

impl Drop for Callee {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(Stop::Graceful);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn execute(board: Arc<Board>, release: Arc<Notify>, port: u16, parked: Arc<Mutex<Vec<Work>>>) {
    while let Some(w) = board.next_work().await {
        let outcome = if let Some(m) = w.text.strip_prefix("fail:") {
            TaskOutcome::Failed(m.into())
        } else if let Some(r) = w.text.strip_prefix("noanswer:") {
            TaskOutcome::NoAnswer {
                reason: r.into(),
                below: vec![NoAnswerBelow {
                    member: "reviewer".into(),
                    status: "failed".into(),
                }],
            }
        } else if let Some(q) = w.text.strip_prefix("ask:") {
            // The Work is held while the task asks: dropping it would end the task.
            let asked = board
                .ask(&w.task_id, q, &["coder".to_string()], Duration::from_secs(10))
                .await;
            match asked {
                crate::tasks::Asked::Answered { text, .. } => TaskOutcome::Completed(format!("answered: {text}")),
                crate::tasks::Asked::TimedOut => TaskOutcome::Failed("no answer".into()),
                crate::tasks::Asked::Ended => TaskOutcome::Canceled,
            }
        } else if w.text == "hold" {
            // Parked outside the door's thread: a killed door leaves the task as it was, as a
            // killed process would, instead of the board ending it when the Work is dropped.
            let (cancel, id) = (w.cancel.clone(), w.task_id.clone());
            lock(&parked).push(w);
            let outcome = tokio::select! {
                _ = cancel.cancelled() => TaskOutcome::Canceled,
                _ = release.notified() => TaskOutcome::Completed("released".into()),
            };
            board.finish(&id, outcome);
            lock(&parked).retain(|p| p.task_id != id);
            continue;
        } else if w.text == "whoami" {
            TaskOutcome::Completed(format!(
                "I am http://localhost:{port}/, localhost:{port} or 127.0.0.1:{port}"
            ))
        } else if w.text == "big" {
            TaskOutcome::Completed("é".repeat(40_000))
        } else {
            TaskOutcome::Completed(format!("echo: {}", w.text))
        };
        board.finish(&w.task_id, outcome);
    }
}

/// Starts member `member`'s door in formation [`FRM`], verifying tokens under `sk`.
fn callee(sk: &SigningKey, member: &str, acceptance: Acceptance, depth: u32) -> Callee {
    let config = DoorConfig {
        capsule_name: format!("local/{member}"),
        capsule_version: "1.0.0".into(),
        description: "a callee".into(),
        session_id: "ses_0199c4e2f1b7712a9d3e4f5061728394".into(),
        authenticate: true,
        peer_tasks_accept: true,
        acceptance,
        queue_depth: depth,
        formation: Some(FormationTrust {
            formation_id: FRM.into(),
            member: member.into(),
            verify_key: sk.verify_key(),
            grant_key: None,
        }),
        network_allow: vec![],
        tools: vec![],
        skills: vec![],
        input_modes: vec![],
        socket: None,
    };
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<Stop>();
    let release = Arc::new(Notify::new());
    let events = Arc::new(Mutex::new(Vec::new()));
    let parked = Arc::new(Mutex::new(Vec::new()));
    let (rel, ev, park) = (Arc::clone(&release), Arc::clone(&events), Arc::clone(&parked));
    let thread = std::thread::spawn(move || {
        let system = actix_rt::System::new();
        system.block_on(async move {
            let door = match Door::start(config, "127.0.0.1") {
                Ok(d) => d,
                Err(e) => {
                    let _ = tx.send(Err(e.render("")));
                    return;
                }
            };
            door.board()
                .set_observer(move |e| crate::sync::lock(&ev).push(e.clone()));
            let _ = tx.send(Ok((door.port(), Arc::clone(door.board()))));
            actix_rt::spawn(execute(Arc::clone(door.board()), rel, door.port(), park));
            if let Ok(Stop::Graceful) = stop_rx.await {
                door.board().close();
                door.stop().await;
            }
        });
        // Dropping the system drops the server: the listener closes and every connection breaks.
        drop(system);
    });
    let (port, board) = match rx.recv() {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("the callee door does not start: {e}"),
        Err(e) => panic!("the callee door thread ended: {e}"),
    };
    Callee {
        url: format!("http://localhost:{port}"),
        port,
        board,
        release,
        events,
        _parked: parked,
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// The caller side: member `lead` of [`FRM`] with its router, calls and trace.
struct Caller {
    calls: Calls,
    router: actix::Addr<VirtualPeerRouter>,
    trace_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Caller {
    fn records(&self) -> Vec<Value> {
        crate::trace::read_records(&self.trace_path).unwrap_or_default()
    }

    fn records_of(&self, event_type: &str) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["event_type"] == event_type)
            .collect()
    }

    fn trace_text(&self) -> String {
        std::fs::read_to_string(&self.trace_path).unwrap_or_default()
    }
}

fn timing() -> crate::timing::Timing {
    let mut t = crate::timing::Timing::SPEC;
    // Polling would take 5 s: a prompt answer can only have come from the stream.
    t.answer_poll = Duration::from_secs(5);
    t.address_wait = Duration::from_secs(2);
    t.call_bound = Duration::from_secs(20);
    t.busy_first = Duration::from_millis(40);
    t.busy_max = Duration::from_millis(80);
    t
}

/// `lead`, which may call `callees` (each with its door URL, if known yet), reaching what `allow`
/// lets it. Call inside an actix system.
fn caller(sk: &SigningKey, callees: &[(&str, Option<&str>)], allow: &[&str], timing: &crate::timing::Timing) -> Caller {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let trace_path = dir.path().join("trace.jsonl");
    let trace = crate::trace::TraceWriter::create(&trace_path, "ses_0199c4e2f1b7712a9d3e4f50617283aa")
        .unwrap_or_else(|e| panic!("{e}"));
    let line: Vec<Call> = callees
        .iter()
        .map(|(n, _)| Call {
            name: n.to_string(),
            token: crate::secret::Secret::new(sk.mint(FRM, "lead", n)),
        })
        .collect();
    let router = VirtualPeerRouter::new(&line, timing.address_wait).start();
    let known: Vec<(&str, &str)> = callees.iter().filter_map(|(n, u)| u.map(|u| (*n, u))).collect();
    if !known.is_empty() {
        router.do_send(addresses(&known));
    }
    let calls = Calls::new(
        router.clone(),
        callees.iter().map(|(n, _)| n.to_string()).collect(),
        crate::runner::AllowList::parse(allow),
        Arc::new(trace),
        timing,
    );
    Caller {
        calls,
        router,
        trace_path,
        _dir: dir,
    }
}

/// Waits until `f` holds (or panics after 10 s).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e:?}"))
}

// ---------------------------------------------------------------------------------------------
// Calls against real doors

#[actix_rt::test]
async fn a_call_completes_and_its_answer_arrives_as_soon_as_the_callee_finishes() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_0199c4e2f1b7712a9d3e4f50617283bb", Trust::Trusted);

    let d = ok(task.dispatch("coder", "hold").await);
    assert!(crate::ids::is(crate::ids::IdKind::Call, &d.call_id), "{}", d.call_id);
    let DispatchKind::Started { member_task_id } = d.kind.clone() else {
        panic!("the callee takes the task: {d:?}");
    };
    // The callee's door holds the task as the peer `lead` sent it, with the caller's trust.
    let received = door.received();
    let Some(BoardEvent::Received {
        task_id,
        message_id,
        caller_member,
        origin,
        trust,
        ..
    }) = received.first()
    else {
        panic!("the callee received nothing");
    };
    assert_eq!(task_id, &member_task_id);
    assert_eq!(message_id, &format!("msg_{}", d.call_id));
    assert_eq!(caller_member.as_deref(), Some("lead"));
    assert_eq!((*origin, *trust), (Origin::Peer, Trust::Trusted));

    // A second call to the same member while the first is unanswered is refused
    // (docs/reference/capsules.md#calls-between-members step 4).
    let again = task.dispatch("coder", "more").await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.contains(&d.call_id) && e.contains("end your turn")),
        "{again:?}"
    );

    until("the callee to run the task", || {
        door.state(&member_task_id) == Some(TaskState::Working)
    })
    .await;
    let waiter = {
        let task = task.clone();
        actix_rt::spawn(async move { task.await_all().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    door.release.notify_one();
    let outcomes = ok(waiter.await);
    let took = released.elapsed();
    // Sooner than the next poll would have seen it: the stream was followed.
    assert!(
        took < timing().answer_poll,
        "the answer took {took:?}: the stream was not followed"
    );
    assert_eq!(
        outcomes,
        [CallOutcome {
            call_id: d.call_id.clone(),
            member: "coder".into(),
            status: CallStatus::Completed,
            output: "released".into(),
            truncated: false,
            asked_by: Vec::new(),
        }]
    );

    // Handed over: the member may be called again.
    let next = ok(task.dispatch("coder", "two").await);
    let outcomes = task.await_all().await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        (outcomes[0].status, outcomes[0].output.as_str()),
        (CallStatus::Completed, "echo: two")
    );
    me.calls.finish_task(task.task_id());

    let starts = me.records_of("member_call_start");
    assert_eq!(starts.len(), 2);
    let keys: Vec<&str> = starts[0]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    for k in ["task_id", "call_id", "member", "member_task_id"] {
        assert!(keys.contains(&k), "{keys:?}");
    }
    assert_eq!(starts[0]["task_id"], "tsk_0199c4e2f1b7712a9d3e4f50617283bb");
    assert_eq!(starts[0]["call_id"], d.call_id.as_str());
    assert_eq!(starts[0]["member"], "coder");
    assert_eq!(starts[0]["member_task_id"], member_task_id.as_str());
    let ends = me.records_of("member_call");
    assert_eq!(ends.len(), 2, "one record per call, none more at finish");
    assert_eq!(ends[0]["call_id"], d.call_id.as_str());
    assert_eq!(ends[0]["status"], "completed");
    assert_eq!(ends[0]["output"], "released");
    assert_eq!(ends[0]["truncated"], false);
    assert_eq!(ends[0]["delivered"], true);
    assert_eq!(ends[0]["member_task_id"], member_task_id.as_str());
    assert_eq!(ends[0]["no_answer_below"], json!([]));
    assert!(ends[0]["duration_ms"].as_u64().is_some());
    assert_eq!(ends[1]["call_id"], next.call_id.as_str());
    // The trace line's own field order (docs/reference/formation.md#trace-records).
    let text = me.trace_text();
    let line = text.lines().find(|l| l.contains("\"member_call\"")).unwrap_or_default();
    let order = [
        "\"task_id\"",
        "\"call_id\"",
        "\"member\"",
        "\"member_task_id\"",
        "\"status\"",
        "\"duration_ms\"",
        "\"output\"",
        "\"truncated\"",
        "\"delivered\"",
        "\"no_answer_below\"",
    ];
    let at: Vec<usize> = order.iter().map(|k| line.find(k).unwrap_or(usize::MAX)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{line}");
    // No token and no real address ever reaches the trace.
    assert!(!text.contains("mft1"), "{text}");
    assert!(!text.contains(&door.port.to_string()), "{text}");
}

#[actix_rt::test]
async fn a_busy_callee_is_offered_the_task_again_until_it_takes_it() {
    let sk = ok(SigningKey::generate());
    // Holds one task at a time and none waiting: busy while anything runs.
    let door = callee(&sk, "coder", Acceptance::Queue, 0);
    let first = door.board.submit_local("hold");
    until("the callee to be busy", || {
        door.state(&first.id) == Some(TaskState::Working)
    })
    .await;
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);

    let d = ok(task.dispatch("coder", "after you").await);
    assert_eq!(d.kind, DispatchKind::Busy);
    let busy = me.records_of("member_call_busy");
    assert_eq!(busy.len(), 1);
    assert_eq!(busy[0]["offer"], 1);
    assert_eq!(busy[0]["member"], "coder");
    assert_eq!(
        busy[0]["message"],
        "coder is busy with other work and did not take the task"
    );
    assert!(busy[0]["waited_ms"].as_u64().is_some());

    // Let it be refused a few more times, then free the callee.
    until("a re-offer", || me.records_of("member_call_busy").len() >= 3).await;
    door.release.notify_one();
    let outcomes = task.await_all().await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        (outcomes[0].status, outcomes[0].output.as_str()),
        (CallStatus::Completed, "echo: after you")
    );

    let offers: Vec<u64> = me
        .records_of("member_call_busy")
        .iter()
        .filter_map(|r| r["offer"].as_u64())
        .collect();
    assert_eq!(
        offers,
        (1..=offers.len() as u64).collect::<Vec<_>>(),
        "offers are numbered in order"
    );
    assert_eq!(me.records_of("member_call_start").len(), 1);
    // Every refused offer is a task the callee rejected; the last one it took.
    let received = door.received();
    assert_eq!(
        received.len(),
        1 + offers.len() + 1,
        "the local task, each busy offer, the taken one"
    );
}

#[actix_rt::test]
async fn a_callee_that_stays_busy_until_the_bound_ends_the_call_rejected() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 0);
    let first = door.board.submit_local("hold");
    until("the callee to be busy", || {
        door.state(&first.id) == Some(TaskState::Working)
    })
    .await;
    let mut t = timing();
    t.call_bound = Duration::from_millis(300);
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    assert_eq!(ok(task.dispatch("coder", "x").await).kind, DispatchKind::Busy);
    let started = Instant::now();
    let outcomes = task.await_all().await;
    // The bound ended it: the callee stays busy for good, so nothing else would have. Loose
    // enough for a loaded machine; the output below names the 300 ms bound.
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(outcomes[0].status, CallStatus::Rejected);
    let busy = me.records_of("member_call_busy").len();
    assert!(busy >= 2, "{busy}");
    // The text counts every offer made; each busy answer is traced. When the bound falls while
    // one more offer is in flight, that offer counts but has no busy record yet.
    let offered = [busy, busy + 1].into_iter().find(|n| {
        outcomes[0].output
            == format!(
                "coder stayed busy with other work and did not take the task; it was offered {n} time(s) within the call's bound of 300 ms"
            )
    });
    assert!(offered.is_some(), "{busy} busy offer(s) traced: {}", outcomes[0].output);
    let end = &me.records_of("member_call")[0];
    assert_eq!(end["member_task_id"], Value::Null);
    // The callee never took it.
    door.release.notify_one();
    assert_eq!(
        door.board
            .all()
            .iter()
            .filter(|t| t.state != TaskState::Rejected)
            .count(),
        1
    );
}

#[actix_rt::test]
async fn a_callee_killed_mid_task_ends_the_call_unreachable() {
    let sk = ok(SigningKey::generate());
    let mut door = callee(&sk, "coder", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "hold").await);
    let DispatchKind::Started { member_task_id } = d.kind else {
        panic!("started");
    };
    until("the callee to run the task", || {
        door.state(&member_task_id) == Some(TaskState::Working)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let killed = Instant::now();
    door.kill();
    // The launcher withdraws a member whose process ended (no restart follows).
    me.router.do_send(Channel(ChannelEvent::Addresses(AddressLine {
        addresses: vec![],
        withdrawn: vec!["coder".into()],
    })));
    let outcomes = task.await_all().await;
    // Two transport failures in a row (the stream, then GetTask) without a poll between.
    assert!(killed.elapsed() < timing().answer_poll, "{:?}", killed.elapsed());
    assert_eq!(outcomes[0].status, CallStatus::Unreachable, "{:?}", outcomes[0]);
    assert!(
        outcomes[0]
            .output
            .starts_with("coder's door stopped answering while it worked on the task: "),
        "{}",
        outcomes[0].output
    );
    assert!(
        !outcomes[0].output.contains(&door.port.to_string()),
        "{}",
        outcomes[0].output
    );
}

#[actix_rt::test]
async fn the_bound_ends_a_call_timed_out_and_leaves_the_callee_running() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let mut t = timing();
    t.call_bound = Duration::from_millis(300);
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "hold").await);
    let DispatchKind::Started { member_task_id } = d.kind else {
        panic!("started");
    };
    let outcomes = task.await_all().await;
    assert_eq!(outcomes[0].status, CallStatus::TimedOut);
    assert_eq!(
        outcomes[0].output,
        "coder did not answer within the call's bound of 300 ms; its task was left running"
    );
    assert_eq!(door.state(&member_task_id), Some(TaskState::Working));
    let end = &me.records_of("member_call")[0];
    assert_eq!(end["status"], "timed_out");
    assert_eq!(end["member_task_id"], member_task_id.as_str());
    let ms = end["duration_ms"].as_u64().unwrap_or(0);
    assert!((300..2000).contains(&ms), "{ms}");
}

#[actix_rt::test]
async fn callee_outcomes_other_than_completed_reach_the_caller() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let reviewer = callee(&sk, "reviewer", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(
        &sk,
        &[("coder", Some(&door.url)), ("reviewer", Some(&reviewer.url))],
        &["localhost"],
        &t,
    );
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    ok(task.dispatch("coder", "fail:the build broke").await);
    ok(task.dispatch("reviewer", "noanswer:nothing to review").await);
    let outcomes = task.await_all().await;
    let got: Vec<(&str, CallStatus, &str)> = outcomes
        .iter()
        .map(|o| (o.member.as_str(), o.status, o.output.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("coder", CallStatus::Failed, "the build broke"),
            ("reviewer", CallStatus::NoAnswer, "nothing to review")
        ]
    );
    let ends = me.records_of("member_call");
    assert_eq!(ends[1]["status"], "no_answer");
    assert_eq!(
        ends[1]["no_answer_below"],
        json!([{"member": "reviewer", "status": "failed"}])
    );
}

#[actix_rt::test]
async fn answers_are_redacted_and_capped() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    ok(task.dispatch("coder", "whoami").await);
    let o = task.await_all().await;
    let v = "http://coder.formation.invalid";
    assert_eq!(o[0].output, format!("I am {v}/, {v} or {v}"));
    ok(task.dispatch("coder", "big").await);
    let o = task.await_all().await;
    assert!(o[0].truncated);
    assert_eq!(o[0].output, format!("{}{CUT_MARKER}", "é".repeat(ANSWER_CAP / 2)));
    let ends = me.records_of("member_call");
    assert_eq!(ends[0]["output"], format!("I am {v}/, {v} or {v}"));
    assert_eq!(ends[1]["truncated"], true);
    assert!(!me.trace_text().contains(&door.port.to_string()));
}

#[actix_rt::test]
async fn dispatch_faults_are_tool_errors_and_send_nothing() {
    let sk = ok(SigningKey::generate());
    let (count, url, _listener) = counting_listener();
    let t = timing();
    let me = caller(
        &sk,
        &[("coder", Some(&url)), ("reviewer", Some(&url))],
        &["localhost"],
        &t,
    );
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    for m in ["planner", "nobody", "Coder"] {
        assert_eq!(
            task.dispatch(m, "x").await,
            Err(format!(
                "'{m}' is not a member this capsule may call; it may call: coder, reviewer"
            ))
        );
    }
    let lonely = caller(&sk, &[], &["localhost"], &t);
    assert_eq!(
        lonely
            .calls
            .task("tsk_2", Trust::Untrusted)
            .dispatch("coder", "x")
            .await,
        Err("'coder' is not a member this capsule may call; it may call no member".into())
    );
    // After the task ended, nothing may start under it.
    me.calls.finish_task("tsk_1");
    assert_eq!(
        task.dispatch("coder", "x").await,
        Err("there is no task in scope for this call: the task has already ended".into())
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(count.load(Ordering::SeqCst), 0);
    assert!(me.records().is_empty(), "a refused dispatch traces nothing");
}

#[actix_rt::test]
async fn routing_refusals_end_the_call_rejected_before_any_connection() {
    let sk = ok(SigningKey::generate());
    let (count, url, _listener) = counting_listener();
    let mut t = timing();
    t.address_wait = Duration::from_secs(5);
    // The roster grants a name, never network access: no loopback rule, no call.
    let no_loopback = caller(&sk, &[("coder", Some(&url))], &["example.com", "127.0.0.1"], &t);
    let task = no_loopback.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "x").await);
    assert_eq!(d.kind, DispatchKind::Ended {
        status: CallStatus::Rejected,
        output: "the runtime refused to route the call to coder: this capsule's capabilities.network.allow does not reach its door; declare \"localhost\"".into(),
    });
    // An address that never came: refused at once once the channel has closed.
    let unknown = caller(&sk, &[("coder", None)], &["localhost"], &t);
    unknown.router.do_send(Channel(ChannelEvent::Closed));
    let task = unknown.calls.task("tsk_1", Trust::Untrusted);
    let started = Instant::now();
    let d = ok(task.dispatch("coder", "x").await);
    assert!(started.elapsed() < t.address_wait, "it waited for the address");
    assert_eq!(
        d.kind,
        DispatchKind::Ended {
            status: CallStatus::Rejected,
            output:
                "the runtime refused to route the call to coder: the formation channel closed without its door address"
                    .into(),
        }
    );
    // The outcome is handed over like any other.
    let o = task.await_all().await;
    assert_eq!(o[0].status, CallStatus::Rejected);
    assert_eq!(unknown.records_of("member_call")[0]["delivered"], true);
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

#[actix_rt::test]
async fn a_door_that_refuses_the_connection_ends_the_call_unreachable() {
    let sk = ok(SigningKey::generate());
    // A port nothing listens on.
    let port = {
        let l = ok(TcpListener::bind("127.0.0.1:0"));
        ok(l.local_addr()).port()
    };
    let url = format!("http://localhost:{port}");
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "x").await);
    let DispatchKind::Ended { status, output } = d.kind else {
        panic!("ended: {d:?}");
    };
    assert_eq!(status, CallStatus::Unreachable);
    assert!(output.starts_with("coder's door could not be reached: "), "{output}");
    assert!(!output.contains(&port.to_string()), "{output}");
}

#[actix_rt::test]
async fn finishing_a_task_abandons_its_unawaited_calls_and_cancels_their_callees_tasks_queued_ones_too() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let reviewer = callee(&sk, "reviewer", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(
        &sk,
        &[("coder", Some(&door.url)), ("reviewer", Some(&reviewer.url))],
        &["localhost"],
        &t,
    );
    // Another task keeps coder busy, so this task's call to it waits in coder's queue.
    let other = me.calls.task("tsk_0", Trust::Untrusted);
    let busy = ok(other.dispatch("coder", "hold").await);
    let DispatchKind::Started {
        member_task_id: busy_task,
    } = busy.kind
    else {
        panic!("started: {busy:?}");
    };
    until("coder to work on the other task", || {
        door.state(&busy_task) == Some(TaskState::Working)
    })
    .await;
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    let queued = ok(task.dispatch("coder", "hold").await);
    let held = ok(task.dispatch("reviewer", "hold").await);
    let DispatchKind::Started {
        member_task_id: queued_task,
    } = queued.kind.clone()
    else {
        panic!("started: {queued:?}");
    };
    let DispatchKind::Started {
        member_task_id: held_task,
    } = held.kind.clone()
    else {
        panic!("started: {held:?}");
    };
    until("reviewer to work on the held task", || {
        reviewer.state(&held_task) == Some(TaskState::Working)
    })
    .await;
    assert_eq!(
        door.state(&queued_task),
        Some(TaskState::Submitted),
        "queued behind the other"
    );
    me.calls.finish_task("tsk_1");
    me.calls.finish_task("tsk_1");
    let ends = me.records_of("member_call");
    assert_eq!(ends.len(), 2, "one record per call, written once");
    for (call, member_task) in [(&queued, &queued_task), (&held, &held_task)] {
        let rec = ends
            .iter()
            .find(|r| r["call_id"] == call.call_id.as_str())
            .cloned()
            .unwrap_or_default();
        assert_eq!(rec["status"], "abandoned", "{rec}");
        assert_eq!(rec["delivered"], false, "{rec}");
        assert_eq!(rec["member_task_id"], member_task.as_str(), "{rec}");
    }
    // Both callees' tasks end canceled, the running one and the queued one.
    until("the held task to be canceled", || {
        reviewer.state(&held_task) == Some(TaskState::Canceled)
    })
    .await;
    until("the queued task to be canceled", || {
        door.state(&queued_task) == Some(TaskState::Canceled)
    })
    .await;
    // The other task's call is untouched: it still runs, and completes when released.
    assert_eq!(door.state(&busy_task), Some(TaskState::Working));
    door.release.notify_one();
    let o = other.await_all().await;
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].status, CallStatus::Completed, "{o:?}");
    assert_eq!(door.state(&queued_task), Some(TaskState::Canceled), "never run");
    // The finished task's calls are not followed any more.
    assert_eq!(
        me.records_of("member_call")
            .iter()
            .filter(|r| r["task_id"] == "tsk_1")
            .count(),
        2
    );
}

/// The callee's `InputSettled` outcomes, in order.
fn input_outcomes(door: &Callee) -> Vec<crate::tasks::InputOutcome> {
    lock(&door.events)
        .iter()
        .filter_map(|e| match e {
            BoardEvent::InputSettled { outcome, .. } => Some(*outcome),
            _ => None,
        })
        .collect()
}

#[actix_rt::test]
async fn a_callee_that_asks_ends_the_call_input_required_and_a_reply_answers_it() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let reviewer = callee(&sk, "reviewer", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(
        &sk,
        &[("coder", Some(&door.url)), ("reviewer", Some(&reviewer.url))],
        &["localhost"],
        &t,
    );
    let task = me.calls.task("tsk_ask", Trust::Trusted);
    let d = ok(task.dispatch("coder", "ask:which colour?").await);
    let DispatchKind::Started { member_task_id } = d.kind.clone() else {
        panic!("started: {d:?}");
    };
    let asked = Instant::now();
    let outcomes = task.await_all().await;
    // Seen on the stream, sooner than a poll would have seen it.
    assert!(asked.elapsed() < timing().answer_poll, "{:?}", asked.elapsed());
    assert_eq!(
        outcomes,
        [CallOutcome {
            call_id: d.call_id.clone(),
            member: "coder".into(),
            status: CallStatus::InputRequired,
            output: "which colour?".into(),
            truncated: false,
            asked_by: vec!["coder".into()],
        }]
    );
    assert_eq!(door.state(&member_task_id), Some(TaskState::InputRequired));
    assert_eq!(task.question_of(&d.call_id), Some(vec!["coder".to_string()]));
    let ends = me.records_of("member_call");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["status"], "input_required");
    assert_eq!(ends[0]["output"], "which colour?");

    // Faults are tool errors, and send nothing: an unknown call id, another member, no text.
    let unknown = task.reply("coder", "mcl_nothing", "blue").await;
    assert!(
        unknown
            .as_ref()
            .is_err_and(|e| e.contains("mcl_nothing") && e.contains("no call")),
        "{unknown:?}"
    );
    let other = task.reply("reviewer", &d.call_id, "blue").await;
    assert!(
        other.as_ref().is_err_and(|e| e.contains("not to 'reviewer'")),
        "{other:?}"
    );
    let empty = task.reply("coder", &d.call_id, "  ").await;
    assert!(empty.is_err(), "{empty:?}");
    assert!(reviewer.received().is_empty());
    assert_eq!(door.received().len(), 1, "no new task at the callee");
    assert_eq!(door.state(&member_task_id), Some(TaskState::InputRequired));

    // The reply: a call of its own, to the same task, followed to its end.
    let r = ok(task.reply("coder", &d.call_id, "blue").await);
    assert_ne!(r.call_id, d.call_id);
    assert_eq!(
        r.kind,
        DispatchKind::Started {
            member_task_id: member_task_id.clone()
        }
    );
    assert_eq!(task.question_of(&d.call_id), None, "the question is answered");
    let again = task.reply("coder", &d.call_id, "red").await;
    assert!(again.is_err(), "one answer per question: {again:?}");
    let outcomes = task.await_all().await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        (
            outcomes[0].call_id.as_str(),
            outcomes[0].status,
            outcomes[0].output.as_str()
        ),
        (r.call_id.as_str(), CallStatus::Completed, "answered: blue")
    );
    assert_eq!(input_outcomes(&door), [crate::tasks::InputOutcome::Answered]);
    let starts = me.records_of("member_call_start");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0].get("reply_to"), None);
    assert_eq!(starts[1]["reply_to"], d.call_id.as_str());
    assert_eq!(starts[1]["member_task_id"], member_task_id.as_str());
    me.calls.finish_task("tsk_ask");
}

#[actix_rt::test]
async fn a_question_left_open_when_the_task_ends_cancels_the_callees_task() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_gone", Trust::Trusted);
    let d = ok(task.dispatch("coder", "ask:may I?").await);
    let DispatchKind::Started { member_task_id } = d.kind.clone() else {
        panic!("started: {d:?}");
    };
    let outcomes = task.await_all().await;
    assert_eq!(outcomes[0].status, CallStatus::InputRequired);
    me.calls.finish_task("tsk_gone");
    // Cancelled by the caller long before the callee's own 10 s bound.
    until("the callee's task to be cancelled", || {
        door.state(&member_task_id) == Some(TaskState::Canceled)
    })
    .await;
    assert_eq!(input_outcomes(&door), [crate::tasks::InputOutcome::Abandoned]);
}

#[actix_rt::test]
async fn await_all_reports_a_question_failed_and_cancels_the_callee() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let task = me.calls.task("tsk_old", Trust::Trusted);
    let calls: &dyn MemberCalls = &task;
    let id = ok(calls.start("coder", "ask:may I?").await);
    let outcomes = calls.await_all().await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        (outcomes[0].call_id.as_str(), outcomes[0].status),
        (id.as_str(), CallStatus::Failed)
    );
    assert!(outcomes[0].output.ends_with(": may I?"), "{}", outcomes[0].output);
    let member_task = door.received().first().and_then(|e| match e {
        BoardEvent::Received { task_id, .. } => Some(task_id.clone()),
        _ => None,
    });
    let member_task = member_task.unwrap_or_default();
    until("the callee's task to be cancelled", || {
        door.state(&member_task) == Some(TaskState::Canceled)
    })
    .await;
    assert!(calls.reply(&id, "yes").await.is_err(), "no question is left open");
    // The new interface sees the question, and answers it.
    let id = ok(calls.start("coder", "ask:and now?").await);
    let Some(asks) = calls.await_next().await else {
        panic!("an event");
    };
    assert_eq!(
        (asks.call_id.as_str(), asks.status),
        (id.as_str(), CallStatus::InputRequired)
    );
    let reply = ok(calls.reply(&id, "now").await);
    let Some(done) = calls.await_next().await else {
        panic!("an event");
    };
    assert_eq!(
        (done.call_id.as_str(), done.status, done.output.as_str()),
        (reply.as_str(), CallStatus::Completed, "answered: now")
    );
    assert_eq!(calls.await_next().await, None, "every call was returned");
    me.calls.finish_task("tsk_old");
}

#[actix_rt::test]
async fn a_component_calls_a_member_through_the_host() {
    let sk = ok(SigningKey::generate());
    let worker = callee(&sk, "worker", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("worker", Some(&worker.url))], &["localhost"], &t);
    let engine = ok(CapsuleEngine::new());
    let relay = ok(Capsule::load(&engine, RELAY.as_bytes()));
    let (calls, http) = me.calls.for_task("tsk_1", Trust::Trusted);
    let env = TaskEnv {
        calls,
        http,
        ..TaskEnv::default()
    };
    assert_eq!(
        relay.run("sum 2 and 2", env).await,
        capsule::RunOutcome::Completed("echo: sum 2 and 2".into())
    );
    me.calls.finish_task("tsk_1");
    let ends = me.records_of("member_call");
    assert_eq!((ends.len(), ends[0]["delivered"].clone()), (1, json!(true)));
}

// ---------------------------------------------------------------------------------------------
// The wasi:http path, with a real component

/// A listener that counts connections and answers each `204`, keeping every request head.
fn counting_listener() -> (Arc<AtomicUsize>, String, Arc<Mutex<Vec<String>>>) {
    let listener = ok(TcpListener::bind("127.0.0.1:0"));
    let port = ok(listener.local_addr()).port();
    let count = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (c, h) = (Arc::clone(&count), Arc::clone(&heads));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            c.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            crate::sync::lock(&h).push(String::from_utf8_lossy(&head).into_owned());
            let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (count, format!("http://localhost:{port}"), heads)
}

async fn probe(capsule: &Capsule, calls: &Calls, trust: Trust, authority: &str) -> capsule::RunOutcome {
    let (member_calls, http) = calls.for_task("tsk_probe", trust);
    let env = TaskEnv {
        calls: member_calls,
        http,
        ..TaskEnv::default()
    };
    capsule.run(authority, env).await
}

fn answered(text: &str) -> capsule::RunOutcome {
    capsule::RunOutcome::Completed(text.into())
}

#[actix_rt::test]
async fn virtual_addresses_route_callees_only_and_replace_forged_credentials() {
    let sk = ok(SigningKey::generate());
    let (count, url, heads) = counting_listener();
    let t = timing();
    // `reviewer` is a member of the formation, but not one `lead` may call; its address line
    // entry (pointing at the same listener) is ignored.
    let me = caller(&sk, &[("coder", Some(&url))], &["localhost"], &t);
    me.router.do_send(addresses(&[("reviewer", &url)]));
    let engine = ok(CapsuleEngine::new());
    let probe_capsule = ok(Capsule::load(&engine, PROBE.as_bytes()));

    // A non-callee member, a name no member has, an address of the wrong form: the same
    // refusal (HTTP-request-denied is case 15), and no connection.
    for authority in [
        "reviewer.formation.invalid",
        "nobody.formation.invalid",
        "Coder.formation.invalid",
        "coder.formation.invalid:80",
        "formation.invalid",
    ] {
        assert_eq!(
            probe(&probe_capsule, &me.calls, Trust::Untrusted, authority).await,
            answered("error 15"),
            "{authority}"
        );
    }
    assert_eq!(count.load(Ordering::SeqCst), 0);

    // A callee: routed to its real door, credentials stamped by the runtime.
    assert_eq!(
        probe(&probe_capsule, &me.calls, Trust::Untrusted, "coder.formation.invalid").await,
        answered("status 204")
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let head = crate::sync::lock(&heads)
        .first()
        .cloned()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let token = sk.mint(FRM, "lead", "coder").to_ascii_lowercase();
    assert!(head.starts_with("get /probe?x=1 http/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("\r\nhost: {}\r\n", url.trim_start_matches("http://"))),
        "{head}"
    );
    assert!(
        head.contains(&format!("\r\nauthorization: bearer {token}\r\n")),
        "{head}"
    );
    assert_eq!(head.matches("authorization:").count(), 1, "{head}");
    assert!(head.contains("\r\nx-murmur-task-trust: untrusted\r\n"), "{head}");
    assert_eq!(head.matches("x-murmur-task-trust:").count(), 1, "{head}");
    assert!(head.contains("\r\nx-murmur-task-origin: peer\r\n"), "{head}");
    assert_eq!(head.matches("x-murmur-task-origin:").count(), 1, "{head}");
    assert!(head.contains("\r\nx-probe: kept\r\n"), "{head}");
    assert!(!head.contains("forged"), "{head}");

    // The roster grants a name, never network access.
    let no_loopback = caller(&sk, &[("coder", Some(&url))], &["example.com"], &t);
    assert_eq!(
        probe(
            &probe_capsule,
            &no_loopback.calls,
            Trust::Untrusted,
            "coder.formation.invalid"
        )
        .await,
        answered("error 15")
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[actix_rt::test]
async fn a_virtual_request_reaches_a_real_door_with_the_edges_token() {
    let sk = ok(SigningKey::generate());
    let door = callee(&sk, "coder", Acceptance::Queue, 5);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&door.url))], &["localhost"], &t);
    let engine = ok(CapsuleEngine::new());
    let probe_capsule = ok(Capsule::load(&engine, PROBE.as_bytes()));
    // The forged token would be 401; the edge's token passes authentication, and the door then
    // answers a GET it does not serve with 404 (docs/reference/door.md#request-pipeline).
    assert_eq!(
        probe(&probe_capsule, &me.calls, Trust::Trusted, "coder.formation.invalid").await,
        answered("status 404")
    );
}

#[actix_rt::test]
async fn a_virtual_address_that_arrives_late_is_waited_for() {
    let sk = ok(SigningKey::generate());
    let (count, url, _heads) = counting_listener();
    let t = timing();
    let me = caller(&sk, &[("coder", None)], &["localhost"], &t);
    let engine = ok(CapsuleEngine::new());
    let probe_capsule = ok(Capsule::load(&engine, PROBE.as_bytes()));
    let router = me.router.clone();
    let late = url.clone();
    actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        router.do_send(addresses(&[("coder", &late)]));
    });
    assert_eq!(
        probe(&probe_capsule, &me.calls, Trust::Untrusted, "coder.formation.invalid").await,
        answered("status 204")
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// A scripted door, for what a real one cannot be made to do on cue

type Script = dyn Fn(&Value) -> (Duration, Value) + Send + Sync;

/// A keep-alive HTTP/1.1 JSON-RPC server on 127.0.0.1 that records every request body (before
/// answering) and answers it with `script(body)`: a delay, then a JSON reply.
fn scripted_door(script: Arc<Script>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = ok(TcpListener::bind("127.0.0.1:0"));
    let port = ok(listener.local_addr()).port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let (script, seen) = (Arc::clone(&script), Arc::clone(&s));
            std::thread::spawn(move || serve_scripted(conn, &*script, &seen));
        }
    });
    (format!("http://localhost:{port}"), seen)
}

/// The next request's JSON body on a keep-alive connection; `None` once the client is gone.
fn read_request(conn: &mut std::net::TcpStream) -> Option<Value> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).unwrap_or(0) != 1 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).ok()?;
    Some(serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn serve_scripted(mut conn: std::net::TcpStream, script: &Script, seen: &Mutex<Vec<Value>>) {
    while let Some(request) = read_request(&mut conn) {
        lock(seen).push(request.clone());
        let (delay, reply) = script(&request);
        std::thread::sleep(delay);
        let reply = reply.to_string();
        let out = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
            reply.len()
        );
        if conn.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

fn methods(seen: &Mutex<Vec<Value>>) -> Vec<(String, String)> {
    lock(seen)
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("method"), s("id"))
        })
        .collect()
}

#[actix_rt::test]
async fn without_a_stream_the_callee_is_polled() {
    let sk = ok(SigningKey::generate());
    let polls = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&polls);
    let script: Arc<Script> = Arc::new(move |req: &Value| {
        let id = req["id"].clone();
        let reply = |result: Value| json!({"id": id, "jsonrpc": "2.0", "result": result});
        let answer = match req["method"].as_str() {
            Some("SendMessage") => reply(json!({"task": task_json("TASK_STATE_SUBMITTED", None)})),
            Some("GetTask") if p.fetch_add(1, Ordering::SeqCst) < 2 => reply(task_json("TASK_STATE_WORKING", None)),
            Some("GetTask") => {
                let mut t = task_json("TASK_STATE_COMPLETED", None);
                t["artifacts"] = json!([{"artifactId": "response", "parts": [{"text": "polled"}]}]);
                reply(t)
            }
            _ => json!({"error": {"code": -32004, "message": "Unsupported operation"}, "id": id, "jsonrpc": "2.0"}),
        };
        (Duration::ZERO, answer)
    });
    let (url, seen) = scripted_door(script);
    let mut t = timing();
    t.answer_poll = Duration::from_millis(30);
    let me = caller(&sk, &[("coder", Some(&url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "x").await);
    let o = task.await_all().await;
    assert_eq!((o[0].status, o[0].output.as_str()), (CallStatus::Completed, "polled"));
    let got: Vec<String> = methods(&seen).into_iter().map(|(m, _)| m).collect();
    assert_eq!(got, ["SendMessage", "SubscribeToTask", "GetTask", "GetTask", "GetTask"]);
    let bodies = lock(&seen).clone();
    assert_eq!(bodies[2]["params"], json!({"id": "tsk_1"}));
    assert_eq!(bodies[0]["id"], d.call_id.as_str());
}

/// A callee whose session ends with its task: it takes the task, streams it to its end, and
/// then its door is gone (every later connection is closed unanswered).
fn door_that_closes_after_its_stream() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = ok(TcpListener::bind("127.0.0.1:0"));
    let port = ok(listener.local_addr()).port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let (seen, gone) = (Arc::clone(&s), Arc::clone(&gone));
            std::thread::spawn(move || {
                while let Some(request) = read_request(&mut conn) {
                    let method = request["method"].as_str().unwrap_or_default().to_string();
                    lock(&seen).push(method.clone());
                    if gone.load(Ordering::SeqCst) {
                        return; // closed without an answer
                    }
                    let id = request["id"].clone();
                    if method == "SubscribeToTask" {
                        // One chunk per event, as the door streams them.
                        let event = |result: Value| {
                            let data = format!("data: {}\n\n", json!({"id": id, "jsonrpc": "2.0", "result": result}));
                            format!("{:x}\r\n{data}\r\n", data.len())
                        };
                        let mut out =
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                                .to_string();
                        out.push_str(&event(json!({"task": task_json("TASK_STATE_WORKING", None)})));
                        out.push_str(&event(json!({"artifactUpdate": {"artifact": {"artifactId": "response", "parts": [{"text": "finished"}]}, "taskId": "tsk_1"}})));
                        out.push_str(&event(
                            json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}, "taskId": "tsk_1"}}),
                        ));
                        out.push_str("0\r\n\r\n");
                        gone.store(true, Ordering::SeqCst);
                        let _ = conn.write_all(out.as_bytes());
                        return;
                    }
                    let reply = json!({"id": id, "jsonrpc": "2.0", "result": {"task": task_json("TASK_STATE_SUBMITTED", None)}}).to_string();
                    let out = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                        reply.len()
                    );
                    if conn.write_all(out.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://localhost:{port}"), seen)
}

#[actix_rt::test]
async fn a_callee_whose_door_closes_after_the_stream_still_answers() {
    let sk = ok(SigningKey::generate());
    let (url, seen) = door_that_closes_after_its_stream();
    let mut t = timing();
    t.answer_poll = Duration::from_millis(30);
    let me = caller(&sk, &[("coder", Some(&url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    ok(task.dispatch("coder", "x").await);
    let o = task.await_all().await;
    assert_eq!(
        (o[0].status, o[0].output.as_str()),
        (CallStatus::Completed, "finished"),
        "{:?}",
        lock(&seen)
    );
    assert_eq!(
        lock(&seen).clone(),
        ["SendMessage", "SubscribeToTask", "GetTask"],
        "GetTask found the door gone"
    );
    let end = &me.records_of("member_call")[0];
    assert_eq!(
        (end["status"].clone(), end["output"].clone()),
        (json!("completed"), json!("finished"))
    );
}

#[actix_rt::test]
async fn a_reoffer_taken_after_the_caller_gave_up_is_cancelled() {
    let sk = ok(SigningKey::generate());
    let script: Arc<Script> = Arc::new(|req: &Value| {
        let id = req["id"].clone();
        let reply = |result: Value| json!({"id": id, "jsonrpc": "2.0", "result": result});
        let rid = req["id"].as_str().unwrap_or_default();
        match req["method"].as_str() {
            // The second offer is taken, slowly: the caller gives up meanwhile.
            Some("SendMessage") if rid.ends_with("-2") => (
                Duration::from_millis(400),
                reply(
                    json!({"task": {"contextId": "ctx_1", "id": "tsk_late", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                ),
            ),
            Some("SendMessage") => (
                Duration::ZERO,
                reply(json!({"task": task_json("TASK_STATE_REJECTED", Some("task rejected: capsule is busy"))})),
            ),
            _ => (Duration::ZERO, reply(task_json("TASK_STATE_CANCELED", None))),
        }
    });
    let (url, seen) = scripted_door(script);
    let t = timing();
    let me = caller(&sk, &[("coder", Some(&url))], &["localhost"], &t);
    let task = me.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "x").await);
    assert_eq!(d.kind, DispatchKind::Busy);
    until("the second offer", || methods(&seen).len() == 2).await;
    me.calls.finish_task("tsk_1");
    until("the cancellation", || methods(&seen).len() == 3).await;
    let cid = &d.call_id;
    assert_eq!(
        methods(&seen),
        [
            ("SendMessage".to_string(), cid.clone()),
            ("SendMessage".to_string(), format!("{cid}-2")),
            ("CancelTask".to_string(), format!("{cid}-cancel")),
        ]
    );
    assert_eq!(lock(&seen)[2]["params"], json!({"id": "tsk_late"}));
    let end = &me.records_of("member_call")[0];
    assert_eq!(
        (end["status"].clone(), end["delivered"].clone()),
        (json!("abandoned"), json!(false))
    );
    assert!(me.records_of("member_call_start").is_empty());
}

/// The key a real door signs its card with, read from its public card as a caller would.
fn door_card_key(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    ok(write!(
        s,
        "GET {} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
        crate::card_sig::CARD_PATH
    ));
    let mut reply = String::new();
    ok(s.read_to_string(&mut reply));
    let (_, body) = reply.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{reply}"));
    let card: Value = ok(serde_json::from_str(body));
    crate::card_sig::named_key(&card)
        .unwrap_or_else(|| panic!("no key in {card}"))
        .to_b64()
}

fn keyed_address(name: &str, url: &str, key: &str) -> Channel {
    Channel(ChannelEvent::Addresses(AddressLine {
        addresses: vec![Address {
            name: name.into(),
            url: url.into(),
            door: None,
            card_key: Some(key.into()),
        }],
        withdrawn: vec![],
    }))
}

#[actix_rt::test]
async fn a_callee_whose_card_does_not_verify_under_the_handed_key_is_never_called() {
    let sk = ok(SigningKey::generate());
    let coder = callee(&sk, "coder", Acceptance::Single, 0);
    let right = door_card_key(coder.port);
    let other = ok(crate::card_sig::CardKey::generate()).public().to_b64();
    assert_ne!(right, other);
    let t = timing();

    // Handed the key the door signs with: the card verifies and the call goes through.
    let good = caller(&sk, &[("coder", None)], &["localhost"], &t);
    good.router.do_send(keyed_address("coder", &coder.url, &right));
    let task = good.calls.task("tsk_1", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "first").await);
    assert!(matches!(d.kind, DispatchKind::Started { .. }), "{:?}", d.kind);
    until("the callee took the task", || !lock(&coder.events).is_empty()).await;

    // Handed another key: the door is refused, by every path, and told once.
    let notes = Arc::new(Mutex::new(Vec::<String>::new()));
    let n = Arc::clone(&notes);
    let line: Vec<Call> = vec![Call {
        name: "coder".into(),
        token: crate::secret::Secret::new(sk.mint(FRM, "lead", "coder")),
    }];
    let router = VirtualPeerRouter::new(&line, t.address_wait)
        .with_notes(move |l| lock(&n).push(l.to_string()))
        .start();
    router.do_send(keyed_address("coder", &coder.url, &other));
    // Tasks the door received (its other events, of the first task, may still come).
    let received = || {
        lock(&coder.events)
            .iter()
            .filter(|e| matches!(e, BoardEvent::Received { .. }))
            .count()
    };
    let received_before = received();
    for _ in 0..2 {
        assert_eq!(denial(&resolve(&router, "coder").await), Some(Denial::CardRefused));
    }
    let said = lock(&notes).clone();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("error[E-RUN-054]: the door of 'coder' showed an agent card that does not verify under the key the launcher handed for it (no signature of the card is by this key)"),
        "{said:?}"
    );
    assert_eq!(received(), received_before, "the refused door got no task");
    // A call through the member-call path ends rejected with the same reason.
    let bad = caller(&sk, &[("coder", None)], &["localhost"], &t);
    bad.router.do_send(keyed_address("coder", &coder.url, &other));
    let task = bad.calls.task("tsk_2", Trust::Untrusted);
    let d = ok(task.dispatch("coder", "second").await);
    assert_eq!(
        d.kind,
        DispatchKind::Ended {
            status: CallStatus::Rejected,
            output: "the runtime refused to route the call to coder: its door's agent card does not verify under the key its launcher handed (error[E-RUN-054])".into(),
        }
    );
    assert_eq!(received(), received_before, "the refused door got no task");

    // An address that arrives while a call waits for it: its card is read then, and the route
    // is handed out (not left waiting for the address wait to end).
    let late = caller(&sk, &[("coder", None)], &["localhost"], &t);
    let (r, url, key) = (late.router.clone(), coder.url.clone(), right.clone());
    actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        r.do_send(keyed_address("coder", &url, &key));
    });
    let resolved = resolve(&late.router, "coder").await;
    assert_eq!(
        route_url(&resolved),
        Some(coder.url.as_str()),
        "{:?}",
        denial(&resolved)
    );
}

// ---------------------------------------------------------------------------------------------
// Grants prepared ahead of a task's calls

/// What one `delegate` asked for: callee, deadline, budget.
type Asked = (String, Option<u64>, Option<u64>);

/// A launcher's authority channel that grants every `delegate` (grant `mgr2.g<n>`, n counting from
/// 1) and keeps what each asked for: callee, deadline and budget.
fn granting_launcher() -> (Arc<crate::runner::authority::Authority>, Arc<Mutex<Vec<Asked>>>) {
    use crate::wire::authority_line::{Ask, Reply};
    use std::io::BufRead;
    let (member, launcher) = ok(std::os::unix::net::UnixStream::pair());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&asked);
    std::thread::spawn(move || {
        let mut writer = ok(launcher.try_clone());
        let reader = std::io::BufReader::new(launcher);
        for line in reader.lines() {
            let Ok(line) = line else { return };
            let Some(Ask::Delegate(d)) = Ask::parse(&line) else {
                return;
            };
            let n = {
                let mut asked = lock(&kept);
                asked.push((d.callee.clone(), d.deadline_ms, d.budget));
                asked.len()
            };
            let reply = Reply::Delegated {
                id: d.id,
                grant: format!("mgr2.g{n}"),
            };
            if writer.write_all(reply.line().as_bytes()).is_err() {
                return;
            }
        }
    });
    (Arc::new(crate::runner::authority::Authority::new(member)), asked)
}

#[actix_rt::test]
async fn a_prepared_grant_is_used_by_one_call_and_never_by_one_with_limits_of_its_own() {
    let sk = ok(SigningKey::generate());
    let (authority, asked) = granting_launcher();
    let lead = caller(&sk, &[("a", None), ("b", None)], &[], &timing());
    let calls = lead.calls.with_authority(Some(authority));
    let parent = Parent::Root(crate::grant::Origin::Operator);
    let id = crate::ids::mint(crate::ids::IdKind::Task);
    calls.set_parent(&id, parent.clone());
    let task = calls.task(&id, Trust::Trusted);
    let prepared = task.inner.prepared.clone();
    let prepared = prepared.as_deref();
    assert!(prepared.is_some(), "a task of a member with callees prepares grants");
    // One grant per callee, asked for as the task started, with no limits of their own.
    until("both callees' grants", || lock(&asked).len() == 2).await;
    let mut first = lock(&asked).clone();
    first.sort();
    assert_eq!(first, [("a".into(), None, None), ("b".into(), None, None)]);

    let shared = &task.inner.shared;
    let grant = |callee: &str, limits: crate::runner::CallLimits| {
        ok(shared.grant_for(&parent, &id, callee, limits, prepared)).unwrap_or_default()
    };
    // (a) A call with a budget or a deadline of its own asks the launcher itself, with them,
    // and leaves the prepared grant to another call.
    let limited = crate::runner::CallLimits {
        deadline_ms: None,
        budget: Some(700),
    };
    assert_eq!(grant("a", limited), "mgr2.g3");
    let until_ms = crate::runner::CallLimits {
        deadline_ms: Some(4_000_000_000_000),
        budget: None,
    };
    assert_eq!(grant("a", until_ms), "mgr2.g4");
    assert_eq!(
        lock(&asked)[2..],
        [
            ("a".into(), None, Some(700)),
            ("a".into(), Some(4_000_000_000_000), None)
        ]
    );
    // (b) A call with none takes the prepared one, once: the next call to the same callee asks.
    let prepared_a = grant("a", crate::runner::CallLimits::default());
    assert!(["mgr2.g1", "mgr2.g2"].contains(&prepared_a.as_str()), "{prepared_a}");
    assert_eq!(lock(&asked).len(), 4, "the prepared grant cost no round trip");
    let next = grant("a", crate::runner::CallLimits::default());
    assert_eq!(next, "mgr2.g5", "a prepared grant is never used twice");
    assert_eq!(lock(&asked).len(), 5);

    // At most one per callee: `b`'s is still there; the task's end drops it.
    assert_eq!(prepared.map(|p| p.outstanding()), Some(1));
    calls.finish_task(&id);
    assert_eq!(prepared.map(|p| p.outstanding()), Some(0));
    assert_eq!(
        prepared.and_then(|p| p.take("b")),
        None,
        "nothing is taken after the task ended"
    );
}

#[actix_rt::test]
async fn a_member_with_no_callees_prepares_nothing_and_many_callees_only_after_a_call() {
    let sk = ok(SigningKey::generate());
    let (authority, asked) = granting_launcher();
    let none = caller(&sk, &[], &[], &timing());
    let calls = none.calls.with_authority(Some(Arc::clone(&authority)));
    calls.set_parent("tsk_1", Parent::Root(crate::grant::Origin::Operator));
    assert!(calls.task("tsk_1", Trust::Trusted).inner.prepared.is_none());

    let names: Vec<String> = (0..9).map(|i| format!("m{i}")).collect();
    let many: Vec<(&str, Option<&str>)> = names.iter().map(|n| (n.as_str(), None)).collect();
    let nine = caller(&sk, &many, &[], &timing());
    let calls = nine.calls.with_authority(Some(authority));
    let id = crate::ids::mint(crate::ids::IdKind::Task);
    calls.set_parent(&id, Parent::Root(crate::grant::Origin::Operator));
    let task = calls.task(&id, Trust::Trusted);
    let prepared = task.inner.prepared.clone();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        lock(&asked).is_empty(),
        "more callees than it prepares for: none up front"
    );
    // After a call to a callee settles, its next grant is prepared, at most eight in all.
    for n in &names {
        if let Some(p) = &prepared {
            p.replenish(n);
        }
    }
    until("eight prepared", || lock(&asked).len() == 8).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(lock(&asked).len(), 8, "never more than eight outstanding");
    calls.finish_task(&id);
}

#[test]
fn answers_to_asks_sent_ahead_are_kept_for_their_askers_in_any_order() {
    let (authority, asked) = granting_launcher();
    let task = crate::ids::mint(crate::ids::IdKind::Task);
    let root = || Parent::Root(crate::grant::Origin::Operator);
    let a = ok(authority.delegate_ahead(root(), &task, "a"));
    let b = ok(authority.delegate_ahead(root(), &task, "b"));
    let c = ok(authority.delegate_ahead(root(), &task, "c"));
    // A lockstep ask after them reads their answers first and keeps them.
    assert_eq!(ok(authority.delegate(root(), &task, "d", None, None)), "mgr2.g4");
    assert_eq!(ok(authority.collect(b)), "mgr2.g2");
    authority.drop_ahead(a);
    assert_eq!(ok(authority.collect(c)), "mgr2.g3");
    let e = ok(authority.delegate_ahead(root(), &task, "e"));
    authority.drop_ahead(e);
    assert_eq!(ok(authority.delegate(root(), &task, "f", None, None)), "mgr2.g6");
    assert_eq!(lock(&asked).len(), 6);
}
