//! A person answering a task's question (docs/reference/door.md#asking, docs/reference/cli.md#mur-answer):
//! `mur run --capsule … --task` without a terminal says once how to answer, and `mur answer`
//! from another process answers; `mur send` stops at a question; `mur answer` refuses an
//! unknown task, an empty or too large answer, and an answer after the timeout with its codes; a
//! launcher killed while its entry's task waits leaves nothing running. The model is the
//! scripted provider on 127.0.0.1; it calls the runtime's `request-input` tool.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::faults::{all_members_gone, nothing_claims_to_run};
use crate::support::provider::{Provider, Reply, Request, Step, openai};
use crate::support::{Launcher, Sandbox, door_rpc, stderr, stdout, wait_until};

pub(crate) const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
pub(crate) const KEY: &str = "sk-it-0123456789";

/// A model capsule `local/<name>` on `endpoint` that may ask, waiting `timeout_secs` for an
/// answer; `lifecycle` adds lifecycle keys (two spaces in).
pub(crate) fn install_asker(sb: &Sandbox, name: &str, endpoint: &str, timeout_secs: u32, lifecycle: &str) {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {endpoint}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You paint.\n  max_turns: 6\nlifecycle:\n  input_timeout_secs: {timeout_secs}\n{lifecycle}\
         network:\n  authentication:\n    scheme: bearer\n"
    );
    sb.install_manifest(name, &manifest);
}

/// `mur run --capsule local/<name> --task <task>` in the sandbox's `work`, with the provider's
/// key, no terminal and its output piped.
pub(crate) fn task_run(sb: &Sandbox, name: &str, task: &str) -> std::process::Command {
    let mut cmd = sb.mur(&sb.path("work"));
    cmd.args([
        "run",
        "--capsule",
        &format!("local/{name}"),
        "--capsule-version",
        "0.1.0",
        "--task",
        task,
    ])
    .env(KEY_VAR, KEY)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    cmd
}

/// The model's turn that asks `question` through `request-input`.
pub(crate) fn ask(call_id: &str, question: &str) -> Step {
    Reply::json(openai::tool_calls(&[(
        call_id,
        "request-input",
        json!({"question": question}),
    )]))
    .into()
}

