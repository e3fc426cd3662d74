//! Questions across members through the real binary
//! (docs/reference/capsules.md#questions-across-members): a formation of model capsules on the
//! scripted provider, where the worker asks, the lead passes the question up, the operator
//! answers at the entry's door, and the answer travels back down as a reply call.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Request, Step, fenced_answers, openai};
use crate::support::{Launcher, Sandbox, door_rpc, member_traces, running_record, wait_until};

pub(crate) const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
pub(crate) const KEY: &str = "sk-it-0123456789";
const LONG: Duration = Duration::from_secs(60);

const ROSTER: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/planner
    version: 0.1.0
    entry: true
  - name: worker
    capsule: local/asker
    version: 0.1.0
reachability:
  - from: lead
    to: [worker]
";

const LEAD_TAIL: &str = "lifecycle:\n  input_timeout_secs: 60\ncapabilities:\n  network:\n    allow: [localhost]\n\
network:\n  authentication:\n    scheme: bearer\n";

const WORKER_TAIL: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  input_timeout_secs: 60\n\
exports:\n  peer_tasks:\n    accept: true\nnetwork:\n  authentication:\n    scheme: bearer\n";

fn install_model(sb: &Sandbox, name: &str, endpoint: &str, tail: &str) {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {endpoint}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You work.\n  max_turns: 8\n{tail}"
    );
    sb.install_manifest(name, &manifest);
}

fn tools(calls: &[(&str, &str, Value)]) -> Step {
    Reply::json(openai::tool_calls(calls)).into()
}

fn text(t: &str) -> Step {
    Reply::json(openai::text(t)).into()
}

/// Every message text of the request (user, assistant and tool messages), oldest first.
fn message_texts(req: &Request) -> Vec<String> {
    req.json()["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["content"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The text between `start` and `end` in the newest message holding `start`.
fn between(req: &Request, start: &str, end: &str) -> Option<String> {
    message_texts(req).iter().rev().find_map(|t| {
        let from = t.find(start)? + start.len();
        let to = t[from..].find(end)? + from;
        Some(t[from..to].to_string())
    })
}

/// The call id the continuation names for `reply_to`.
fn asked_call(req: &Request) -> String {
    between(req, "reply_to \"", "\"").unwrap_or_else(|| panic!("no question in {:?}", message_texts(req)))
}

/// The answer a `request-input` tool result carries.
fn answer_of(req: &Request) -> String {
    between(req, "<untrusted-content source=caller>\n", "\n</untrusted-content>")
        .unwrap_or_else(|| panic!("no answer in {:?}", message_texts(req)))
}

fn formation(lead: Vec<Step>, worker: Vec<Step>) -> (Sandbox, std::path::PathBuf, Provider, Provider) {
    let sb = Sandbox::new();
    let (lp, wp) = (Provider::start(lead), Provider::start(worker));
    install_model(&sb, "planner", lp.url(), LEAD_TAIL);
    install_model(&sb, "asker", wp.url(), WORKER_TAIL);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    (sb, dir, lp, wp)
}

fn of_type<'a>(recs: &'a [Value], t: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["event_type"] == t).collect()
}

/// The entry's task once it asks, as ListTasks at the entry's door shows it.
fn asking_task(rec: &Value) -> Option<Value> {
    let listed = door_rpc(rec, "ListTasks", json!({}));
    listed["result"]["tasks"]
        .as_array()?
        .iter()
        .find(|t| t["status"]["state"] == "TASK_STATE_INPUT_REQUIRED")
        .cloned()
}

/// The relay formation's scripts: the lead calls the worker, passes the worker's question up
/// with `request-input` and `relay`, replies to the worker with the answer it gets, and ends
/// with `Done: worker => <the worker's answer>`; the worker asks `which colour?` and answers
/// `Painted it <answer>`.
pub(crate) fn relay_scripts() -> (Vec<Step>, Vec<Step>) {
    let lead = vec![
        tools(&[(
            "c1",
            "call-member",
            json!({"member": "worker", "task": "paint the shed"}),
        )]),
        text("waiting for the worker"),
        // The worker asks: pass the question up, through this member.
        Step::func(|req: &Request| {
            let id = asked_call(req);
            Reply::json(openai::tool_calls(&[(
                "r1",
                "request-input",
                json!({"question": "The worker asks: which colour?", "relay": id}),
            )]))
        }),
        // The operator answered: reply to the worker with it.
        Step::func(|req: &Request| {
            let (id, answer) = (asked_call(req), answer_of(req));
            Reply::json(openai::tool_calls(&[(
                "r2",
                "call-member",
                json!({"member": "worker", "reply_to": id, "task": answer}),
            )]))
        }),
        text("waiting for the worker again"),
        Step::func(|req: &Request| {
            let parts: Vec<String> = fenced_answers(&req.last_user_text().unwrap_or_default())
                .into_iter()
                .map(|(m, o)| format!("{m} => {o}"))
                .collect();
            Reply::json(openai::text(&format!("Done: {}", parts.join(" | "))))
        }),
    ];
    let worker = vec![
        tools(&[("w1", "request-input", json!({"question": "which colour?"}))]),
        Step::func(|req: &Request| Reply::json(openai::text(&format!("Painted it {}", answer_of(req))))),
    ];
    (lead, worker)
}

