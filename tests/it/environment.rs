//! What a formation member's environment holds, and where a model capsule may send its key
//! (docs/guide.md, "What a member's environment holds"): the real launcher, real member
//! processes read through /proc, the scripted provider on 127.0.0.1.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::provider::{Provider, Reply, Request, Step, openai};
use crate::support::{Launcher, Sandbox, formation_pids, mur_bin, stderr, stdout};

const KEY_VAR: &str = "MUR_IT_PROVIDER_KEY";
const KEY: &str = "sk-it-env-0123456789";
const SECRET: &str = "aws-secret-never-in-a-member";

/// A model capsule `name` of the openai format at `endpoint`; `api_key` names its variable.
fn model_manifest(name: &str, endpoint: &str, api_key: Option<&str>) -> String {
    let key = api_key.map(|v| format!("  api_key: ${{{v}}}\n")).unwrap_or_default();
    format!(
        "name: {name}\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: '{endpoint}'\n  model: test-model\n{key}\
         capabilities:\n  network:\n    allow: [localhost]\nnetwork:\n  authentication:\n    scheme: bearer\n"
    )
}

const ROSTER: &str = "roster_version: 1
members:
  - {name: lead, capsule: local/planner, version: 0.1.0, entry: true}
  - {name: coder, capsule: local/echo, version: 0.1.0}
reachability:
  - {from: lead, to: [coder]}
";

/// A member process: its command line and its environment.
type Seen = (String, BTreeMap<String, String>);

/// One member process's environment, as /proc shows it.
fn environ(pid: u32) -> BTreeMap<String, String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ")
}

#[test]
fn members_hold_their_declared_key_and_none_of_the_launchers_secrets() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    // While the lead's first request waits for its reply, every member is up: read each one's
    // environment then. The formation id is in the request's [Capsule] block.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = Arc::clone(&seen);
    let provider = Provider::start(vec![Step::func(move |req: &Request| {
        let body = req.text();
        let frm = body
            .split("formation: ")
            .nth(1)
            .map(|s| s.chars().take(36).collect::<String>())
            .unwrap_or_default();
        let mut found = record.lock().unwrap_or_else(|e| e.into_inner());
        for pid in formation_pids(&frm) {
            found.push((cmdline(pid), environ(pid)));
        }
        Reply::json(openai::text("done"))
    })]);
    sb.install_manifest("planner", &model_manifest("planner", provider.url(), Some(KEY_VAR)));
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER).expect("roster");

    let out = sb
        .mur(&dir)
        .env(KEY_VAR, KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("GITHUB_TOKEN", SECRET)
        .env("MURMUR_MUR_BINARY", mur_bin())
        .env("MURMUR_TEST_TIMING", "launcher_grace=5s,bogus=1s")
        .args(["run", "--roster", "--task", "plan it"])
        .output()
        .expect("mur run --roster");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "done\n");

    // The declared key reached the provider.
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 1, "{err}");
    assert_eq!(reqs[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));

    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(seen.len(), 2, "lead and coder were running: {seen:?}");
    let allowed = [
        "HOME",
        "PATH",
        "TMPDIR",
        "MURMUR_FORMATION_ID",
        "MURMUR_FORMATION_CHANNEL",
        "MURMUR_FORMATION_LIFELINE",
        // The launcher's authority channel: a descriptor number, no secret.
        "MURMUR_FORMATION_AUTHORITY",
        "MURMUR_HOST_WARNINGS_REPORTED",
        "MURMUR_TEST_TIMING",
        // A component member's compiled entry, checked once by the launcher: a descriptor number
        // and a key id, no secret.
        "MURMUR_COMPILED_FD",
        "MURMUR_COMPILED_KEY",
        // A model member's channel to the formation's budget (the default guard's when no
        // --max-tokens is given): a descriptor number, no secret.
        "MURMUR_FORMATION_BUDGET",
    ];
    for (cmd, env) in &seen {
        let planner = cmd.contains("local/planner");
        for (k, v) in env {
            assert!(
                allowed.contains(&k.as_str()) || (planner && k == KEY_VAR),
                "{cmd}: {k} was passed"
            );
            assert!(!v.contains(SECRET), "{cmd}: {k} holds the launcher's secret");
        }
        assert_eq!(env.get(KEY_VAR).map(String::as_str), planner.then_some(KEY), "{cmd}");
        // Passed deliberately, clamped and in the runtime's own spelling.
        assert_eq!(
            env.get("MURMUR_TEST_TIMING").map(String::as_str),
            Some("launcher_grace=5000ms"),
            "{cmd}"
        );
        assert_eq!(env.get("HOME").map(PathBuf::from), Some(sb.home()), "{cmd}");
    }
    // Each test switch is announced once, by the launcher; members do not repeat it.
    assert!(
        err.contains(&format!(
            "[mur run] warning[W-ENV-001]: MURMUR_MUR_BINARY is set, so members run {} instead of this mur binary\n",
            mur_bin().display()
        )),
        "{err}"
    );
    let timing = "warning[W-ENV-001]: MURMUR_TEST_TIMING is set, so these test-only timings are in effect: launcher_grace=5000ms\n";
    assert_eq!(err.matches(timing).count(), 1, "{err}");
}

