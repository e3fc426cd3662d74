//! `mur deploy --kubernetes` through the real binary: every object it writes valid under the
//! official Kubernetes schemas (strict, oldest and newest supported release, checked in
//! [`deploy`] and on `-o DIR` files), admission refusals identical to `mur run --roster`, NetworkPolicies that carry exactly the admitted edges, Secrets that carry only their
//! own member's tokens, YAML that round-trips through the typed structs, one snapshot per sample
//! roster, the terminal refusal (on a real pty), owner-only files, and the member pods' own
//! command lines running the demo formation to its answer on 127.0.0.1.
//!
//! Snapshots: formation ids and uids are fixed with `--formation-id`/`--formation-uid`; the
//! signing key is drawn fresh on every run (there is no seed to fix it, on purpose), so each
//! Secret is decoded, its tokens are verified, and the verify key and tokens are replaced by
//! placeholders before comparing. Refresh with `MUR_UPDATE_SNAPSHOTS=1 cargo test --workspace
//! --test it -- deploy::`.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use mur::channel::{FirstLine, parse_address_line};
use mur::token::{self, Verdict, VerifyKey};

use crate::support::{self, Sandbox, kubernetes, stderr, stdout, wait_until};

pub(crate) const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const UID: &str = "2f0c6c4e-3d1a-4b7e-9d52-6a1f0e8b7c39";
pub(crate) const IMAGE: &str = "registry.example/mur-formation:1";

/// The full manifests' arguments after `--roster DIR`.
fn full_args() -> Vec<&'static str> {
    vec![
        "--kubernetes",
        "--namespace",
        "agents",
        "--image",
        IMAGE,
        "--formation-id",
        FRM,
        "--formation-uid",
        UID,
    ]
}

const RULES: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/echo
    version: 0.1.0
    entry: true
  - name: worker
    capsule: local/echo
    version: 0.1.0
  - name: helper
    capsule: local/echo
    version: 0.1.0
reachability:
  - from: lead
    to: [worker, helper]
  - from: worker
    to: [helper]
";

const ALL: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/echo
    version: 0.1.0
    entry: true
  - name: one
    capsule: local/echo
    version: 0.1.0
  - name: two
    capsule: local/echo
    version: 0.1.0
reachability: all
";

const NO_EDGES: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/echo
    version: 0.1.0
    entry: true
  - name: crash
    capsule: local/trap
    version: 0.1.0
";

/// A sandbox with echo and trap installed globally and a formation directory per roster.
fn sandbox(rosters: &[(&str, &str)]) -> Sandbox {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_actor("trap");
    for (name, text) in rosters {
        std::fs::write(sb.path(name).join("roster.yaml"), text).expect("write roster");
    }
    sb
}

/// `mur deploy --roster DIR …`. Every object it writes to stdout is held against the official
/// Kubernetes schemas (strict, oldest and newest supported release) before the test reads it, so
/// no deploy test can pass on an object the API server would refuse.
fn deploy(sb: &Sandbox, dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["deploy", "--roster", dir.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    // Keys in the environment, as a user's shell would hold them: nothing written may show one.
    let o = sb
        .mur(sb.dir.path())
        .args(&args)
        .envs(KEY_VARS.iter().map(|v| (*v, KEY_VALUE)))
        .output()
        .expect("run mur deploy");
    for (what, text) in [("stdout", stdout(&o)), ("stderr", stderr(&o))] {
        assert!(!text.contains(KEY_VALUE), "a key's value reached {what}");
    }
    if o.status.success() && !o.stdout.is_empty() {
        kubernetes::assert_valid(&stdout(&o));
    }
    o
}

/// The key variables the model formation's manifests name, and the value each holds in the
/// environment of every `mur deploy` run.
const KEY_VARS: [&str; 3] = ["OPENAI_API_KEY", "TOOLS_KEY", "REMOTE_KEY"];
const KEY_VALUE: &str = "sk-never-written-9f3a7c";

/// One manifest object, read back into the type its `kind` names.
#[derive(Clone, PartialEq)]
pub(crate) enum Obj {
    ConfigMap(ConfigMap),
    NetworkPolicy(NetworkPolicy),
    Secret(Secret),
    Service(Service),
    Deployment(Deployment),
    Job(Job),
}

impl Obj {
    fn yaml(&self) -> String {
        match self {
            Obj::ConfigMap(o) => serde_yaml_ng::to_string(o),
            Obj::NetworkPolicy(o) => serde_yaml_ng::to_string(o),
            Obj::Secret(o) => serde_yaml_ng::to_string(o),
            Obj::Service(o) => serde_yaml_ng::to_string(o),
            Obj::Deployment(o) => serde_yaml_ng::to_string(o),
            Obj::Job(o) => serde_yaml_ng::to_string(o),
        }
        .expect("serialise")
    }
}

/// Splits a `---` stream into documents and reads each into its typed struct.
fn parse_stream(text: &str) -> Vec<(String, Obj)> {
    assert!(
        text.starts_with("---\n"),
        "a stream starts with ---: {}",
        &text[..text.len().min(80)]
    );
    text.split("---\n")
        .skip(1)
        .map(|doc| (doc.to_string(), parse_doc(doc)))
        .collect()
}

fn parse_doc(doc: &str) -> Obj {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).expect("YAML");
    let kind = v.get("kind").and_then(|k| k.as_str()).expect("kind").to_string();
    let typed = match kind.as_str() {
        "ConfigMap" => serde_yaml_ng::from_value(v).map(Obj::ConfigMap),
        "NetworkPolicy" => serde_yaml_ng::from_value(v).map(Obj::NetworkPolicy),
        "Secret" => serde_yaml_ng::from_value(v).map(Obj::Secret),
        "Service" => serde_yaml_ng::from_value(v).map(Obj::Service),
        "Deployment" => serde_yaml_ng::from_value(v).map(Obj::Deployment),
        "Job" => serde_yaml_ng::from_value(v).map(Obj::Job),
        other => panic!("unexpected kind {other}"),
    };
    typed.unwrap_or_else(|e| panic!("{kind} does not read as its struct: {e}"))
}

