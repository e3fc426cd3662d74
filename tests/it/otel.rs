//! OpenTelemetry across a formation: every member exports its spans over OTLP/HTTP to a collector
//! on loopback, whose requests this file decodes with the official OTLP protobuf messages
//! (`opentelemetry-proto`). One formation is one trace: the launcher's formation span, the
//! entry's task under it, its member call, the callee's task under that call (the `traceparent`
//! crossed the door), and a GenAI span per model turn with the token counts the provider sent.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Request, Step, openai, read_request};
use crate::support::{PLANNER_CALLS_CODER, Sandbox, stderr, stdout};

const KEY_VAR: &str = "MUR_IT_OTEL_KEY";
const KEY: &str = "sk-it-otel-0123456789";
/// What `OTEL_EXPORTER_OTLP_HEADERS` carries: a collector's key, sent to the collector only.
const COLLECTOR_KEY: &str = "otlp-collector-secret-4242";

/// One export request as the collector received it (the scripted provider's reader parses it).
type Export = Request;

/// A collector on 127.0.0.1: answers every request `200` (after `delay`) and keeps it.
struct Collector {
    port: u16,
    got: Arc<Mutex<Vec<Export>>>,
}

impl Collector {
    fn start() -> Collector {
        Collector::slow(std::time::Duration::ZERO)
    }

    fn slow(delay: std::time::Duration) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        let port = listener.local_addr().expect("address").port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&got);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let keep = Arc::clone(&keep);
                std::thread::spawn(move || {
                    if let Some(e) = read_request(&conn) {
                        keep.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                    }
                    std::thread::sleep(delay);
                    let mut conn = conn;
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                });
            }
        });
        Collector { port, got }
    }

    fn exports(&self) -> Vec<Export> {
        self.got.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every span received, decoded, with its resource's `service.name`.
    fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for e in self.exports() {
            let req = ExportTraceServiceRequest::decode(e.body.as_slice()).expect("an OTLP trace export");
            for rs in req.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| attr(&r.attributes, "service.name"))
                    .unwrap_or(Value::Null);
                let resource_attr = |key: &str| {
                    rs.resource
                        .as_ref()
                        .and_then(|r| attr(&r.attributes, key))
                        .unwrap_or(Value::Null)
                };
                let instance = resource_attr("service.instance.id");
                let member = resource_attr("mur.member");
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        out.push(Span {
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            parent: hex(&s.parent_span_id),
                            name: s.name.clone(),
                            kind: s.kind,
                            attrs: s
                                .attributes
                                .iter()
                                .filter_map(|kv| Some((kv.key.clone(), value(kv.value.as_ref()?))))
                                .collect(),
                            service: service.clone(),
                            instance: instance.clone(),
                            member: member.clone(),
                            events: s
                                .events
                                .iter()
                                .map(|e| {
                                    let attrs = e
                                        .attributes
                                        .iter()
                                        .filter_map(|kv| Some((kv.key.clone(), value(kv.value.as_ref()?))))
                                        .collect();
                                    (e.name.clone(), attrs)
                                })
                                .collect(),
                        });
                    }
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone)]
struct Span {
    trace_id: String,
    span_id: String,
    /// Empty for a root.
    parent: String,
    name: String,
    kind: i32,
    attrs: HashMap<String, Value>,
    service: Value,
    /// The resource's `service.instance.id` and `mur.member`: which member exported it.
    instance: Value,
    member: Value,
    /// The span's events: name and attributes.
    events: Vec<(String, HashMap<String, Value>)>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn value(v: &AnyValue) -> Value {
    match v.value.as_ref() {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(value).collect()),
        _ => Value::Null,
    }
}

fn attr(attrs: &[KeyValue], key: &str) -> Option<Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .map(value)
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "exactly one span named {name:?} in {spans:#?}");
    found[0]
}

/// A model entry (OpenAI, streamed) that calls `coder` (a component), waits for its answer and
/// continues with it: three model turns, one member call.
fn planner_formation(sb: &Sandbox) -> Provider {
    sb.install_actor("echo");
    let script: Vec<Step> = vec![
        Reply::sse(&openai::stream_of(&openai::tool_calls(&[(
            "c1",
            "call-member",
            json!({"member": "coder", "task": "write the parser"}),
        )])))
        .into(),
        Reply::sse(&openai::stream_of(&openai::text("Waiting for coder."))).into(),
        Step::func(|_req: &Request| Reply::sse(&openai::stream_of(&openai::text("Done.")))),
    ];
    let provider = Provider::start(script);
    let manifest = format!(
        "name: planner\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{{KEY_VAR}}}\n  system_prompt: You plan in secret words.\n\
         capabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n",
        provider.url()
    );
    sb.install_manifest("planner", &manifest);
    std::fs::write(sb.path("formation").join("roster.yaml"), PLANNER_CALLS_CODER).expect("roster");
    provider
}

