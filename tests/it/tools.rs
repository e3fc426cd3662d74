//! A model capsule's tools through the real binary (docs/reference/capsules.md#tools): a
//! WebAssembly tool packed with the capsule, and an MCP server — the official MCP Python SDK's,
//! provisioned by the test — with the scripted provider on 127.0.0.1 as the model.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::mcp::SdkServer;
use crate::support::provider::{Provider, Reply, Request, Step, openai};
use crate::support::{Sandbox, repo_root, stderr, stdout};

const PROVIDER_KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
const PROVIDER_KEY: &str = "sk-it-provider-0123456789";
const MCP_KEY_VAR: &str = "MUR_IT_CALC_KEY";
const MCP_KEY: &str = "mcp-it-key-8d1f6e2a9b";

/// Builds and installs model capsule `name` whose manifest ends with `tools` (a `tools:` block),
/// with `files` (path, repository file) copied beside it first.
fn install(sb: &Sandbox, name: &str, endpoint: &str, tools: &str, files: &[(&str, &str)]) {
    let dir = sb.path(&format!("src/{name}"));
    for (to, from) in files {
        let to = dir.join(to);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(repo_root().join(from), &to).expect("copy");
    }
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {endpoint}\n  model: test-model\n  \
         api_key: ${{{PROVIDER_KEY_VAR}}}\n{tools}"
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("manifest");
    let out = sb.run(&dir, &["build", "."]);
    assert!(out.status.success(), "mur build {name}: {}", stderr(&out));
    let zip = dir.join(format!("{name}-0.1.0.mur.zip"));
    let out = sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8")]);
    assert!(out.status.success(), "mur install {name}: {}", stderr(&out));
}

/// `mur run --capsule local/<name> --json --task <task>`: exit code, the lines it printed, stderr.
fn run(sb: &Sandbox, name: &str, task: &str, env: &[(&str, &str)]) -> (Option<i32>, Vec<Value>, String) {
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
    .args(["--task", task])
    .env(PROVIDER_KEY_VAR, PROVIDER_KEY)
    .envs(env.iter().copied());
    let out = cmd.output().expect("mur run");
    let lines = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect();
    (out.status.code(), lines, stderr(&out))
}

fn trace(ready: &Value) -> (PathBuf, Vec<Value>) {
    let dir = PathBuf::from(ready["records_dir"].as_str().expect("records_dir"));
    let recs = std::fs::read_to_string(dir.join("trace.jsonl"))
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line"))
        .collect();
    (dir, recs)
}

fn of_type<'a>(recs: &'a [Value], t: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["event_type"] == t).collect()
}

/// Tool calls `(id, name, input)` in one reply.
fn calls(calls: &[(&str, &str, Value)]) -> Step {
    Reply::json(openai::tool_calls(calls)).into()
}

/// A final answer quoting the tool results the request carries, one per line.
fn answer_with_results() -> Step {
    Step::func(|r: &Request| Reply::json(openai::text(&tool_results(r).join("\n"))))
}

/// The `tool` messages of a Chat Completions request, in order.
fn tool_results(r: &Request) -> Vec<String> {
    r.json()["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Every file under `dir`, as text.
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.push_str(&all_text(&p));
        } else if let Ok(t) = std::fs::read(&p) {
            out.push_str(&String::from_utf8_lossy(&t));
        }
    }
    out
}

const WORDS: (&str, &str) = ("tools/words/tool.wat", "src/capsule/testdata/words-tool.wat");
const WORDS_ENTRY: &str = "tools:\n  - name: words\n    component: tools/words/tool.wat\n";

#[test]
fn a_webassembly_tool_answers_the_model_and_its_faults_come_back_as_tool_errors() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        calls(&[
            ("c1", "words", json!({"text": "one two three"})),
            ("c2", "words", json!({"trap": 1})),
            ("c3", "nope", json!({})),
        ]),
        calls(&[("c4", "words", json!({"spin": 1}))]),
        answer_with_results(),
    ]);
    install(&sb, "counter", provider.url(), WORDS_ENTRY, &[WORDS]);
    let (code, lines, err) = run(&sb, "counter", "count", &[("MURMUR_TEST_TIMING", "tool_call=300ms")]);
    assert_eq!(code, Some(0), "{err}");
    let answer = &lines[1];
    assert_eq!(answer["state"], "TASK_STATE_COMPLETED", "{answer}");

    let requests = provider.requests();
    assert_eq!(
        requests[0].tool_names(),
        ["words"],
        "the model is offered the tool, as it describes itself"
    );
    let offered = &requests[0].json()["tools"][0]["function"];
    assert_eq!(offered["description"], "Counts the words of a text.");
    assert_eq!(offered["parameters"]["required"], json!(["text"]));
    let first = tool_results(&requests[1]);
    assert_eq!(first.len(), 3, "every call gets its result, in order");
    // The tool reads its input as the compact JSON the model's arguments are: `{"text":"one` is a word.
    assert_eq!(
        first[0],
        "<untrusted-content source=tool:words>\n3\n</untrusted-content>"
    );
    assert!(first[1].contains("the tool trapped"), "{}", first[1]);
    assert!(
        first[2].contains("there is no tool named 'nope'; the tool is words"),
        "{}",
        first[2]
    );
    // The third request holds the whole conversation: the fourth tool result is the new one.
    let spun = &tool_results(&requests[2])[3];
    assert!(spun.contains("ran longer than its time budget"), "{spun}");

    let (_, recs) = trace(&lines[0]);
    let start = &of_type(&recs, "session_start")[0];
    assert_eq!(start["tools_declared"], json!(["words"]));
    // Calls of one reply run at once: their records come in the order they ended.
    let mut records = of_type(&recs, "tool_call");
    records.sort_by_key(|r| r["call_id"].as_str().unwrap_or_default().to_string());
    let calls: Vec<(&Value, &Value, &Value)> = records
        .iter()
        .map(|r| (&r["call_id"], &r["kind"], &r["status"]))
        .collect();
    assert_eq!(
        calls,
        [
            (&json!("c1"), &json!("wasm"), &json!("ok")),
            (&json!("c2"), &json!("wasm"), &json!("error")),
            // A name no tool has is refused, and recorded: every call the model made is counted.
            (&json!("c3"), &json!("unknown"), &json!("refused")),
            (&json!("c4"), &json!("wasm"), &json!("timeout")),
        ]
    );
    let ok = records[0];
    assert_eq!((&ok["input_bytes"], &ok["output_bytes"]), (&json!(24), &json!(1)));
    assert!(
        !recs.iter().any(|r| r.to_string().contains("one two three")),
        "no tool input in the trace"
    );
    // The records count what the session's end counts.
    let end = &of_type(&recs, "session_end")[0];
    assert_eq!(end["total_tool_calls"], json!(records.len()), "{end}");
}

