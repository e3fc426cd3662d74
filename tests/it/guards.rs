//! A newcomer's guards (docs/guide.md#writing-a-model-capsule): every flag `mur run` accepts works in the mode it
//! is given in, and a model that loops is stopped by a limit, not by the operator.

use std::time::Duration;

use serde_json::json;

use crate::support::provider::{Provider, Reply, Step, openai};
use crate::support::{Launcher, Sandbox};

const KEY_VAR: &str = "MUR_IT_GUARD_KEY";
const KEY: &str = "sk-it-guard-0123456789";

/// A model that never answers: every turn asks for a tool nobody has, and reports spending
/// 3000 tokens in and 3000 out.
fn looping_provider() -> Provider {
    Provider::start(
        (0..64)
            .map(|_| {
                Step::func(|_| {
                    let mut v = openai::tool_calls(&[("c1", "no-such-tool", json!({}))]);
                    v["usage"] = json!({"prompt_tokens": 3000, "completion_tokens": 3000, "total_tokens": 6000});
                    Reply::json(v)
                })
            })
            .collect(),
    )
}

/// Installs the model capsule `local/looper@0.1.0` against `provider`, `extra` under `inference:`.
fn install_looper(sb: &Sandbox, provider: &Provider, extra: &str) {
    sb.install_manifest(
        "looper",
        &format!(
            "name: looper\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n{extra}",
            provider.url()
        ),
    );
}

/// `mur run --capsule … args…`, ended by the test after `limit` if it has not ended itself.
fn run_capsule(sb: &Sandbox, args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut cmd = sb.mur(&sb.path("work"));
    cmd.args(["run", "--capsule", "local/looper", "--capsule-version", "0.1.0"])
        .args(args)
        .env(KEY_VAR, KEY)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    Launcher::spawn(cmd).wait(limit)
}

#[test]
fn max_tokens_with_a_lone_capsule_stops_a_looping_model_at_the_budget() {
    let sb = Sandbox::new();
    let provider = looping_provider();
    install_looper(&sb, &provider, "");
    let (code, out, err) = run_capsule(
        &sb,
        &["--task", "loop", "--max-tokens", "20000"],
        Duration::from_secs(60),
    );
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(err.contains("error[E-BUD-002]"), "{err}");
    assert!(
        err.contains("(--max-tokens: 20000)"),
        "names the flag that set it: {err}"
    );
    // Each turn spends 6000: the fourth still fits its reservation, the fifth cannot.
    let sent = provider.requests().len();
    assert!((3..=5).contains(&sent), "{sent} turns sent under a 20000-token budget");
}

#[test]
fn deadline_with_a_lone_capsule_ends_the_session() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![Step::func(|_| {
        Reply::json(openai::text("late")).delayed(Duration::from_secs(30))
    })]);
    install_looper(&sb, &provider, "");
    let started = std::time::Instant::now();
    let (code, out, err) = run_capsule(&sb, &["--task", "slow", "--deadline", "2"], Duration::from_secs(25));
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}: {err}",
        started.elapsed()
    );
}

#[test]
fn lone_capsule_limits_that_cannot_hold_are_refused() {
    let sb = Sandbox::new();
    let provider = looping_provider();
    install_looper(&sb, &provider, "");
    let (code, _, err) = run_capsule(&sb, &["--task", "x", "--max-tokens", "-3"], Duration::from_secs(20));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E-BUD-003]"), "{err}");
    let (code, _, err) = run_capsule(
        &sb,
        &["--task", "x", "--deadline", "99999999999"],
        Duration::from_secs(20),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--deadline"), "{err}");
    assert!(provider.requests().is_empty(), "nothing sent");
}

/// Installs `local/looper` with `endpoint` as written (no provider of ours behind it maybe).
fn install_at(sb: &Sandbox, endpoint: &str) {
    sb.install_manifest(
        "looper",
        &format!(
            "name: looper\nversion: 0.1.0\ninference:\n  provider: openai-compatible\n  endpoint: {endpoint}\n  model: local-model\n  \
             api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n"
        ),
    );
}