#[test]
fn huge_test_timings_are_clamped_instead_of_ending_the_launcher() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER.replace("local/planner", "local/echo")).expect("roster");
    let huge = "peer_readiness=18446744073709551615s,launcher_grace=18446744073709551615ms";
    // Unclamped, the launcher's first deadline overflowed and the formation never started.
    let launch = Launcher::start(&sb, &dir, &["--task", "still on time"], &[("MURMUR_TEST_TIMING", huge)]);
    let (code, out, err) = launch.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "still on time\n");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("MURMUR_TEST_TIMING is set, so these test-only timings are in effect: peer_readiness=180000ms,launcher_grace=25000ms\n"),
        "{err}"
    );
}

#[test]
fn a_plain_http_endpoint_off_this_machine_is_refused_with_a_hint() {
    let sb = Sandbox::new();
    let build = |name: &str, endpoint: &str| {
        let dir = sb.path(&format!("src/{name}"));
        std::fs::write(dir.join("murmur.yaml"), model_manifest(name, endpoint, Some(KEY_VAR))).expect("manifest");
        sb.run(&dir, &["build", "."])
    };
    for (name, endpoint) in [("evil", "http://evil.example"), ("lan", "http://192.168.1.20:11434/v1")] {
        let out = build(name, endpoint);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{endpoint}: {err}");
        assert!(
            err.contains(&format!(
                "error[E-MAN-001]: murmur.yaml: inference.endpoint: '{endpoint}' would send the API key over plain http to a host that is not this machine; plain http:// is allowed only to loopback (127.0.0.0/8, [::1], localhost)\n  hint: use https:// for a provider on another machine"
            )),
            "{err}"
        );
        // Doctor says the same in the member's directory.
        let out = sb.run(&sb.path(&format!("src/{name}")), &["doctor"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stdout(&out).contains("  \u{2717}  murmur.yaml: inference.endpoint: '"),
            "{}",
            stdout(&out)
        );
    }
    for (name, endpoint) in [
        ("local", "http://localhost:11434"),
        ("loop", "http://127.0.0.1:9/v1"),
        ("remote", "https://evil.example"),
    ] {
        let out = build(name, endpoint);
        assert_eq!(out.status.code(), Some(0), "{endpoint}: {}", stderr(&out));
    }
}

/// Issue 29, item 5: `api_key` may not name a variable the runtime itself hands a member (the
/// collector's `OTEL_*` headers, `MURMUR_*`, the fixed list): the provider would be sent it.
#[test]
fn an_api_key_naming_a_variable_the_runtime_passes_is_refused_with_its_code() {
    let sb = Sandbox::new();
    let dir = sb.path("src/thief");
    for var in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "MURMUR_FORMATION_ID",
        "HOME",
        "RUST_LOG",
        "LC_ALL",
        "TRACEPARENT",
    ] {
        std::fs::write(
            dir.join("murmur.yaml"),
            model_manifest("thief", "https://api.example", Some(var)),
        )
        .expect("manifest");
        let out = sb.run(&dir, &["build", "."]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{var}: {err}");
        assert!(
            err.contains(&format!(
                "error[E-MAN-004]: murmur.yaml: inference.api_key: names {var}, a variable the runtime passes to every member"
            )) && err.contains("  hint: "),
            "{var}: {err}"
        );
        let out = sb.run(&dir, &["doctor"]);
        assert_eq!(out.status.code(), Some(1), "{var}");
        assert!(
            stdout(&out).contains(&format!("inference.api_key: names {var},")),
            "{}",
            stdout(&out)
        );
    }
    std::fs::write(
        dir.join("murmur.yaml"),
        model_manifest("thief", "https://api.example", Some(KEY_VAR)),
    )
    .expect("manifest");
    let out = sb.run(&dir, &["build", "."]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn doctor_names_what_each_model_member_reads_and_where_it_goes() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_manifest(
        "planner",
        &model_manifest("planner", "http://127.0.0.1:9", Some(KEY_VAR)),
    );
    sb.install_manifest(
        "scout",
        &model_manifest("scout", "https://llm.example.com:8443/v1", None),
    );
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1
members:
  - {name: lead, capsule: local/planner, version: 0.1.0, entry: true}
  - {name: coder, capsule: local/echo, version: 0.1.0}
  - {name: scout, capsule: local/scout, version: 0.1.0}
reachability:
  - {from: lead, to: [coder]}
",
    )
    .expect("roster");
    let out = sb
        .mur(&dir)
        // The endpoints are placeholders: this checks what each member reads, not that they answer.
        .args(["doctor", "--offline"])
        .env(KEY_VAR, "sk-doctor-0123456789")
        .output()
        .expect("doctor");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let env: Vec<&str> = text.lines().filter(|l| l.starts_with("  env: ")).collect();
    assert_eq!(
        env,
        [
            format!("  env: lead reads {KEY_VAR}, sent to 127.0.0.1:9"),
            "  env: scout reads no variable; its requests go to llm.example.com:8443".to_string(),
        ],
        "{text}"
    );
}

#[test]
fn a_deadline_too_far_away_is_refused_before_anything_starts() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), ROSTER.replace("local/planner", "local/echo")).expect("roster");
    for secs in ["18446744073709551615", "9223372036854775"] {
        let out = sb.run(&dir, &["run", "--roster", "--deadline", secs, "--task", "x"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{secs}: {err}");
        assert!(
            err.contains(&format!("error[E-RUN-045]: the formation could not be launched: --deadline {secs} is more than 3155760000 seconds (100 years) away\n  hint: ")),
            "{err}"
        );
        assert!(!err.contains("formation: "), "nothing was launched: {err}");
    }
    // The longest accepted deadline still runs the task.
    let out = sb.run(&dir, &["run", "--roster", "--deadline", "3155760000", "--task", "far"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "far\n");
}