/// The task's text is kept beside the trace (`texts.jsonl`, owner-only), never in it.
#[test]
fn a_tasks_text_is_kept_beside_the_trace_and_never_in_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        calls(&[("c1", "words", json!({"text": format!("{PROVIDER_KEY} one two")}))]),
        answer_with_results(),
    ]);
    install(&sb, "counter", provider.url(), WORDS_ENTRY, &[WORDS]);
    let task = format!("count the words of {PROVIDER_KEY} please");
    let (code, lines, err) = run(&sb, "counter", &task, &[]);
    assert_eq!(code, Some(0), "{err}");
    let (dir, recs) = trace(&lines[0]);
    assert!(
        !recs.iter().any(|r| r.to_string().contains("count the words")),
        "the trace holds the text"
    );
    let path = dir.join("texts.jsonl");
    let mode = std::fs::metadata(&path).expect("texts.jsonl").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let texts: Vec<Value> = std::fs::read_to_string(&path)
        .expect("texts")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect();
    let task_id = &of_type(&recs, "task_start")[0]["task_id"];
    let kept = of_type(&texts, "task_text");
    assert_eq!(kept.len(), 1, "{texts:?}");
    assert_eq!(&kept[0]["task_id"], task_id);
    // The member's own credential is scrubbed from what is kept.
    let text = kept[0]["text"].as_str().expect("text");
    assert!(
        text.starts_with("count the words of ") && text.ends_with(" please"),
        "{text}"
    );
    assert!(!text.contains(PROVIDER_KEY), "{text}");
    assert_eq!(kept[0]["text_bytes"], json!(text.len()), "kept whole");

    // Each step's words too: the turns' new input and output, the tool call's arguments and
    // result, scrubbed alike, and none of them in the trace.
    let words: Vec<(String, String, String, String)> = of_type(&texts, "step_text")
        .iter()
        .map(|r| {
            assert_eq!(&r["task_id"], task_id);
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("step"), s("key"), s("part"), s("text"))
        })
        .collect();
    let of = |step: &str, key: &str, part: &str| -> String {
        words
            .iter()
            .find(|w| (w.0.as_str(), w.1.as_str(), w.2.as_str()) == (step, key, part))
            .map(|w| w.3.clone())
            .unwrap_or_else(|| panic!("no {step} {key} {part}: {words:?}"))
    };
    assert_eq!(of("turn", "1", "input"), text);
    let called = of("turn", "1", "output");
    assert!(
        called.starts_with("words {\"text\":") && called.ends_with(" one two\"}"),
        "{called}"
    );
    let arguments = of("tool", "c1", "arguments");
    assert!(arguments.ends_with(" one two\"}"), "{arguments}");
    assert!(of("tool", "c1", "result").contains('3'), "{words:?}");
    assert!(of("turn", "2", "input").starts_with("result of c1: "), "{words:?}");
    assert!(!of("turn", "2", "output").is_empty());
    for w in &words {
        assert!(!w.3.contains(PROVIDER_KEY), "a credential is kept: {w:?}");
    }
    assert!(
        !recs.iter().any(|r| r.to_string().contains(" one two")),
        "the trace holds a tool's arguments"
    );
}

#[test]
fn a_component_that_is_not_a_tool_refuses_the_session_before_it_is_ready() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![]);
    install(
        &sb,
        "broken",
        provider.url(),
        "tools:\n  - name: words\n    component: tools/words/tool.wat\n",
        &[("tools/words/tool.wat", "actors/echo/capsule.wat")],
    );
    let (code, lines, err) = run(&sb, "broken", "count", &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        lines.iter().all(|l| l.get("records_dir").is_none()),
        "it never reported ready: {lines:?}"
    );
    assert!(
        err.contains("E-RUN-002") && err.contains("its tool 'words'") && err.contains("it is not a tool"),
        "{err}"
    );
    assert!(provider.requests().is_empty());
}

