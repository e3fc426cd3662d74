//! Table-driven tests of the pure deploy planner: edges, credentials, ownership, options.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::*;
use crate::channel::line::parse_address_line;
use crate::token::{self, Verdict};

// The integration suite's schema check, compiled here too from the same files: every object a
// test below renders passes through `manifests` (this module's, which shadows the planner's) and
// is held against the official schemas (tests/it/support/kubernetes.rs).
#[allow(dead_code)]
#[path = "../../tests/it/support/kubernetes.rs"]
mod kubernetes;
#[allow(dead_code)]
#[path = "../../tests/it/support/pins.rs"]
mod pins;
#[allow(dead_code)]
#[path = "../../tests/it/support/python.rs"]
mod python;

fn repo_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The planner's `manifests`, with every object it returns validated against the schemas. Renders
/// that differ only in their Secrets' bytes (a fresh key each time) are validated once: the
/// schema sees a Secret's data as strings whatever they hold.
fn manifests(f: &Formation, o: &Options, key: &SigningKey) -> Result<Manifests, Diagnostic> {
    static SEEN: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());
    let m = super::manifests(f, o, key)?;
    let shape: Vec<Object> = m
        .objects
        .iter()
        .cloned()
        .map(|mut x| {
            if let Object::Secret(s) = &mut x {
                s.data = None;
            }
            x
        })
        .collect();
    let shape = objects::to_yaml_stream(&shape).expect("YAML");
    let first = SEEN.lock().unwrap_or_else(|e| e.into_inner()).insert(shape);
    if first {
        kubernetes::assert_valid(&objects::to_yaml_stream(&m.objects).expect("YAML"));
    }
    Ok(m)
}

const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const UID: &str = "2f0c6c4e-3d1a-4b7e-9d52-6a1f0e8b7c39";

fn member(name: &str, entry: bool) -> Member {
    Member {
        name: name.into(),
        capsule: "local/echo".into(),
        version: "0.1.0".into(),
        sha256: "ab".repeat(32),
        entry,
        endpoints: Vec::new(),
        allowed: Vec::new(),
        keys: Vec::new(),
        memory_mib: RUNTIME_MEMORY_MIB,
        asks: false,
    }
}

/// A formation of `names` (the first is the entry) with `edges` by name.
fn formation(names: &[&str], edges: &[(&str, &str)]) -> Formation {
    let idx = |n: &str| names.iter().position(|m| *m == n).expect("member");
    Formation {
        id: FRM.into(),
        members: names.iter().enumerate().map(|(i, n)| member(n, i == 0)).collect(),
        edges: edges.iter().map(|&(a, b)| (idx(a), idx(b))).collect(),
    }
}

fn options(task: Option<&str>, uid: Option<&str>) -> Options {
    Options {
        namespace: "agents".into(),
        image: "registry.example/mur:1".into(),
        task: task.map(String::from),
        deadline: None,
        owner_uid: uid.map(String::from),
        keys_secret: DEFAULT_KEYS_SECRET.into(),
        endpoint_maps: Vec::new(),
        dry_run: false,
    }
}

fn remote(url: &str) -> Endpoint {
    Endpoint {
        field: "remote.url".into(),
        url: url.into(),
        origin: Origin::of(url).expect("origin"),
    }
}

fn names(f: &Formation) -> BTreeSet<(String, String)> {
    f.edges
        .iter()
        .map(|&(a, b)| (f.members[a].name.clone(), f.members[b].name.clone()))
        .collect()
}

