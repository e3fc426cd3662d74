//! Model capsules through the real binary (docs/reference/capsules.md#model-capsules,
//! docs/reference/capsules.md#calls-between-members): `mur run --capsule` and `mur run --roster`
//! against the scripted provider on 127.0.0.1, in each provider's wire format.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Request, Step, anthropic, fenced_answers, openai};
use crate::support::{Sandbox, formation_pids, stderr, stdout, wait_until};

const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
const KEY: &str = "sk-it-0123456789";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    OpenAi,
    Anthropic,
}

impl Api {
    fn word(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    fn text(self, text: &str) -> Reply {
        Reply::json(match self {
            Api::OpenAi => openai::text(text),
            Api::Anthropic => anthropic::text(text),
        })
    }

    /// `call-member` tool calls `(id, member, task)`.
    fn calls(self, calls: &[(&str, &str, &str)]) -> Reply {
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, m, t)| (*id, "call-member", json!({"member": m, "task": t})))
            .collect();
        Reply::json(match self {
            Api::OpenAi => openai::tool_calls(&calls),
            Api::Anthropic => anthropic::tool_use(&calls),
        })
    }
}

/// A model capsule `name` pointed at `endpoint`, its key in [`KEY_VAR`]; `extra` is appended
/// under `inference:`, `tail` at the top level.
fn install_model(sb: &Sandbox, name: &str, api: Api, endpoint: &str, extra: &str, tail: &str) {
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: {}\n  endpoint: {endpoint}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You plan.\n{extra}{tail}",
        api.word()
    );
    sb.install_manifest(name, &manifest);
}

/// `mur run --capsule local/<name> --json --task <task>` to completion: exit code, readiness line,
/// answer line, stderr.
fn run_task(sb: &Sandbox, name: &str, task: &str, with_key: bool) -> (Option<i32>, Value, Value, String) {
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
    .args(["--task", task]);
    if with_key {
        cmd.env(KEY_VAR, KEY);
    } else {
        cmd.env_remove(KEY_VAR);
    }
    let out = cmd.output().expect("mur run");
    let text = stdout(&out);
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or(Value::Null));
    let ready = lines.next().unwrap_or(Value::Null);
    let answer = lines.next().unwrap_or(Value::Null);
    (out.status.code(), ready, answer, stderr(&out))
}

fn trace(records_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(records_dir.join("trace.jsonl"))
        .expect("trace.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line"))
        .collect()
}

fn records_dir(ready: &Value) -> PathBuf {
    PathBuf::from(ready["records_dir"].as_str().expect("records_dir"))
}

fn of_type<'a>(recs: &'a [Value], t: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["event_type"] == t).collect()
}