fn mcp_entry(url: &str, allow: &str) -> String {
    format!("tools:\n  - name: calc\n    mcp: {url}\n    api_key: ${{{MCP_KEY_VAR}}}\n    allow: [{allow}]\n")
}

#[test]
fn an_mcp_server_is_offered_only_its_allowed_tools_and_its_key_goes_to_it_alone() {
    let sdk = SdkServer::start(MCP_KEY, &[]);
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        calls(&[
            ("c1", "calc__add", json!({"a": 1, "b": 2})),
            ("c2", "calc__echo", json!({"text": "hi"})),
            ("c3", "calc__fail", json!({})),
        ]),
        answer_with_results(),
    ]);
    install(&sb, "adder", provider.url(), &mcp_entry(&sdk.url(), "add, fail"), &[]);
    let (code, lines, err) = run(&sb, "adder", "add them", &[(MCP_KEY_VAR, MCP_KEY)]);
    assert_eq!(code, Some(0), "{err}\n{}", sdk.stderr());
    assert_eq!(lines[1]["state"], "TASK_STATE_COMPLETED");

    let requests = provider.requests();
    assert_eq!(
        requests[0].tool_names(),
        ["calc__add", "calc__fail"],
        "echo is on the server, not in allow"
    );
    let results = tool_results(&requests[1]);
    assert_eq!(
        results[0],
        "<untrusted-content source=tool:calc__add>\n3\n</untrusted-content>"
    );
    assert!(
        results[1].contains("there is no tool named 'calc__echo'"),
        "{}",
        results[1]
    );
    assert!(
        results[2].starts_with("<untrusted-content source=tool:calc__fail>\n"),
        "{}",
        results[2]
    );
    let log = sdk.log();
    assert!(log.iter().any(|l| l == "call add"), "{log:?}");
    assert!(log.iter().any(|l| l == "call fail"), "{log:?}");
    assert!(
        !log.iter().any(|l| l.contains("echo")),
        "a call outside allow never reaches the server: {log:?}"
    );
    assert!(log.iter().any(|l| l == &format!("auth Bearer {MCP_KEY}")), "{log:?}");

    // The key reached the server and nothing else: no provider request, trace or log holds it.
    for r in &requests {
        assert!(!r.text().contains(MCP_KEY), "a provider request carries the MCP key");
    }
    let (dir, recs) = trace(&lines[0]);
    // The two calls run at once, so their records come in the order they ended.
    let mut mcp: Vec<&Value> = of_type(&recs, "tool_call");
    mcp.sort_by_key(|r| r["call_id"].as_str().unwrap_or_default().to_string());
    assert_eq!(mcp.len(), 3, "{mcp:?}");
    assert_eq!(
        (&mcp[0]["call_id"], &mcp[0]["kind"], &mcp[0]["status"]),
        (&json!("c1"), &json!("mcp"), &json!("ok"))
    );
    assert_eq!(mcp[0]["server"], format!("127.0.0.1:{}", sdk.port()));
    // The call outside `allow` is refused before any server, and has its record.
    assert_eq!(
        (&mcp[1]["call_id"], &mcp[1]["kind"], &mcp[1]["status"]),
        (&json!("c2"), &json!("unknown"), &json!("refused"))
    );
    assert_eq!((&mcp[2]["call_id"], &mcp[2]["status"]), (&json!("c3"), &json!("error")));
    let session = dir.parent().expect("session dir");
    assert!(
        !all_text(session).contains(MCP_KEY),
        "the key is in the session's records"
    );
    assert!(!err.contains(MCP_KEY) && !stdout_text(&lines).contains(MCP_KEY));
}

/// Servers that echo the credentials they were sent: an MCP tool answering with its request's
/// `Authorization` header, and a model quoting its own key and handing it to a tool. Every
/// credential the member holds is scrubbed where foreign text is read, so neither key reaches
/// the model (its provider), the MCP server, the answer, the records or stderr.
#[test]
fn credentials_echoed_by_their_own_servers_are_passed_on_to_no_one() {
    let sdk = SdkServer::start(MCP_KEY, &[("MCP_TEST_WHOAMI", "1")]);
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        calls(&[
            ("c1", "calc__whoami", json!({})),
            ("c2", "calc__echo", json!({"text": format!("my key is {PROVIDER_KEY}")})),
        ]),
        Step::func(|r: &Request| {
            Reply::json(openai::text(&format!(
                "{}\nand mine is {PROVIDER_KEY}",
                tool_results(r).join("\n")
            )))
        }),
    ]);
    install(
        &sb,
        "echoer",
        provider.url(),
        &mcp_entry(&sdk.url(), "whoami, echo"),
        &[],
    );
    let (code, lines, err) = run(&sb, "echoer", "who am I", &[(MCP_KEY_VAR, MCP_KEY)]);
    assert_eq!(code, Some(0), "{err}\n{}", sdk.stderr());
    let log = sdk.log();
    assert!(log.iter().any(|l| l == "call whoami"), "{log:?}");

    let requests = provider.requests();
    let results = tool_results(&requests[1]);
    assert_eq!(
        results,
        [
            "<untrusted-content source=tool:calc__whoami>\nyou called with Authorization: Bearer [redacted]\n</untrusted-content>",
            "<untrusted-content source=tool:calc__echo>\nmy key is [redacted]\n</untrusted-content>",
        ]
    );
    for r in &requests {
        assert!(
            !r.text().contains(MCP_KEY),
            "the model was handed the MCP bearer: {}",
            r.text()
        );
    }
    let answer = lines[1]["answer"].as_str().unwrap_or_default();
    assert!(answer.ends_with("and mine is [redacted]"), "{answer}");
    let (dir, _) = trace(&lines[0]);
    let said = format!(
        "{}{err}{}",
        stdout_text(&lines),
        all_text(dir.parent().expect("session dir"))
    );
    for key in [MCP_KEY, PROVIDER_KEY] {
        assert!(!said.contains(key), "{key} was passed on: {said}");
    }
}

