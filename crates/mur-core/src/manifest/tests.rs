use super::*;
use crate::diag::{Code, E_MAN_001, E_MAN_003, E_MAN_004, W_SEC_019};

const HEAD: &str = "name: coder\nversion: 1.2.0\n";

fn ok(body: &str) -> Parsed {
    let text = format!("{HEAD}{body}");
    match parse(text.as_bytes()) {
        Ok(p) => p,
        Err(d) => panic!("{body:?} was refused: {}", d.render("")),
    }
}

fn refused(text: &str) -> Diagnostic {
    match parse(text.as_bytes()) {
        Ok(p) => panic!("{text:?} was accepted: {:?}", p.manifest),
        Err(d) => d,
    }
}

#[test]
fn defaults() {
    let p = ok("");
    assert_eq!(p.manifest, Manifest::minimal("coder", "1.2.0"));
    assert!(p.warnings.is_empty());
    assert_eq!(
        p.manifest.lifecycle,
        Lifecycle {
            task_acceptance: Acceptance::Single,
            after_task: AfterTask::Exit,
            queue_depth: 1,
            delegation_deadline_secs: 600,
            input_timeout_secs: None,
            repeatable_tasks: false,
        }
    );
    let inf = ok("inference: {}\n").manifest.inference.unwrap();
    assert_eq!(inf, Inference::default());
    assert_eq!(
        (inf.max_tokens, inf.max_turns, inf.system_prompt.as_str()),
        (4096, None, "")
    );
}

#[test]
fn full_manifest() {
    let m = ok("component: capsule.wat\n\
         exports: {peer_tasks: {accept: true}}\n\
         network: {authentication: {scheme: bearer}}\n\
         lifecycle: {task_acceptance: queue, after_task: sleep, queue_depth: 3, delegation_deadline_secs: 30, input_timeout_secs: 90, repeatable_tasks: true}\n\
         capabilities: {network: {allow: [localhost, 'https://api.example.com:443']}, spawn: {allow: []}}\n\
         trace: {retain: {max_sessions: 5, max_age: 7d}}\n")
    .manifest;
    assert_eq!(
        m.kind,
        Kind::Component {
            path: "capsule.wat".into()
        }
    );
    assert!(m.peer_tasks_accept && m.authentication);
    assert_eq!(
        m.lifecycle,
        Lifecycle {
            task_acceptance: Acceptance::Queue,
            after_task: AfterTask::Sleep,
            queue_depth: 3,
            delegation_deadline_secs: 30,
            input_timeout_secs: Some(90),
            repeatable_tasks: true,
        }
    );
    assert_eq!(m.network_allow, ["localhost", "https://api.example.com:443"]);
    assert!(m.spawn_allow.is_empty());
    assert_eq!(
        m.retain,
        Some(Retain {
            max_sessions: Some(5),
            max_age_secs: Some(7 * 86_400)
        })
    );
    assert_eq!(m.holds(), 4);

    let m = ok("inference:\n  transport: http\n  provider: anthropic\n  endpoint: http://127.0.0.1:9\n  model: claude\n  api_key: ${ANTHROPIC_API_KEY}\n  max_tokens: 100\n  max_turns: 3\n  system_prompt: |\n    Be brief.\n  driver: whatever\n").manifest;
    assert_eq!(m.kind, Kind::Model);
    assert_eq!(
        m.inference,
        Some(Inference {
            provider: Some(Provider::Anthropic),
            endpoint: Some("http://127.0.0.1:9".into()),
            model: Some("claude".into()),
            api_key_var: Some("ANTHROPIC_API_KEY".into()),
            max_tokens: 100,
            max_turns: Some(3),
            max_session_tokens: None,
            system_prompt: "Be brief.\n".into(),
            transport: Transport::Http,
            reasoning_effort: None,
        })
    );
    // Chat Completions providers, with every reasoning effort OpenAI's API takes.
    for effort in crate::manifest::REASONING_EFFORTS {
        for (word, provider) in [
            ("openai", Provider::OpenAi),
            ("openai-compatible", Provider::OpenAiCompatible),
        ] {
            let inf = ok(&format!(
                "inference: {{provider: {word}, reasoning_effort: {effort}}}\n"
            ))
            .manifest
            .inference
            .unwrap();
            assert_eq!(
                (inf.provider, inf.reasoning_effort.as_deref()),
                (Some(provider), Some(*effort))
            );
        }
    }
    assert_eq!(
        ok("inference: {transport: process}\n")
            .manifest
            .inference
            .unwrap()
            .transport,
        Transport::Process
    );
    // `exports.peer_tasks.accept: false` and an empty authentication block.
    let m = ok("exports: {peer_tasks: {accept: false}}\nnetwork: {authentication: {}}\n").manifest;
    assert!(!m.peer_tasks_accept && m.authentication);
    // Keys written with no value read as absent.
    let m = ok("exports:\nnetwork:\n  authentication:\nlifecycle:\ninference:\ntrace:\n").manifest;
    assert_eq!(m, Manifest::minimal("coder", "1.2.0"));
}