/// Every file under `root`, as text (lossy), for "never written anywhere" checks.
fn all_text_under(root: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push_str(&String::from_utf8_lossy(&b));
            }
        }
    }
    out
}

#[test]
fn a_formation_is_one_trace_of_tasks_calls_and_model_turns() {
    let sb = Sandbox::new();
    let provider = planner_formation(&sb);
    let collector = Collector::start();
    let dir = sb.path("formation");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        // `localhost`: dialled at 127.0.0.1, where the collector listens.
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://localhost:{}", collector.port),
        )
        .env("OTEL_EXPORTER_OTLP_HEADERS", format!("x-collector-key={COLLECTOR_KEY}"))
        // A budget, so each chat span carries its reservation and settlement.
        .args(["run", "--roster", "--task", "Ship a parser", "--max-tokens", "1000000"])
        .output()
        .expect("mur run --roster");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Done.\n");
    assert_eq!(provider.requests().len(), 3);

    // Every export went to the traces path, as protobuf, with the configured header.
    let exports = collector.exports();
    assert!(!exports.is_empty(), "nothing was exported; stderr:\n{}", stderr(&out));
    for e in &exports {
        assert_eq!(e.path, "/v1/traces");
        let h = |k: &str| e.headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(h("content-type"), Some("application/x-protobuf"));
        assert_eq!(h("x-collector-key"), Some(COLLECTOR_KEY));
    }

    let spans = collector.spans();
    // One formation, one trace.
    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|s| &s.trace_id == trace), "{spans:#?}");
    assert!(spans.iter().all(|s| s.service == json!("mur")), "{spans:#?}");
    // Each member's spans come from an instance of its own: its session, named after it.
    let mut instances = std::collections::BTreeMap::new();
    for s in spans.iter().filter(|s| s.attrs.contains_key("mur.session.id")) {
        assert_eq!(s.instance, s.attrs["mur.session.id"], "{s:#?}");
        assert_eq!(s.member, s.attrs["mur.member"], "{s:#?}");
        instances.insert(s.member.to_string(), s.instance.to_string());
    }
    assert!(instances.len() >= 2, "spans of several members: {instances:?}");
    let distinct: std::collections::BTreeSet<&String> = instances.values().collect();
    assert_eq!(distinct.len(), instances.len(), "{instances:?}");

    let formation = one(&spans, "formation");
    assert!(
        formation.attrs["mur.formation.id"]
            .as_str()
            .is_some_and(|f| f.starts_with("frm_"))
    );
    assert_eq!(formation.attrs["mur.formation.entry"], "lead");
    assert_eq!(formation.parent, "", "the formation span is the root");
    let lead = one(&spans, "task lead");
    assert_eq!(
        lead.parent, formation.span_id,
        "the entry's task hangs off the formation"
    );
    let call = one(&spans, "call coder");
    assert_eq!(call.parent, lead.span_id);
    assert_eq!(call.kind, SpanKind::Client as i32);
    assert_eq!(call.attrs["mur.callee"], "coder");
    assert_eq!(call.attrs["mur.status"], "completed");
    let coder = one(&spans, "task coder");
    assert_eq!(
        coder.parent, call.span_id,
        "the callee's task is a child of the caller's call"
    );
    assert_eq!(coder.kind, SpanKind::Server as i32);
    assert_eq!(coder.attrs["mur.member"], "coder");

    // A GenAI span per model turn, under the entry's task, with what the provider reported.
    let mut turns: Vec<&Span> = spans.iter().filter(|s| s.name == "chat test-model").collect();
    turns.sort_by_key(|s| s.attrs["mur.turn"].as_i64());
    assert_eq!(turns.len(), 3, "{spans:#?}");
    let want = [(20, 7, "tool_calls"), (10, 5, "stop"), (10, 5, "stop")];
    for (s, (input, output, finish)) in turns.iter().zip(want) {
        assert_eq!(s.parent, lead.span_id);
        assert_eq!(s.kind, SpanKind::Client as i32);
        assert_eq!(s.attrs["gen_ai.operation.name"], "chat");
        assert_eq!(s.attrs["gen_ai.provider.name"], "openai");
        assert_eq!(s.attrs["gen_ai.request.model"], "test-model");
        assert_eq!(s.attrs["gen_ai.response.model"], "scripted");
        assert_eq!(s.attrs["gen_ai.usage.input_tokens"], input);
        assert_eq!(s.attrs["gen_ai.usage.output_tokens"], output);
        assert_eq!(s.attrs["gen_ai.response.finish_reasons"], json!([finish]));
        assert!(
            s.attrs["mur.budget.reserved"]
                .as_i64()
                .is_some_and(|n| n > input + output),
            "{s:?}"
        );
        assert_eq!(s.attrs["mur.budget.charged"], input + output);
    }
    let lefts: Vec<i64> = turns
        .iter()
        .filter_map(|s| s.attrs["mur.budget.left"].as_i64())
        .collect();
    assert_eq!(
        lefts,
        [1_000_000 - 27, 1_000_000 - 42, 1_000_000 - 57],
        "what is left after each turn"
    );

    // No prompt, no answer, no key in any span; the collector key nowhere but its header.
    let everything = format!("{spans:?}");
    for secret in [
        KEY,
        "You plan in secret words",
        "Ship a parser",
        "write the parser",
        COLLECTOR_KEY,
    ] {
        assert!(!everything.contains(secret), "a span holds {secret:?}");
    }
    assert!(!stderr(&out).contains(COLLECTOR_KEY));
    assert!(
        !all_text_under(&sb.home()).contains(COLLECTOR_KEY),
        "a file under HOME holds the collector key"
    );

    // The same formation, summed by `mur trace show --json`.
    let frm = formation.attrs["mur.formation.id"]
        .as_str()
        .expect("formation id")
        .to_string();
    let shown = sb.run(&dir, &["trace", "show", &frm, "--json"]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let v: Value = serde_json::from_str(stdout(&shown).trim()).expect("one JSON object");
    assert_eq!(v["formation_id"], frm);
    let member = |name: &str| {
        v["members"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["member"] == name))
            .map(|m| m["usage"].clone())
            .unwrap_or_else(|| panic!("no {name} in {v}"))
    };
    let lead = member("lead");
    assert_eq!(
        (
            &lead["tasks"],
            &lead["calls"],
            &lead["model_turns"],
            &lead["input_tokens"],
            &lead["output_tokens"]
        ),
        (&json!(1), &json!(1), &json!(3), &json!(40), &json!(17))
    );
    let coder = member("coder");
    assert_eq!((&coder["tasks"], &coder["model_turns"]), (&json!(1), &json!(0)));
    assert_eq!(v["total"]["model_turns"], 3);
    assert_eq!(v["total"]["tasks"], 2);
    assert_eq!(v["calls"][0]["from"], "lead");
    assert_eq!(v["calls"][0]["to"], "coder");
    let ms = |u: &Value, k: &str| u[k].as_u64().unwrap_or(u64::MAX);
    assert_eq!(ms(&lead, "other_ms") + ms(&lead, "model_ms"), ms(&lead, "task_ms"));

    // And as the table.
    let table = sb.run(&dir, &["trace", "show", &frm]);
    let text = stdout(&table);
    assert!(
        text.contains(
            "\nusage:\n  member  tasks  calls  turns  model ms  tools  tool ms  other ms  tokens in  tokens out\n"
        ),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("lead "))
        .expect("lead's row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (cells[1], cells[2], cells[3], cells[8], cells[9]),
        ("1", "1", "3", "40", "17"),
        "{row}"
    );
}