#[test]
fn a_solo_model_capsule_answers_its_task_in_both_formats() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let sb = Sandbox::new();
        let provider = Provider::start(vec![api.text("forty-two").into()]);
        install_model(&sb, "solo", api, provider.url(), "  max_turns: 4\n", "");
        let (code, ready, answer, err) = run_task(&sb, "solo", "What is six times seven?", true);
        assert_eq!(code, Some(0), "{api:?}: {err}");
        assert_eq!(answer["answer"], "forty-two");
        assert_eq!(answer["state"], "TASK_STATE_COMPLETED");

        let reqs = provider.requests();
        assert_eq!(reqs.len(), 1);
        let body = reqs[0].json();
        match api {
            Api::OpenAi => {
                assert_eq!(reqs[0].path, "/v1/chat/completions");
                assert_eq!(reqs[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
                assert_eq!(
                    body["messages"][0],
                    json!({"role": "developer", "content": "[Capsule]\nname: local/solo\n\nYou plan."})
                );
                assert_eq!(
                    body["messages"][1],
                    json!({"role": "user", "content": "What is six times seven?"})
                );
            }
            Api::Anthropic => {
                assert_eq!(reqs[0].path, "/v1/messages");
                assert_eq!(reqs[0].header("x-api-key"), Some(KEY));
                assert_eq!(reqs[0].header("anthropic-version"), Some("2026-10-21"));
                assert_eq!(body["system"], "[Capsule]\nname: local/solo\n\nYou plan.");
                assert_eq!(
                    body["messages"][0],
                    json!({"role": "user", "content": "What is six times seven?"})
                );
            }
        }
        assert_eq!(body["model"], "test-model");
        let bound = match api {
            Api::OpenAi => "max_completion_tokens",
            Api::Anthropic => "max_tokens",
        };
        assert_eq!(body[bound], 4096);
        assert!(
            body.get("tools").is_none(),
            "a capsule that may call nobody gets no tools"
        );

        let recs = trace(&records_dir(&ready));
        let start = &recs[0];
        assert_eq!(start["event_type"], "session_start");
        assert_eq!(start["model"], "test-model");
        assert_eq!(start["max_turns"], 4);
        assert_eq!(start["tools_declared"], json!([]));
        let end = recs.last().unwrap();
        assert_eq!(end["event_type"], "session_end");
        assert_eq!(end["exit_status"], "ok");
        assert_eq!(
            (
                &end["total_turns"],
                &end["total_input_tokens"],
                &end["total_output_tokens"],
                &end["total_tool_calls"]
            ),
            (&json!(1), &json!(10), &json!(5), &json!(0))
        );
        // The key is in no file the session wrote, nor in its output.
        let dir = records_dir(&ready);
        for f in ["trace.jsonl", "logs/bootstrap.log", "out/result.txt"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            assert!(!text.contains(KEY), "{f} holds the key");
        }
        assert!(!err.contains(KEY));
    }
}

#[test]
fn a_401_fails_the_task_with_the_providers_answer() {
    let sb = Sandbox::new();
    let body = r#"{"error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let provider = Provider::start(vec![Reply::status(401, body).into()]);
    install_model(&sb, "solo", Api::Anthropic, provider.url(), "", "");
    let (code, ready, answer, err) = run_task(&sb, "solo", "hi", true);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(answer["state"], "TASK_STATE_FAILED");
    assert_eq!(answer["answer"], Value::Null);
    // The provider's answer, then what it most likely means: the key, named by its variable.
    let want = format!(
        "failed: inference failed: 401 {body} \u{2014} POST {}/v1/messages refused the key in ${KEY_VAR} (inference.api_key): check that it holds a valid key for this provider",
        provider.url()
    );
    assert_eq!(
        std::fs::read_to_string(records_dir(&ready).join("out/result.txt")).unwrap(),
        want
    );
    assert!(err.contains("error[E-RUN-030]"), "{err}");
    // The hint names the very file that holds the result.
    let result = records_dir(&ready).join("out/result.txt");
    assert!(
        err.contains(&format!("  hint: {} holds the task's result\n", result.display())),
        "{err}"
    );
    assert_eq!(provider.requests().len(), 1, "a 401 is not retried");
    let recs = trace(&records_dir(&ready));
    assert_eq!(recs.last().unwrap()["exit_status"], "failed");
}

