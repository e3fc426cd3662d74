//! `mur doctor` finds what the launch would refuse (docs/guide.md#limits, docs/reference/codes.md#e-doc-001):
//! an endpoint a member will use that does not answer, named by member and manifest line, without
//! sending it anything; a kind key written wrong; a model capsule missing what its session needs.

use crate::support::provider::{Provider, Reply, Step, openai};
use crate::support::{Sandbox, stderr, stdout};

const KEY_VAR: &str = "MUR_IT_CHECKUP_KEY";

/// A port nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn model_manifest(endpoint: &str) -> String {
    format!(
        "name: lead\nversion: 0.1.0\ninference:\n  provider: openai-compatible\n  endpoint: {endpoint}\n  model: local-model\n  \
         api_key: ${{{KEY_VAR}}}\n  max_tokens: 50\n"
    )
}

/// A formation directory whose one member is `local/lead` installed from `manifest`.
fn formation(sb: &Sandbox, manifest: &str) -> std::path::PathBuf {
    sb.install_manifest("lead", manifest);
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/lead\n    version: 0.1.0\n    entry: true\n",
    )
    .expect("roster");
    dir
}

#[test]
fn doctor_dials_each_model_endpoint_names_member_and_line_and_sends_it_nothing() {
    let sb = Sandbox::new();
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}");
    let dir = formation(&sb, &model_manifest(&url));
    let out = sb
        .mur(&dir)
        .arg("doctor")
        .env(KEY_VAR, "sk-it")
        .output()
        .expect("doctor");
    let (o, e) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{o}\n{e}");
    assert!(
        o.contains(&format!(
            "\u{2717}  roster.yaml: member 'lead' (local/lead@0.1.0): inference.endpoint {url} (murmur.yaml line 5) does not answer: nothing listens at 127.0.0.1:{port} (connection refused), so its model turns would fail"
        )),
        "{o}"
    );
    assert!(e.contains("error[E-DOC-001]"), "{e}");
    assert!(o.contains("Fix: start the server, or correct the URL"), "{o}");

    // --offline skips the dial.
    let out = sb
        .mur(&dir)
        .args(["doctor", "--offline"])
        .env(KEY_VAR, "sk-it")
        .output()
        .expect("doctor");
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));

    // A server that listens passes, and receives no request (so no key).
    let provider = Provider::start(vec![Step::func(|_| Reply::json(openai::text("never asked")))]);
    let sb = Sandbox::new();
    let dir = formation(&sb, &model_manifest(provider.url()));
    let out = sb
        .mur(&dir)
        .arg("doctor")
        .env(KEY_VAR, "sk-it")
        .output()
        .expect("doctor");
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    assert!(provider.requests().is_empty(), "doctor sent a request");
}

#[test]
fn doctor_in_a_member_directory_reports_each_endpoint_and_a_misspelt_kind_with_its_line() {
    let sb = Sandbox::new();
    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}");
    let src = sb.path("lead");
    std::fs::write(src.join("murmur.yaml"), model_manifest(&url)).expect("manifest");
    let out = sb.mur(&src).arg("doctor").output().expect("doctor");
    let (o, e) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{o}\n{e}");
    assert!(
        o.contains(&format!(
            "\u{2717}  inference.endpoint {url} (murmur.yaml line 5) does not answer"
        )),
        "{o}"
    );
    assert!(e.contains("error[E-DOC-001]"), "{e}");

    let provider = Provider::start(vec![]);
    std::fs::write(src.join("murmur.yaml"), model_manifest(provider.url())).expect("manifest");
    let out = sb.mur(&src).arg("doctor").output().expect("doctor");
    let o = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{o}\n{}", stderr(&out));
    assert!(
        o.contains(&format!(
            "\u{2713}  inference.endpoint answers: {} (murmur.yaml line 5)",
            provider.url()
        )),
        "{o}"
    );

    // `infrence:` leaves a capsule with nothing to run: a warning alone let it through before.
    std::fs::write(
        src.join("murmur.yaml"),
        "name: lead\nversion: 0.1.0\ninfrence:\n  provider: openai\n  model: m\n",
    )
    .expect("manifest");
    let out = sb.mur(&src).arg("doctor").output().expect("doctor");
    let (o, e) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{o}\n{e}");
    assert!(
        o.contains("\u{2717}  murmur.yaml line 3: `infrence:` is not a key; `inference:` was meant"),
        "{o}"
    );
    assert!(e.contains("error[E-DOC-002]"), "{e}");

    // A model capsule without inference.model is refused as its session would refuse it.
    std::fs::write(
        src.join("murmur.yaml"),
        format!(
            "name: lead\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n",
            provider.url()
        ),
    )
    .expect("manifest");
    let out = sb.mur(&src).args(["doctor", "--offline"]).output().expect("doctor");
    let (o, e) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{o}\n{e}");
    assert!(e.contains("error[E-RUN-002]"), "{e}");
    assert!(o.contains("\u{2717}  murmur.yaml: "), "{o}");
}