#[test]
fn versions_read_as_text() {
    let table: &[(&str, &str)] = &[
        ("1.10", "1.10"),
        ("'1.10'", "1.10"),
        ("2", "2"),
        ("1.0", "1.0"),
        ("0.3.0", "0.3.0"),
        ("true", "true"),
        ("1.0.0-beta.1", "1.0.0-beta.1"),
    ];
    for (written, want) in table {
        let p = parse(format!("name: a\nversion: {written}\n").as_bytes()).unwrap();
        assert_eq!(p.manifest.version, *want, "{written}");
    }
}

#[test]
fn holds() {
    let table = [
        (Acceptance::None, 5, 0),
        (Acceptance::Single, 5, 1),
        (Acceptance::Queue, 1, 2),
        (Acceptance::Queue, 4, 5),
        (Acceptance::Queue, u32::MAX, u32::MAX),
    ];
    for (acceptance, depth, want) in table {
        let mut m = Manifest::minimal("a", "1");
        m.lifecycle.task_acceptance = acceptance;
        m.lifecycle.queue_depth = depth;
        assert_eq!(m.holds(), want, "{acceptance:?} {depth}");
    }
}

#[test]
fn max_age_forms() {
    let table: &[(&str, u64)] = &[
        ("3600", 3600),
        ("90s", 90),
        ("30m", 1800),
        ("12h", 43_200),
        ("7d", 604_800),
        ("'15'", 15),
    ];
    for (written, secs) in table {
        let m = ok(&format!("trace: {{retain: {{max_age: {written}}}}}\n")).manifest;
        assert_eq!(
            m.retain,
            Some(Retain {
                max_sessions: None,
                max_age_secs: Some(*secs)
            }),
            "{written}"
        );
    }
}

#[test]
fn unknown_keys_warn_and_reference_keys_do_not() {
    let p = ok("runtime: {image: x}\nexecution: {mode: y}\nartifacts: [{name: z}]\n\
         description: hi\n\
         exports: {peer_tasks: {accept: true, extra: 1}, other: 2}\n\
         network: {authentication: {scheme: bearer, realm: r}, egress: x}\n\
         lifecycle: {idle: 3}\n\
         capabilities: {env: {allow: [A]}, network: {allow: [], deny: []}}\n\
         inference: {driver: d, temperature: 0.2}\n\
         trace: {retain: {max_sessions: 1, keep: 2}, level: debug}\n");
    let got: Vec<String> = p.warnings.iter().map(|w| w.render("")).collect();
    let want: Vec<String> = [
        "description",
        "exports.other",
        "exports.peer_tasks.extra",
        "network.egress",
        "network.authentication.realm",
        "lifecycle.idle",
        "capabilities.env",
        "capabilities.network.deny",
        "inference.temperature",
        "trace.level",
        "trace.retain.keep",
    ]
    .iter()
    .map(|k| format!("warning[W-SEC-019]: murmur.yaml: {k}: unknown key; it is ignored"))
    .collect();
    assert_eq!(got, want);
    assert!(p.warnings.iter().all(|w| w.code == W_SEC_019));
}