pub(crate) fn full(sb: &Sandbox, dir: &Path, extra: &[&str]) -> Vec<(String, Obj)> {
    let mut args = full_args();
    args.extend_from_slice(extra);
    let o = deploy(sb, dir, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    parse_stream(&stdout(&o))
}

/// The admitted edges as `mur doctor --json` reports them.
fn admitted_edges(sb: &Sandbox, dir: &Path) -> BTreeSet<(String, String)> {
    let o = sb.run(dir, &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("doctor json");
    v["roster"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (
                e["from"].as_str().expect("from").to_string(),
                e["to"].as_str().expect("to").to_string(),
            )
        })
        .collect()
}

/// The member a label selector picks in this formation, if it picks exactly one member's pods.
fn selected_member(sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>) -> Option<String> {
    let labels = sel?.match_labels.as_ref()?;
    if labels.get("murmur.nexus/formation").map(String::as_str) != Some(FRM) {
        return None;
    }
    labels.get("murmur.nexus/member").cloned()
}

/// `(caller, callee)` pairs that the NetworkPolicies let reach a member's door, derived here
/// independently of the code that wrote them. Pods carry a member label, so a peer without one
/// (the operator) is not a member edge.
fn policy_edges(objs: &[(String, Obj)]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (_, o) in objs {
        let Obj::NetworkPolicy(p) = o else { continue };
        let spec = p.spec.as_ref().expect("spec");
        // Egress policies admit nothing in; `egress_edges` reads them.
        if spec.policy_types.as_deref() == Some(&["Egress".to_string()][..]) {
            continue;
        }
        assert_eq!(spec.policy_types.as_deref(), Some(&["Ingress".to_string()][..]));
        let Some(callee) = selected_member(spec.pod_selector.as_ref()) else {
            // Only the default deny selects more than one member: it must admit nothing.
            assert_eq!(
                spec.ingress.as_deref(),
                Some(&[][..]),
                "a formation-wide policy admits nothing"
            );
            continue;
        };
        for rule in spec.ingress.iter().flatten() {
            for peer in rule.from.iter().flatten() {
                assert!(peer.namespace_selector.is_none() && peer.ip_block.is_none());
                match selected_member(peer.pod_selector.as_ref()) {
                    Some(caller) => {
                        out.insert((caller, callee.clone()));
                    }
                    None => {
                        let l = peer
                            .pod_selector
                            .as_ref()
                            .and_then(|s| s.match_labels.clone())
                            .unwrap_or_default();
                        assert_eq!(
                            l.get("murmur.nexus/role").map(String::as_str),
                            Some("operator"),
                            "{l:?}"
                        );
                    }
                }
            }
        }
    }
    out
}

/// The schema check itself: it refuses what an API server would (a mistyped field, a field the
/// kind does not have) for each version, so a deploy test passing it means something; and the
/// versions it checks are the ones docs/kubernetes.md claims.
#[test]
fn the_schema_check_refuses_objects_the_api_server_would() {
    let sb = sandbox(&[("rules", RULES)]);
    let o = deploy(&sb, &sb.path("rules"), &full_args());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let good = stdout(&o);
    let [oldest, newest] = kubernetes::versions();
    assert_ne!(oldest, newest, "docs/kubernetes.md claims a range");
    let bad = [
        good.replacen("replicas: 1\n", "replicas: one\n", 1),
        good.replacen("  namespace: agents\n", "  namespace: agents\n  colour: blue\n", 1),
    ];
    for (n, b) in bad.iter().enumerate() {
        assert_ne!(*b, good, "case {n} planted nothing");
        for v in [&oldest, &newest] {
            let e = kubernetes::check(b, v).expect_err(&format!("case {n} passed {v}"));
            assert!(e.contains("did not validate"), "{e}");
        }
    }
}

/// `(caller, callee)` pairs whose doors the egress policies let a caller's pods reach: each
/// egress policy selects one member, and each rule's pod selectors name its callees.
fn egress_edges(objs: &[(String, Obj)]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (_, o) in objs {
        let Obj::NetworkPolicy(p) = o else { continue };
        let spec = p.spec.as_ref().expect("spec");
        if spec.policy_types.as_deref() != Some(&["Egress".to_string()][..]) {
            continue;
        }
        let caller = selected_member(spec.pod_selector.as_ref()).expect("an egress policy selects one member");
        for rule in spec.egress.iter().flatten() {
            for peer in rule.to.iter().flatten() {
                if let Some(callee) = selected_member(peer.pod_selector.as_ref()) {
                    out.insert((caller.clone(), callee));
                }
            }
        }
    }
    out
}

#[test]
fn network_policies_carry_exactly_the_admitted_edges() {
    let sb = sandbox(&[("rules", RULES), ("all", ALL), ("none", NO_EDGES)]);
    let mut sizes = Vec::new();
    for name in ["rules", "all", "none"] {
        let dir = sb.path(name);
        let admitted = admitted_edges(&sb, &dir);
        for task in [&[][..], &["--task", "hello"][..]] {
            let objs = full(&sb, &dir, task);
            assert_eq!(policy_edges(&objs), admitted, "{name} {task:?}");
            assert_eq!(egress_edges(&objs), admitted, "{name} {task:?}: egress");
        }
        sizes.push(admitted.len());
    }
    // `all` among three echoes: lead calls both, and the two peers call each other.
    assert_eq!(sizes, vec![3, 4, 0]);
}

/// Every Secret's channel, by member.
fn channels(objs: &[(String, Obj)]) -> BTreeMap<String, String> {
    objs.iter()
        .filter_map(|(_, o)| match o {
            Obj::Secret(s) => {
                let member = s.metadata.labels.as_ref()?.get("murmur.nexus/member")?.clone();
                let data = s.data.as_ref().expect("data");
                assert_eq!(data.len(), 1, "a Secret holds only the channel");
                let ByteString(bytes) = &data["channel"];
                Some((member, String::from_utf8(bytes.clone()).expect("utf-8")))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn no_secret_carries_another_members_tokens() {
    let sb = sandbox(&[("all", ALL), ("rules", RULES)]);
    for name in ["all", "rules"] {
        let dir = sb.path(name);
        let admitted = admitted_edges(&sb, &dir);
        let objs = full(&sb, &dir, &[]);
        let chans = channels(&objs);
        assert_eq!(
            chans.keys().cloned().collect::<Vec<_>>().len(),
            3,
            "{name}: one Secret per member"
        );
        let mut keys = BTreeSet::new();
        let mut seen_tokens = BTreeSet::new();
        let mut edges = BTreeSet::new();
        for (member, text) in &chans {
            let first = FirstLine::parse(text.lines().next().expect("first line")).expect("first line reads");
            assert_eq!(first.member, *member);
            assert_eq!(first.formation_id, FRM);
            let vk = VerifyKey::from_b64(&first.verify_key).expect("verify key");
            keys.insert(first.verify_key.clone());
            for call in &first.calls {
                // Issued to this member, for that callee, and to nobody else.
                assert_eq!(
                    token::verify(&vk, call.token.reveal(), FRM, &call.name),
                    Verdict::Member { from: member.clone() }
                );
                assert!(
                    seen_tokens.insert(call.token.reveal().to_string()),
                    "a token appears in two Secrets"
                );
                edges.insert((member.clone(), call.name.clone()));
            }
            for other in chans.keys().filter(|o| *o != member) {
                assert!(!text.contains(&format!("\"member\":\"{other}\"")));
            }
        }
        assert_eq!(keys.len(), 1, "{name}: one formation key");
        assert_eq!(edges, admitted, "{name}: the tokens are exactly the admitted edges");
        // Each pod mounts its own Secret and none other.
        for (_, o) in &objs {
            let (labels, spec) = match o {
                Obj::Deployment(d) => (
                    &d.metadata.labels,
                    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap(),
                ),
                Obj::Job(j) => (
                    &j.metadata.labels,
                    j.spec.as_ref().unwrap().template.spec.as_ref().unwrap(),
                ),
                _ => continue,
            };
            let member = &labels.as_ref().unwrap()["murmur.nexus/member"];
            let mounted: Vec<String> = spec
                .volumes
                .iter()
                .flatten()
                .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
                .collect();
            assert_eq!(mounted, vec![format!("{member}-4f5061728394-channel")]);
            assert_eq!(spec.automount_service_account_token, Some(false));
        }
    }
}

#[test]
fn the_output_round_trips_through_the_typed_structs() {
    let sb = sandbox(&[("rules", RULES)]);
    let dir = sb.path("rules");
    for extra in [
        &[][..],
        &["--task", "a task: with 'quotes'\nand a second line", "--deadline", "60"][..],
    ] {
        let mut args = full_args();
        args.extend_from_slice(extra);
        let o = deploy(&sb, &dir, &args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let text = stdout(&o);
        let objs = parse_stream(&text);
        assert!(objs.len() >= 10, "{}", objs.len());
        let mut again = String::new();
        for (doc, obj) in &objs {
            let yaml = obj.yaml();
            assert_eq!(yaml, *doc);
            // And once more through the struct: a fixed point.
            assert!(parse_doc(&yaml) == *obj);
            again.push_str("---\n");
            again.push_str(&yaml);
        }
        assert_eq!(again, text);
    }
}

/// The Secret's channel with the verify key and tokens replaced by placeholders (after checking
/// them), as `stringData` so a snapshot shows it.
fn normalised(objs: &[(String, Obj)]) -> String {
    let mut out = String::new();
    for (_, o) in objs {
        let o = match o {
            Obj::Secret(s) => {
                let mut s = s.clone();
                let ByteString(bytes) = &s.data.as_ref().expect("data")["channel"];
                let text = String::from_utf8(bytes.clone()).expect("utf-8");
                let first = FirstLine::parse(text.lines().next().expect("line")).expect("first line");
                assert_eq!(first.check_tokens(), Ok(()));
                let mut shown = text.replace(&first.verify_key, "<verify key>");
                for c in &first.calls {
                    shown = shown.replace(c.token.reveal(), &format!("<mft1 {}→{}>", first.member, c.name));
                }
                s.data = None;
                s.string_data = Some(BTreeMap::from([("channel".to_string(), shown)]));
                Obj::Secret(s)
            }
            other => other.clone(),
        };
        out.push_str("---\n");
        out.push_str(&o.yaml());
    }
    out
}

fn snapshot(name: &str, actual: &str) {
    let path = support::repo_root()
        .join("tests/it/snapshots/deploy")
        .join(format!("{name}.yaml"));
    if std::env::var_os("MUR_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; write it with MUR_UPDATE_SNAPSHOTS=1", path.display()));
    if want != actual {
        let line = want
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  snapshot: {:?}\n  output:   {:?}\nrefresh with MUR_UPDATE_SNAPSHOTS=1 if the change is meant",
            path.display(),
            line + 1,
            want.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// Installs the demo formation's members (as `mur demo` builds them) into the sandbox's global
/// store and writes its roster; returns the formation directory.
pub(crate) fn demo_formation(sb: &Sandbox) -> PathBuf {
    for m in ["planner", "analyst", "writer"] {
        sb.install_actor(&format!("demo/{m}"));
    }
    let dir = sb.path("demo");
    std::fs::copy(
        support::repo_root().join("actors/demo/roster.yaml"),
        dir.join("roster.yaml"),
    )
    .expect("roster");
    dir
}

#[test]
fn snapshots_of_the_sample_rosters() {
    let sb = sandbox(&[("rules", RULES), ("all", ALL), ("none", NO_EDGES)]);
    let demo = demo_formation(&sb);
    let cases: Vec<(&str, PathBuf, Vec<&str>)> = vec![
        ("demo", demo, vec!["--task", "Count these words."]),
        ("rules", sb.path("rules"), vec![]),
        ("all", sb.path("all"), vec!["--task", "hello", "--deadline", "300"]),
        ("none", sb.path("none"), vec![]),
    ];
    for (name, dir, extra) in cases {
        let objs = full(&sb, &dir, &extra);
        snapshot(name, &normalised(&objs));
    }
}

#[test]
fn the_first_step_writes_only_the_formation_object() {
    let sb = sandbox(&[("rules", RULES)]);
    let dir = sb.path("rules");
    let o = deploy(&sb, &dir, &["--kubernetes", "--namespace", "agents"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let objs = parse_stream(&stdout(&o));
    assert_eq!(objs.len(), 1);
    let Obj::ConfigMap(cm) = &objs[0].1 else {
        panic!("not the formation object")
    };
    let name = cm.metadata.name.clone().expect("name");
    let id = name.replacen("frm-", "frm_", 1);
    assert!(mur::ids::check(mur::ids::IdKind::Formation, &id).is_ok(), "{name}");
    assert_eq!(cm.metadata.owner_references, None);
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "--formation-id {id} --formation-uid \"$(kubectl get configmap {name} --namespace agents -o jsonpath='{{.metadata.uid}}')\""
        )),
        "{err}"
    );
    assert!(!stdout(&o).contains("mft1"), "no credential in the first step");
}

#[test]
fn admission_refusals_are_those_of_run_roster() {
    let sb = sandbox(&[
        ("ok", RULES),
        (
            "missing",
            &RULES.replace(
                "local/echo\n    version: 0.1.0\n  - name: helper",
                "local/nope\n    version: 0.1.0\n  - name: helper",
            ),
        ),
        ("to-entry", &RULES.replace("to: [helper]", "to: [lead]")),
        ("bad-yaml", "roster_version: 1\nmembers: [\n"),
        (
            "two-entries",
            &RULES.replace(
                "  - name: worker\n    capsule: local/echo\n    version: 0.1.0\n",
                "  - name: worker\n    capsule: local/echo\n    version: 0.1.0\n    entry: true\n",
            ),
        ),
    ]);
    let nowhere = sb.dir.path().join("nowhere");
    let cases: Vec<(&str, PathBuf, &str)> = vec![
        ("missing", sb.path("missing"), "E-ROS-007"),
        ("to-entry", sb.path("to-entry"), "E-ROS-008"),
        ("bad-yaml", sb.path("bad-yaml"), "E-ROS-001"),
        ("two-entries", sb.path("two-entries"), "E-ROS-002"),
        ("no roster", nowhere, "E-ROS-001"),
    ];
    for (why, dir, code) in cases {
        let d = deploy(&sb, &dir, &full_args());
        let r = sb.run(sb.dir.path(), &["run", "--roster", dir.to_str().expect("utf-8")]);
        assert_eq!(d.status.code(), Some(1), "{why}: {}", stderr(&d));
        assert_eq!(r.status.code(), Some(1), "{why}: {}", stderr(&r));
        assert!(
            stderr(&d).starts_with(&format!("error[{code}]")),
            "{why}: {}",
            stderr(&d)
        );
        assert_eq!(stderr(&d), stderr(&r), "{why}");
        assert_eq!(stdout(&d), "", "{why}: nothing written");
    }
}

#[test]
fn options_the_cluster_would_refuse() {
    let sb = sandbox(&[("ok", RULES)]);
    let dir = sb.path("ok");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--kubernetes", "--namespace", "Agents"],
            "[mur deploy] error[E-DEP-002]: --namespace 'Agents' is not a Kubernetes namespace name\n  hint: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit\n",
        ),
        (
            vec!["--kubernetes", "--formation-id", FRM, "--formation-uid", "nope"],
            "[mur deploy] error[E-DEP-002]: --formation-uid 'nope' is not an object uid (a lowercase UUID such as 2f0c6c4e-3d1a-4b7e-9d52-6a1f0e8b7c39)\n  hint: read it from the cluster: kubectl get configmap <formation object> -o jsonpath='{.metadata.uid}'\n",
        ),
        (
            vec!["--kubernetes", "--formation-id", "frm_1"],
            "[mur deploy] error[E-DEP-002]: --formation-id 'frm_1' is not a formation id: it needs exactly 32 hex digits after `frm_`, found 1\n  hint: pass the id the first `mur deploy` printed, e.g. frm_0199c4e2f1b7712a9d3e4f5061728394\n",
        ),
    ];
    for (args, want) in cases {
        let o = deploy(&sb, &dir, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&o), want, "{args:?}");
        assert_eq!(stdout(&o), "");
    }
    // Usage errors are clap's: no --kubernetes, --deadline without --task, a uid without an id.
    for args in [
        vec![],
        vec!["--kubernetes", "--deadline", "5"],
        vec!["--kubernetes", "--formation-uid", UID],
    ] {
        let o = deploy(&sb, &dir, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn credentials_are_never_printed_to_a_terminal() {
    let sb = sandbox(&[("ok", RULES)]);
    let dir = sb.path("ok");
    let run_on_pty = |args: &[&str]| -> (Option<i32>, String, String) {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let out = {
            let mut cmd = sb.mur(sb.dir.path());
            cmd.arg("deploy")
                .arg("--roster")
                .arg(&dir)
                .args(args)
                .stdout(Stdio::from(pty.slave))
                .stderr(Stdio::piped());
            // Dropping the command closes this process's copy of the slave.
            cmd.output().expect("run")
        };
        // The child has exited and the slave is closed: the master reads what reached the screen.
        let mut screen = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&pty.master), &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => screen.extend_from_slice(&buf[..n]),
            }
        }
        (
            out.status.code(),
            String::from_utf8_lossy(&screen).into_owned(),
            stderr(&out),
        )
    };
    let (code, screen, err) = run_on_pty(&full_args());
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(screen, "", "nothing reached the terminal");
    assert_eq!(
        err,
        "[mur deploy] error[E-DEP-001]: the manifests hold every member's formation credentials, and stdout is a terminal, so they are not printed\n  hint: pipe them to the cluster (`mur deploy … | kubectl apply -f -`) or write them to owner-only files with -o DIR\n"
    );
    // The first step holds no credential: it may be shown.
    let (code, screen, err) = run_on_pty(&["--kubernetes"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(screen.contains("kind: ConfigMap"), "{screen}");
    kubernetes::assert_valid(&screen.replace("\r\n", "\n"));
}

#[test]
fn output_directory_files_are_owner_only_and_in_apply_order() {
    let sb = sandbox(&[("ok", RULES)]);
    let dir = sb.path("ok");
    let out = sb.dir.path().join("manifests");
    let mut args = full_args();
    args.extend(["-o", out.to_str().expect("utf-8")]);
    let o = deploy(&sb, &dir, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o700);
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names[0], "000-configmap-frm-0199c4e2f1b7712a9d3e4f5061728394.yaml");
    assert_eq!(
        names[1],
        "001-networkpolicy-frm-0199c4e2f1b7712a9d3e4f5061728394-deny.yaml"
    );
    assert_eq!(
        names.last().unwrap(),
        &format!("{:03}-deployment-lead-4f5061728394.yaml", names.len() - 1)
    );
    let mut secrets = 0;
    for n in &names {
        let p = out.join(n);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600,
            "{n}"
        );
        let obj = parse_doc(&std::fs::read_to_string(&p).unwrap());
        secrets += usize::from(matches!(obj, Obj::Secret(_)));
    }
    assert_eq!(secrets, 3);
    kubernetes::assert_valid_dir(&out);
    // A directory holding anything is refused: `kubectl apply -f` would apply it too.
    let again = deploy(&sb, &dir, &args);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).starts_with("[mur deploy] error[E-DEP-003]: the output directory "),
        "{}",
        stderr(&again)
    );
}

// ---------------------------------------------------------------------------------------------
// The pods' own command lines, run here: what each container would execute, with the image's
// paths mapped into the sandbox, the door on 127.0.0.1, and each relay's loopback URL pointed at
// the callee's door directly (the relay forwards bytes, nothing more).

/// A "pod": the member container's process.
struct Pod {
    child: Child,
    port: u16,
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
    }
}

