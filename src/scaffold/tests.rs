use serde_json::{Value, json};

use super::*;
use crate::manifest::{Acceptance, AfterTask, Kind, Language};
use crate::roster::Reachability;

#[test]
fn formation_names() {
    let long_ok = "a".repeat(93);
    let long_bad = "a".repeat(94);
    let table: &[(&str, Option<&str>)] = &[
        ("demo", None),
        ("my-team-2", None),
        ("9lives", None),
        (&long_ok, None),
        ("", Some("'' cannot name a formation: the name is empty")),
        (
            "Team",
            Some("'Team' cannot name a formation: the name may hold only lowercase letters, digits and '-'"),
        ),
        (
            "a/b",
            Some("'a/b' cannot name a formation: the name may hold only lowercase letters, digits and '-'"),
        ),
        (
            "..",
            Some("'..' cannot name a formation: the name may hold only lowercase letters, digits and '-'"),
        ),
        (
            "-x",
            Some("'-x' cannot name a formation: the name must not start or end with '-'"),
        ),
        (
            "x-",
            Some("'x-' cannot name a formation: the name must not start or end with '-'"),
        ),
        (
            "a\tb",
            Some("'a\\tb' cannot name a formation: the name may hold only lowercase letters, digits and '-'"),
        ),
    ];
    for (name, want) in table {
        let got = check_name(name);
        match want {
            None => assert_eq!(got, Ok(()), "{name}"),
            Some(msg) => {
                let d = got.expect_err(name);
                assert_eq!(d.code, diag::E_NEW_002, "{name}");
                assert_eq!(&d.message, msg);
            }
        }
    }
    let d = check_name(&long_bad).expect_err("94 characters");
    assert_eq!(
        d.message,
        format!(
            "'{}' cannot name a formation: its worker's capsule name '{long_bad}-worker' is longer than 100 characters",
            diag::shown(&long_bad)
        )
    );
    assert!(d.hint().is_some_and(|h| h.contains("<NAME>-lead and <NAME>-worker")));
}

#[test]
fn providers() {
    assert_eq!(provider("openai"), Ok(Provider::OpenAi));
    assert_eq!(provider("anthropic"), Ok(Provider::Anthropic));
    for word in ["OpenAI", "", "gemini", "openai "] {
        let d = provider(word).expect_err(word);
        assert_eq!(d.code, diag::E_NEW_004);
        assert_eq!(
            d.message,
            format!("'{word}' is not an inference provider mur new can scaffold; it knows openai and anthropic")
        );
        assert_eq!(d.hint(), Some("use --inference openai or --inference anthropic"));
    }
}

#[test]
fn config_defaults_table() {
    let both = |e: &str, m: &str| ConfigDefaults {
        endpoint: Some(e.into()),
        model: Some(m.into()),
    };
    let none = ConfigDefaults::default();
    let table: &[(&str, Provider, Result<ConfigDefaults, &str>)] = &[
        ("", Provider::OpenAi, Ok(none.clone())),
        ("# nothing\n", Provider::OpenAi, Ok(none.clone())),
        ("other: 1\n", Provider::OpenAi, Ok(none.clone())),
        ("inference:\n", Provider::OpenAi, Ok(none.clone())),
        (
            "inference:\n  model: m1\n",
            Provider::Anthropic,
            Ok(ConfigDefaults {
                endpoint: None,
                model: Some("m1".into()),
            }),
        ),
        (
            "inference:\n  provider: openai\n  endpoint: http://127.0.0.1:8080\n  model: 1.10\n",
            Provider::OpenAi,
            Ok(both("http://127.0.0.1:8080", "1.10")),
        ),
        (
            "inference:\n  provider: openai\n  model: gpt\n",
            Provider::Anthropic,
            Ok(none.clone()),
        ),
        ("inference: [\n", Provider::OpenAi, Err("YAML syntax error at line")),
        ("- a\n", Provider::OpenAi, Err("it must be a mapping, found a list")),
        (
            "inference: 3\n",
            Provider::OpenAi,
            Err("inference: must be a mapping, found an integer"),
        ),
        (
            "inference:\n  model: [a]\n",
            Provider::OpenAi,
            Err("inference.model: must be a one-line string, found a list"),
        ),
        (
            "inference:\n  model: \"a\\nb\"\n",
            Provider::OpenAi,
            Err("inference.model: must be a one-line string, found a string"),
        ),
    ];
    for (text, p, want) in table {
        let got = config_defaults(text.as_bytes(), *p);
        match want {
            Ok(w) => assert_eq!(got.as_ref(), Ok(w), "{text:?}"),
            Err(prefix) => {
                let e = got.expect_err(text);
                assert!(e.starts_with(prefix), "{text:?}: {e}");
            }
        }
    }
    assert_eq!(
        config_defaults(b"\xff", Provider::OpenAi),
        Err("it is not UTF-8".into())
    );
}