#[test]
fn type_errors() {
    let table: &[(&str, &str)] = &[
        (
            "",
            "murmur.yaml: must be a mapping with `name` and `version`, found nothing",
        ),
        (
            "- a\n",
            "murmur.yaml: must be a mapping with `name` and `version`, found a list",
        ),
        ("name: [\n", "murmur.yaml: YAML syntax error at line 2, column 1: "),
        ("version: 1\n", "murmur.yaml: name: is required"),
        ("name:\nversion: 1\n", "murmur.yaml: name: is required"),
        (
            "name: 12\nversion: 1\n",
            "murmur.yaml: name: must be a string, found an integer",
        ),
        (
            "name: Coder\nversion: 1\n",
            "murmur.yaml: name: 'Coder' may hold only lowercase letters, digits and '-'; a capsule name is 1–100 characters of [a-z0-9-], not starting or ending in '-'",
        ),
        (
            "name: coder-\nversion: 1\n",
            "murmur.yaml: name: 'coder-' must not start or end with '-';",
        ),
        ("name: a\n", "murmur.yaml: version: is required"),
        (
            "name: a\nversion: [1]\n",
            "murmur.yaml: version: must be a version string, found a list",
        ),
        ("name: a\nversion: '  '\n", "murmur.yaml: version: must not be blank"),
        (
            "name: a\nversion: ../x\n",
            "murmur.yaml: version: '../x' cannot name a store directory;",
        ),
        (
            "name: a\nversion: '1 0'\n",
            "murmur.yaml: version: '1 0' cannot name a store directory;",
        ),
        (
            "name: a\nversion: ..\n",
            "murmur.yaml: version: '..' cannot name a store directory;",
        ),
    ];
    for (text, want) in table {
        let d = refused(text);
        assert_eq!(d.code, E_MAN_001, "{text:?}");
        assert!(d.message.starts_with(want), "{text:?}: {:?}", d.message);
    }
    let keyed: &[(&str, &str)] = &[
        ("component: 3\n", "component: must be a string, found an integer"),
        ("component: ''\n", "component: must not be blank"),
        ("exports: true\n", "exports: must be a mapping, found a boolean"),
        (
            "exports: {peer_tasks: yes}\n",
            "exports.peer_tasks: must be a mapping, found a string",
        ),
        (
            "exports: {peer_tasks: {}}\n",
            "exports.peer_tasks.accept: is required whenever exports.peer_tasks is present",
        ),
        (
            "exports: {peer_tasks: {accept: yes}}\n",
            "exports.peer_tasks.accept: must be true or false, found a string",
        ),
        (
            "network: {authentication: bearer}\n",
            "network.authentication: must be a mapping, found a string",
        ),
        (
            "network: {authentication: {scheme: basic}}\n",
            "network.authentication.scheme: must be one of `bearer`, found 'basic'",
        ),
        ("lifecycle: []\n", "lifecycle: must be a mapping, found a list"),
        (
            "lifecycle: {task_acceptance: many}\n",
            "lifecycle.task_acceptance: must be one of `none`, `single`, `queue`, found 'many'",
        ),
        (
            "lifecycle: {task_acceptance: 1}\n",
            "lifecycle.task_acceptance: must be one of `none`, `single`, `queue`, found an integer",
        ),
        (
            "lifecycle: {after_task: stay}\n",
            "lifecycle.after_task: must be one of `exit`, `sleep`, found 'stay'",
        ),
        (
            "lifecycle: {queue_depth: '2'}\n",
            "lifecycle.queue_depth: must be an integer, found a string",
        ),
        (
            "lifecycle: {queue_depth: 1.5}\n",
            "lifecycle.queue_depth: must be an integer, found a number",
        ),
        (
            "lifecycle: {queue_depth: -1}\n",
            "lifecycle.queue_depth: must be at least 0, found -1",
        ),
        (
            "lifecycle: {queue_depth: 4294967296}\n",
            "lifecycle.queue_depth: must be at most 4294967295, found 4294967296",
        ),
        (
            "lifecycle: {delegation_deadline_secs: 0}\n",
            "lifecycle.delegation_deadline_secs: must be at least 1, found 0",
        ),
        (
            "lifecycle: {input_timeout_secs: 0}\n",
            "lifecycle.input_timeout_secs: must be at least 1, found 0",
        ),
        (
            "capabilities: {network: {allow: localhost}}\n",
            "capabilities.network.allow: must be a list of strings, found a string",
        ),
        (
            "capabilities: {network: {allow: [localhost, 8080]}}\n",
            "capabilities.network.allow[1]: must be a string, found an integer",
        ),
        (
            "capabilities: {spawn: []}\n",
            "capabilities.spawn: must be a mapping, found a list",
        ),
        ("inference: openai\n", "inference: must be a mapping, found a string"),
        (
            "inference: {transport: grpc}\n",
            "inference.transport: must be one of `http`, `process`, found 'grpc'",
        ),
        (
            "inference: {provider: gemini}\n",
            "inference.provider: must be one of `openai`, `openai-compatible`, `anthropic`, found 'gemini'",
        ),
        (
            "inference: {reasoning_effort: extreme}\n",
            "inference.reasoning_effort: must be one of `none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `max`, found 'extreme'",
        ),
        (
            "inference: {reasoning_effort: 3}\n",
            "inference.reasoning_effort: must be one of `none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `max`, found an integer",
        ),
        (
            "inference: {endpoint: localhost:8080}\n",
            "inference.endpoint: must be an http:// or https:// URL, found 'localhost:8080'",
        ),
        (
            "inference: {model: 4}\n",
            "inference.model: must be a string, found an integer",
        ),
        (
            "inference: {max_tokens: 0}\n",
            "inference.max_tokens: must be at least 1, found 0",
        ),
        (
            "inference: {max_turns: 0}\n",
            "inference.max_turns: must be at least 1, found 0",
        ),
        (
            "inference: {max_session_tokens: 0}\n",
            "inference.max_session_tokens: must be at least 1, found 0",
        ),
        (
            "inference: {max_session_tokens: -5}\n",
            "inference.max_session_tokens: must be at least 1, found -5",
        ),
        (
            "inference: {max_session_tokens: 1000000000001}\n",
            "inference.max_session_tokens: must be at most 1000000000000, found 1000000000001",
        ),
        (
            "inference: {max_session_tokens: lots}\n",
            "inference.max_session_tokens: must be an integer, found a string",
        ),
        (
            "inference: {system_prompt: [a]}\n",
            "inference.system_prompt: must be a string, found a list",
        ),
        (
            "trace: {retain: {}}\n",
            "trace.retain: must set max_sessions, max_age or both",
        ),
        (
            "trace: {retain: {max_sessions: 0}}\n",
            "trace.retain.max_sessions: must be at least 1, found 0",
        ),
        (
            "trace: {retain: {max_age: 0}}\n",
            "trace.retain.max_age: must be greater than zero",
        ),
        (
            "trace: {retain: {max_age: 3w}}\n",
            "trace.retain.max_age: must be a duration such as 3600, 90s, 30m, 12h or 7d, found '3w'",
        ),
        (
            "trace: {retain: {max_age: 1.5}}\n",
            "trace.retain.max_age: must be a duration such as 3600, 90s, 30m, 12h or 7d, found a number",
        ),
        (
            "trace: {retain: {max_age: h}}\n",
            "trace.retain.max_age: must be a duration such as 3600, 90s, 30m, 12h or 7d, found 'h'",
        ),
        (
            "trace: {retain: {max_age: 99999999999999999999d}}\n",
            "trace.retain.max_age: '99999999999999999999d' is too large",
        ),
    ];
    for (body, want) in keyed {
        let d = refused(&format!("{HEAD}{body}"));
        assert_eq!(d.code, E_MAN_001, "{body:?}");
        assert_eq!(d.message, format!("murmur.yaml: {want}"), "{body:?}");
    }
}