#[test]
fn a_local_model_server_that_is_not_running_is_named_at_once_with_what_to_do() {
    let sb = Sandbox::new();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    install_at(&sb, &format!("http://127.0.0.1:{port}"));
    let started = std::time::Instant::now();
    let (code, out, err) = run_capsule(&sb, &["--task", "hi"], Duration::from_secs(30));
    assert_eq!(code, 1, "{out}\n{err}");
    // No 15 s of retries: one refused dial ends it.
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert!(
        err.contains(&format!("no reply from http://127.0.0.1:{port}/v1/chat/completions: ")),
        "names the URL: {err}"
    );
    assert!(err.contains("nothing listens there; start the model server"), "{err}");
}

#[test]
fn an_endpoint_copied_with_its_api_path_is_not_doubled_and_a_wrong_path_is_named() {
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        Step::func(|r| match r.path.as_str() {
            "/v1/chat/completions" => Reply::json(openai::text("hello from the right path")),
            other => Reply::status(404, &format!("no route {other}")),
        }),
        Reply::status(404, "Not Found").into(),
    ]);
    install_at(&sb, &format!("{}/v1/chat/completions", provider.url()));
    let (code, out, err) = run_capsule(&sb, &["--task", "hi"], Duration::from_secs(30));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("hello from the right path"), "{out}");

    // A server whose path is elsewhere: the failure says which URL was asked, and what to check.
    let (code, _, err) = run_capsule(&sb, &["--task", "hi"], Duration::from_secs(30));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "inference failed: 404 Not Found \u{2014} POST {}/v1/chat/completions is not an API path of this server: inference.endpoint should be the server's base URL",
            provider.url()
        )),
        "{err}"
    );
}

/// A model turn that asks for a tool nobody has, reporting `tokens` spent (half in, half out).
fn looping_turn(tokens: u64) -> Reply {
    let mut v = openai::tool_calls(&[("c1", "no-such-tool", json!({}))]);
    v["usage"] = json!({"prompt_tokens": tokens / 2, "completion_tokens": tokens / 2, "total_tokens": tokens});
    Reply::json(v)
}

#[test]
fn a_looping_model_run_alone_without_limits_is_stopped_by_the_default_guard_shown_at_launch() {
    let sb = Sandbox::new();
    let provider = looping_provider();
    install_looper(&sb, &provider, "");
    let (code, out, err) = run_capsule(&sb, &["--task", "loop"], Duration::from_secs(120));
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains(
            "guard: model turns per task: 50 (the default; raise with --max-turns N, lift with --max-turns unlimited); \
             tokens per session: 1000000 (the default"
        ),
        "the guard is shown at launch: {err}"
    );
    assert!(err.contains("error[E-BUD-005]"), "{err}");
    assert!(err.contains("(the default guard: 50 model turns per task)"), "{err}");
    assert_eq!(provider.requests().len(), 50, "{err}");
}

#[test]
fn max_turns_narrows_the_turns_and_unlimited_lifts_only_the_default() {
    let sb = Sandbox::new();
    let provider = looping_provider();
    install_looper(&sb, &provider, "");
    let (code, out, err) = run_capsule(&sb, &["--task", "loop", "--max-turns", "3"], Duration::from_secs(60));
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(err.contains("guard: model turns per task: 3 (--max-turns)"), "{err}");
    assert!(
        err.contains("error[E-BUD-005]: the model asked for a tool call after its last turn (--max-turns: 3)"),
        "{err}"
    );
    assert_eq!(provider.requests().len(), 3, "{err}");

    // The capsule's own limit holds under `unlimited`.
    let sb = Sandbox::new();
    let provider = looping_provider();
    install_looper(&sb, &provider, "  max_turns: 2\n");
    let (code, out, err) = run_capsule(
        &sb,
        &[
            "--task",
            "loop",
            "--max-turns",
            "unlimited",
            "--max-tokens",
            "unlimited",
        ],
        Duration::from_secs(60),
    );
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("guard: model turns per task: 2 (inference.max_turns); tokens per session: unlimited (--max-tokens unlimited)"),
        "{err}"
    );
    assert!(err.contains("(inference.max_turns: 2)"), "{err}");
    assert_eq!(provider.requests().len(), 2, "{err}");

    let (code, _, err) = run_capsule(&sb, &["--task", "x", "--max-turns", "0"], Duration::from_secs(20));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E-BUD-003]: --max-turns '0' is zero"), "{err}");
    assert_eq!(provider.requests().len(), 2, "nothing more sent");
}