#[test]
fn an_unreachable_collector_is_one_warning_and_the_formation_still_answers() {
    let sb = Sandbox::new();
    let _provider = planner_formation(&sb);
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dir = sb.path("formation");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("OTEL_EXPORTER_OTLP_HEADERS", format!("x-collector-key={COLLECTOR_KEY}"))
        .args(["run", "--roster", "--task", "Ship a parser"])
        .output()
        .expect("mur run --roster");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "Done.\n");
    assert_eq!(err.matches("warning[W-OTL-002]").count(), 1, "{err}");
    // It names the collector and why, nothing of the headers.
    assert!(err.contains(&format!("127.0.0.1:{port}: no connection")), "{err}");
    assert!(!err.contains(COLLECTOR_KEY), "{err}");
}

#[test]
fn a_protocol_this_runtime_does_not_speak_is_a_warning_and_no_export() {
    let sb = Sandbox::new();
    let _provider = planner_formation(&sb);
    let collector = Collector::start();
    let dir = sb.path("formation");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", collector.port),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .args(["run", "--roster", "--task", "Ship a parser"])
        .output()
        .expect("mur run --roster");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("warning[W-OTL-001]").count(), 1, "{err}");
    assert!(err.contains("OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'"), "{err}");
    assert!(collector.exports().is_empty());
}