#[test]
fn api_key_must_name_a_variable_and_is_never_echoed() {
    for bad in ["sk-live-SECRET", "${}", "${1A}", "$OPENAI_API_KEY", "${A-B}", "'${A} '"] {
        let d = refused(&format!("{HEAD}inference:\n  api_key: {bad}\n"));
        assert_eq!(d.code, E_MAN_001, "{bad}");
        assert!(
            d.message
                .starts_with("murmur.yaml: inference.api_key: must be written `${VAR}`"),
            "{}",
            d.message
        );
        assert!(!d.message.contains("SECRET"));
    }
    assert_eq!(
        ok("inference: {api_key: '${_K9}'}\n")
            .manifest
            .inference
            .unwrap()
            .api_key_var
            .as_deref(),
        Some("_K9")
    );
}

#[test]
fn rule_conflicts() {
    let table: &[(&str, &str)] = &[
        (
            "inference: {model: m}\ncomponent: c.wasm\n",
            "inference: cannot be declared together with component: a capsule either runs a model (inference) or a WebAssembly component (component), not both",
        ),
        (
            "lifecycle: {task_acceptance: queue, queue_depth: 0}\n",
            "lifecycle.queue_depth: must be at least 1 when lifecycle.task_acceptance is queue: a queue of depth 0 holds no waiting task",
        ),
        (
            "network: {authentication: {scheme: bearer}}\ncapabilities: {spawn: {allow: [local/helper, gh/x]}}\n",
            "network.authentication: cannot be declared together with capabilities.spawn.allow: this capsule may delegate to 'local/helper', 'gh/x', but a capsule whose door requires authentication serves a formation, and a formation member cannot delegate to child capsules",
        ),
        (
            "inference: {provider: anthropic, reasoning_effort: high}\n",
            "inference.reasoning_effort: cannot be declared together with inference.provider: anthropic: 'high' is a field of OpenAI's Chat Completions API, and the Anthropic Messages API has no such field",
        ),
    ];
    for (body, want) in table {
        let d = refused(&format!("{HEAD}{body}"));
        assert_eq!(d.code, E_MAN_003, "{body:?}");
        assert_eq!(d.message, *want);
        assert!(d.hint().is_some());
    }
    // Not conflicts: depth 0 outside queue; an empty spawn list beside authentication.
    assert_eq!(ok("lifecycle: {queue_depth: 0}\n").manifest.holds(), 1);
    ok("network: {authentication: {}}\ncapabilities: {spawn: {allow: []}}\n");
    // A type error anywhere is reported before a conflict.
    let d = refused(&format!(
        "{HEAD}inference: {{}}\ncomponent: c\nlifecycle: {{queue_depth: x}}\n"
    ));
    assert_eq!(d.code, E_MAN_001);
}

#[test]
fn load_file_reports_absence_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("murmur.yaml");
    let d = load_file(&path).unwrap_err();
    assert_eq!(
        (d.code, d.message.clone()),
        (E_MAN_001, format!("murmur.yaml not found at {}", path.display()))
    );
    std::fs::write(&path, HEAD).unwrap();
    assert_eq!(load_file(&path).unwrap().manifest.version, "1.2.0");
    std::fs::write(&path, b"name: \xff\n").unwrap();
    assert!(
        load_file(&path)
            .unwrap_err()
            .message
            .starts_with("murmur.yaml: is not UTF-8 text")
    );
    let d = load_file(dir.path()).unwrap_err();
    assert!(d.message.starts_with("failed to read murmur.yaml at "), "{}", d.message);
}

