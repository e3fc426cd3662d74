//! A task that asks its caller for input, over a real door (docs/reference/door.md#asking): each
//! state change a caller sees, and each answer the door refuses, which changes nothing.

use super::*;
use crate::tasks::{Asked, InputOutcome};

fn id_of(task: &Value) -> String {
    task["id"].as_str().unwrap_or_default().to_string()
}

/// A message carrying `text` for task `task_id` (and `context_id`, when given).
fn answer_params(task_id: &str, context_id: Option<&str>, text: &str) -> Value {
    let mut message =
        json!({"messageId": "m-answer", "role": "ROLE_USER", "taskId": task_id, "parts": [{"text": text}]});
    if let Some(c) = context_id {
        message["contextId"] = json!(c);
    }
    json!({"message": message})
}

impl TestDoor {
    fn answer(&self, auth: Option<&str>, task_id: &str, text: &str) -> Value {
        self.rpc(auth, "SendMessage", answer_params(task_id, None, text))
    }

    fn get(&self, auth: Option<&str>, task_id: &str) -> Value {
        self.rpc(auth, "GetTask", json!({"id": task_id}))["result"].clone()
    }

    /// A streaming method's events, to the end of the stream.
    fn stream(&self, auth: Option<&str>, method: &str, params: Value) -> Vec<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let mut r = agent()
            .post(&self.http_url("/"))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0");
        if let Some(a) = auth {
            r = r.set("authorization", a);
        }
        sse_events(r.send_string(&body).expect("stream"))
    }

    /// What the question of `task_id` came to, once it came to something.
    fn asked_of(&self, task_id: &str) -> Asked {
        for _ in 0..400 {
            if let Some((_, a)) = crate::sync::lock(&self.asked).iter().find(|(id, _)| id == task_id) {
                return a.clone();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("{task_id} never settled its question");
    }

    fn settled(&self, task_id: &str) -> Vec<InputOutcome> {
        crate::sync::lock(&self.events)
            .iter()
            .filter_map(|e| match e {
                BoardEvent::InputSettled {
                    task_id: t, outcome, ..
                } if t == task_id => Some(*outcome),
                _ => None,
            })
            .collect()
    }
}

/// A task shown asking: its state, its status message (role agent) and who asked.
fn asking(task: &Value) -> (&str, &str, &str, &Value) {
    let status = &task["status"];
    (
        status["state"].as_str().unwrap_or_default(),
        status["message"]["role"].as_str().unwrap_or_default(),
        status["message"]["parts"][0]["text"].as_str().unwrap_or_default(),
        &task["metadata"]["murmur"]["askedBy"],
    )
}

const ASKING: (&str, &str, &str) = ("TASK_STATE_INPUT_REQUIRED", "ROLE_AGENT", "which colour?");

#[test]
fn a_task_that_asks_shows_its_question_everywhere_and_its_answer_continues_it() {
    let d = start(config(Acceptance::Queue, 5, true));
    let op = d.op();
    let coder = json!(["coder"]);
    // A blocking SendMessage returns once the task asks.
    let task = d.send(Some(&op), "ask:which colour?", false);
    let id = id_of(&task);
    let (state, role, text, by) = asking(&task);
    assert_eq!(((state, role, text), by), (ASKING, &coder), "{task}");
    let context = task["contextId"].as_str().unwrap_or_default().to_string();

    // GetTask, ListTasks filtered on the state, and SubscribeToTask show the same.
    let got = d.get(Some(&op), &id);
    let (state, role, text, by) = asking(&got);
    assert_eq!(((state, role, text), by), (ASKING, &coder), "{got}");
    let list = |status: &str| d.rpc(Some(&op), "ListTasks", json!({"status": status}))["result"].clone();
    let listed = list("TASK_STATE_INPUT_REQUIRED");
    assert_eq!(
        (listed["totalSize"].as_u64(), &listed["tasks"][0]["id"]),
        (Some(1), &json!(id))
    );
    assert_eq!(asking(&listed["tasks"][0]).3, &coder);
    assert_eq!(list("TASK_STATE_WORKING")["totalSize"], 0);
    // A stream closes at input-required as at a terminal state: the caller has to act.
    let sub = d.stream(Some(&op), "SubscribeToTask", json!({"id": id}));
    assert_eq!(sub.len(), 1, "{sub:?}");
    let (state, role, text, by) = asking(&sub[0]["result"]["task"]);
    assert_eq!(((state, role, text), by), (ASKING, &coder), "{sub:?}");

    // The answer, streamed, with the task's own contextId: back to work, then the end.
    let events = d.stream(
        Some(&op),
        "SendStreamingMessage",
        answer_params(&id, Some(&context), "blue"),
    );
    let first = &events[0]["result"]["task"];
    assert_eq!(
        (first["id"].as_str(), &first["status"]["state"]),
        (Some(id.as_str()), &json!("TASK_STATE_WORKING"))
    );
    assert!(first["metadata"]["murmur"].get("askedBy").is_none(), "{first}");
    let art = events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .expect("artifact");
    assert_eq!(art["artifact"]["parts"][0]["text"], "told: blue");
    let last = &events[events.len() - 1]["result"]["statusUpdate"];
    assert_eq!(
        (&last["taskId"], &last["status"]["state"]),
        (&json!(id), &json!("TASK_STATE_COMPLETED"))
    );
    assert!(matches!(d.asked_of(&id), Asked::Answered { text, .. } if text == "blue"));
    assert_eq!(d.settled(&id), [InputOutcome::Answered]);

    // The history holds the task, the question (agent), the answer (user) and the end.
    let done = d.rpc(Some(&op), "GetTask", json!({"id": id, "historyLength": 10}))["result"].clone();
    let turns: Vec<(&str, &str)> = done["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default(),
                m["parts"][0]["text"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            ("ROLE_USER", "ask:which colour?"),
            ("ROLE_AGENT", "which colour?"),
            ("ROLE_USER", "blue"),
            ("ROLE_AGENT", "told: blue"),
        ]
    );

    // SendStreamingMessage shows the whole course up to the question, and closes there; a
    // blocking answer returns the task at its end.
    let events = d.stream(
        Some(&op),
        "SendStreamingMessage",
        json!({"message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "ask:which colour?"}]}}),
    );
    assert_eq!(events[0]["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    let last = &events[events.len() - 1]["result"]["statusUpdate"];
    assert_eq!(
        (
            last["status"]["state"].as_str(),
            last["status"]["message"]["parts"][0]["text"].as_str()
        ),
        (Some("TASK_STATE_INPUT_REQUIRED"), Some("which colour?"))
    );
    let second = last["taskId"].as_str().unwrap_or_default().to_string();
    let done = d.answer(Some(&op), &second, "red")["result"]["task"].clone();
    assert_eq!(
        (&done["status"]["state"], &done["artifacts"][0]["parts"][0]["text"]),
        (&json!("TASK_STATE_COMPLETED"), &json!("told: red"))
    );
}

#[test]
fn answers_that_cannot_land_are_refused_and_change_nothing() {
    let sk = SigningKey::generate().expect("key");
    let d = start(member_config(&sk, true));
    let planner = format!("Bearer {}", sk.mint(FRM, "planner", "coder"));
    let reviewer = format!("Bearer {}", sk.mint(FRM, "reviewer", "coder"));
    let task = d.send(Some(&planner), "ask:which colour?", false);
    let id = id_of(&task);
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let before = d.get(Some(&planner), &id);
    let data = |r: &Value| r["error"]["data"][0]["metadata"].clone();

    // Another caller may not see the task: not found, as an unknown id.
    for (who, task_id) in [
        (&reviewer, id.as_str()),
        (&planner, "tsk_0199c4e2f1b7712a9d3e4f5061728394"),
    ] {
        let r = d.answer(Some(who), task_id, "red");
        assert_eq!(code(&r), -32001, "{r}");
    }
    // An empty answer, and a contextId that is not the task's: invalid params.
    let empty = d.answer(Some(&planner), &id, "  \n");
    assert_eq!(
        (code(&empty), &empty["error"]["data"][0]["fieldViolations"][0]["field"]),
        (-32602, &json!("message.parts")),
        "{empty}"
    );
    let elsewhere = d.rpc(
        Some(&planner),
        "SendMessage",
        answer_params(&id, Some("ctx_other"), "red"),
    );
    assert_eq!(
        (
            code(&elsewhere),
            &elsewhere["error"]["data"][0]["fieldViolations"][0]["field"]
        ),
        (-32602, &json!("message.contextId")),
        "{elsewhere}"
    );
    // An answer over the body limit is refused before it is read.
    let big = answer_params(&id, None, &"r".repeat(BODY_LIMIT));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": big}).to_string();
    let mut request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nAuthorization: {planner}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body.as_bytes());
    let refused = d.raw(&request);
    assert!(
        refused.starts_with("HTTP/1.1 413"),
        "{}",
        &refused[..refused.len().min(200)]
    );
    // Nothing changed: the question is open, and its owner's answer still lands.
    assert_eq!(d.get(Some(&planner), &id), before);
    assert!(d.settled(&id).is_empty());
    let done = d.answer(Some(&planner), &id, "blue")["result"]["task"].clone();
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");

    // A terminal task, and a live one that asked nothing: unsupported, naming the task's state.
    let r = d.answer(Some(&planner), &id, "again");
    assert_eq!(
        (code(&r), data(&r)),
        (-32004, json!({"taskId": id, "state": "TASK_STATE_COMPLETED"})),
        "{r}"
    );
    let held = id_of(&d.send(Some(&planner), "hold", true));
    d.wait_state(&held, TaskState::Working);
    let r = d.answer(Some(&planner), &held, "red");
    assert_eq!(
        (code(&r), data(&r)),
        (-32004, json!({"taskId": held, "state": "TASK_STATE_WORKING"})),
        "{r}"
    );
    assert_eq!(
        d.board.get(&held).map(|t| (t.state, t.history.len())),
        Some((TaskState::Working, 1))
    );
    d.release.notify_one();
}

#[test]
fn of_two_answers_racing_exactly_one_lands() {
    let d = Arc::new(start(config(Acceptance::Queue, 5, false)));
    for round in 0..5 {
        let id = id_of(&d.send(None, "ask:which colour?", false));
        let racers: Vec<_> = ["red", "blue"]
            .into_iter()
            .map(|text| {
                let (d, id) = (Arc::clone(&d), id.clone());
                std::thread::spawn(move || (text, d.answer(None, &id, text)))
            })
            .collect();
        let replies: Vec<(&str, Value)> = racers.into_iter().map(|r| r.join().expect("racer")).collect();
        let won: Vec<&str> = replies
            .iter()
            .filter(|(_, r)| r.get("result").is_some())
            .map(|(t, _)| *t)
            .collect();
        let lost: Vec<i64> = replies
            .iter()
            .filter(|(_, r)| r.get("error").is_some())
            .map(|(_, r)| code(r))
            .collect();
        assert_eq!(
            (won.len(), lost.as_slice()),
            (1, [-32004].as_slice()),
            "round {round}: {replies:?}"
        );
        assert!(matches!(d.asked_of(&id), Asked::Answered { text, .. } if text == won[0]));
        d.wait_state(&id, TaskState::Completed);
        assert_eq!(d.settled(&id), [InputOutcome::Answered]);
    }
}

#[test]
fn cancel_while_asking_ends_the_question_and_an_answer_then_is_refused() {
    let d = start(config(Acceptance::Queue, 5, false));
    let id = id_of(&d.send(None, "ask:which colour?", false));
    let canceled = d.rpc(None, "CancelTask", json!({"id": id}))["result"].clone();
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    assert!(canceled["metadata"]["murmur"].get("askedBy").is_none(), "{canceled}");
    assert_eq!(d.asked_of(&id), Asked::Ended);
    assert_eq!(d.settled(&id), [InputOutcome::Abandoned]);
    let r = d.answer(None, &id, "blue");
    assert_eq!(code(&r), -32004, "{r}");
    assert_eq!(d.get(None, &id)["status"]["state"], "TASK_STATE_CANCELED");
}

#[test]
fn a_question_left_unanswered_fails_the_task_with_e_ask_001() {
    let d = start(config(Acceptance::Queue, 5, false));
    let id = id_of(&d.send(None, "ask-briefly:which colour?", true));
    d.wait_state(&id, TaskState::Failed);
    assert_eq!(d.asked_of(&id), Asked::TimedOut);
    let failed = d.get(None, &id);
    let text = failed["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text, tasks::ask::no_answer_text(Duration::from_millis(50)));
    assert!(text.starts_with("error[E-ASK-001]"), "{text}");
    assert_eq!(d.settled(&id), [InputOutcome::TimedOut]);
    let r = d.answer(None, &id, "blue");
    assert_eq!(
        (code(&r), &r["error"]["data"][0]["metadata"]["state"]),
        (-32004, &json!("TASK_STATE_FAILED")),
        "{r}"
    );
}

#[test]
fn a_question_asked_while_the_task_is_cancelled_asks_nothing() {
    let d = start(config(Acceptance::Queue, 5, false));
    let id = id_of(&d.send(None, "ask-when-canceled:which colour?", true));
    d.wait_state(&id, TaskState::Working);
    assert_eq!(
        d.rpc(None, "CancelTask", json!({"id": id}))["result"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert_eq!(d.asked_of(&id), Asked::Ended);
    let t = d.get(None, &id);
    assert_eq!(
        (&t["status"]["state"], t["metadata"]["murmur"].get("askedBy")),
        (&json!("TASK_STATE_CANCELED"), None)
    );
    let requested = crate::sync::lock(&d.events)
        .iter()
        .any(|e| matches!(e, BoardEvent::InputRequested { task_id, .. } if *task_id == id));
    assert!(!requested, "a question opened on a cancelled task");
}