fn manifest_of(files: &[File], path: &str) -> crate::manifest::Manifest {
    let f = files.iter().find(|f| f.path == path).expect(path);
    manifest::parse(&f.bytes).expect("parses").manifest
}

#[test]
fn component_scaffold_is_what_the_spec_lists() {
    let files = render("crew", &Members::Components);
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "roster.yaml",
            "lead/murmur.yaml",
            "lead/capsule.wasm",
            "worker/murmur.yaml",
            "worker/capsule.wasm",
            ".schemas/roster.schema.json",
            ".schemas/murmur.schema.json"
        ]
    );
    for f in &files {
        check(&f.path, &f.bytes).unwrap_or_else(|d| panic!("{}: {d}", f.path));
    }
    // Editors validate the scaffold offline against the schemas it carries.
    let first_line = |p: &str| {
        let f = files.iter().find(|f| f.path == p).expect(p);
        String::from_utf8_lossy(&f.bytes)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        first_line("roster.yaml"),
        "# yaml-language-server: $schema=.schemas/roster.schema.json"
    );
    assert_eq!(
        first_line("lead/murmur.yaml"),
        "# yaml-language-server: $schema=../.schemas/murmur.schema.json"
    );
    let schema = files
        .iter()
        .find(|f| f.path == ".schemas/roster.schema.json")
        .expect("schema");
    assert_eq!(
        schema.bytes,
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/roster.schema.json")).unwrap()
    );

    let roster = crate::roster::parse(&files[0].bytes).expect("roster");
    let members: Vec<(&str, String, &str, bool)> = roster
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.capsule.to_string(), m.version.as_str(), m.entry))
        .collect();
    assert_eq!(
        members,
        [
            ("lead", "local/crew-lead".to_string(), "0.1.0", true),
            ("worker", "local/crew-worker".to_string(), "0.1.0", false)
        ]
    );
    assert_eq!(
        roster.reachability,
        Reachability::Rules(vec![crate::roster::Rule {
            from: "lead".into(),
            to: vec!["worker".into()]
        }])
    );

    let lead = manifest_of(&files, "lead/murmur.yaml");
    assert_eq!((lead.name.as_str(), lead.version.as_str()), ("crew-lead", "0.1.0"));
    assert_eq!(
        lead.kind,
        Kind::Component {
            path: "capsule.wasm".into()
        }
    );
    assert!(lead.authentication);
    assert_eq!(lead.network_allow, ["localhost"]);
    assert!(!lead.peer_tasks_accept);

    let worker = manifest_of(&files, "worker/murmur.yaml");
    assert_eq!(worker.name, "crew-worker");
    assert_eq!(
        worker.kind,
        Kind::Component {
            path: "capsule.wasm".into()
        }
    );
    assert!(worker.authentication && worker.peer_tasks_accept);
    assert_eq!(worker.lifecycle.task_acceptance, Acceptance::Queue);
    assert_eq!(worker.lifecycle.after_task, AfterTask::Sleep);
    assert!(worker.network_allow.is_empty());

    // The components are real ones, not placeholders.
    for f in files.iter().filter(|f| f.path.ends_with(".wasm")) {
        assert!(f.bytes.starts_with(b"\0asm"), "{}", f.path);
    }
}