#[test]
fn plain_http_endpoints_reach_only_loopback() {
    for url in [
        "http://evil.example",
        "http://10.1.2.3:8080/v1",
        "http://127.0.0.1@evil.example",
    ] {
        let d = refused(&format!("{HEAD}inference:\n  endpoint: '{url}'\n"));
        assert_eq!(d.code, E_MAN_001, "{url}");
        assert_eq!(
            d.message,
            format!(
                "murmur.yaml: inference.endpoint: '{url}' would send the API key over plain http to a host that is not this machine; plain http:// is allowed only to loopback (127.0.0.0/8, [::1], localhost)"
            )
        );
        assert!(d.hint().is_some_and(|h| h.starts_with("use https://")), "{url}");
    }
    for url in [
        "http://127.0.0.1:9",
        "http://localhost:11434/v1",
        "http://[::1]:8080",
        "https://evil.example",
    ] {
        let inf = ok(&format!("inference:\n  endpoint: '{url}'\n"))
            .manifest
            .inference
            .unwrap();
        assert_eq!(inf.endpoint.as_deref(), Some(url));
    }
}

#[test]
fn the_receiver_is_the_endpoints_host_or_the_providers() {
    let table = [
        ("inference: {provider: openai}\n", Some("api.openai.com")),
        ("inference: {provider: anthropic}\n", Some("api.anthropic.com")),
        (
            "inference: {provider: openai, endpoint: 'http://127.0.0.1:9/v1'}\n",
            Some("127.0.0.1:9"),
        ),
        (
            "inference: {endpoint: 'https://llm.example.com:8443'}\n",
            Some("llm.example.com:8443"),
        ),
        ("inference: {}\n", None),
    ];
    for (body, want) in table {
        assert_eq!(ok(body).manifest.inference.unwrap().receiver(), want, "{body}");
    }
}

#[test]
fn api_key_may_not_name_a_runtime_variable() {
    // (variable, refused): the rule is member_env's, tested there in full; here, that the
    // manifest applies it with its code.
    for (var, runtimes) in [
        ("MURMUR_FORMATION_CHANNEL", true),
        ("OTEL_EXPORTER_OTLP_HEADERS", true),
        ("HOME", true),
        ("OPENAI_API_KEY", false),
    ] {
        let block = format!("inference:\n  api_key: ${{{var}}}\n");
        if !runtimes {
            assert_eq!(ok(&block).manifest.inference.unwrap().api_key_var.as_deref(), Some(var));
            continue;
        }
        let d = refused(&format!("{HEAD}{block}"));
        assert_eq!(d.code, E_MAN_004, "{var}");
        assert_eq!(
            d.message,
            format!(
                "murmur.yaml: inference.api_key: names {var}, a variable the runtime passes to every member, so the key's endpoint would be sent what it holds"
            )
        );
        assert_eq!(d.hint(), E_MAN_004.default_hint, "the registry's hint applies");
    }
}

/// `exports.skills` and `exports.input_modes` feed the agent card (A2A v1.0 §4.4.1 AgentCard
/// `skills`, `defaultInputModes`) and the parts SendMessage accepts.
#[test]
fn skills_and_input_modes() {
    let p = ok(concat!(
        "exports:\n  input_modes: [image/png, 'application/*']\n  skills:\n",
        "    - id: review\n      name: Code review\n      description: reviews a diff\n",
        "      tags: [code]\n      examples: [review this]\n      colour: blue\n",
        "    - {id: plain, name: Plain, description: no tags}\n",
    ));
    assert_eq!(
        p.manifest.skills,
        vec![
            Skill {
                id: "review".into(),
                name: "Code review".into(),
                description: "reviews a diff".into(),
                tags: vec!["code".into()],
                examples: vec!["review this".into()],
            },
            Skill {
                id: "plain".into(),
                name: "Plain".into(),
                description: "no tags".into(),
                tags: vec![],
                examples: vec![],
            },
        ]
    );
    assert_eq!(p.manifest.input_modes, ["image/png", "application/*"]);
    let warned: Vec<&str> = p.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(
        warned,
        ["murmur.yaml: exports.skills[0].colour: unknown key; it is ignored"]
    );
    let table = [
        (
            "exports:\n  skills: x\n",
            "exports.skills: must be a list of skills, found",
        ),
        ("exports:\n  skills: [x]\n", "exports.skills[0]: must be a mapping"),
        (
            "exports:\n  skills: [{name: n, description: d}]\n",
            "exports.skills[0].id: is required in a skill",
        ),
        (
            "exports:\n  skills: [{id: ' ', name: n, description: d}]\n",
            "exports.skills[0].id: must not be blank",
        ),
        (
            "exports:\n  skills: [{id: a, name: n, description: d}, {id: a, name: m, description: e}]\n",
            "exports.skills[1].id: 'a' is the id of an earlier skill",
        ),
        (
            "exports:\n  skills: [{id: a, name: n, description: d, tags: x}]\n",
            "exports.skills[0].tags: must be a list",
        ),
        (
            "exports:\n  input_modes: [png]\n",
            "exports.input_modes[0]: 'png' is not a media type",
        ),
        (
            "exports:\n  input_modes: ['image/png; q=1']\n",
            "exports.input_modes[0]:",
        ),
        (
            "exports:\n  input_modes: image/png\n",
            "exports.input_modes: must be a list of strings",
        ),
    ];
    for (body, want) in table {
        let d = refused(&format!("{HEAD}{body}"));
        assert_eq!(d.code, E_MAN_001, "{body}");
        assert!(d.message.contains(want), "{body}: {}", d.message);
    }
}