#[test]
fn a_component_formation_is_one_trace_too() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component(
        "relay",
        "src/capsule/testdata/relay.wat",
        "capabilities:\n  network:\n    allow: [localhost]\n",
    );
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}\n  \
         - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .expect("roster");
    let collector = Collector::start();
    let out = sb
        .mur(&dir)
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("http://127.0.0.1:{}/v1/traces", collector.port),
        )
        .env("OTEL_SERVICE_NAME", "relay-demo")
        .args(["run", "--roster", "--task", "relayed"])
        .output()
        .expect("mur run --roster");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "relayed\n");
    let spans = collector.spans();
    assert!(spans.iter().all(|s| s.trace_id == spans[0].trace_id), "{spans:#?}");
    assert!(spans.iter().all(|s| s.service == json!("relay-demo")), "{spans:#?}");
    let formation = one(&spans, "formation");
    let lead = one(&spans, "task lead");
    let call = one(&spans, "call worker");
    let worker = one(&spans, "task worker");
    assert_eq!(
        (&lead.parent, &call.parent, &worker.parent),
        (&formation.span_id, &lead.span_id, &call.span_id)
    );
    assert_eq!(lead.attrs["mur.status"], "completed");
    assert!(spans.iter().all(|s| !s.name.starts_with("chat ")));
}

/// The closing count each process logs: `(ended, exported, lost, dropped)` per line.
fn span_counts(sb: &Sandbox) -> Vec<(u64, u64, u64, u64)> {
    let mut out = Vec::new();
    for line in all_text_under(&sb.home()).lines() {
        let Some(rest) = line.split("opentelemetry: ").nth(1) else {
            continue;
        };
        let n: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| !w.is_empty())
            .filter_map(|w| w.parse().ok())
            .collect();
        if let [ended, exported, lost, dropped] = n[..] {
            out.push((ended, exported, lost, dropped));
        }
    }
    out
}

#[test]
fn a_slow_collector_holds_no_task_up_and_what_it_misses_is_counted() {
    let sb = Sandbox::new();
    let _provider = planner_formation(&sb);
    // Each export is answered after 2 s, and the queue holds one span: the entry's spans end
    // faster than that, so some find the queue full.
    let collector = Collector::slow(std::time::Duration::from_secs(2));
    let dir = sb.path("formation");
    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", collector.port),
        )
        .env("OTEL_BSP_MAX_QUEUE_SIZE", "1")
        .args(["run", "--roster", "--task", "Ship a parser"])
        .output()
        .expect("mur run --roster");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        stdout(&out),
        "Done.
"
    );
    assert!(!err.contains("W-OTL"), "a slow collector is not a failing one: {err}");
    // Each member logged its count; every span it ended is accounted for, and the entry (five
    // spans in quick succession) dropped some.
    let counts = span_counts(&sb);
    assert_eq!(counts.len(), 2, "{counts:?}");
    for (ended, exported, lost, dropped) in &counts {
        assert_eq!(*ended, exported + lost + dropped, "{counts:?}");
    }
    assert!(counts.iter().any(|c| c.3 > 0), "nothing was dropped: {counts:?}");
}

/// `mur demo` (planner → analyst, planner → writer → analyst) is one trace: each callee's task
/// under the call that sent it, a call made while serving a call under that callee's task.
#[test]
fn the_demo_formation_is_one_trace() {
    let sb = Sandbox::new();
    let collector = Collector::start();
    let cwd = sb.path("work");
    let out = sb
        .mur(&cwd)
        .env("TMPDIR", sb.path("tmp"))
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://localhost:{}", collector.port),
        )
        .arg("demo")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("mur demo");
    assert!(out.status.success(), "{}", stderr(&out));
    let spans = collector.spans();
    assert!(spans.iter().all(|s| s.trace_id == spans[0].trace_id), "{spans:#?}");
    let formation = one(&spans, "formation");
    assert_eq!(formation.parent, "");
    let planner = one(&spans, "task planner");
    assert_eq!(planner.parent, formation.span_id);
    let writer = one(&spans, "task writer");
    let call_writer = one(&spans, "call writer");
    assert_eq!(
        (&call_writer.parent, &writer.parent),
        (&planner.span_id, &call_writer.span_id)
    );
    // analyst is called twice: once by planner, once by writer while it serves planner's call.
    let calls_to_analyst: Vec<&Span> = spans.iter().filter(|s| s.name == "call analyst").collect();
    let mut callers: Vec<&str> = calls_to_analyst
        .iter()
        .map(|c| {
            if c.parent == planner.span_id {
                "planner"
            } else if c.parent == writer.span_id {
                "writer"
            } else {
                "?"
            }
        })
        .collect();
    callers.sort_unstable();
    assert_eq!(callers, ["planner", "writer"], "{spans:#?}");
    let analyst_tasks: Vec<&Span> = spans.iter().filter(|s| s.name == "task analyst").collect();
    assert_eq!(analyst_tasks.len(), 2, "{spans:#?}");
    for t in analyst_tasks {
        assert!(calls_to_analyst.iter().any(|c| c.span_id == t.parent), "{t:#?}");
    }
}