/// Issue 29: a key too short to be a secret (a local server's placeholder) is not scrubbed from
/// the provider's text, which would mangle it; one long enough still is.
#[test]
fn only_a_key_long_enough_to_be_a_secret_is_scrubbed_from_a_failure() {
    let body = r#"{"error":{"message":"the key broke: sk-it-0123456789 is not known"}}"#;
    for (key, want) in [("k", body.to_string()), (KEY, body.replace(KEY, "[redacted]"))] {
        let sb = Sandbox::new();
        let provider = Provider::start(vec![Reply::status(401, body).into()]);
        install_model(&sb, "solo", Api::OpenAi, provider.url(), "", "");
        let out = sb
            .mur(&sb.path("work"))
            .args(["run", "--capsule", "local/solo", "--capsule-version", "0.1.0", "--json"])
            .args(["--task", "hi"])
            .env(KEY_VAR, key)
            .output()
            .expect("mur run");
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let ready: Value = serde_json::from_str(stdout(&out).lines().next().expect("readiness")).expect("json");
        assert_eq!(
            std::fs::read_to_string(records_dir(&ready).join("out/result.txt")).expect("result"),
            format!(
                "failed: inference failed: 401 {want} \u{2014} POST {}/v1/chat/completions refused the key in ${KEY_VAR} (inference.api_key): check that it holds a valid key for this provider",
                provider.url()
            ),
            "key {key:?}"
        );
        assert!(
            stderr(&out).contains(&format!("inference failed: 401 {want}")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn a_500_then_success_completes() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Reply::status(500, r#"{"error":"overloaded"}"#).into(),
        Api::OpenAi.text("after a retry").into(),
    ]);
    install_model(&sb, "solo", Api::OpenAi, provider.url(), "", "");
    let (code, _, answer, err) = run_task(&sb, "solo", "hi", true);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(answer["answer"], "after a retry");
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, reqs[1].body, "the retry resends the same request");
}

#[test]
fn a_tool_call_on_the_last_turn_ends_max_turns_reached() {
    let sb = Sandbox::new();
    let api = Api::OpenAi;
    let provider = Provider::start(vec![api.calls(&[("c1", "coder", "x")]).into()]);
    install_model(&sb, "solo", api, provider.url(), "  max_turns: 1\n", "");
    let (code, ready, answer, err) = run_task(&sb, "solo", "hi", true);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(answer["state"], "TASK_STATE_FAILED");
    let dir = records_dir(&ready);
    let result = std::fs::read_to_string(dir.join("out/result.txt")).unwrap();
    assert!(
        result.starts_with(
            "failed: error[E-BUD-005]: the model asked for a tool call after its last turn (inference.max_turns: 1)\n  hint: "
        ),
        "{result}"
    );
    let recs = trace(&dir);
    assert_eq!(of_type(&recs, "task_end")[0]["exit_status"], "max_turns_reached");
    let end = recs.last().unwrap();
    assert_eq!(end["exit_status"], "max_turns_reached");
    assert_eq!((&end["total_turns"], &end["total_tool_calls"]), (&json!(1), &json!(0)));
}

#[test]
fn sigterm_drops_the_request_in_flight() {
    let sb = Sandbox::new();
    let api = Api::Anthropic;
    let provider = Provider::start(vec![api.text("too late").delayed(Duration::from_secs(30)).into()]);
    install_model(&sb, "solo", api, provider.url(), "", "");
    let dir = sb.path("work");
    let child = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .args([
            "run",
            "--capsule",
            "local/solo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mur run");
    assert!(provider.wait_requests(1, Duration::from_secs(20)), "no request arrived");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let start = Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("error[E-RUN-040]"), "{}", stderr(&out));
    assert!(
        wait_until(Duration::from_secs(3), || provider.dropped() == 1).is_some(),
        "the provider saw the request dropped"
    );
}

#[test]
fn an_unset_key_variable_refuses_the_session() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![]);
    install_model(&sb, "solo", Api::OpenAi, provider.url(), "", "");
    let (code, _, _, err) = run_task(&sb, "solo", "hi", false);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!(
            "error[E-RUN-002]: capsule 'local/solo@0.1.0' cannot be run: its inference.api_key is ${{{KEY_VAR}}}, \
             and {KEY_VAR} is not set in this environment"
        )),
        "{err}"
    );
    assert!(provider.requests().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Formations: a model entry member calling two echo peers.

const ROSTER: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/planner
    version: 0.1.0
    entry: true
  - name: coder
    capsule: local/echo
    version: 0.1.0
  - name: tester
    capsule: local/echo
    version: 0.1.0
reachability:
  - from: lead
    to: [coder, tester]
";

const PLANNER_TAIL: &str =
    "capabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n";

fn planner_formation(api: Api, script: Vec<Step>, extra: &str) -> (Sandbox, PathBuf, Provider) {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let provider = Provider::start(script);
    install_model(&sb, "planner", api, provider.url(), extra, PLANNER_TAIL);
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");
    (sb, dir, provider)
}

/// Runs the formation's task to completion: exit code, stdout, stderr.
fn launch(sb: &Sandbox, dir: &Path, task: &str) -> (Option<i32>, String, String) {
    let out = sb
        .mur(dir)
        .env(KEY_VAR, KEY)
        .args(["run", "--roster", "--task", task])
        .output()
        .expect("mur run --roster");
    (out.status.code(), stdout(&out), stderr(&out))
}

/// The lead's trace: the session under the project's records group whose member is `lead`.
fn lead_trace(sb: &Sandbox) -> Vec<Value> {
    let mut found = Vec::new();
    let mut stack = vec![sb.home().join(".murmur/records")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "trace.jsonl") {
                let recs: Vec<Value> = std::fs::read_to_string(&p)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                if recs.first().is_some_and(|r| r["formation_member"] == "lead") {
                    found = recs;
                }
            }
        }
    }
    found
}