#[test]
fn media_ranges() {
    let ranges = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let table: &[(&[&str], &str, bool)] = &[
        (&["image/png"], "image/png", true),
        (&["image/png"], "IMAGE/PNG; q=1", true),
        (&["image/png"], "image/jpeg", false),
        (&["image/*"], "image/jpeg", true),
        (&["image/*"], "text/plain", false),
        (&["*/*"], "application/pdf", true),
        (&["*/*"], "nonsense", false),
        (&["image/*"], "image/", false),
        (&[], "image/png", false),
    ];
    for (r, media, want) in table {
        assert_eq!(accepts_media(&ranges(r), media), *want, "{r:?} {media}");
    }
    for (m, ok) in [
        ("image/png", true),
        ("image/*", true),
        ("*/*", true),
        ("application/vnd.a+json", true),
        ("*/png", false),
        ("png", false),
        ("image/", false),
        ("image/png;q=1", false),
        ("image /png", false),
    ] {
        assert_eq!(media_range_ok(m), ok, "{m}");
    }
}

#[test]
fn build_language() {
    // Each language, read beside the component it makes.
    for (word, lang) in [
        ("python", Language::Python),
        ("javascript", Language::JavaScript),
        ("rust", Language::Rust),
    ] {
        let p = ok(&format!("component: capsule.wasm\nbuild: {{language: {word}}}\n"));
        assert_eq!(p.manifest.build, Some(lang), "{word}");
        assert_eq!(lang.as_str(), word);
        assert!(p.warnings.is_empty());
    }
    // Absent (or null) means the component is packed as it is.
    assert_eq!(ok("component: capsule.wasm\n").manifest.build, None);
    assert_eq!(ok("component: capsule.wasm\nbuild:\n").manifest.build, None);
    // An unknown key of the block warns like any other.
    let p = ok("component: c.wasm\nbuild: {language: rust, profile: release}\n");
    assert_eq!(
        p.warnings.iter().map(|w| w.render("")).collect::<Vec<_>>(),
        ["warning[W-SEC-019]: murmur.yaml: build.profile: unknown key; it is ignored"]
    );

    let types: &[(&str, &str)] = &[
        (
            "build: python\n",
            "murmur.yaml: build: must be a mapping, found a string",
        ),
        (
            "build: {}\n",
            "murmur.yaml: build.language: is required whenever build is present",
        ),
        (
            "build: {language: go}\n",
            "murmur.yaml: build.language: must be one of `python`, `javascript`, `rust`, found 'go'",
        ),
        (
            "build: {language: Python}\n",
            "murmur.yaml: build.language: must be one of `python`, `javascript`, `rust`, found 'Python'",
        ),
        (
            "build: {language: [python]}\n",
            "murmur.yaml: build.language: must be one of `python`, `javascript`, `rust`, found a list",
        ),
    ];
    for (body, want) in types {
        let d = refused(&format!("{HEAD}component: c.wasm\n{body}"));
        assert_eq!((d.code, d.message.as_str()), (E_MAN_001, *want), "{body:?}");
    }

    // Sources without a place for the component they make, a model capsule included: parsed
    // (install and admission take them), refused by what mur build checks first.
    assert_eq!(
        ok("component: c.wasm\nbuild: {language: rust}\n")
            .manifest
            .check_build(),
        Ok(Some((Language::Rust, "c.wasm")))
    );
    assert_eq!(ok("component: c.wasm\n").manifest.check_build(), Ok(None));
    for body in [
        "build: {language: python}\n",
        "inference: {model: m}\nbuild: {language: javascript}\n",
    ] {
        let d = ok(body).manifest.check_build().expect_err(body);
        assert_eq!(d.code, E_MAN_003, "{body:?}");
        assert!(
            d.message.starts_with("build.language: needs component: beside it"),
            "{}",
            d.message
        );
        assert!(d.hint().is_some());
    }
}

const MODEL: &str = "inference: {provider: openai, model: m}\n";