#[test]
fn the_default_token_guard_stops_a_lone_model_and_unlimited_lifts_it() {
    // 300 000 tokens a turn: the fourth turn still fits its reservation, the fifth cannot.
    let turns = || Provider::start((0..8).map(|_| Step::func(|_| looping_turn(300_000))).collect());
    let sb = Sandbox::new();
    let provider = turns();
    install_looper(&sb, &provider, "");
    let (code, out, err) = run_capsule(&sb, &["--task", "loop"], Duration::from_secs(60));
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(err.contains("error[E-BUD-002]"), "{err}");
    assert!(
        err.contains("(the default guard: 1000000)"),
        "names the default guard: {err}"
    );
    assert_eq!(provider.requests().len(), 4, "{err}");

    let sb = Sandbox::new();
    let provider = turns();
    install_looper(&sb, &provider, "");
    let (code, out, err) = run_capsule(
        &sb,
        &["--task", "loop", "--max-tokens", "unlimited", "--max-turns", "6"],
        Duration::from_secs(60),
    );
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(!err.contains("E-BUD-002"), "no token budget: {err}");
    assert!(err.contains("(--max-turns: 6)"), "{err}");
    assert_eq!(provider.requests().len(), 6, "{err}");
}

#[test]
fn a_model_formation_launched_without_limits_keeps_the_default_budget_and_mur_ps_shows_its_spend() {
    let sb = Sandbox::new();
    // Two turns of 6000 tokens, then a third the provider holds, so the formation is seen running.
    let provider = Provider::start(vec![
        Step::func(|_| looping_turn(6000)),
        Step::func(|_| looping_turn(6000)),
        Step::func(|_| looping_turn(6000).delayed(Duration::from_secs(60))),
    ]);
    install_looper(&sb, &provider, "");
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/looper\n    version: 0.1.0\n    entry: true\n",
    )
    .expect("roster");
    let launcher = Launcher::start(&sb, &dir, &["--task", "loop"], &[(KEY_VAR, KEY)]);
    let mut ps = String::new();
    let seen = crate::support::wait_until(Duration::from_secs(60), || {
        ps = crate::support::stdout(&sb.run(&dir, &["ps"]));
        ps.contains("tokens 12000 of 1000000")
    });
    assert!(seen.is_some(), "mur ps:\n{ps}\nstderr:\n{}", launcher.stderr());
    assert!(
        launcher
            .stderr()
            .contains("[mur run] guard: model turns per task: 50 (the default; raise with --max-turns N, lift with --max-turns unlimited); tokens per formation: 1000000 (the default"),
        "{}",
        launcher.stderr()
    );
}

#[test]
fn retries_are_shown_on_a_terminal_as_they_happen_and_not_on_a_pipe() {
    let busy = || Reply::status(503, r#"{"error":{"message":"overloaded"}}"#);
    let sb = Sandbox::new();
    let provider = Provider::start(vec![
        busy().into(),
        Reply::json(openai::text("done")).into(),
        busy().into(),
        Reply::json(openai::text("done")).into(),
    ]);
    install_looper(&sb, &provider, "");
    let command = || {
        let mut cmd = sb.mur(&sb.path("work"));
        cmd.args([
            "run",
            "--capsule",
            "local/looper",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ])
        .env(KEY_VAR, KEY)
        .env("MURMUR_TEST_TIMING", "inference_retry=10ms");
        cmd
    };
    let mut term = crate::terminal::OnTerminal::start(command());
    assert_eq!(term.wait(Duration::from_secs(60)), 0, "{}", term.output());
    assert!(
        term.output()
            .contains("[capsule-runtime] the model provider answered 503; retry 1 in "),
        "{}",
        term.output()
    );
    let out = command().stdin(std::process::Stdio::null()).output().expect("mur run");
    let err = crate::support::stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("retry 1 in"), "a pipe gets the trace only: {err}");
    assert_eq!(provider.requests().len(), 4);
}