/// The planner's final step: answer with the fenced answers of the continuation.
fn summarise(api: Api) -> Step {
    Step::func(move |req: &Request| {
        let text = req.last_user_text().unwrap_or_default();
        let parts: Vec<String> = fenced_answers(&text)
            .into_iter()
            .map(|(m, o)| format!("{m} => {o}"))
            .collect();
        api.text(&format!("Plan done. {}", parts.join(" | ")))
    })
}

#[test]
fn a_model_entry_calls_two_peers_and_answers_with_their_fenced_answers() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let script = vec![
            api.calls(&[("c1", "coder", "write the parser"), ("c2", "tester", "test the parser")])
                .into(),
            api.text("Waiting for coder and tester.").into(),
            summarise(api),
        ];
        let (sb, dir, provider) = planner_formation(api, script, "  max_turns: 5\n");
        let (code, out, err) = launch(&sb, &dir, "Ship a parser");
        assert_eq!(code, Some(0), "{api:?}: {err}");
        assert_eq!(
            out,
            "Plan done. coder => write the parser | tester => test the parser\n"
        );
        let frm = err
            .lines()
            .find_map(|l| l.strip_prefix("formation: "))
            .expect("formation line")
            .to_string();
        assert!(formation_pids(&frm).is_empty());

        let reqs = provider.requests();
        assert_eq!(reqs.len(), 3, "{api:?}");
        // The [Capsule] block names the member and the formation; the tools name the callees.
        let first = reqs[0].json();
        let system = match api {
            Api::OpenAi => first["messages"][0]["content"].clone(),
            Api::Anthropic => first["system"].clone(),
        };
        assert_eq!(
            system,
            json!(format!(
                "[Capsule]\nname: local/planner\nmember: lead\nformation: {frm}\n\nYou plan."
            ))
        );
        assert_eq!(reqs[0].tool_names(), ["call-member", "end-without-answer"]);
        let schema = match api {
            Api::OpenAi => first["tools"][0]["function"]["parameters"].clone(),
            Api::Anthropic => first["tools"][0]["input_schema"].clone(),
        };
        assert_eq!(schema["properties"]["member"]["enum"], json!(["coder", "tester"]));
        // Each call was started at the peer's door; its tool result says so.
        let second = reqs[1].text();
        assert!(
            second.contains("Called coder: started") && second.contains("Called tester: started"),
            "{second}"
        );
        // The continuation fences each answer under its member, with the real calls' ids.
        let cont = reqs[2].last_user_text().unwrap();
        assert!(
            cont.contains("<untrusted-content source=member:coder>\nwrite the parser\n</untrusted-content>"),
            "{cont}"
        );
        assert!(
            cont.ends_with("[call-member] Every call this task made has ended."),
            "{cont}"
        );

        let recs = lead_trace(&sb);
        assert_eq!(recs[0]["tools_declared"], json!(["call-member", "end-without-answer"]));
        assert_eq!(recs[0]["model"], "test-model");
        assert_eq!(of_type(&recs, "member_call_start").len(), 2);
        let calls = of_type(&recs, "member_call");
        assert_eq!(calls.len(), 2);
        assert!(
            calls
                .iter()
                .all(|c| c["status"] == "completed" && c["delivered"] == true),
            "{calls:?}"
        );
        let cont_rec = of_type(&recs, "task_continued");
        assert_eq!(cont_rec.len(), 1);
        assert_eq!(cont_rec[0]["continuation"], 1);
        assert_eq!(cont_rec[0]["turns_left"], 3);
        let ids: Vec<&Value> = calls.iter().map(|c| &c["call_id"]).collect();
        assert_eq!(
            cont_rec[0]["call_ids"].as_array().unwrap().iter().collect::<Vec<_>>(),
            ids
        );
        let end = recs.last().unwrap();
        assert_eq!(end["exit_status"], "ok");
        assert_eq!((&end["total_turns"], &end["total_tool_calls"]), (&json!(3), &json!(2)));
    }
}