#[test]
fn model_scaffold_declares_provider_endpoint_model_and_key() {
    for (provider, var, endpoint) in [
        (Provider::OpenAi, "OPENAI_API_KEY", "https://api.openai.com"),
        (Provider::Anthropic, "ANTHROPIC_API_KEY", "https://api.anthropic.com"),
    ] {
        let settings = ModelSettings::new(provider, &ConfigDefaults::default());
        let files = render("crew", &Members::Models(settings));
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "roster.yaml",
                "lead/murmur.yaml",
                "worker/murmur.yaml",
                ".schemas/roster.schema.json",
                ".schemas/murmur.schema.json"
            ]
        );
        for f in &files {
            check(&f.path, &f.bytes).unwrap_or_else(|d| panic!("{}: {d}", f.path));
        }
        for path in ["lead/murmur.yaml", "worker/murmur.yaml"] {
            let m = manifest_of(&files, path);
            assert_eq!(m.kind, Kind::Model, "{path}");
            assert!(m.authentication, "{path}");
            let inf = m.inference.expect("inference");
            assert_eq!(inf.provider, Some(provider));
            assert_eq!(inf.endpoint.as_deref(), Some(endpoint));
            assert_eq!(inf.model.as_deref(), Some(default_model(provider)));
            assert_eq!(inf.max_tokens, SCAFFOLD_MAX_TOKENS);
            // The guards are written, so a looping model stops and a person sees where to raise them.
            assert_eq!(inf.max_turns, Some(SCAFFOLD_MAX_TURNS), "{path}");
            assert_eq!(inf.max_session_tokens, Some(SCAFFOLD_SESSION_TOKENS), "{path}");
            assert_eq!(inf.api_key_var.as_deref(), Some(var));
            assert!(inf.system_prompt.contains("task"), "{path}");
        }
        let lead = manifest_of(&files, "lead/murmur.yaml");
        assert_eq!(lead.network_allow, ["localhost"]);
        assert!(
            lead.inference
                .expect("inference")
                .system_prompt
                .contains("`worker` with the call-member tool")
        );
        let worker = manifest_of(&files, "worker/murmur.yaml");
        assert!(worker.peer_tasks_accept);
        assert_eq!(
            (worker.lifecycle.task_acceptance, worker.lifecycle.after_task),
            (Acceptance::Queue, AfterTask::Sleep)
        );
    }
}

#[test]
fn configured_values_survive_yaml_quoting() {
    for model in [
        "gpt-4o", "1.10", "yes", "null", "a: b", "#x", "'q'", "\"d\"", "x # y", "- z", "[a]", "é",
    ] {
        let config = ConfigDefaults {
            endpoint: Some("http://localhost:11434/v1".into()),
            model: Some(model.into()),
        };
        let files = render("crew", &Members::Models(ModelSettings::new(Provider::OpenAi, &config)));
        for f in &files {
            check(&f.path, &f.bytes).unwrap_or_else(|d| panic!("{model:?}: {}: {d}", f.path));
        }
        let inf = manifest_of(&files, "lead/murmur.yaml").inference.expect("inference");
        assert_eq!(inf.model.as_deref(), Some(model));
        assert_eq!(inf.endpoint.as_deref(), Some("http://localhost:11434/v1"));
    }
}

#[test]
fn next_steps_name_the_zips_mur_build_writes() {
    assert_eq!(
        next_steps("crew", &Members::Components),
        [
            "mur build crew/lead && mur install -g crew/lead/crew-lead-0.1.0.mur.zip",
            "mur build crew/worker && mur install -g crew/worker/crew-worker-0.1.0.mur.zip",
            "mur run --roster crew --task \"<your task>\"",
        ]
    );
    let m = Members::Models(ModelSettings::new(Provider::Anthropic, &ConfigDefaults::default()));
    assert_eq!(
        next_steps("crew", &m)[2],
        "export ANTHROPIC_API_KEY=…   (the key both members send to https://api.anthropic.com)"
    );
}