fn stdout_text(lines: &[Value]) -> String {
    lines.iter().map(Value::to_string).collect()
}

#[test]
fn an_mcp_server_that_cannot_serve_the_allowed_tools_refuses_the_session() {
    let sdk = SdkServer::start(MCP_KEY, &[]);
    let sb = Sandbox::new();
    let provider = Provider::start(vec![]);
    // A tool it lacks, a server nobody listens on, a wrong key.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://127.0.0.1:{}/mcp", l.local_addr().expect("addr").port())
    };
    let cases: [(&str, String, &str, &str); 3] = [
        ("lacking", sdk.url(), MCP_KEY, "mul"),
        ("unreachable", dead, MCP_KEY, "MCP server 'calc'"),
        ("refused", sdk.url(), "wrong-key-0000000000", "401"),
    ];
    for (name, url, key, words) in cases {
        install(&sb, name, provider.url(), &mcp_entry(&url, "add, mul"), &[]);
        let (code, lines, err) = run(&sb, name, "x", &[(MCP_KEY_VAR, key)]);
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(
            lines.iter().all(|l| l.get("records_dir").is_none()),
            "{name} reported ready"
        );
        assert!(
            err.contains("E-RUN-002") && err.contains("its tool 'calc'") && err.contains(words),
            "{name}: {err}"
        );
        assert!(!err.contains(key), "{name}: the key is in the refusal");
    }
    // An unset key variable is named before anything is sent.
    install(&sb, "keyless", provider.url(), &mcp_entry(&sdk.url(), "add"), &[]);
    let (code, _, err) = run(&sb, "keyless", "x", &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains(&format!("{MCP_KEY_VAR} is not set")), "{err}");
    assert!(provider.requests().is_empty());
}

/// A roster of one: the model capsule `counter` as the entry.
const SOLO_ROSTER: &str =
    "roster_version: 1\nmembers:\n  - name: counter\n    capsule: local/counter\n    version: 0.1.0\n    entry: true\n";

#[test]
fn a_python_tool_from_mur_new_runs_in_a_formation() {
    let tools = crate::support::toolchains::componentize_py_dir();
    scaffolded_tool_runs_in_a_formation("python", &tools, &|_, _| {});
}

#[test]
fn a_javascript_tool_from_mur_new_runs_in_a_formation() {
    let tools = crate::support::toolchains::componentize_js_dir();
    scaffolded_tool_runs_in_a_formation("javascript", &tools, &|_, _| {});
}

/// Built by Debian's Rust (provisioned under `target/test-rust/`), which has no wasm32-wasip2
/// library: for wasm32-unknown-unknown from the standard library's sources, linked into a
/// component by its wasm-component-ld.
#[test]
fn a_rust_tool_from_mur_new_runs_in_a_formation() {
    let rust = crate::support::debian_rust::debian_rust();
    let built = scaffolded_tool_runs_in_a_formation("rust", &rust.bin, &|tool, cmd| {
        rust.share_target(tool);
        cmd.env("CARGO_HOME", &rust.cargo_home);
    });
    let with = format!("/tools/words/Cargo.toml with {}\n", rust.bin.join("cargo").display());
    assert!(built.contains(&with), "{built}");
}