struct Image {
    /// `/opt/murmur`: the store the Dockerfile installs the formation's capsules into.
    store_root: PathBuf,
    root: PathBuf,
}

impl Image {
    /// Installs `zips` as the Dockerfile does: `mur install -g` with HOME=/opt/murmur.
    fn build(sb: &Sandbox, zips: &[PathBuf]) -> Image {
        let root = sb.path("image");
        let store_root = sb.path("image/opt/murmur");
        for z in zips {
            let o = Command::new(support::mur_bin())
                .args(["install", "-g"])
                .arg(z)
                .env("HOME", &store_root)
                .current_dir(&root)
                .output()
                .expect("install");
            assert!(o.status.success(), "{}", stderr(&o));
        }
        Image { store_root, root }
    }

    /// Runs a member container: its command and args with the image's paths mapped.
    fn run(&self, name: &str, c: &Container, channel: &str, task: Option<&str>) -> Child {
        let pod = self.root.join("pods").join(name);
        for d in ["home", "work", "secret", "etc"] {
            std::fs::create_dir_all(pod.join(d)).expect("mkdir");
        }
        let chan = pod.join("secret/channel");
        std::fs::write(&chan, channel).expect("channel");
        let task_file = pod.join("etc/task");
        if let Some(t) = task {
            std::fs::write(&task_file, t).expect("task");
        }
        let command = c.command.clone().expect("command");
        assert_eq!(command[..2], ["/bin/sh".to_string(), "-c".to_string()]);
        let script = command[2]
            .replace("/usr/local/bin/mur", support::mur_bin().to_str().expect("utf-8"))
            .replace("/var/run/murmur/channel", chan.to_str().expect("utf-8"));
        let args: Vec<String> = c
            .args
            .clone()
            .expect("args")
            .into_iter()
            .map(|a| match a.as_str() {
                "/opt/murmur" => self.store_root.display().to_string(),
                "/work" => pod.join("work").display().to_string(),
                // The OS picks the port, as in a pod each door has its own network namespace; a
                // port picked ahead by the test could be taken by another test's door meanwhile.
                "0.0.0.0:8080" => "127.0.0.1".to_string(),
                "/etc/murmur/task" => task_file.display().to_string(),
                _ => a,
            })
            .collect();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script).args(&command[3..]).args(&args);
        cmd.env_clear().env("PATH", "/usr/bin:/bin");
        for e in c.env.iter().flatten() {
            let v = e.value.clone().unwrap_or_default();
            let v = if e.name == "HOME" {
                pod.join("home").display().to_string()
            } else {
                v
            };
            cmd.env(&e.name, v);
        }
        cmd.current_dir(pod.join("work"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pod")
    }
}

/// The port a pod's door bound, from its readiness line; the rest of its stdout is drained.
fn readiness_port(child: &mut Child) -> u16 {
    use std::io::BufRead as _;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("readiness line");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let r: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    let url = r["url"].as_str().expect("url");
    url.strip_prefix("localhost:")
        .and_then(|p| p.parse().ok())
        .expect("localhost:<port>")
}

fn card_answers(port: u16) -> bool {
    ureq::get(&format!("http://127.0.0.1:{port}/.well-known/agent-card.json"))
        .timeout(Duration::from_secs(2))
        .call()
        .is_ok()
}

#[test]
fn the_pods_command_lines_run_the_demo_formation_to_its_answer() {
    let sb = Sandbox::new();
    let dir = demo_formation(&sb);
    let zips: Vec<PathBuf> = ["planner", "analyst", "writer"]
        .iter()
        .map(|m| sb.dir.path().join(format!("src/demo/{m}/demo-{m}-0.1.0.mur.zip")))
        .collect();
    let objs = full(&sb, &dir, &["--task", mur::scaffold::demo::DEFAULT_TASK]);
    // Once the manifests exist, the image holds the capsules; the global store is not needed.
    std::fs::remove_dir_all(sb.home().join(".murmur/artifacts")).expect("forget the global store");
    let image = Image::build(&sb, &zips);
    let chans = channels(&objs);
    let task = objs.iter().find_map(|(_, o)| match o {
        Obj::ConfigMap(cm) => cm.data.as_ref()?.get("task").cloned(),
        _ => None,
    });
    // Doors get their ports from the OS, so a callee starts before its callers and each relay
    // URL (localhost:10000+i) is pointed at the port its callee's door reported.
    let mut ports: BTreeMap<String, u16> = BTreeMap::new();
    let order: Vec<&str> = vec!["planner", "analyst", "writer"];
    let mapped = |text: &str, ports: &BTreeMap<String, u16>| -> Option<String> {
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        if let Some(addr) = lines.get_mut(1) {
            for a in parse_address_line(addr).expect("address line").addresses {
                let i = order.iter().position(|m| *m == a.name).expect("member");
                assert_eq!(a.url, format!("http://localhost:{}", 10000 + i));
                *addr = addr.replace(&a.url, &format!("http://localhost:{}", ports.get(&a.name)?));
            }
        }
        Some(lines.join("\n") + "\n")
    };
    let mut peers: Vec<(String, Container)> = objs
        .iter()
        .filter_map(|(_, o)| match o {
            Obj::Deployment(d) => {
                let spec = d.spec.as_ref()?.template.spec.as_ref()?;
                let member = d.metadata.labels.as_ref()?.get("murmur.nexus/member")?.clone();
                Some((member, spec.containers[0].clone()))
            }
            _ => None,
        })
        .collect();
    let mut pods = Vec::new();
    while !peers.is_empty() {
        let ready = peers
            .iter()
            .position(|(m, _)| mapped(&chans[m], &ports).is_some())
            .expect("a peer whose callees all run");
        let (member, container) = peers.remove(ready);
        let channel = mapped(&chans[&member], &ports).expect("callees run");
        let mut child = image.run(&member, &container, &channel, None);
        let port = readiness_port(&mut child);
        ports.insert(member, port);
        pods.push(Pod { child, port });
    }
    assert_eq!(pods.len(), 2);
    // The readiness probe, then the entry's wait for its callees.
    for p in &pods {
        assert!(
            wait_until(Duration::from_secs(60), || card_answers(p.port)).is_some(),
            "a peer's door did not answer"
        );
    }
    let job = objs
        .iter()
        .find_map(|(_, o)| match o {
            Obj::Job(j) => Some(j.clone()),
            _ => None,
        })
        .expect("the entry's Job");
    let spec = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
    let channel = mapped(&chans["planner"], &ports).expect("the entry's callees run");
    let entry = image.run("planner", &spec.containers[0], &channel, task.as_deref());
    let out = entry.wait_with_output().expect("entry");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text, stderr(&out));
    let (readiness, answer) = text.split_once('\n').expect("readiness line");
    let r: serde_json::Value = serde_json::from_str(readiness).expect("readiness json");
    assert_eq!(r["formation_id"], FRM);
    assert!(r.get("tokens").is_none(), "no operator token in a pod's log");
    // With --json the task's end is one JSON line: the demo's answer, completed.
    let end: serde_json::Value = serde_json::from_str(answer.trim_end()).expect("task end json");
    assert_eq!(end["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(end["answer"].as_str(), Some(crate::demo::DEFAULT_ANSWER.trim_end()));
    drop(pods);
}

// ---------------------------------------------------------------------------------------------
// A model formation, as a new user writes one: a model member with a provider key and an MCP tool,
// a remote member with its own key, and a model member whose endpoint is on this machine's
// loopback.

const MODEL_ROSTER: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/echo
    version: 0.1.0
    entry: true
  - name: model
    capsule: local/model
    version: 0.1.0
  - name: far
    capsule: local/far
    version: 0.1.0
  - name: local
    capsule: local/local
    version: 0.1.0
reachability:
  - from: lead
    to: [model, far, local]
";

const ACCEPT: &str = "exports:\n  peer_tasks:\n    accept: true\nnetwork:\n  authentication:\n    scheme: bearer\n";

fn model_sandbox() -> Sandbox {
    let sb = sandbox(&[("crew", MODEL_ROSTER)]);
    sb.install_manifest(
        "model",
        &format!(
            "name: model\nversion: 0.1.0\ninference:\n  provider: openai\n  model: m\n  api_key: ${{OPENAI_API_KEY}}\n\
             tools:\n  - name: calc\n    mcp: https://tools.example/mcp\n    api_key: ${{TOOLS_KEY}}\n    allow: [add]\n{ACCEPT}"
        ),
    );
    sb.install_manifest(
        "far",
        &format!(
            "name: far\nversion: 0.1.0\nremote:\n  url: https://203.0.113.7:8443/.well-known/agent-card.json\n  api_key: ${{REMOTE_KEY}}\n{ACCEPT}"
        ),
    );
    sb.install_manifest(
        "local",
        &format!(
            "name: local\nversion: 0.1.0\ninference:\n  provider: openai-compatible\n  endpoint: http://127.0.0.1:11434/v1\n  model: m\n  api_key: ${{OPENAI_API_KEY}}\n{ACCEPT}"
        ),
    );
    sb
}

const OLLAMA: &str = "127.0.0.1:11434=ollama.models.svc.cluster.local:11434";

/// The member container of member `name`'s Deployment or Job, and its init containers.
fn member_pod(objs: &[(String, Obj)], name: &str) -> k8s_openapi::api::core::v1::PodSpec {
    objs.iter()
        .find_map(|(_, o)| {
            let (labels, spec) = match o {
                Obj::Deployment(d) => (&d.metadata.labels, d.spec.as_ref()?.template.spec.clone()?),
                Obj::Job(j) => (&j.metadata.labels, j.spec.as_ref()?.template.spec.clone()?),
                _ => return None,
            };
            (labels.as_ref()?.get("murmur.nexus/member")? == name).then_some(spec)
        })
        .unwrap_or_else(|| panic!("no pod for {name}"))
}

/// Each egress rule of member `name` as (its CIDRs, its TCP ports; 0 for every port).
fn egress_of(objs: &[(String, Obj)], name: &str) -> Vec<(Vec<String>, Vec<i32>)> {
    let p = objs
        .iter()
        .find_map(|(_, o)| match o {
            Obj::NetworkPolicy(p) if p.metadata.name.as_deref() == Some(&format!("{name}-4f5061728394-egress")) => {
                Some(p.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no egress policy for {name}"));
    p.spec
        .and_then(|s| s.egress)
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let cidrs =
                r.to.iter()
                    .flatten()
                    .filter_map(|t| t.ip_block.as_ref().map(|b| b.cidr.clone()))
                    .collect();
            let ports = r
                .ports
                .iter()
                .flatten()
                .filter(|p| p.protocol.as_deref() == Some("TCP"))
                .map(|p| match p.port {
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => n,
                    _ => 0,
                })
                .collect();
            (cidrs, ports)
        })
        .collect()
}

#[test]
fn a_loopback_endpoint_is_refused_until_its_cluster_place_is_given() {
    let sb = model_sandbox();
    let dir = sb.path("crew");
    let o = deploy(&sb, &dir, &full_args());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "[mur deploy] error[E-DEP-004]: member 'local': inference.endpoint 'http://127.0.0.1:11434/v1' is on the loopback, which in a pod is the pod itself, not this machine\n  \
         hint: say where that service is in the cluster: --endpoint 127.0.0.1:11434=SERVICE-HOST:PORT (the pod then relays its own 127.0.0.1:11434 to it)\n"
    );
    assert_eq!(stdout(&o), "");
    // The first step refuses too: nothing is applied that step 2 would refuse.
    let o = deploy(&sb, &dir, &["--kubernetes"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    for (bad, why) in [
        ("127.0.0.1:11434", "it needs the form"),
        ("10.0.0.1:11434=ollama:11434", "is not on the loopback"),
        ("127.0.0.1:11434=localhost:80", "is on the loopback"),
        ("127.0.0.1:9=ollama:11434", "no member dials 127.0.0.1:9"),
    ] {
        // The one endpoint the roster needs is given, so only `bad` can be refused.
        let mut args = full_args();
        args.extend(["--endpoint", OLLAMA, "--endpoint", bad]);
        let o = deploy(&sb, &dir, &args);
        assert_eq!(o.status.code(), Some(1), "{bad}");
        assert!(
            stderr(&o).starts_with("[mur deploy] error[E-DEP-004]: "),
            "{bad}: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains(why), "{bad}: {}", stderr(&o));
    }
}

#[test]
fn members_get_their_keys_from_a_named_secret_egress_to_what_they_dial_and_their_limits() {
    let sb = model_sandbox();
    let dir = sb.path("crew");
    let mut args = full_args();
    args.extend(["--endpoint", OLLAMA, "--task", "hello"]);
    let o = deploy(&sb, &dir, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "members read their keys from secret/mur-keys, which mur deploy does not write, under these names: \
             OPENAI_API_KEY (model, local), TOOLS_KEY (model), REMOTE_KEY (far)."
        ),
        "{err}"
    );
    assert!(
        err.contains("kubectl create secret generic mur-keys --namespace agents --from-env-file=FILE"),
        "{err}"
    );
    let objs = parse_stream(&stdout(&o));
    // Each member's container reads exactly its manifest's keys, each from mur-keys.
    for (member, want) in [
        ("lead", vec![]),
        ("model", vec!["OPENAI_API_KEY", "TOOLS_KEY"]),
        ("far", vec!["REMOTE_KEY"]),
        ("local", vec!["OPENAI_API_KEY"]),
    ] {
        let pod = member_pod(&objs, member);
        let refs: Vec<String> = pod.containers[0]
            .env
            .iter()
            .flatten()
            .filter_map(|e| {
                let r = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
                assert_eq!(
                    (r.name.as_str(), r.key.as_str(), r.optional),
                    ("mur-keys", e.name.as_str(), Some(false))
                );
                Some(e.name.clone())
            })
            .collect();
        assert_eq!(refs, want, "{member}");
        // Every container states its requests and a memory limit.
        for c in pod.init_containers.iter().flatten().chain(&pod.containers) {
            let r = c
                .resources
                .as_ref()
                .unwrap_or_else(|| panic!("{member}/{}: no resources", c.name));
            let req = r.requests.as_ref().expect("requests");
            assert!(
                req.contains_key("cpu") && req.contains_key("memory"),
                "{member}/{}",
                c.name
            );
            assert!(
                r.limits.as_ref().is_some_and(|l| l.contains_key("memory")),
                "{member}/{}",
                c.name
            );
        }
    }
    // A component member holds its runtime and a task's linear memory (256 MiB); a model member
    // without WebAssembly tools, its runtime alone.
    let limit = |m: &str| {
        member_pod(&objs, m).containers[0]
            .resources
            .clone()
            .unwrap()
            .limits
            .unwrap()["memory"]
            .0
            .clone()
    };
    assert_eq!(limit("lead"), "384Mi");
    assert_eq!(limit("model"), "128Mi");
    // The loopback endpoint's relay, in the pod that dials it, and nowhere else.
    let local = member_pod(&objs, "local");
    let relay = local
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "to-endpoint-0")
        .expect("relay");
    assert_eq!(relay.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        relay.command.as_deref().expect("command"),
        [
            "socat",
            "TCP-LISTEN:11434,bind=127.0.0.1,fork,reuseaddr",
            "TCP:ollama.models.svc.cluster.local:11434"
        ]
    );
    assert!(
        member_pod(&objs, "model")
            .init_containers
            .iter()
            .flatten()
            .all(|c| !c.name.starts_with("to-endpoint"))
    );
    // Egress: DNS, then what each dials. A name is admitted at its port on any address.
    let any = vec!["0.0.0.0/0".to_string(), "::/0".to_string()];
    let dns = (vec![], vec![53]);
    assert_eq!(egress_of(&objs, "lead"), [dns.clone(), (vec![], vec![8080])]);
    assert_eq!(
        egress_of(&objs, "model"),
        [dns.clone(), (any.clone(), vec![443]), (any.clone(), vec![443])]
    );
    assert_eq!(
        egress_of(&objs, "far"),
        [dns.clone(), (vec!["203.0.113.7/32".to_string()], vec![8443])]
    );
    assert_eq!(egress_of(&objs, "local"), [dns, (any, vec![11434])]);
    // Another Secret name, when asked.
    let mut args = full_args();
    args.extend(["--endpoint", OLLAMA, "--keys-secret", "crew-keys"]);
    let o = deploy(&sb, &dir, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("name: crew-keys") && !stdout(&o).contains("mur-keys"));
}

#[test]
fn a_guarantee_the_cluster_cannot_carry_is_refused_by_name() {
    let sb = sandbox(&[("rules", RULES)]);
    let dir = sb.path("rules");
    for step in [&["--kubernetes"][..], &full_args()[..]] {
        let mut args = step.to_vec();
        args.extend(["--max-tokens", "1000"]);
        let o = deploy(&sb, &dir, &args);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(
            stderr(&o),
            "[mur deploy] error[E-DEP-005]: --max-tokens cannot be carried into the cluster yet: the formation's token budget is kept by the launcher, which counts every member's model turns, and a formation in a cluster has no launcher\n  \
             hint: leave out --max-tokens; a model capsule's own inference.max_session_tokens still bounds each member's session in its pod\n"
        );
        assert_eq!(stdout(&o), "");
    }
}

#[test]
fn a_dry_run_is_the_whole_formation_and_no_server_would_apply_it() {
    let sb = sandbox(&[("rules", RULES)]);
    let dir = sb.path("rules");
    let dry = deploy(
        &sb,
        &dir,
        &[
            "--kubernetes",
            "--namespace",
            "agents",
            "--image",
            IMAGE,
            "--formation-id",
            FRM,
            "--dry-run",
            "--task",
            "hello",
        ],
    );
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(stderr(&dry).contains("for review (--dry-run)"), "{}", stderr(&dry));
    let dry = parse_stream(&stdout(&dry));
    let real = full(&sb, &dir, &["--task", "hello"]);
    let names = |objs: &[(String, Obj)]| -> Vec<String> {
        objs.iter()
            .map(|(d, _)| {
                let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(d).expect("yaml");
                format!(
                    "{}/{}",
                    v["kind"].as_str().unwrap_or(""),
                    v["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    assert_eq!(
        names(&dry),
        names(&real),
        "every object of the full render, in its order"
    );
    for (doc, _) in &dry {
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).expect("yaml");
        let meta = &v["metadata"];
        assert_eq!(meta["resourceVersion"].as_str(), Some("1"), "{doc}");
        assert!(meta["annotations"]["murmur.nexus/dry-run"].is_string(), "{doc}");
        if let Some(owners) = meta["ownerReferences"].as_sequence() {
            for o in owners {
                assert_eq!(o["uid"].as_str(), Some("00000000-0000-0000-0000-000000000000"));
            }
        }
    }
    // Never together with a real owner.
    let o = deploy(&sb, &dir, &[&full_args()[..], &["--dry-run"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
