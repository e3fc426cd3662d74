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