/// `mur new --tool words --lang <lang>` in a model capsule's directory, `mur build .` with the
/// language's toolchain in `tools` on PATH (after `prepare` saw the tool's directory and the
/// command), and a formation of that capsule calling the tool. Returns `mur build`'s stderr.
fn scaffolded_tool_runs_in_a_formation(
    lang: &str,
    tools: &Path,
    prepare: &dyn Fn(&Path, &mut std::process::Command),
) -> String {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        calls(&[("c1", "words", json!({"text": "the quick brown fox"}))]),
        answer_with_results(),
    ]);
    let dir = sb.path("src/counter");
    std::fs::write(
        dir.join("murmur.yaml"),
        format!(
            "# the lead\nname: counter\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{PROVIDER_KEY_VAR}}}\n",
            provider.url()
        ),
    )
    .expect("manifest");
    let out = sb.run(&dir, &["new", "--tool", "words", "--lang", lang]);
    assert!(out.status.success(), "mur new --tool: {}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("(once: the toolchain mur build runs)").count(),
        1,
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(&format!("Scaffolded {lang} tool 'words' in ./tools/words")),
        "{}",
        stdout(&out)
    );
    let manifest = std::fs::read_to_string(dir.join("murmur.yaml")).expect("manifest");
    assert!(manifest.starts_with("# the lead\n") && manifest.contains("component: tools/words/tool.wasm"));
    // A second run refuses: the tool is there.
    let again = sb.run(&dir, &["new", "--tool", "words"]);
    assert!(
        !again.status.success() && stderr(&again).contains("E-NEW-005"),
        "{}",
        stderr(&again)
    );

    let build = || {
        let mut build = sb.mur(&dir);
        build
            .env("PATH", crate::support::toolchains::path_with(tools))
            .args(["build", "."]);
        prepare(&dir.join("tools/words"), &mut build);
        let out = build.output().expect("mur build");
        assert!(out.status.success(), "mur build: {}", stderr(&out));
        stderr(&out)
    };
    let built = build();
    let tool = dir.join("tools/words/tool.wasm");
    let component = std::fs::read(&tool).expect("the built tool");
    assert!(
        mur::scaffold::toolchain::is_component(&component),
        "{lang}: not a component"
    );
    // Built again with nothing changed, the toolchain does not run: the tool keeps its bytes
    // and its mtime.
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).expect("mtime");
    let before = mtime(&tool);
    let again = build();
    assert!(
        again.contains(&format!("Unchanged {} (", tool.display())) && !again.contains("Building "),
        "{lang}: {again}"
    );
    assert_eq!((mtime(&tool), std::fs::read(&tool).expect("tool")), (before, component));
    let out = sb.run(
        &dir,
        &[
            "install",
            "-g",
            dir.join("counter-0.1.0.mur.zip").to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // Installing compiled the tool: list says so, and the run below compiles nothing.
    assert_eq!(listed_compiled(&sb, &dir), ["compiled"], "{lang}");
    let cache = compiled_entries(&sb);

    let formation = sb.path("formation");
    std::fs::write(formation.join("roster.yaml"), SOLO_ROSTER).expect("roster");
    let out = sb
        .mur(&formation)
        .env(PROVIDER_KEY_VAR, PROVIDER_KEY)
        .args(["run", "--roster", "--task", "count"])
        .output()
        .expect("mur run --roster");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = tool_results(&provider.requests()[1]);
    assert_eq!(
        results,
        ["<untrusted-content source=tool:words>\n4\n</untrusted-content>"]
    );
    assert!(
        stdout(&out).contains("<untrusted-content source=tool:words>"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        compiled_entries(&sb),
        cache,
        "{lang}: the run compiled and stored an entry"
    );
    built
}

#[test]
fn each_mcp_server_gets_its_own_key_and_arguments_that_are_not_json_reach_no_server() {
    let (a, b) = (
        SdkServer::start(MCP_KEY, &[]),
        SdkServer::start("mcp-it-other-key-3c7e90", &[]),
    );
    let sb = Sandbox::new();
    // OpenAI sends arguments as a JSON string; this one is not JSON.
    let broken = Reply::json(json!({
        "id": "x", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "one__add", "arguments": "{not json"}}]}}],
    }));
    let provider = Provider::start(vec![
        broken.into(),
        calls(&[
            ("c2", "one__add", json!({"a": 2, "b": 2})),
            ("c3", "two__add", json!({"a": 3, "b": 3})),
        ]),
        answer_with_results(),
    ]);
    let tools = format!(
        "tools:\n  - name: one\n    mcp: {}\n    api_key: ${{MUR_IT_ONE_KEY}}\n    allow: [add]\n  \
         - name: two\n    mcp: {}\n    api_key: ${{MUR_IT_TWO_KEY}}\n    allow: [add]\n",
        a.url(),
        b.url()
    );
    install(&sb, "pair", provider.url(), &tools, &[]);
    let (code, lines, err) = run(
        &sb,
        "pair",
        "add",
        &[
            ("MUR_IT_ONE_KEY", MCP_KEY),
            ("MUR_IT_TWO_KEY", "mcp-it-other-key-3c7e90"),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let requests = provider.requests();
    let first = tool_results(&requests[1]);
    assert!(first[0].contains("its arguments are not a JSON object"), "{}", first[0]);
    let all = tool_results(&requests[2]);
    assert_eq!(
        &all[1..],
        [
            "<untrusted-content source=tool:one__add>\n4\n</untrusted-content>",
            "<untrusted-content source=tool:two__add>\n6\n</untrusted-content>"
        ]
    );
    let (la, lb) = (a.log(), b.log());
    assert_eq!(
        la.iter().filter(|l| *l == "call add").count(),
        1,
        "the broken call reached nothing: {la:?}"
    );
    assert!(
        la.iter()
            .all(|l| !l.starts_with("auth ") || l == &format!("auth Bearer {MCP_KEY}")),
        "{la:?}"
    );
    assert!(
        lb.iter()
            .all(|l| !l.starts_with("auth ") || l == "auth Bearer mcp-it-other-key-3c7e90"),
        "{lb:?}"
    );
    assert!(
        !lb.iter().any(|l| l.contains(MCP_KEY)),
        "server two saw server one's key"
    );
    let (_, recs) = trace(&lines[0]);
    let mut statuses: Vec<(String, String)> = of_type(&recs, "tool_call")
        .iter()
        .map(|r| {
            (
                r["call_id"].as_str().unwrap_or_default().into(),
                r["status"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [
            ("c1".into(), "failed".into()),
            ("c2".into(), "ok".into()),
            ("c3".into(), "ok".into())
        ]
    );
}

#[test]
fn anthropic_models_get_tools_and_results_in_their_own_format() {
    use crate::support::provider::anthropic;
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Reply::json(anthropic::tool_use(&[
            ("tu_1", "words", json!({"text": "a b"})),
            ("tu_2", "words", json!({"trap": 1})),
        ]))
        .into(),
        Reply::json(anthropic::text("Done.")).into(),
    ]);
    let dir = sb.path("src/claude");
    std::fs::create_dir_all(dir.join("tools/words")).expect("mkdir");
    std::fs::copy(repo_root().join(WORDS.1), dir.join(WORDS.0)).expect("copy");
    std::fs::write(
        dir.join("murmur.yaml"),
        format!(
            "name: claude\nversion: 0.1.0\ninference:\n  provider: anthropic\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{PROVIDER_KEY_VAR}}}\n{WORDS_ENTRY}",
            provider.url()
        ),
    )
    .expect("manifest");
    assert!(sb.run(&dir, &["build", "."]).status.success());
    let zip = dir.join("claude-0.1.0.mur.zip");
    assert!(
        sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8")])
            .status
            .success()
    );
    let (code, _, err) = run(&sb, "claude", "count", &[]);
    assert_eq!(code, Some(0), "{err}");
    let requests = provider.requests();
    let tool = &requests[0].json()["tools"][0];
    assert_eq!(
        (&tool["name"], &tool["input_schema"]["type"]),
        (&json!("words"), &json!("object"))
    );
    let results = requests[1].json()["messages"]
        .as_array()
        .and_then(|m| m.last().cloned())
        .unwrap_or_default();
    let blocks = results["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(blocks.len(), 2, "{results}");
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[0]["tool_use_id"], "tu_1");
    assert_eq!(
        blocks[0]["content"],
        "<untrusted-content source=tool:words>\n2\n</untrusted-content>"
    );
    assert!(blocks[0].get("is_error").is_none());
    assert_eq!(blocks[1]["is_error"], true, "a trap is a tool error: {}", blocks[1]);
}

#[test]
fn mur_doctor_names_where_an_mcp_key_goes_and_warns_when_it_is_unset() {
    let sb = Sandbox::new();
    install(
        &sb,
        "adder",
        "http://127.0.0.1:9/v1",
        &mcp_entry("http://127.0.0.1:9/mcp", "add"),
        &[],
    );
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), SOLO_ROSTER.replace("counter", "adder")).expect("roster");
    let out = sb
        .mur(&dir)
        .env(PROVIDER_KEY_VAR, PROVIDER_KEY)
        .env_remove(MCP_KEY_VAR)
        // Nothing listens at the placeholder endpoints; the dial has its own tests (checkup.rs).
        .args(["doctor", "--offline"])
        .output()
        .expect("doctor");
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(
        text.contains(&format!("env: adder reads {MCP_KEY_VAR}, sent to 127.0.0.1:9")),
        "{text}"
    );
    // Admission needs no key: a warning naming the variable and the launch that will refuse.
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains(&format!(
            "warning[W-RUN-010]: roster.yaml: member 'adder': its tool 'calc' names ${{{MCP_KEY_VAR}}} as the MCP server's key, and {MCP_KEY_VAR} is not set in this environment: admission needs no key, but `mur run` will refuse the member (E-RUN-002)"
        )),
        "{text}"
    );
    let out = sb
        .mur(&dir)
        .env(PROVIDER_KEY_VAR, PROVIDER_KEY)
        .env(MCP_KEY_VAR, MCP_KEY)
        .arg("doctor")
        .output()
        .expect("doctor");
    assert!(
        !stdout(&out).contains(&format!("{MCP_KEY_VAR} is not set")),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains(MCP_KEY) && !stderr(&out).contains(MCP_KEY));
}