#[test]
fn max_turns_with_calls_outstanding_answers_at_once_and_abandons_them() {
    let api = Api::OpenAi;
    let script = vec![
        api.calls(&[("c1", "coder", "slow work")]).into(),
        api.text("no time to wait").into(),
    ];
    let (sb, dir, provider) = planner_formation(api, script, "  max_turns: 2\n");
    let (code, out, err) = launch(&sb, &dir, "Hurry");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "no time to wait\n");
    assert_eq!(provider.requests().len(), 2);
    let recs = lead_trace(&sb);
    assert!(of_type(&recs, "task_continued").is_empty());
    let calls = of_type(&recs, "member_call");
    assert_eq!(calls.len(), 1, "{recs:?}");
    assert_eq!(calls[0]["member"], "coder");
    assert_eq!(calls[0]["delivered"], false, "the answer was never handed to the model");
    assert_eq!(recs.last().unwrap()["exit_status"], "ok");
}

#[test]
fn a_member_it_may_not_call_is_refused_and_nothing_is_sent() {
    let api = Api::Anthropic;
    let script = vec![
        api.calls(&[("c1", "reviewer", "review it")]).into(),
        Step::func(move |req: &Request| {
            // Answer with the tool result the runtime sent back.
            let v = req.json();
            let text = v["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"][0]["content"].as_str())
                .unwrap_or("none")
                .to_string();
            api.text(&text)
        }),
    ];
    let (sb, dir, provider) = planner_formation(api, script, "");
    let (code, out, err) = launch(&sb, &dir, "Review");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "'reviewer' is not a member this capsule may call; it may call: coder, tester\n"
    );
    assert_eq!(provider.requests().len(), 2);
    let recs = lead_trace(&sb);
    assert!(of_type(&recs, "member_call_start").is_empty() && of_type(&recs, "member_call").is_empty());
}

/// A streamed reply that has neither `Content-Length` nor chunked framing and ends when the
/// server closes the connection (legal HTTP/1.1) is read to the close: here from Python's own
/// `http.server` speaking HTTP/1.1, as a local OpenAI-compatible server would. Before, the
/// task failed with "the stream ended before [DONE]" though `[DONE]` was sent.
#[test]
fn a_streamed_reply_delimited_by_the_close_of_the_connection_is_read_to_its_end() {
    let sb = Sandbox::new();
    let events: String = crate::support::provider::openai::stream_text(&["forty", "-two"]).concat();
    let events_file = sb.path("work").join("events.txt");
    std::fs::write(&events_file, &events).expect("events");
    let server = r#"
import http.server, sys
events = open(sys.argv[1], "rb").read()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(events)
        self.wfile.flush()
        self.close_connection = True
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", server, events_file.to_str().expect("path")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut port,
    )
    .expect("port");
    let endpoint = format!("http://127.0.0.1:{}", port.trim());
    install_model(&sb, "solo", Api::OpenAi, &endpoint, "", "");
    let (code, _, answer, err) = run_task(&sb, "solo", "What is six times seven?", true);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(answer["answer"], "forty-two", "{answer}");
}