/// The relay formation, installed, with its two providers.
pub(crate) fn relay_formation() -> (Sandbox, std::path::PathBuf, Provider, Provider) {
    let (lead, worker) = relay_scripts();
    formation(lead, worker)
}

#[test]
fn the_workers_question_goes_up_to_the_operator_and_the_answer_comes_back_down() {
    let (sb, dir, lp, wp) = relay_formation();
    let launch = Launcher::start(&sb, &dir, &["--task", "Paint the shed"], &[(KEY_VAR, KEY)]);
    launch.formation_id();
    let entry = running_record(&sb, "lead");

    let mut asking = None;
    wait_until(LONG, || {
        asking = asking_task(&entry);
        asking.is_some()
    });
    let asking = asking.unwrap_or_else(|| panic!("the entry never asked; stderr:\n{}", launch.stderr()));
    assert_eq!(asking["metadata"]["murmur"]["askedBy"], json!(["worker", "lead"]));
    assert_eq!(
        asking["status"]["message"]["parts"][0]["text"],
        "The worker asks: which colour?"
    );
    let id = asking["id"].as_str().expect("task id");
    let answered = door_rpc(
        &entry,
        "SendMessage",
        json!({"configuration": {"returnImmediately": true},
               "message": {"messageId": "op-1", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "blue"}]}}),
    );
    assert_eq!(
        answered["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{answered}"
    );

    let (code, out, err) = launch.wait(LONG);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "Done: worker => Painted it blue\n");

    // The lead's model saw the question fenced as the worker's, and the worker the answer as its
    // caller's.
    let lreqs = lp.requests();
    assert_eq!(lreqs.len(), 6);
    let cont = lreqs[2].last_user_text().unwrap_or_default();
    assert!(
        cont.contains("worker asks a question (input-required):\n<untrusted-content source=member:worker>\nwhich colour?\n</untrusted-content>"),
        "{cont}"
    );
    assert_eq!(wp.requests().len(), 2);

    let lead_recs = member_traces(&sb, "lead").concat();
    let calls = of_type(&lead_recs, "member_call");
    let statuses: Vec<&Value> = calls.iter().map(|c| &c["status"]).collect();
    assert_eq!(statuses, [&json!("input_required"), &json!("completed")], "{calls:?}");
    let starts = of_type(&lead_recs, "member_call_start");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[1]["reply_to"], calls[0]["call_id"]);
    assert_eq!(
        starts[1]["member_task_id"], starts[0]["member_task_id"],
        "the reply answers the same task"
    );
    let asked = of_type(&lead_recs, "input_requested");
    assert_eq!(asked.len(), 1, "{lead_recs:?}");
    let worker_recs = member_traces(&sb, "worker").concat();
    let received = of_type(&worker_recs, "input_received");
    assert_eq!(received.len(), 1, "{worker_recs:?}");
    assert_eq!(received[0]["outcome"], "answered");
    // Nobody answered on anyone's behalf: one answer at each level, the operator's first.
    assert_eq!(of_type(&lead_recs, "input_received")[0]["outcome"], "answered");
}