#[test]
fn a_member_whose_mcp_server_lacks_an_allowed_tool_stops_the_launch_naming_it() {
    let sdk = SdkServer::start(MCP_KEY, &[]);
    let sb = Sandbox::new();
    let provider = Provider::start(vec![]);
    sb.install_actor("echo");
    let serves = "network:\n  authentication:\n    scheme: bearer\nexports:\n  peer_tasks:\n    accept: true\n";
    install(
        &sb,
        "adder",
        provider.url(),
        &format!("{serves}{}", mcp_entry(&sdk.url(), "add, mul")),
        &[],
    );
    let dir = sb.path("formation");
    let roster = "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/echo\n    version: 0.1.0\n    entry: true\n  \
                  - name: adder\n    capsule: local/adder\n    version: 0.1.0\nreachability:\n  - from: lead\n    to: [adder]\n";
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    let out = sb
        .mur(&dir)
        .env(PROVIDER_KEY_VAR, PROVIDER_KEY)
        .env(MCP_KEY_VAR, MCP_KEY)
        .args(["run", "--roster", "--task", "add"])
        .output()
        .expect("mur run --roster");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("E-RUN-002") && err.contains("'mul'") && err.contains("its tool 'calc'"),
        "{err}"
    );
    assert!(err.contains("adder"), "the member is named: {err}");
    assert!(provider.requests().is_empty(), "no task reached the model");
    assert!(!err.contains(MCP_KEY));
}