#[test]
fn a_tool_call_is_an_execute_tool_span_under_the_chat_span_that_asked_for_it() {
    use crate::support::provider::openai;
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Reply::json(openai::tool_calls(&[("call_w1", "words", json!({"text": "a b"}))])).into(),
        Reply::json(openai::text("Two.")).into(),
    ]);
    let dir = sb.path("src/counter");
    std::fs::create_dir_all(dir.join("tools/words")).expect("mkdir");
    std::fs::copy(
        crate::support::repo_root().join("src/capsule/testdata/words-tool.wat"),
        dir.join("tools/words/tool.wat"),
    )
    .expect("copy");
    std::fs::write(
        dir.join("murmur.yaml"),
        format!(
            "name: counter\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\ntools:\n  - name: words\n    component: tools/words/tool.wat\n",
            provider.url()
        ),
    )
    .expect("manifest");
    assert!(sb.run(&dir, &["build", "."]).status.success());
    let zip = dir.join("counter-0.1.0.mur.zip");
    assert!(
        sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8")])
            .status
            .success()
    );
    let collector = Collector::start();
    let work = sb.path("work");
    let out = sb
        .mur(&work)
        .env(KEY_VAR, KEY)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", collector.port),
        )
        .args([
            "run",
            "--capsule",
            "local/counter",
            "--capsule-version",
            "0.1.0",
            "--task",
            "count",
        ])
        .output()
        .expect("mur run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spans = collector.spans();
    let tool = one(&spans, "execute_tool words");
    let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat test-model").collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    assert!(
        chats.iter().any(|c| c.span_id == tool.parent),
        "the tool span hangs off the chat span that asked for it: {spans:#?}"
    );
    assert_eq!(tool.attrs["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool.attrs["gen_ai.tool.name"], "words");
    assert_eq!(tool.attrs["gen_ai.tool.call.id"], "call_w1");
    assert_eq!(tool.attrs["mur.tool.kind"], "wasm");
    assert_eq!(tool.attrs["mur.tool.status"], "ok");
}

#[test]
fn a_question_and_its_answer_are_events_on_the_task_span_without_their_texts() {
    use crate::answer::{ask, install_asker, paint_with_answers, task_in, task_run};
    use crate::support::{Launcher, wait_until};
    use std::time::Duration;
    let sb = Sandbox::new();
    let provider = Provider::start(vec![ask("c1", "Which colour?"), paint_with_answers()]);
    install_asker(&sb, "painter", provider.url(), 60, "");
    let collector = Collector::start();
    let work = sb.path("work");
    let mut cmd = task_run(&sb, "painter", "paint");
    cmd.env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", collector.port),
    );
    let run = Launcher::spawn(cmd);
    wait_until(Duration::from_secs(60), || run.stderr().contains("Which colour?"))
        .unwrap_or_else(|| panic!("no question; stderr:\n{}", run.stderr()));
    let task = task_in(&run.stderr()).expect("the task id");
    let answered = sb
        .mur(&work)
        .args(["answer", &task, "green"])
        .output()
        .expect("mur answer");
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    let (code, out, err) = run.wait(Duration::from_secs(30));
    assert_eq!((code, out.as_str()), (0, "Painted green\n"), "{err}");
    let spans = collector.spans();
    let task_span = one(&spans, "task capsule");
    let names: Vec<&str> = task_span.events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["input_requested", "input_received"], "{task_span:#?}");
    let (_, asked) = &task_span.events[0];
    assert_eq!(asked["mur.input.question_bytes"], json!("Which colour?".len()));
    let (_, got) = &task_span.events[1];
    assert_eq!(got["mur.input.outcome"], "answered");
    assert_eq!(got["mur.input.answer_bytes"], json!("green".len()));
    let everything = format!("{spans:?}");
    assert!(
        !everything.contains("Which colour?") && !everything.contains("green\""),
        "no text in spans"
    );
}
