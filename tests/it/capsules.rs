//! Capsules that misbehave, through the real binary
//! (docs/reference/capsules.md#component-capsules): a trap, an endless loop and a memory hog each
//! end their task FAILED with a message that says why, the door keeps answering while they run, and
//! the session keeps serving afterwards.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::door::Door;
use crate::support::{Sandbox, wait_until};

/// The status text of a FAILED task, after checking the status message's shape
/// (docs/reference/door.md#methods).
#[track_caller]
fn failure(t: &Value) -> String {
    assert_eq!(t["status"]["state"], "TASK_STATE_FAILED", "{t}");
    assert_eq!(t.get("artifacts"), None, "a failed task has no answer: {t}");
    let m = &t["status"]["message"];
    assert_eq!(
        (&m["role"], &m["taskId"], &m["contextId"]),
        (&json!("ROLE_AGENT"), &t["id"], &t["contextId"]),
        "{t}"
    );
    m["parts"][0]["text"].as_str().expect("failure text").to_string()
}

fn id(t: &Value) -> String {
    t["id"].as_str().expect("task id").to_string()
}

/// The session's `out/result_<task>.txt` [ours], once written.
fn result_file(d: &Door, task: &str) -> String {
    let path = d.records_dir().join(format!("out/result_{task}.txt"));
    let mut text = String::new();
    let found = wait_until(Duration::from_secs(10), || {
        text = std::fs::read_to_string(&path).unwrap_or_default();
        !text.is_empty()
    });
    assert!(found.is_some(), "{} was never written", path.display());
    text
}

/// `task_end` records of the session so far, as (task id, exit status).
fn task_ends(d: &Door) -> Vec<(String, String)> {
    d.trace()
        .iter()
        .filter(|r| r["event_type"] == "task_end")
        .map(|r| {
            (
                r["task_id"].as_str().unwrap_or("").to_string(),
                r["exit_status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_trapping_capsule_fails_its_task_and_the_session_keeps_serving() {
    let sb = Sandbox::new();
    sb.install_actor("trap");
    let mut d = Door::start(&sb, "trap", &[]);
    let want = "the capsule trapped: wasm `unreachable` instruction executed";

    let first = d.send(None, "boom", false);
    assert_eq!(failure(&first), want);
    assert_eq!(result_file(&d, &id(&first)), format!("failed: {want}"));
    // Still serving: another task gets a fresh instance and fails the same way.
    let second = d.send(None, "boom again", false);
    assert_eq!(failure(&second), want);
    assert_ne!(id(&first), id(&second));
    assert_eq!(failure(&d.task(None, &id(&first))), want);
    let listed = d.rpc(None, "ListTasks", json!({"status": "TASK_STATE_FAILED"}));
    assert_eq!(listed["result"]["totalSize"], 2, "{listed}");
    assert!(
        d.is_running(),
        "the session survived its capsule's traps: {}",
        d.stderr()
    );
    let ends = task_ends(&d);
    assert_eq!(
        ends,
        [(id(&first), "failed".to_string()), (id(&second), "failed".to_string())],
        "{ends:?}"
    );
}

#[test]
fn a_spinning_capsule_is_stopped_at_its_time_budget_while_the_door_answers() {
    let sb = Sandbox::new();
    sb.install_actor("spin");
    let mut d = Door::start(&sb, "spin", &[("MURMUR_TEST_TIMING", "component_task=2s")]);
    let want = "the capsule ran longer than its time budget of 2 s and was stopped";

    let started = Instant::now();
    let t = d.send(None, "loop", true);
    let tid = id(&t);
    // While the capsule spins, the door answers every request promptly.
    let mut states = Vec::new();
    let mut working_answers = 0;
    let mut slowest = Duration::ZERO;
    let ended = loop {
        let asked = Instant::now();
        let now = d.task(None, &tid);
        let card = d.get("/.well-known/agent-card.json", None);
        slowest = slowest.max(asked.elapsed());
        assert_eq!(card.status, 200);
        let state = now["status"]["state"].as_str().unwrap_or("").to_string();
        working_answers += usize::from(state == "TASK_STATE_WORKING");
        if states.last() != Some(&state) {
            states.push(state.clone());
        }
        if state == "TASK_STATE_FAILED" {
            break now;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "still {state} after 15 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    assert!(states.contains(&"TASK_STATE_WORKING".to_string()), "{states:?}");
    assert_eq!(states.last().map(String::as_str), Some("TASK_STATE_FAILED"));
    assert!(
        took >= Duration::from_millis(1900),
        "stopped before its budget: {took:?}"
    );
    // A door blocked by its capsule would answer once or twice in those two seconds, not every
    // 50 ms; the bounds leave room for a loaded machine.
    assert!(
        working_answers >= 5 && slowest < Duration::from_millis(1500),
        "the door answered {working_answers} times while the capsule ran, the slowest in {slowest:?}"
    );
    assert_eq!(failure(&ended), want);

    // The session serves on: a blocking SendMessage gets the same outcome after the budget.
    let again = Instant::now();
    let t2 = d.send(None, "loop again", false);
    assert_eq!(failure(&t2), want);
    assert!(again.elapsed() >= Duration::from_millis(1900), "{:?}", again.elapsed());
    assert!(d.is_running(), "{}", d.stderr());
    assert_eq!(result_file(&d, &id(&t2)), format!("failed: {want}"));
}

#[test]
fn a_memory_hog_fails_its_task_and_the_session_keeps_serving() {
    let sb = Sandbox::new();
    sb.install_actor("hog");
    let mut d = Door::start(&sb, "hog", &[]);
    let want = "the capsule needed more memory than its limit of 256 MiB and was stopped";

    let first = d.send(None, "eat", false);
    assert_eq!(failure(&first), want);
    let second = d.send(None, "eat more", false);
    assert_eq!(failure(&second), want);
    assert!(d.is_running(), "{}", d.stderr());
    assert_eq!(result_file(&d, &id(&second)), format!("failed: {want}"));
    let listed = d.rpc(None, "ListTasks", json!({}));
    assert_eq!(listed["result"]["totalSize"], 2, "{listed}");
}

#[test]
fn a_capsule_task_cancelled_mid_run_stops_promptly_and_the_next_task_runs() {
    let sb = Sandbox::new();
    sb.install_actor("spin");
    // The default budget (600 s) is far away: only the cancellation can stop this task.
    let d = Door::start(&sb, "spin", &[]);
    let t = d.send(None, "loop", true);
    let tid = id(&t);
    d.wait_state(None, &tid, "TASK_STATE_WORKING");
    let queued = id(&d.send(None, "next", true));
    let asked = Instant::now();
    let r = d.rpc(None, "CancelTask", json!({ "id": tid }));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    // Epoch interruption frees the slot, and the queued task starts.
    d.wait_state(None, &queued, "TASK_STATE_WORKING");
    assert!(asked.elapsed() < Duration::from_secs(5), "{:?}", asked.elapsed());
    let ends: Vec<Value> = d
        .trace()
        .into_iter()
        .filter(|r| r["event_type"] == "task_canceled")
        .collect();
    assert!(ends.iter().any(|r| r["task_id"] == json!(tid)), "{ends:?}");
}