#[test]
fn check_refuses_what_our_parsers_refuse() {
    let d = check("roster.yaml", b"roster_version: 2\nmembers: []\n").expect_err("bad roster");
    assert_eq!(d.code, diag::E_ROS_001);
    let d = check(
        "roster.yaml",
        b"roster_version: 1\nmembers:\n  - {name: a, capsule: local/a, version: '1'}\n",
    )
    .expect_err("no entry");
    assert_eq!(d.code, diag::E_ROS_002);
    let d = check("lead/murmur.yaml", b"name: a\n").expect_err("no version");
    assert_eq!(d.code, diag::E_MAN_001);
    let d = check("lead/murmur.yaml", b"name: a\nversion: '1'\ncolour: red\n").expect_err("unknown key");
    assert_eq!(d.code, diag::W_SEC_019);
    assert_eq!(check("lead/capsule.wasm", b"anything"), Ok(()));
}

#[test]
fn demo_files_parse_and_form_the_documented_roster() {
    for (path, bytes) in demo::FILES {
        check(path, bytes).unwrap_or_else(|d| panic!("{path}: {d}"));
    }
    let roster = crate::roster::parse(demo::FILES[0].1).expect("demo roster");
    let names: Vec<&str> = roster.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, demo::MEMBERS);
    assert!(roster.members.iter().any(|m| m.entry && m.name == demo::ENTRY));
    for member in demo::MEMBERS {
        let manifest = demo::FILES
            .iter()
            .find(|(p, _)| *p == format!("{member}/murmur.yaml"))
            .expect("manifest");
        let m = manifest::parse(manifest.1).expect("parses").manifest;
        assert!(m.authentication, "{member}");
        assert_eq!(
            m.kind,
            Kind::Component {
                path: "capsule.wasm".into()
            }
        );
        let wasm = demo::FILES
            .iter()
            .find(|(p, _)| *p == format!("{member}/capsule.wasm"))
            .expect("wasm");
        assert!(wasm.1.starts_with(b"\0asm"), "{member}");
    }
}

// ---- call tree ----

fn start(member: &str, frm: &str) -> Value {
    json!({"event_type": "session_start", "formation_id": frm, "formation_member": member})
}

fn call_start(task: &str, call: &str, member: &str, member_task: &str) -> Value {
    json!({"event_type": "member_call_start", "task_id": task, "call_id": call, "member": member, "member_task_id": member_task})
}

fn call_end(task: &str, call: &str, member: &str, member_task: &str, status: &str, ms: u64) -> Value {
    json!({"event_type": "member_call", "task_id": task, "call_id": call, "member": member,
           "member_task_id": member_task, "status": status, "duration_ms": ms})
}

fn rendered(lines: &[crate::trace::formation::CallLine]) -> Vec<String> {
    lines.iter().map(|l| l.render()).collect()
}

#[test]
fn call_tree_nests_calls_under_the_task_that_made_them() {
    let frm = "frm_1";
    let planner = vec![
        start("planner", frm),
        call_start("tsk_p", "mcl_1", "analyst", "tsk_a1"),
        call_start("tsk_p", "mcl_2", "writer", "tsk_w"),
        call_end("tsk_p", "mcl_1", "analyst", "tsk_a1", "completed", 12),
        call_end("tsk_p", "mcl_2", "writer", "tsk_w", "completed", 48),
    ];
    let writer = vec![
        start("writer", frm),
        json!({"event_type": "a2a_task_received", "task_id": "tsk_w", "caller_member": "planner"}),
        call_start("tsk_w", "mcl_3", "analyst", "tsk_a2"),
        call_end("tsk_w", "mcl_3", "analyst", "tsk_a2", "completed", 9),
    ];
    let analyst = vec![start("analyst", frm)];
    // Another formation's session, and a session in none: both ignored.
    let stranger = vec![
        start("planner", "frm_2"),
        call_end("tsk_x", "mcl_0", "coder", "tsk_y", "failed", 1),
    ];
    let alone = vec![
        json!({"event_type": "session_start"}),
        call_end("tsk_z", "mcl_00", "x", "tsk_q", "failed", 1),
    ];
    let sessions = vec![analyst, writer, stranger, planner, alone];

    let lines = crate::trace::formation::build(&sessions, Some(frm));
    assert_eq!(
        rendered(&lines),
        [
            "planner → analyst  completed  12 ms",
            "planner → writer  completed  48 ms",
            "  writer → analyst  completed  9 ms",
        ]
    );
    assert_eq!(lines[2].call_id, "mcl_3");
    assert_eq!(lines[2].depth, 1);

    // Without a formation id, every session of any formation counts.
    assert_eq!(crate::trace::formation::build(&sessions, None).len(), 4);
}