/// A server that changes a tool's definition after it was approved (the "rug pull"): the first
/// start records the definitions beside the installed archive; a later start does not offer the
/// changed tool, says which and how (E-RUN-055) and how to approve it; `mur approve` records the
/// new definition, after which it is offered again.
#[test]
fn an_mcp_tool_whose_definition_changed_after_approval_is_not_offered_until_approved() {
    let first = SdkServer::start(MCP_KEY, &[]);
    let port = first.port().to_string();
    let sb = Sandbox::new();
    let done = || -> Step { Reply::json(openai::text("done")).into() };
    let provider = Provider::start(vec![done(), done(), done()]);
    install(
        &sb,
        "pinned",
        provider.url(),
        &mcp_entry(&first.url(), "add, echo"),
        &[],
    );
    let env = [(MCP_KEY_VAR, MCP_KEY)];
    let pins = sb
        .home()
        .join(".murmur/artifacts/local/pinned/0.1.0")
        .join("tool-pins.json");

    // First start: both tools offered, their definitions recorded.
    let (code, _, err) = run(&sb, "pinned", "one", &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("E-RUN-055"), "{err}");
    assert_eq!(provider.requests()[0].tool_names(), ["calc__add", "calc__echo"]);
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&pins).expect("pins beside the archive")).expect("pins are JSON");
    assert_eq!(
        recorded["tools"]["calc"]
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["add".to_string(), "echo".to_string()]),
        "{recorded}"
    );

    // The same server, restarted with another description for `echo`.
    drop(first);
    let pulled = SdkServer::start(MCP_KEY, &[("MCP_TEST_PORT", &port), ("MCP_TEST_RUG_PULL", "1")]);
    let (code, _, err) = run(&sb, "pinned", "two", &env);
    assert_eq!(code, Some(0), "the rest of the capsule still runs: {err}");
    assert_eq!(
        provider.requests()[1].tool_names(),
        ["calc__add"],
        "the changed tool is not offered"
    );
    assert!(
        err.contains(
            "error[E-RUN-055]: the MCP tool 'echo' of 'local/pinned@0.1.0' (server of tools entry 'calc') is not offered to the model: its description changed since it was approved"
        ) && err.contains("hint: if you trust the server's new definition, approve it with `mur approve local/pinned --capsule-version 0.1.0`"),
        "{err}"
    );

    // Approved as it is now: offered again, and nothing is said.
    let out = sb
        .mur(&sb.path("work"))
        .args(["approve", "local/pinned", "--capsule-version", "0.1.0"])
        .envs(env)
        .output()
        .expect("mur approve");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Approved 2 MCP tool(s) of local/pinned@0.1.0: calc.add, calc.echo\n"),
        "{}",
        stdout(&out)
    );
    let (code, _, err) = run(&sb, "pinned", "three", &env);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("E-RUN-055"), "{err}");
    assert_eq!(provider.requests()[2].tool_names(), ["calc__add", "calc__echo"]);
    drop(pulled);
}

/// A stand-in for componentize-py that logs the directory of each build it is asked for and
/// writes the words tool (component-model WAT, which the runtime compiles as it does a binary)
/// under the directory's name (five letters, as `words`: the name's data keeps its length): what
/// `mur build` does around a toolchain, without the toolchain's seconds.
fn logging_componentize_py(sb: &Sandbox) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = sb.path("logging-bin");
    let log = sb.dir.path().join("builds.log");
    let script = format!(
        "#!/bin/sh\npwd -P >> '{}'\nwhile [ \"$1\" != -o ]; do shift; done\n\
         sed \"s/\\\"words\\\"/\\\"$(basename \"$(pwd -P)\")\\\"/\" '{}' > \"$2\"\n",
        log.display(),
        repo_root().join(WORDS.1).display()
    );
    let program = bin.join("componentize-py");
    std::fs::write(&program, script).expect("script");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (bin, log)
}