/// The fenced answers the runtime handed back to the model, in order.
pub(crate) fn answers_seen(req: &Request) -> Vec<String> {
    req.json()["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .filter_map(|m| m["content"].as_str())
                .filter_map(|c| {
                    let inner = c.strip_prefix("<untrusted-content source=caller>\n")?;
                    Some(inner.strip_suffix("\n</untrusted-content>")?.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The model's last turn: `Painted <answers joined by " and ">`, from what it was handed.
pub(crate) fn paint_with_answers() -> Step {
    Step::func(|req: &Request| Reply::json(openai::text(&format!("Painted {}", answers_seen(req).join(" and ")))))
}

/// The task id a `… (task tsk_…)` or `task tsk_… …` line names, once `text` shows one.
pub(crate) fn task_in(text: &str) -> Option<String> {
    let at = text.find("task tsk_")? + "task ".len();
    let id: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Some(id)
}

fn answer(sb: &Sandbox, dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = sb.mur(dir).arg("answer").args(args).output().expect("mur answer");
    (out.status.code(), stdout(&out), stderr(&out))
}

/// The records directory of the one session of `capsule` under the sandbox.
fn records_of(sb: &Sandbox, capsule: &str) -> std::path::PathBuf {
    let mut stack = vec![sb.home().join(".murmur/records")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "trace.jsonl")
                && let Some(dir) = p.parent()
                && trace_of(dir).first().is_some_and(|r| r["capsule_name"] == capsule)
            {
                return dir.to_path_buf();
            }
        }
    }
    panic!("no session of {capsule}")
}

fn trace_of(records_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(records_dir.join("trace.jsonl"))
        .expect("trace.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn without_a_terminal_the_run_says_once_how_to_answer_and_mur_answer_answers() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        ask("c1", "Which colour?"),
        ask("c2", "How many coats?"),
        paint_with_answers(),
    ]);
    install_asker(&sb, "painter", provider.url(), 60, "");
    let dir = sb.path("work");
    let run = Launcher::spawn(task_run(&sb, "painter", "paint the fence"));
    wait_until(Duration::from_secs(60), || {
        let err = run.stderr();
        err.contains("Which colour?") && err.contains("waits for input;")
    })
    .unwrap_or_else(|| panic!("no question; stderr:\n{}", run.stderr()));
    let err = run.stderr();
    assert!(err.contains("[mur run] local/painter asks (task tsk_"), "{err}");
    let task = task_in(&err).expect("the task id");
    assert!(
        err.contains(&format!("waits for input; answer it with `mur answer {task} TEXT`")),
        "{err}"
    );

    // The first answer: the task asks again, and `mur answer` says so (exit 3).
    let (code, out, aerr) = answer(&sb, &dir, &[&task, "green"]);
    assert_eq!(code, Some(3), "{aerr}");
    assert_eq!(out, "", "nothing answered yet");
    assert!(aerr.contains("How many coats?"), "{aerr}");
    assert!(aerr.contains(&format!("`mur answer {task} TEXT`")), "{aerr}");

    // The second, from a file: the task completes, and `mur answer` prints its answer.
    wait_until(Duration::from_secs(30), || run.stderr().contains("How many coats?")).expect("the second question");
    let file = sb.write("coats.txt", "two");
    let (code, out, aerr) = answer(&sb, &dir, &[&task, "--file", &file.display().to_string()]);
    assert_eq!(code, Some(0), "{aerr}");
    assert_eq!(out, "Painted green and two\n");

    let (code, out, err) = run.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "Painted green and two\n");
    assert_eq!(err.matches("waits for input;").count(), 1, "said once: {err}");
    assert!(!err.contains(KEY), "no key on stderr");

    // The model was handed each answer fenced, one per question.
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(answers_seen(&reqs[1]), ["green"]);
    assert_eq!(answers_seen(&reqs[2]), ["green", "two"]);

    // The trace has who asked and the sizes; neither the trace nor the log holds the texts.
    let records_dir = records_of(&sb, "local/painter");
    let recs = trace_of(&records_dir);
    let asked: Vec<&Value> = recs.iter().filter(|r| r["event_type"] == "input_requested").collect();
    let got: Vec<&Value> = recs.iter().filter(|r| r["event_type"] == "input_received").collect();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0]["question_bytes"], "Which colour?".len());
    assert_eq!(asked[0]["asked_by"], json!([]));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["outcome"], "answered");
    assert_eq!(got[0]["answer_bytes"], 5);
    assert_eq!(got[1]["answer_bytes"], 3);
    let trace_text = std::fs::read_to_string(records_dir.join("trace.jsonl")).expect("trace");
    let log = std::fs::read_to_string(records_dir.join("logs/bootstrap.log")).expect("log");
    for text in ["Which colour?", "How many coats?", "green"] {
        assert!(!trace_text.contains(text), "the trace holds {text:?}");
        assert!(!log.contains(text), "the log holds {text:?}");
    }

    // Once the session ended, no running session holds the task.
    let (code, _, aerr) = answer(&sb, &dir, &[&task, "late"]);
    assert_eq!(code, Some(1));
    assert!(aerr.contains("error[E-ANS-001]"), "{aerr}");
}

/// A session of `local/<name>` that serves on (queue + sleep), with its readiness line read.
fn serving(sb: &Sandbox, name: &str) -> (Launcher, Value) {
    let dir = sb.path("work");
    let mut cmd = sb.mur(&dir);
    cmd.args([
        "run",
        "--capsule",
        &format!("local/{name}"),
        "--capsule-version",
        "0.1.0",
        "--json",
    ])
    .env(KEY_VAR, KEY)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let run = Launcher::spawn(cmd);
    wait_until(Duration::from_secs(60), || run.stdout().lines().next().is_some())
        .unwrap_or_else(|| panic!("no readiness line; stderr:\n{}", run.stderr()));
    let ready: Value = serde_json::from_str(run.stdout().lines().next().unwrap_or("")).expect("readiness line");
    let rec = crate::support::running_records(sb)
        .into_iter()
        .find(|r| r["session_id"] == ready["session_id"])
        .expect("its running record");
    (run, rec)
}