#[test]
fn call_tree_shows_calls_without_an_outcome_and_survives_bad_traces() {
    let frm = "frm_1";
    let lead = vec![
        start("lead", frm),
        call_start("tsk_l", "mcl_1", "worker", "tsk_w"),
        // A busy call that never got a task id, and ended rejected.
        json!({"event_type": "member_call", "task_id": "tsk_l", "call_id": "mcl_2", "member": "worker",
               "member_task_id": null, "status": "rejected", "duration_ms": 600000}),
        json!({"event_type": "member_call", "call_id": 7}),
        json!("not an object"),
    ];
    // A callee whose task calls back into its own task id: no endless loop.
    let worker = vec![
        start("worker", frm),
        call_end("tsk_w", "mcl_3", "helper", "tsk_w", "completed", 1),
    ];
    let lines = crate::trace::formation::build(&[lead, worker, Vec::new()], Some(frm));
    assert_eq!(
        rendered(&lines),
        [
            "lead → worker  unfinished",
            "  worker → helper  completed  1 ms",
            "lead → worker  rejected  600000 ms",
        ]
    );
}

#[test]
fn capsule_scaffold_per_language() {
    let table: &[(Language, &[&str], &str)] = &[
        (
            Language::Python,
            &["murmur.yaml", "app.py", ".gitignore", ".schemas/murmur.schema.json"],
            "app.py",
        ),
        (
            Language::JavaScript,
            &[
                "murmur.yaml",
                "app.js",
                "package.json",
                ".gitignore",
                ".schemas/murmur.schema.json",
            ],
            "app.js",
        ),
        (
            Language::Rust,
            &[
                "murmur.yaml",
                "Cargo.toml",
                "src/lib.rs",
                "wit/capsule.wit",
                ".gitignore",
                ".schemas/murmur.schema.json",
            ],
            "src/lib.rs",
        ),
    ];
    for (lang, want, source) in table {
        let files = capsule("scout", *lang);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, *want, "{lang:?}");
        for f in &files {
            check(&f.path, &f.bytes).unwrap_or_else(|d| panic!("{lang:?} {}: {d}", f.path));
        }
        // Built from sources into capsule.wasm; serves calls and may make them.
        let m = manifest_of(&files, "murmur.yaml");
        assert_eq!(m.build, Some(*lang));
        assert_eq!(m.check_build(), Ok(Some((*lang, "capsule.wasm"))));
        assert_eq!(m.name, "scout");
        assert!(m.peer_tasks_accept && m.authentication);
        assert_eq!(m.network_allow, ["localhost"]);
        assert_eq!(
            (m.lifecycle.task_acceptance, m.lifecycle.after_task),
            (Acceptance::Queue, AfterTask::Sleep)
        );
        // The source implements run with call-member and identity, and names the capsule.
        let text = String::from_utf8_lossy(&files.iter().find(|f| f.path == *source).expect(source).bytes).into_owned();
        assert!(!text.contains("@NAME@"), "{lang:?}");
        assert!(text.contains("scout"), "{lang:?}");
        for needle in ["run", "start", "identity"] {
            assert!(text.to_lowercase().contains(needle), "{lang:?}: {needle}");
        }
        let steps = capsule_next_steps("scout", *lang);
        assert!(steps[0].contains(&toolchain::install_hint(*lang)), "{steps:?}");
        assert_eq!(steps[1], "mur build scout && mur install -g scout/scout-0.1.0.mur.zip");
    }
    // The Rust crate carries the world it is written against.
    let rust = capsule("scout", Language::Rust);
    let wit = rust.iter().find(|f| f.path == "wit/capsule.wit").expect("wit");
    assert_eq!(wit.bytes, include_bytes!("../capsule/wit/capsule.wit"));
}