#[test]
fn tools_of_both_kinds() {
    let m = ok(&format!(
        "{MODEL}tools:\n\
         - {{name: words, component: tools/words/tool.wasm, build: {{language: python}}}}\n\
         - {{name: fetch, component: tools/fetch/tool.wasm, capabilities: {{network: {{allow: ['https://example.com']}}}}}}\n\
         - {{name: calc, mcp: 'http://127.0.0.1:9000/mcp', api_key: '${{CALC_KEY}}', allow: [add, word_count]}}\n\
         - {{name: search, mcp: 'https://search.example/mcp', allow: [Query-1]}}\n"
    ))
    .manifest;
    assert_eq!(
        m.tools,
        [
            ToolDecl {
                name: "words".into(),
                source: ToolSource::Wasm {
                    component: "tools/words/tool.wasm".into(),
                    build: Some(Language::Python),
                    network_allow: vec![],
                },
            },
            ToolDecl {
                name: "fetch".into(),
                source: ToolSource::Wasm {
                    component: "tools/fetch/tool.wasm".into(),
                    build: None,
                    network_allow: vec!["https://example.com".into()],
                },
            },
            ToolDecl {
                name: "calc".into(),
                source: ToolSource::Mcp {
                    url: "http://127.0.0.1:9000/mcp".into(),
                    api_key_var: Some("CALC_KEY".into()),
                    allow: vec!["add".into(), "word_count".into()],
                },
            },
            ToolDecl {
                name: "search".into(),
                source: ToolSource::Mcp {
                    url: "https://search.example/mcp".into(),
                    api_key_var: None,
                    allow: vec!["Query-1".into()],
                },
            },
        ]
    );
    assert_eq!(m.tools[2].mcp_tool_name("add"), "calc__add");
    assert!(ok(MODEL).manifest.tools.is_empty());
}

#[test]
fn bad_tools_entries() {
    let long = "a".repeat(62);
    let many = (0..=32)
        .map(|i| format!("{{name: t{i}, component: t.wasm}}"))
        .collect::<Vec<_>>()
        .join(", ");
    // (tools value, code, words the message holds)
    let table: Vec<(String, crate::diag::Code, &str)> = vec![
        ("{name: words}".into(), E_MAN_001, "tools: must be a list"),
        ("[words]".into(), E_MAN_001, "tools[0]: must be a mapping"),
        ("[{component: t.wasm}]".into(), E_MAN_001, "tools[0].name: is required"),
        (
            "[{name: Words, component: t.wasm}]".into(),
            E_MAN_001,
            "is not a tool name",
        ),
        (
            "[{name: a_b, component: t.wasm}]".into(),
            E_MAN_001,
            "is not a tool name",
        ),
        (
            "[{name: a--b, component: t.wasm}]".into(),
            E_MAN_001,
            "is not a tool name",
        ),
        (
            format!("[{{name: {long}, component: t.wasm}}]"),
            E_MAN_001,
            "is not a tool name",
        ),
        (
            "[{name: call-member, component: t.wasm}]".into(),
            E_MAN_001,
            "the runtime itself",
        ),
        (
            "[{name: request-input, component: t.wasm}]".into(),
            E_MAN_001,
            "the runtime itself",
        ),
        (
            "[{name: w, component: a.wasm}, {name: w, component: b.wasm}]".into(),
            E_MAN_001,
            "tools[1].name: 'w' names an earlier tool",
        ),
        ("[{name: w}]".into(), E_MAN_001, "needs `component`"),
        (
            "[{name: w, component: t.wasm, mcp: 'https://x.example/mcp', allow: [a]}]".into(),
            E_MAN_003,
            "not both",
        ),
        ("[{name: w, component: /abs/t.wasm}]".into(), E_MAN_001, "relative path"),
        ("[{name: w, component: ../t.wasm}]".into(), E_MAN_001, "relative path"),
        ("[{name: w, component: ' '}]".into(), E_MAN_001, "must not be blank"),
        (
            "[{name: w, component: t.wasm, allow: [a]}]".into(),
            E_MAN_003,
            "tools[0].allow: cannot be declared together with tools[0].component",
        ),
        (
            "[{name: w, component: t.wasm, api_key: '${K}'}]".into(),
            E_MAN_003,
            "tools[0].api_key",
        ),
        (
            "[{name: w, component: t.wasm, capabilities: {network: {allow: ['http://']}}}]".into(),
            E_MAN_001,
            "tools[0].capabilities.network.allow[0]",
        ),
        (
            "[{name: c, mcp: 'https://x.example/mcp'}]".into(),
            E_MAN_001,
            "tools[0].allow: is required",
        ),
        (
            "[{name: c, mcp: 'https://x.example/mcp', allow: []}]".into(),
            E_MAN_001,
            "at least one",
        ),
        (
            "[{name: c, mcp: 'https://x.example/mcp', allow: [a, a]}]".into(),
            E_MAN_001,
            "listed twice",
        ),
        (
            "[{name: c, mcp: 'https://x.example/mcp', allow: [a.b]}]".into(),
            E_MAN_001,
            "tools[0].allow[0]",
        ),
        (
            format!("[{{name: c, mcp: 'https://x.example/mcp', allow: [{long}]}}]"),
            E_MAN_001,
            "at most 64",
        ),
        (
            "[{name: c, mcp: 'http://mcp.example/mcp', allow: [a]}]".into(),
            E_MAN_001,
            "plain http",
        ),
        (
            "[{name: c, mcp: 'ftp://x.example', allow: [a]}]".into(),
            E_MAN_001,
            "http:// or https://",
        ),
        (
            "[{name: c, mcp: 'https://x.example/mcp', api_key: sk-live-123, allow: [a]}]".into(),
            E_MAN_001,
            "tools[0].api_key: must be written",
        ),
        (
            "[{name: c, mcp: 'https://x.example/mcp', allow: [a], capabilities: {}}]".into(),
            E_MAN_003,
            "capabilities",
        ),
        (format!("[{many}]"), E_MAN_001, "at most 32"),
    ];
    for (tools, code, words) in table {
        let d = refused(&format!("{HEAD}{MODEL}tools: {tools}\n"));
        assert_eq!(d.code, code, "{tools}: {}", d.render(""));
        assert!(d.message.contains(words), "{tools}: {:?} lacks {words:?}", d.message);
        assert!(!d.message.contains("sk-live-123"), "a pasted key is never echoed");
    }
    // Tools are for models only.
    let d = refused(&format!(
        "{HEAD}component: c.wasm\ntools: [{{name: w, component: t.wasm}}]\n"
    ));
    assert_eq!(
        (d.code, d.message.contains("needs inference")),
        (E_MAN_003, true),
        "{}",
        d.message
    );
    // An unknown key in an entry warns, as everywhere.
    let p = ok(&format!(
        "{MODEL}tools: [{{name: w, component: t.wasm, colour: red}}]\n"
    ));
    assert!(
        p.warnings
            .iter()
            .any(|w| w.code == W_SEC_019 && w.message.contains("tools[0].colour"))
    );
}