/// The lines of the stand-in's log: one directory per build it ran.
fn builds(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The compiled entries (`.cwasm`) in HOME's cache, with their modification times.
fn compiled_entries(sb: &Sandbox) -> Vec<(String, std::time::SystemTime)> {
    let mut found: Vec<_> = std::fs::read_dir(sb.home().join(".murmur/compiled"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .map(|e| {
            let mtime = e.metadata().and_then(|m| m.modified()).expect("mtime");
            (e.file_name().to_string_lossy().into_owned(), mtime)
        })
        .collect();
    found.sort();
    found
}

/// The last column of each `mur list` line.
fn listed_compiled(sb: &Sandbox, cwd: &Path) -> Vec<String> {
    let out = sb.run(cwd, &["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| l.rsplit("  ").next().unwrap_or_default().to_string())
        .collect()
}

/// The newcomer's loop: `mur new --tool` twice, `mur build .` again and again, `mur install`,
/// `mur list`, `mur run`. A build with nothing changed runs no toolchain and leaves each
/// component's bytes and mtime; a changed source rebuilds its tool alone; `mur install` compiles
/// both tools, `mur list` says so, and the first run loads them from the cache, compiling nothing.
#[test]
fn an_unchanged_tool_is_not_rebuilt_and_install_compiles_every_tool_for_the_first_run() {
    let sb = Sandbox::unshared();
    let provider = Provider::start(vec![
        calls(&[("c1", "words", json!({"text": "one two three"}))]),
        answer_with_results(),
    ]);
    let dir = sb.path("src/counter").canonicalize().expect("dir");
    std::fs::write(
        dir.join("murmur.yaml"),
        format!(
            "name: counter\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{PROVIDER_KEY_VAR}}}\n",
            provider.url()
        ),
    )
    .expect("manifest");
    for tool in ["words", "other"] {
        let out = sb.run(&dir, &["new", "--tool", tool, "--lang", "python"]);
        assert!(out.status.success(), "mur new --tool {tool}: {}", stderr(&out));
    }
    let (bin, log) = logging_componentize_py(&sb);
    let build = || {
        let out = sb
            .mur(&dir)
            .env("PATH", crate::support::toolchains::path_with(&bin))
            .args(["build", "."])
            .output()
            .expect("mur build");
        assert!(out.status.success(), "mur build: {}", stderr(&out));
        assert!(stdout(&out).starts_with("Built counter@0.1.0: "), "{}", stdout(&out));
        stderr(&out)
    };
    let words = dir.join("tools/words");
    let other = dir.join("tools/other");
    let state = |tool: &Path| {
        let p = tool.join("tool.wasm");
        let mtime = std::fs::metadata(&p).and_then(|m| m.modified()).expect("built");
        (mtime, std::fs::read(&p).expect("built"))
    };

    let first = build();
    assert_eq!(
        builds(&log),
        // In the manifest's order: each `mur new --tool` entry goes first.
        [other.display().to_string(), words.display().to_string()],
        "{first}"
    );
    for tool in [&words, &other] {
        assert!(
            first.contains(&format!("Building {}/app.py with ", tool.display())),
            "{first}"
        );
    }
    assert!(dir.join(".murmur/build/tools/words/tool.wasm.stamp").is_file());
    let (words_before, other_before) = (state(&words), state(&other));

    // Nothing changed: no toolchain runs, and each component keeps its bytes and mtime.
    let again = build();
    assert_eq!(builds(&log).len(), 2, "{again}");
    for tool in [&words, &other] {
        assert!(
            again.contains(&format!("Unchanged {}/tool.wasm (", tool.display())),
            "{again}"
        );
    }
    assert!(!again.contains("Building "), "{again}");
    assert_eq!(
        (state(&words), state(&other)),
        (words_before.clone(), other_before.clone())
    );

    // One tool's source changes: that tool alone is built, and the output says why.
    let app = words.join("app.py");
    let mut source = std::fs::read_to_string(&app).expect("app.py");
    source.push_str("\n# counts words\n");
    std::fs::write(&app, source).expect("edit app.py");
    let edited = build();
    assert_eq!(builds(&log)[2..], [words.display().to_string()], "{edited}");
    assert!(
        edited.contains(&format!("Building {}/app.py with ", words.display()))
            && edited.contains(" (app.py changed)\n"),
        "{edited}"
    );
    assert!(
        edited.contains(&format!("Unchanged {}/tool.wasm (", other.display())),
        "{edited}"
    );
    assert_eq!(state(&other), other_before);

    // A component removed by hand is built again, even with its sources unchanged.
    std::fs::remove_file(other.join("tool.wasm")).expect("rm");
    let rebuilt = build();
    assert_eq!(builds(&log)[3..], [other.display().to_string()], "{rebuilt}");
    assert!(rebuilt.contains(" (the component is missing)\n"), "{rebuilt}");

    // Install compiles both tools; list says so.
    let work = sb.path("work");
    assert!(compiled_entries(&sb).is_empty());
    let zip = dir.join("counter-0.1.0.mur.zip");
    let out = sb.run(&work, &["install", "-g", zip.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let compiled = compiled_entries(&sb);
    assert_eq!(compiled.len(), 2, "one entry per tool: {compiled:?}");
    assert_eq!(listed_compiled(&sb, &work), ["compiled"]);

    // The first run loads both tools from the cache: it compiles and stores nothing.
    let out = sb
        .mur(&work)
        .args(["run", "--capsule", "local/counter", "--capsule-version", "0.1.0"])
        .args(["--task", "count"])
        .env(PROVIDER_KEY_VAR, PROVIDER_KEY)
        .env("RUST_LOG", "mur=debug")
        .output()
        .expect("mur run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        tool_results(&provider.requests()[1]),
        ["<untrusted-content source=tool:words>\n3\n</untrusted-content>"]
    );
    assert_eq!(err.matches("loaded compiled ").count(), 2, "{err}");
    assert!(!err.contains("compiled component "), "{err}");
    assert_eq!(compiled_entries(&sb), compiled, "the run wrote no entry");

    // Without the cache, list says so.
    std::fs::remove_dir_all(sb.home().join(".murmur/compiled")).expect("rm cache");
    assert_eq!(listed_compiled(&sb, &work), ["not-compiled"]);
}