fn policies(objects: &[Object]) -> Vec<NetworkPolicy> {
    objects
        .iter()
        .filter_map(|o| match o {
            Object::NetworkPolicy(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

/// Shapes: `all` among three consenting peers (a cycle), explicit rules, a chain, no edges.
fn shapes() -> Vec<(&'static str, Formation)> {
    vec![
        (
            "all",
            formation(
                &["lead", "a", "b", "c"],
                &[
                    ("lead", "a"),
                    ("lead", "b"),
                    ("lead", "c"),
                    ("a", "b"),
                    ("a", "c"),
                    ("b", "a"),
                    ("b", "c"),
                    ("c", "a"),
                    ("c", "b"),
                ],
            ),
        ),
        (
            "rules",
            formation(
                &["planner", "analyst", "writer"],
                &[("planner", "analyst"), ("planner", "writer"), ("writer", "analyst")],
            ),
        ),
        (
            "chain",
            formation(&["lead", "mid", "tail"], &[("lead", "mid"), ("mid", "tail")]),
        ),
        ("none", formation(&["lead", "solo"], &[])),
        ("alone", formation(&["lead"], &[])),
    ]
}

#[test]
fn network_policies_carry_exactly_the_admitted_edges() {
    for (why, f) in shapes() {
        for task in [None, Some("t")] {
            let key = SigningKey::generate().unwrap();
            let m = manifests(&f, &options(task, Some(UID)), &key).unwrap();
            let ps = policies(&m.objects);
            assert_eq!(policy::edges_of(&ps, FRM), names(&f), "{why}");
            // The default deny comes first and selects every pod of the formation.
            let deny = ps[0].spec.as_ref().unwrap();
            assert_eq!(deny.ingress.as_deref(), Some(&[][..]), "{why}");
            let sel = deny.pod_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
            assert_eq!(sel.len(), 1);
            assert_eq!(sel[LABEL_FORMATION], FRM);
            // One policy per callee, plus the operator's when the entry serves tasks, plus one
            // egress policy per member.
            let callees: BTreeSet<usize> = f.edges.iter().map(|e| e.1).collect();
            assert_eq!(
                ps.len(),
                1 + callees.len() + usize::from(task.is_none()) + f.members.len(),
                "{why}"
            );
            // Egress lets each member reach exactly its callees' pods.
            assert_eq!(egress_edges(&f, &ps), names(&f), "{why}");
        }
    }
}

/// `(caller, callee)` names read back out of the egress policies: the member each selects, and
/// each member whose pods a rule's `to` selects.
fn egress_edges(f: &Formation, ps: &[NetworkPolicy]) -> BTreeSet<(String, String)> {
    let member = |sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector| {
        f.members
            .iter()
            .position(|m| sel.match_labels.as_ref().and_then(|l| l.get(LABEL_MEMBER)) == Some(&m.name))
    };
    let mut out = BTreeSet::new();
    for p in ps {
        let spec = p.spec.as_ref().unwrap();
        if spec.policy_types.as_deref() != Some(&["Egress".to_string()][..]) {
            continue;
        }
        let from = member(spec.pod_selector.as_ref().unwrap()).expect("an egress policy selects one member");
        for rule in spec.egress.iter().flatten() {
            for peer in rule.to.iter().flatten() {
                if let Some(to) = peer.pod_selector.as_ref().and_then(member) {
                    out.insert((f.members[from].name.clone(), f.members[to].name.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn edges_of_ignores_other_formations_and_foreign_selectors() {
    let f = formation(&["lead", "w"], &[("lead", "w")]);
    let key = SigningKey::generate().unwrap();
    let ps = policies(&manifests(&f, &options(None, Some(UID)), &key).unwrap().objects);
    assert!(policy::edges_of(&ps, "frm_0199c4e2f1b7712a9d3e4f5061728395").is_empty());
    // The operator's selector (formation + role) names no member.
    let op: Vec<NetworkPolicy> = ps
        .iter()
        .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.ends_with("-operator")))
        .cloned()
        .collect();
    assert_eq!(op.len(), 1);
    assert!(policy::edges_of(&op, FRM).is_empty());
}

#[test]
fn each_channel_holds_only_its_own_tokens_and_its_callees_addresses() {
    for (why, f) in shapes() {
        let key = SigningKey::generate().unwrap();
        let vk = key.verify_key();
        for (i, m) in f.members.iter().enumerate() {
            let file = channel_file(&f, i, &key);
            let mut lines = file.lines();
            let first = FirstLine::parse(lines.next().unwrap()).unwrap();
            assert_eq!(first.check_tokens(), Ok(()), "{why}/{}", m.name);
            assert_eq!((first.member.as_str(), first.entry), (m.name.as_str(), m.entry));
            assert_eq!(first.formation_id, FRM);
            assert_eq!(first.launcher, None);
            let want: Vec<String> = f.callees(i).iter().map(|&c| f.members[c].name.clone()).collect();
            let got: Vec<String> = first.calls.iter().map(|c| c.name.clone()).collect();
            assert_eq!(got, want, "{why}/{}", m.name);
            for c in &first.calls {
                // Issued to this member for that callee, and refused at any other door.
                assert_eq!(
                    token::verify(&vk, c.token.reveal(), FRM, &c.name),
                    Verdict::Member { from: m.name.clone() }
                );
                for other in f.members.iter().filter(|o| o.name != c.name) {
                    assert_ne!(
                        token::verify(&vk, c.token.reveal(), FRM, &other.name),
                        Verdict::Member { from: m.name.clone() }
                    );
                }
            }
            match lines.next() {
                None => assert!(want.is_empty(), "{why}/{}", m.name),
                Some(l) => {
                    let addrs = parse_address_line(l).unwrap();
                    let got: Vec<(String, String)> = addrs.addresses.into_iter().map(|a| (a.name, a.url)).collect();
                    let expect: Vec<(String, String)> = f
                        .callees(i)
                        .iter()
                        .map(|&c| (f.members[c].name.clone(), format!("http://localhost:{}", 10000 + c)))
                        .collect();
                    assert_eq!(got, expect, "{why}/{}", m.name);
                }
            }
            assert_eq!(
                lines.next(),
                None,
                "{why}/{}: end of file closes the address book",
                m.name
            );
        }
    }
}

#[test]
fn without_an_owner_uid_only_the_formation_object_is_written() {
    let f = formation(&["lead", "w"], &[("lead", "w")]);
    let key = SigningKey::generate().unwrap();
    let m = manifests(&f, &options(Some("t"), None), &key).unwrap();
    assert!(!m.carries_credentials);
    assert_eq!(
        format!("{:?}", m.objects),
        "[ConfigMap/frm-0199c4e2f1b7712a9d3e4f5061728394]"
    );
    let Object::ConfigMap(cm) = &m.objects[0] else {
        unreachable!()
    };
    assert_eq!(cm.metadata.owner_references, None);
    let data = cm.data.as_ref().unwrap();
    assert_eq!(data["task"], "t");
    let facts: serde_json::Value = serde_json::from_str(&data["formation.json"]).unwrap();
    assert_eq!(facts["formation_id"], FRM);
    assert_eq!(facts["edges"], serde_json::json!([{"from": "lead", "to": "w"}]));
    assert_eq!(facts["members"][0]["sha256"], "ab".repeat(32));
}

#[test]
fn every_object_is_owned_by_the_formation_object_and_labelled() {
    for (why, f) in shapes() {
        for task in [None, Some("t")] {
            let key = SigningKey::generate().unwrap();
            let m = manifests(&f, &options(task, Some(UID)), &key).unwrap();
            assert!(m.carries_credentials);
            for (n, o) in m.objects.iter().enumerate() {
                let meta = o.metadata();
                assert_eq!(meta.namespace.as_deref(), Some("agents"), "{why}: {o:?}");
                assert_eq!(meta.labels.as_ref().unwrap()[LABEL_FORMATION], FRM, "{o:?}");
                if n == 0 {
                    assert_eq!(o.kind(), "ConfigMap");
                    assert_eq!(meta.owner_references, None);
                    continue;
                }
                let owners = meta.owner_references.as_ref().unwrap();
                assert_eq!(owners.len(), 1, "{o:?}");
                let own = &owners[0];
                assert_eq!(
                    (
                        own.api_version.as_str(),
                        own.kind.as_str(),
                        own.name.as_str(),
                        own.uid.as_str()
                    ),
                    ("v1", "ConfigMap", "frm-0199c4e2f1b7712a9d3e4f5061728394", UID)
                );
                assert_eq!((own.controller, own.block_owner_deletion), (Some(true), Some(true)));
            }
        }
    }
}

/// Kinds and names in output order.
fn layout(objects: &[Object]) -> Vec<String> {
    objects.iter().map(|o| format!("{o:?}")).collect()
}

#[test]
fn objects_per_member_and_their_order() {
    let f = formation(&["lead", "a", "b"], &[("lead", "a"), ("a", "b")]);
    let key = SigningKey::generate().unwrap();
    let table: Vec<(Option<&str>, Vec<&str>)> = vec![
        (
            Some("t"),
            vec![
                "ConfigMap/frm-0199c4e2f1b7712a9d3e4f5061728394",
                "NetworkPolicy/frm-0199c4e2f1b7712a9d3e4f5061728394-deny",
                "NetworkPolicy/a-4f5061728394-callers",
                "NetworkPolicy/b-4f5061728394-callers",
                "NetworkPolicy/lead-4f5061728394-egress",
                "NetworkPolicy/a-4f5061728394-egress",
                "NetworkPolicy/b-4f5061728394-egress",
                "Secret/lead-4f5061728394-channel",
                "Secret/a-4f5061728394-channel",
                "Secret/b-4f5061728394-channel",
                "Service/a-4f5061728394",
                "Service/b-4f5061728394",
                "Deployment/a-4f5061728394",
                "Deployment/b-4f5061728394",
                "Job/lead-4f5061728394",
            ],
        ),
        (
            None,
            vec![
                "ConfigMap/frm-0199c4e2f1b7712a9d3e4f5061728394",
                "NetworkPolicy/frm-0199c4e2f1b7712a9d3e4f5061728394-deny",
                "NetworkPolicy/a-4f5061728394-callers",
                "NetworkPolicy/b-4f5061728394-callers",
                "NetworkPolicy/lead-4f5061728394-egress",
                "NetworkPolicy/a-4f5061728394-egress",
                "NetworkPolicy/b-4f5061728394-egress",
                "NetworkPolicy/lead-4f5061728394-operator",
                "Secret/lead-4f5061728394-channel",
                "Secret/a-4f5061728394-channel",
                "Secret/b-4f5061728394-channel",
                "Service/lead-4f5061728394",
                "Service/a-4f5061728394",
                "Service/b-4f5061728394",
                "Deployment/a-4f5061728394",
                "Deployment/b-4f5061728394",
                "Deployment/lead-4f5061728394",
            ],
        ),
    ];
    for (task, want) in table {
        let m = manifests(&f, &options(task, Some(UID)), &key).unwrap();
        assert_eq!(layout(&m.objects), want, "task {task:?}");
    }
}

fn pod_spec_of(o: &Object) -> &k8s_openapi::api::core::v1::PodSpec {
    match o {
        Object::Deployment(Deployment { spec: Some(s), .. }) => s.template.spec.as_ref().unwrap(),
        Object::Job(Job { spec: Some(s), .. }) => s.template.spec.as_ref().unwrap(),
        _ => panic!("{o:?} has no pod"),
    }
}

#[test]
fn each_pod_mounts_only_its_own_secret_and_no_api_credentials() {
    for (why, f) in shapes() {
        let key = SigningKey::generate().unwrap();
        let m = manifests(&f, &options(Some("t"), Some(UID)), &key).unwrap();
        for o in m
            .objects
            .iter()
            .filter(|o| matches!(o, Object::Deployment(_) | Object::Job(_)))
        {
            let member = o.metadata().labels.as_ref().unwrap()[LABEL_MEMBER].clone();
            let i = f.members.iter().position(|m| m.name == member).unwrap();
            let spec = pod_spec_of(o);
            assert_eq!(spec.automount_service_account_token, Some(false), "{why}");
            assert_eq!(spec.service_account_name, None);
            let secrets: Vec<&str> = spec
                .volumes
                .iter()
                .flatten()
                .filter_map(|v| v.secret.as_ref()?.secret_name.as_deref())
                .collect();
            assert_eq!(secrets, vec![f.secret_name(i).as_str()], "{why}/{member}");
            let member_c = &spec.containers[0];
            let env: Vec<(String, String)> = member_c
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect();
            assert!(env.contains(&("MURMUR_FORMATION_CHANNEL".into(), "3".into())));
            assert!(env.contains(&("MURMUR_FORMATION_ID".into(), FRM.into())));
            // No credential in argv or env: the Secret is the only carrier.
            for s in member_c.args.iter().flatten().chain(member_c.command.iter().flatten()) {
                assert!(!s.contains("mft1.") && !s.contains("mdt1."), "{s}");
            }
            // One relay per callee, each a native sidecar; the entry also waits for its callees.
            let init = spec.init_containers.clone().unwrap_or_default();
            let relays: Vec<&str> = init
                .iter()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| c.name.as_str())
                .collect();
            let want: Vec<String> = f
                .callees(i)
                .iter()
                .map(|&c| format!("to-{}-door", f.members[c].name))
                .collect();
            assert_eq!(relays, want, "{why}/{member}");
            let waits = init.iter().any(|c| c.name == "wait-for-callees");
            assert_eq!(waits, f.members[i].entry && !want.is_empty(), "{why}/{member}");
        }
    }
}

#[test]
fn member_command_lines() {
    let f = formation(&["lead", "w"], &[("lead", "w")]);
    let common = "run --capsule local/echo --capsule-version 0.1.0 --capsule-sha256 ".to_string()
        + &"ab".repeat(32)
        + " --store-root /opt/murmur --workdir /work --json --bind 0.0.0.0:8080";
    let table: Vec<(usize, Option<&str>, String)> = vec![
        (1, None, common.clone()),
        (1, Some("t"), common.clone()),
        (
            0,
            None,
            format!("{common} --lifecycle-task-acceptance queue --lifecycle-after-task sleep"),
        ),
        (
            0,
            Some("t"),
            format!("{common} --lifecycle-task-acceptance single --lifecycle-after-task exit --task /etc/murmur/task"),
        ),
    ];
    for (i, task, want) in table {
        assert_eq!(objects::member_args(&f, &options(task, None), i).join(" "), want);
    }
    assert_eq!(
        objects::member_command(),
        vec![
            "/bin/sh",
            "-c",
            "exec /usr/local/bin/mur \"$@\" 3</var/run/murmur/channel",
            "mur"
        ]
    );
}

#[test]
fn deadline_is_the_jobs_and_needs_a_task() {
    let f = formation(&["lead"], &[]);
    let key = SigningKey::generate().unwrap();
    let mut o = options(Some("t"), Some(UID));
    o.deadline = Some(90);
    let m = manifests(&f, &o, &key).unwrap();
    let Some(Object::Job(job)) = m.objects.last() else {
        panic!("no job")
    };
    let spec = job.spec.as_ref().unwrap();
    assert_eq!((spec.active_deadline_seconds, spec.backoff_limit), (Some(90), Some(0)));
    assert_eq!(
        spec.template.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    o.task = None;
    let e = manifests(&f, &o, &key).err().unwrap();
    assert_eq!(e.code.id, "E-DEP-002");
}

#[test]
fn options_the_cluster_would_refuse_are_refused_first() {
    let f = formation(&["lead", "w"], &[("lead", "w")]);
    type Change = Box<dyn Fn(&mut Formation, &mut Options)>;
    let table: Vec<(&str, Change, &str)> = vec![
        (
            "upper-case namespace",
            Box::new(|_, o| o.namespace = "Agents".into()),
            "--namespace 'Agents' is not a Kubernetes namespace name",
        ),
        (
            "empty namespace",
            Box::new(|_, o| o.namespace = String::new()),
            "--namespace '' is not a Kubernetes namespace name",
        ),
        (
            "long namespace",
            Box::new(|_, o| o.namespace = "a".repeat(64)),
            "is not a Kubernetes namespace name",
        ),
        (
            "namespace ending in -",
            Box::new(|_, o| o.namespace = "a-".into()),
            "--namespace 'a-' is not",
        ),
        (
            "image with a space",
            Box::new(|_, o| o.image = "mur 1".into()),
            "--image 'mur 1' is not a container image reference",
        ),
        (
            "empty image",
            Box::new(|_, o| o.image = String::new()),
            "--image '' is not",
        ),
        (
            "uid not a uuid",
            Box::new(|_, o| o.owner_uid = Some("abc".into())),
            "--formation-uid 'abc' is not an object uid",
        ),
        (
            "upper-case uid",
            Box::new(|_, o| o.owner_uid = Some(UID.to_uppercase())),
            "is not an object uid",
        ),
        (
            "bad formation id",
            Box::new(|f, _| f.id = "frm_x".into()),
            "--formation-id 'frm_x' is not a formation id",
        ),
        (
            "member ending in -",
            Box::new(|f, _| f.members[1].name = "w-".into()),
            "member 'w-' ends in '-', which a Kubernetes label value cannot",
        ),
    ];
    for (why, change, want) in table {
        let (mut f, mut o) = (f.clone(), options(None, Some(UID)));
        change(&mut f, &mut o);
        let e = check(&f, &o).err().unwrap_or_else(|| panic!("{why}: admitted"));
        assert_eq!(e.code.id, "E-DEP-002", "{why}");
        assert!(e.message.contains(want), "{why}: {}", e.message);
        assert!(e.hint().is_some(), "{why}");
    }
    assert_eq!(check(&f, &options(None, Some(UID))), Ok(()));
}

/// Reads one document back into the type its `kind` names.
fn parse(doc: &str) -> Object {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).unwrap();
    let kind = v.get("kind").and_then(|k| k.as_str()).unwrap().to_string();
    match kind.as_str() {
        "ConfigMap" => Object::ConfigMap(serde_yaml_ng::from_value::<ConfigMap>(v).unwrap()),
        "NetworkPolicy" => Object::NetworkPolicy(serde_yaml_ng::from_value::<NetworkPolicy>(v).unwrap()),
        "Secret" => Object::Secret(serde_yaml_ng::from_value::<Secret>(v).unwrap()),
        "Service" => Object::Service(serde_yaml_ng::from_value::<Service>(v).unwrap()),
        "Deployment" => Object::Deployment(serde_yaml_ng::from_value::<Deployment>(v).unwrap()),
        "Job" => Object::Job(serde_yaml_ng::from_value::<Job>(v).unwrap()),
        k => panic!("unexpected kind {k}"),
    }
}

#[test]
fn objects_round_trip_through_yaml() {
    for (why, f) in shapes() {
        for task in [None, Some("line one\nline two: 'quoted'")] {
            let key = SigningKey::generate().unwrap();
            let m = manifests(&f, &options(task, Some(UID)), &key).unwrap();
            let stream = objects::to_yaml_stream(&m.objects).unwrap();
            let docs: Vec<&str> = stream.split("---\n").filter(|d| !d.is_empty()).collect();
            assert_eq!(docs.len(), m.objects.len(), "{why}");
            for (doc, o) in docs.iter().zip(&m.objects) {
                let back = parse(doc);
                assert!(back == *o, "{why}: {o:?} changed through YAML");
                assert_eq!(back.to_yaml().unwrap(), *doc, "{why}: {o:?}");
            }
        }
    }
}

#[cfg(feature = "runtime")]
#[test]
fn the_probe_path_is_the_doors_public_card() {
    assert_eq!(CARD_PATH, crate::door::auth::CARD_PATH);
}

#[test]
fn each_members_egress_is_dns_its_callees_and_its_endpoints() {
    let origins = [
        (
            "https://agent.example/.well-known/agent-card.json",
            Some(("agent.example", 443)),
        ),
        ("https://Agent.Example:8443/rpc", Some(("agent.example", 8443))),
        ("http://127.0.0.1:9999/", Some(("127.0.0.1", 9999))),
        ("http://[::1]:7000/", Some(("::1", 7000))),
        ("https://agent.example:0/", None),
        ("ftp://x/", None),
    ];
    for (url, want) in origins {
        let got = Origin::of(url);
        assert_eq!(got.as_ref().map(|o| (o.host.as_str(), o.port)), want, "{url}");
    }

    let mut f = formation(&["lead", "far", "ip"], &[("lead", "far"), ("lead", "ip")]);
    f.members[1].endpoints = vec![remote("https://agent.example/")];
    f.members[2].endpoints = vec![remote("https://203.0.113.7:8443/")];
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference::default();
    let all = policy::network_policies(&f, &options(None, Some(UID)), &owner);
    let egress: Vec<&NetworkPolicy> = all
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.policy_types.as_ref())
                .is_some_and(|t| t == &["Egress"])
        })
        .collect();
    assert_eq!(egress.len(), 3, "one egress policy per member");
    // Each rule as (its CIDRs, its (protocol, port)s).
    type Rule = (Vec<String>, Vec<(String, i32)>);
    let rules = |p: &NetworkPolicy| -> Vec<Rule> {
        p.spec
            .as_ref()
            .and_then(|s| s.egress.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                let to =
                    r.to.unwrap_or_default()
                        .into_iter()
                        .filter_map(|t| t.ip_block.map(|b| b.cidr))
                        .collect();
                let ports = r
                    .ports
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| {
                        let n = match p.port {
                            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => n,
                            _ => 0,
                        };
                        (p.protocol.unwrap_or_default(), n)
                    })
                    .collect();
                (to, ports)
            })
            .collect()
    };
    let dns = (
        Vec::<String>::new(),
        vec![("UDP".to_string(), 53), ("TCP".to_string(), 53)],
    );
    // The lead dials its callees' doors (the rule names their pods, not addresses) and DNS.
    let lead = rules(egress[0]);
    assert_eq!(lead.len(), 2);
    assert_eq!(lead[0], dns);
    assert_eq!(lead[1], (Vec::new(), vec![("TCP".to_string(), 8080)]));
    let callee_pods: Vec<_> = egress[0].spec.as_ref().unwrap().egress.as_ref().unwrap()[1]
        .to
        .iter()
        .flatten()
        .map(|p| p.pod_selector.clone())
        .collect();
    assert_eq!(
        callee_pods,
        vec![
            Some(policy_selector(pod_selector(&f, 1))),
            Some(policy_selector(pod_selector(&f, 2)))
        ]
    );
    assert_eq!(
        rules(egress[1]),
        [
            dns.clone(),
            (
                vec!["0.0.0.0/0".to_string(), "::/0".to_string()],
                vec![("TCP".to_string(), 443)]
            )
        ]
    );
    assert_eq!(
        rules(egress[2]),
        [
            dns,
            (vec!["203.0.113.7/32".to_string()], vec![("TCP".to_string(), 8443)])
        ]
    );
    // The ingress policies are unchanged by it: the edges are still exactly the admitted ones.
    assert_eq!(policy::edges_of(&all, FRM), names(&f));
}

fn policy_selector(
    labels: std::collections::BTreeMap<String, String>,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    }
}

#[test]
fn a_loopback_endpoint_needs_its_cluster_place_and_gets_a_relay() {
    let mut f = formation(&["lead", "model"], &[("lead", "model")]);
    f.members[1].endpoints = vec![Endpoint {
        field: "inference.endpoint".into(),
        url: "http://127.0.0.1:11434/v1".into(),
        origin: Origin::of("http://127.0.0.1:11434/v1").expect("origin"),
    }];
    let key = SigningKey::generate().unwrap();
    let mut o = options(None, Some(UID));
    let e = manifests(&f, &o, &key).err().expect("refused");
    assert_eq!(e.code.id, "E-DEP-004");
    assert!(
        e.message
            .contains("member 'model': inference.endpoint 'http://127.0.0.1:11434/v1' is on the loopback"),
        "{}",
        e.message
    );
    assert!(
        e.hint()
            .unwrap_or_default()
            .contains("--endpoint 127.0.0.1:11434=SERVICE-HOST:PORT")
    );

    o.endpoint_maps = vec![EndpointMap::parse("127.0.0.1:11434=ollama.models.svc:11434").unwrap()];
    let m = manifests(&f, &o, &key).unwrap();
    let spec = pod_spec_of(
        m.objects
            .iter()
            .find(|x| x.name() == "model-4f5061728394" && x.kind() == "Deployment")
            .unwrap(),
    );
    let relay = spec
        .init_containers
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == "to-endpoint-0")
        .expect("relay");
    assert_eq!(
        relay.command.as_deref().unwrap(),
        [
            "socat",
            "TCP-LISTEN:11434,bind=127.0.0.1,fork,reuseaddr",
            "TCP:ollama.models.svc:11434"
        ]
    );
    // Its egress admits the cluster side, not the loopback.
    assert_eq!(
        destinations(&f, &o, 1),
        vec![Destination {
            host: "ollama.models.svc".into(),
            port: Some(11434)
        }]
    );

    // An --endpoint nobody dials, a port the pod keeps, and malformed ones are refused too.
    let mut unused = options(None, Some(UID));
    unused.endpoint_maps = vec![EndpointMap::parse("127.0.0.1:1=x.svc:1").unwrap()];
    let g = formation(&["lead"], &[]);
    assert_eq!(manifests(&g, &unused, &key).err().map(|e| e.code.id), Some("E-DEP-004"));
    f.members[1].endpoints[0].origin.port = 8080;
    o.endpoint_maps = vec![EndpointMap::parse("127.0.0.1:8080=x.svc:80").unwrap()];
    assert_eq!(manifests(&f, &o, &key).err().map(|e| e.code.id), Some("E-DEP-004"));
    for bad in [
        "127.0.0.1:1",
        "example.com:1=x.svc:1",
        "127.0.0.1:1=localhost:2",
        "127.0.0.1=x.svc:1",
        "127.0.0.1:0=x:1",
    ] {
        assert!(EndpointMap::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn keys_are_secret_key_refs_and_memory_follows_the_capsule() {
    let mut f = formation(&["lead", "model"], &[("lead", "model")]);
    f.members[1].keys = vec!["OPENAI_API_KEY".into(), "MCP_KEY".into()];
    f.members[1].memory_mib = 640;
    let key = SigningKey::generate().unwrap();
    let m = manifests(&f, &options(None, Some(UID)), &key).unwrap();
    let spec = pod_spec_of(
        m.objects
            .iter()
            .find(|x| x.name() == "model-4f5061728394" && x.kind() == "Deployment")
            .unwrap(),
    );
    let c = &spec.containers[0];
    let refs: Vec<(String, String, String)> = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let r = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
            assert!(e.value.is_none());
            Some((e.name.clone(), r.name.clone(), r.key.clone()))
        })
        .collect();
    assert_eq!(
        refs,
        [
            (
                "OPENAI_API_KEY".to_string(),
                "mur-keys".to_string(),
                "OPENAI_API_KEY".to_string()
            ),
            ("MCP_KEY".to_string(), "mur-keys".to_string(), "MCP_KEY".to_string())
        ]
    );
    let r = c.resources.as_ref().unwrap();
    assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "640Mi");
    assert_eq!(
        keys_needed(&f),
        [
            ("OPENAI_API_KEY".to_string(), vec!["model".to_string()]),
            ("MCP_KEY".to_string(), vec!["model".to_string()])
        ]
    );
    // The lead reads no key: no env from a Secret.
    let lead = pod_spec_of(
        m.objects
            .iter()
            .find(|x| x.name() == "lead-4f5061728394" && x.kind() == "Deployment")
            .unwrap(),
    );
    assert!(lead.containers[0].env.iter().flatten().all(|e| e.value_from.is_none()));
    let mut bad = options(None, Some(UID));
    bad.keys_secret = "Keys!".into();
    assert_eq!(manifests(&f, &bad, &key).err().map(|e| e.code.id), Some("E-DEP-002"));
}

#[test]
fn a_dry_run_is_complete_and_marked_so_no_server_accepts_it() {
    let f = formation(&["lead", "worker"], &[("lead", "worker")]);
    let key = SigningKey::generate().unwrap();
    let mut o = options(Some("t"), None);
    o.dry_run = true;
    let dry = manifests(&f, &o, &key).unwrap();
    let full = manifests(&f, &options(Some("t"), Some(UID)), &key).unwrap();
    assert_eq!(
        layout(&dry.objects),
        layout(&full.objects),
        "every object of the full render"
    );
    assert!(!dry.carries_credentials);
    for x in &dry.objects {
        let meta = x.metadata();
        assert_eq!(
            meta.resource_version.as_deref(),
            Some(DRY_RUN_RESOURCE_VERSION),
            "{x:?}"
        );
        assert!(
            meta.annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(DRY_RUN_ANNOTATION))
        );
        for r in meta.owner_references.iter().flatten() {
            assert_eq!(r.uid, DRY_RUN_UID);
        }
    }
}

#[test]
fn a_task_for_an_entry_that_asks_is_refused_by_name() {
    let mut f = formation(&["lead", "w"], &[("lead", "w")]);
    f.members[0].asks = true;
    let key = SigningKey::generate().unwrap();
    let e = manifests(&f, &options(Some("t"), Some(UID)), &key)
        .err()
        .expect("refused");
    assert_eq!(e.code.id, "E-DEP-005");
    assert!(e.message.starts_with("--task with an entry that asks"), "{}", e.message);
    // Serving tasks, the entry is reachable by an operator who can answer.
    assert!(manifests(&f, &options(None, Some(UID)), &key).is_ok());
    // A peer that asks is answered by its caller, a member: nothing to refuse.
    f.members[0].asks = false;
    f.members[1].asks = true;
    assert!(manifests(&f, &options(Some("t"), Some(UID)), &key).is_ok());
}