#[test]
fn capsule_names() {
    assert_eq!(check_capsule_name("scout-2"), Ok(()));
    for bad in ["", "Scout", "../x", "-x", &"a".repeat(101)] {
        let d = check_capsule_name(bad).expect_err(bad);
        assert_eq!(d.code, diag::E_NEW_002, "{bad}");
        assert!(d.message.contains("cannot name a capsule"), "{}", d.message);
    }
}

#[test]
fn roster_scaffold_in_a_language() {
    for lang in [Language::Python, Language::JavaScript, Language::Rust] {
        let files = render("crew", &Members::Sources(lang));
        for f in &files {
            check(&f.path, &f.bytes).unwrap_or_else(|d| panic!("{lang:?} {}: {d}", f.path));
        }
        for (member, calls) in [("lead", true), ("worker", false)] {
            let m = manifest_of(&files, &format!("{member}/murmur.yaml"));
            assert_eq!(m.name, format!("crew-{member}"));
            assert_eq!(m.build, Some(lang), "{member}");
            assert_eq!(
                m.kind,
                Kind::Component {
                    path: "capsule.wasm".into()
                }
            );
            assert_eq!(!m.network_allow.is_empty(), calls, "{member}");
            assert_eq!(m.peer_tasks_accept, !calls, "{member}");
            let entry = format!("{member}/{}", toolchain::entry(lang));
            assert!(files.iter().any(|f| f.path == entry), "{entry}");
        }
        let steps = next_steps("crew", &Members::Sources(lang));
        assert!(steps[0].contains(&toolchain::install_hint(lang)), "{steps:?}");
        assert_eq!(
            steps[1],
            "mur build crew/lead && mur install -g crew/lead/crew-lead-0.1.0.mur.zip"
        );
    }
}

#[test]
fn each_capsule_scaffold_ignores_what_its_toolchain_installs_and_builds() {
    let table: &[(Language, &[&str])] = &[
        // The guide creates .venv in the capsule directory for componentize-py.
        (
            Language::Python,
            &["__pycache__/", ".venv/", "capsule.wasm", "*.mur.zip", ".murmur/"],
        ),
        (
            Language::JavaScript,
            &["node_modules/", "capsule.wasm", "*.mur.zip", ".murmur/"],
        ),
        (Language::Rust, &["target/", "capsule.wasm", "*.mur.zip", ".murmur/"]),
    ];
    for (lang, want) in table {
        let files = capsule("scout", *lang);
        let ignore = files.iter().find(|f| f.path == ".gitignore").expect(".gitignore");
        let text = String::from_utf8_lossy(&ignore.bytes);
        for w in *want {
            assert!(text.lines().any(|l| l == *w), "{lang:?}: {w} not in {text:?}");
        }
    }
}

#[test]
fn a_remote_scaffold_is_a_remote_capsule_reading_its_own_key() {
    let files = super::remote_capsule("far-agent", "https://agent.example/.well-known/agent-card.json").unwrap();
    let manifest = &files[0];
    assert_eq!(manifest.path, "murmur.yaml");
    let parsed = crate::manifest::parse(&manifest.bytes).unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let m = parsed.manifest;
    assert_eq!(m.kind, crate::manifest::Kind::Remote);
    assert_eq!(m.key_vars(), ["FAR_AGENT_API_KEY"]);
    assert!(m.authentication && m.peer_tasks_accept);
    // A URL the runtime would refuse is refused here, with the manifest's code.
    for bad in ["http://agent.example/", "ftp://x", "https://a.example/\nname: evil"] {
        let d = super::remote_capsule("far", bad).unwrap_err();
        assert_eq!(d.code, diag::E_MAN_001, "{bad}: {}", d.message);
    }
}