#[test]
fn mur_answer_refuses_unknown_tasks_empty_large_and_late_answers() {
    let sb = Sandbox::new();
    let dir = sb.path("work");
    // Nothing runs yet: a malformed id, and a task no session holds.
    let (code, _, err) = answer(&sb, &dir, &["not-a-task", "yes"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[E-ANS-001]") && err.contains("is not a task id"),
        "{err}"
    );
    let nobody = "tsk_0199c4e2f1b7712a9d3e4f5061728396";
    let (code, _, err) = answer(&sb, &dir, &[nobody, "yes"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[E-ANS-001]") && err.contains("no session runs"),
        "{err}"
    );

    // Two sessions serve: one waits long for answers, one a second only.
    let slow_model = Provider::start(vec![ask("c1", "Which colour?"), paint_with_answers()]);
    let hasty_model = Provider::start(vec![ask("c1", "Quick, which colour?")]);
    let serve_on = "  task_acceptance: queue\n  after_task: sleep\n";
    install_asker(&sb, "slow", slow_model.url(), 120, serve_on);
    install_asker(&sb, "hasty", hasty_model.url(), 1, serve_on);
    let (slow, slow_rec) = serving(&sb, "slow");
    let (hasty, hasty_rec) = serving(&sb, "hasty");

    // `mur send` stops at the question (exit 3) and names the `mur answer` that answers it.
    let sent = |rec: &Value| {
        let out = sb
            .mur(&dir)
            .args(["send", rec["session_id"].as_str().expect("id"), "paint"])
            .output()
            .expect("mur send");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(
            err.contains("waits for input;") && err.contains("`mur answer tsk_"),
            "{err}"
        );
        task_in(&err).expect("task id")
    };
    let slow_task = sent(&slow_rec);
    let hasty_task = sent(&hasty_rec);

    let (code, _, err) = answer(&sb, &dir, &[nobody, "yes"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("none of the 2 running sessions holds task"), "{err}");

    // An empty answer, and one larger than the door's body bound: refused, nothing sent.
    let (code, _, err) = answer(&sb, &dir, &[&slow_task, "  \n "]);
    assert_eq!(code, Some(1));
    assert!(err.contains("error[E-ANS-002]") && err.contains("empty"), "{err}");
    let big = sb.write("big.txt", &"y".repeat(8 * 1024 * 1024 + 1));
    let (code, _, err) = answer(&sb, &dir, &[&slow_task, "--file", &big.display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[E-ANS-002]") && err.contains("more than the 8388608 bytes"),
        "{err}"
    );
    // Under the bound as text, over it as a request: every quote is escaped in the JSON body.
    let quotes = sb.write("quotes.txt", &"\"".repeat(5 * 1024 * 1024));
    let (code, _, err) = answer(&sb, &dir, &[&slow_task, "--file", &quotes.display().to_string()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[E-ANS-002]") && err.contains("makes a request of"),
        "{err}"
    );
    let state = door_rpc(&slow_rec, "GetTask", json!({"id": slow_task}));
    assert_eq!(
        state["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "still asking"
    );

    // The slow task takes its answer; a second answer finds it completed (-32004).
    let (code, out, err) = answer(&sb, &dir, &[&slow_task, "blue"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Painted blue\n");
    let (code, _, err) = answer(&sb, &dir, &[&slow_task, "red"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[E-ANS-002]") && err.contains("-32004") && err.contains("TASK_STATE_COMPLETED"),
        "{err}"
    );

    // The hasty task's second passes: it fails E-ASK-001, and a late answer is refused -32004.
    wait_until(Duration::from_secs(30), || {
        door_rpc(&hasty_rec, "GetTask", json!({"id": hasty_task}))["result"]["status"]["state"] == "TASK_STATE_FAILED"
    })
    .expect("the hasty task timed out");
    let (code, _, err) = answer(&sb, &dir, &[&hasty_task, "green"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[E-ANS-002]") && err.contains("-32004") && err.contains("TASK_STATE_FAILED"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "mur trace show {}",
            hasty_rec["session_id"].as_str().unwrap_or("?")
        )),
        "{err}"
    );
    drop((slow, hasty));
}

/// A formation whose entry `lead` asks on its `--task` task; `worker` idles. Returns the
/// sandbox, the formation directory and the provider.
pub(crate) fn asking_formation(script: Vec<Step>) -> (Sandbox, std::path::PathBuf, Provider) {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let provider = Provider::start(script);
    install_asker(&sb, "lead", provider.url(), 120, "");
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/lead, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\n",
    )
    .expect("roster");
    (sb, dir, provider)
}

#[test]
fn a_launcher_killed_while_its_entry_waits_for_an_answer_leaves_nothing_running() {
    let (sb, dir, _provider) = asking_formation(vec![ask("c1", "Which colour?")]);
    let launcher = Launcher::start(&sb, &dir, &["--task", "paint the fence"], &[(KEY_VAR, KEY)]);
    // The question, then the one line on how to answer it: both are written, one after the other.
    wait_until(Duration::from_secs(60), || {
        let err = launcher.stderr();
        err.contains("Which colour?") && err.contains("waits for input;")
    })
    .unwrap_or_else(|| panic!("no question; stderr:\n{}", launcher.stderr()));
    let err = launcher.stderr();
    assert!(err.contains("[mur run] lead asks (task tsk_"), "{err}");
    assert!(
        err.contains("waits for input; answer it with `mur answer tsk_"),
        "{err}"
    );
    let lead = crate::support::running_record(&sb, "lead");
    let task = task_in(&err).expect("task id");
    let shown = door_rpc(&lead, "GetTask", json!({"id": task}));
    assert_eq!(shown["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(shown["result"]["metadata"]["murmur"]["askedBy"], json!(["lead"]));

    let pid = launcher.pid();
    launcher.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let _ = launcher.wait(Duration::from_secs(10));
    all_members_gone(&sb, pid, killed, "the launcher killed while the entry asked");
    nothing_claims_to_run(&sb, &dir, "the launcher killed while the entry asked");
    // The entry's question was dropped with its task: asked, then abandoned.
    let sessions = crate::support::member_sessions(&sb, "lead");
    let recs = &sessions[0].1;
    let outcome = recs
        .iter()
        .find(|r| r["event_type"] == "input_received")
        .map(|r| r["outcome"].clone());
    assert_eq!(outcome, Some(json!("abandoned")), "{recs:?}");
}

#[test]
fn the_formation_deadline_still_falls_on_an_entry_that_waits_for_an_answer() {
    let (sb, dir, _provider) = asking_formation(vec![ask("c1", "Which colour?")]);
    // The entry may wait 120 s for an answer; the formation's deadline is the shorter bound.
    let launcher = Launcher::start(
        &sb,
        &dir,
        &["--task", "paint the fence", "--deadline", "3"],
        &[(KEY_VAR, KEY)],
    );
    let pid = launcher.pid();
    let started = Instant::now();
    let (code, _out, err) = launcher.wait(Duration::from_secs(60));
    assert!(err.contains("Which colour?"), "the entry asked first: {err}");
    assert!(err.contains("E-RUN-053"), "the deadline ended it: {err}");
    assert_ne!(code, 0, "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    all_members_gone(&sb, pid, Instant::now(), "the deadline fell while the entry asked");
    nothing_claims_to_run(&sb, &dir, "the deadline fell while the entry asked");
    let sessions = crate::support::member_sessions(&sb, "lead");
    let outcome = sessions[0]
        .1
        .iter()
        .find(|r| r["event_type"] == "input_received")
        .map(|r| r["outcome"].clone());
    assert_eq!(outcome, Some(json!("abandoned")), "{:?}", sessions[0].1);
}