#[test]
fn a_caller_that_ends_without_answering_cancels_the_question_and_a_stray_reply_is_a_tool_error() {
    let lead = vec![
        tools(&[(
            "c1",
            "call-member",
            json!({"member": "worker", "task": "paint the shed"}),
        )]),
        text("waiting for the worker"),
        tools(&[(
            "r1",
            "call-member",
            json!({"member": "worker", "reply_to": "mcl_0199c4e2f1b7712a9d3e4f5061728394", "task": "blue"}),
        )]),
        text("I leave the question unanswered."),
    ];
    let worker = vec![tools(&[("w1", "request-input", json!({"question": "which colour?"}))])];
    let (sb, dir, lp, wp) = formation(lead, worker);
    let launch = Launcher::start(&sb, &dir, &["--task", "Paint the shed"], &[(KEY_VAR, KEY)]);
    let (code, out, err) = launch.wait(LONG);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "I leave the question unanswered.\n");

    let lreqs = lp.requests();
    assert_eq!(lreqs.len(), 4);
    let stray = message_texts(&lreqs[3]).pop().unwrap_or_default();
    assert!(
        stray
            .contains("no call of this task waits with a question under the id 'mcl_0199c4e2f1b7712a9d3e4f5061728394'"),
        "{stray}"
    );
    assert_eq!(
        wp.requests().len(),
        1,
        "the worker's model ran once and was never answered"
    );

    // The worker's task was cancelled by its caller, before the formation wound down, and its
    // question recorded abandoned.
    let worker_recs = member_traces(&sb, "worker").concat();
    let received = of_type(&worker_recs, "input_received");
    assert_eq!(received.len(), 1, "{worker_recs:?}");
    assert_eq!(received[0]["outcome"], "abandoned");
    let canceled = of_type(&worker_recs, "task_canceled");
    assert_eq!(canceled.len(), 1, "{worker_recs:?}");
    assert_eq!(canceled[0]["reason"], "canceled by CancelTask from member:lead");
    let at = |t: &str| worker_recs.iter().position(|r| r["event_type"] == t);
    assert!(
        at("formation_ended").is_some() && at("task_canceled") < at("formation_ended"),
        "cancelled by the caller, not by the wind-down: {worker_recs:?}"
    );
    let lead_recs = member_traces(&sb, "lead").concat();
    let calls = of_type(&lead_recs, "member_call");
    assert_eq!(calls.len(), 1, "the stray reply started no call: {calls:?}");
    assert_eq!(calls[0]["status"], "input_required");
}

/// A component lead, in Python: it hands its task to `worker`, puts each question the worker
/// asks to its own caller (`ask.request-input`), replies with the answer (`call-member.reply`),
/// and answers with the worker's outcome once the call ends.
const RELAY_APP: &str = r#"
import wit_world
from componentize_py_types import Err
from wit_world import Failure_Error
from wit_world.imports import ask, call_member


class WitWorld(wit_world.WitWorld):
    def run(self, task: str) -> str:
        try:
            call_member.start("worker", task)
        except Err as e:
            raise Err(Failure_Error(f"could not call worker: {e.value}"))
        while True:
            event = call_member.await_next()
            if event is None:
                raise Err(Failure_Error("the call was lost"))
            if isinstance(event, call_member.CallEvent_Asks):
                q = event.value
                try:
                    answer = ask.request_input(f"{q.member} asks: {q.text}")
                    call_member.reply(q.call_id, answer)
                except Err as e:
                    raise Err(Failure_Error(f"could not pass the question on: {e.value}"))
            else:
                o = event.value
                return f"{o.member} [{o.status.name.lower()}]: {o.output}"
"#;

#[test]
fn a_component_passes_a_callees_question_up_with_its_own_and_replies_with_the_answer() {
    let built = crate::support::toolchains::python_capsule_with("relay", RELAY_APP);
    let sb = Sandbox::new();
    let worker = Provider::start(vec![
        tools(&[("w1", "request-input", json!({"question": "which colour?"}))]),
        Step::func(|req: &Request| Reply::json(openai::text(&format!("Painted it {}", answer_of(req))))),
    ]);
    install_model(&sb, "asker", worker.url(), WORKER_TAIL);
    let src = sb.path("relay");
    std::fs::copy(&built.wasm, src.join("capsule.wasm")).expect("component");
    std::fs::write(
        src.join("murmur.yaml"),
        format!("name: planner\nversion: 0.1.0\ncomponent: capsule.wasm\n{LEAD_TAIL}"),
    )
    .expect("manifest");
    let out = sb.run(&src, &["build", "."]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let zip = src.join("planner-0.1.0.mur.zip");
    let out = sb.run(&src, &["install", "-g", zip.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");

    let launch = Launcher::start(&sb, &dir, &["--task", "paint the shed"], &[(KEY_VAR, KEY)]);
    launch.formation_id();
    let entry = running_record(&sb, "lead");
    let mut asking = None;
    wait_until(LONG, || {
        asking = asking_task(&entry);
        asking.is_some()
    });
    let asking = asking.unwrap_or_else(|| panic!("the entry never asked; stderr:\n{}", launch.stderr()));
    assert_eq!(
        asking["status"]["message"]["parts"][0]["text"],
        "worker asks: which colour?"
    );
    assert_eq!(asking["metadata"]["murmur"]["askedBy"], json!(["lead"]));
    let id = asking["id"].as_str().expect("task id");
    let answered = door_rpc(
        &entry,
        "SendMessage",
        json!({"configuration": {"returnImmediately": true},
               "message": {"messageId": "op-1", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "blue"}]}}),
    );
    assert_eq!(
        answered["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{answered}"
    );
    let (code, out, err) = launch.wait(LONG);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "worker [completed]: Painted it blue\n");
    let lead_recs = member_traces(&sb, "lead").concat();
    let statuses: Vec<Value> = of_type(&lead_recs, "member_call")
        .iter()
        .map(|c| c["status"].clone())
        .collect();
    assert_eq!(statuses, [json!("input_required"), json!("completed")]);
}