#[test]
fn a_remote_block_makes_a_remote_capsule() {
    let p = ok(
        "remote:\n  url: https://agent.example/.well-known/agent-card.json\n  api_key: ${AGENT_KEY}\n  timeout: 30\n",
    );
    assert_eq!(p.manifest.kind, Kind::Remote);
    assert_eq!(
        p.manifest.remote,
        Some(Remote {
            url: "https://agent.example/.well-known/agent-card.json".into(),
            api_key_var: Some("AGENT_KEY".into()),
            timeout_secs: 30,
            card_key: None,
        })
    );
    let key = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    let pinned = ok(&format!("remote: {{url: 'https://a.example', card_key: {key}}}\n")).manifest;
    assert_eq!(pinned.remote.and_then(|r| r.card_key).as_deref(), Some(key));
    assert_eq!(p.manifest.key_vars(), ["AGENT_KEY"]);
    let loopback = ok("remote: {url: 'http://127.0.0.1:9999/'}\n").manifest;
    assert_eq!(
        loopback.remote.map(|r| (r.api_key_var, r.timeout_secs)),
        Some((None, DEFAULT_REMOTE_TIMEOUT_SECS))
    );
    assert!(
        ok("remote: {url: 'https://a.example', extra: 1}\n").warnings[0]
            .message
            .contains("remote.extra: unknown key")
    );

    // Each refusal: its code and the part of its message that says why.
    let rows: [(&str, Code, &str); 11] = [
        ("remote: {}\n", E_MAN_001, "remote.url: is required"),
        (
            "remote: {url: 'https://a.example', card_key: not-a-key}\n",
            E_MAN_001,
            "remote.card_key: must be an Ed25519 public key in base64url",
        ),
        (
            "remote: {url: 'https://a.example', card_key: 7}\n",
            E_MAN_001,
            "remote.card_key: must be a string",
        ),
        ("remote: {url: 7}\n", E_MAN_001, "remote.url: must be a string"),
        (
            "remote: {url: 'ftp://a.example'}\n",
            E_MAN_001,
            "must be an http:// or https:// URL",
        ),
        ("remote: {url: 'http://agent.example/'}\n", E_MAN_001, "plain http"),
        (
            "remote: {url: 'https://a.example', api_key: sk-123}\n",
            E_MAN_001,
            "must be written `${VAR}`",
        ),
        (
            "remote: {url: 'https://a.example', api_key: '${MURMUR_FORMATION_ID}'}\n",
            E_MAN_004,
            "remote.api_key",
        ),
        (
            "remote: {url: 'https://a.example', timeout: 0}\n",
            E_MAN_001,
            "remote.timeout: must be at least 1",
        ),
        (
            "remote: {url: 'https://a.example', timeout: 86401}\n",
            E_MAN_001,
            "must be at most 86400",
        ),
        (
            "remote: {url: 'https://a.example'}\ncomponent: c.wasm\n",
            E_MAN_003,
            "remote: cannot be declared together with component",
        ),
    ];
    for (body, code, why) in rows {
        let d = refused(&format!("{HEAD}{body}"));
        assert_eq!(d.code, code, "{body}: {}", d.message);
        assert!(d.message.contains(why), "{body}: {}", d.message);
        assert!(
            !d.message.contains("sk-123"),
            "a pasted key is never echoed: {}",
            d.message
        );
    }
    let d = refused(&format!(
        "{HEAD}remote: {{url: 'https://a.example'}}\ninference: {{model: m}}\n"
    ));
    assert_eq!(d.code, E_MAN_003);
    assert!(d.hint().is_some_and(|h| h.contains("remove `inference`")), "{d:?}");
}
