use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

/// Keeps `schemas/<file>` equal to what this module generates; `MUR_UPDATE_SCHEMAS=1` rewrites it.
fn in_step(file: &str, schema: &Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join("schemas")
        .join(file);
    let want = render(schema);
    if std::env::var_os("MUR_UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale: run MUR_UPDATE_SCHEMAS=1 cargo test --workspace --lib schema::",
        path.display()
    );
}

#[test]
fn checked_in_schemas_are_in_step() {
    in_step("roster.schema.json", &roster());
    in_step("murmur.schema.json", &manifest());
}

/// Every object of `schema` reachable through `properties`, `items` and `oneOf`, with the
/// JSON-pointer-ish steps into a document (`members`, then index 0, …) and its property names.
fn objects(schema: &Value, steps: Vec<Value>, out: &mut Vec<(Vec<Value>, BTreeSet<String>)>) {
    if let Some(props) = schema["properties"].as_object() {
        out.push((steps.clone(), props.keys().cloned().collect()));
        for (k, v) in props {
            let mut s = steps.clone();
            s.push(json!(k));
            objects(v, s, out);
        }
    }
    if schema.get("items").is_some() {
        let mut s = steps.clone();
        s.push(json!(0));
        objects(&schema["items"], s, out);
    }
    for alt in schema["oneOf"].as_array().into_iter().flatten() {
        objects(alt, steps.clone(), out);
    }
}

/// `doc` with `key: null` added to the mapping at `steps`.
fn with_key(doc: &Value, steps: &[Value], key: &str) -> Value {
    let mut d = doc.clone();
    let mut at = &mut d;
    for s in steps {
        at = match s {
            Value::String(k) => &mut at[k.as_str()],
            Value::Number(n) => &mut at[n.as_u64().unwrap_or(0) as usize],
            _ => unreachable!(),
        };
    }
    at.as_object_mut()
        .unwrap_or_else(|| panic!("the base document has no mapping at {steps:?}"))
        .insert(key.into(), Value::Null);
    d
}

/// Identifier-like string literals of a parser's source: every key it reads is among them.
fn literals(source: &str) -> BTreeSet<String> {
    source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_owned)
        .collect()
}

/// For every object of `schema`, every key the schema lists there or the parser's source names
/// is known to the parser (`known`) exactly when the schema lists it.
fn same_keys(schema: &Value, base: &Value, source: &str, known: impl Fn(&Value, &[Value], &str) -> bool) {
    same_keys_where(schema, base, source, |_| true, known)
}

/// [`same_keys`] for the objects of `schema` at the steps `only` takes: a block that cannot be
/// declared beside the others (`remote`) is probed in a base document of its own.
fn same_keys_where(
    schema: &Value,
    base: &Value,
    source: &str,
    only: impl Fn(&[Value]) -> bool,
    known: impl Fn(&Value, &[Value], &str) -> bool,
) {
    let mut objs = Vec::new();
    objects(schema, Vec::new(), &mut objs);
    objs.retain(|(steps, _)| only(steps));
    assert!(!objs.is_empty());
    let candidates = literals(source);
    for (steps, keys) in &objs {
        for key in keys.iter().chain(&candidates) {
            let doc = with_key(base, steps, key);
            assert_eq!(
                known(&doc, steps, key),
                keys.contains(key),
                "key `{key}` at {steps:?}: the parser and the schema disagree"
            );
        }
    }
}

#[test]
fn roster_schema_and_parser_know_the_same_keys() {
    let base = json!({
        "roster_version": 1,
        "members": [
            {"name": "lead", "capsule": "local/lead", "version": "0.1.0", "entry": true},
            {"name": "worker", "capsule": "local/worker", "version": "0.1.0"},
        ],
        "reachability": [{"from": "lead", "to": ["worker"]}],
    });
    crate::roster::parse(base.to_string().as_bytes()).unwrap();
    // An unknown key is E-ROS-001 `…: unknown key; … accepts only …`; a known key set to null is
    // at worst a type error.
    same_keys(
        &roster(),
        &base,
        include_str!("../roster/parse.rs"),
        |doc, _, _| match crate::roster::parse(doc.to_string().as_bytes()) {
            Ok(_) => true,
            Err(d) => !d.message.contains("unknown key"),
        },
    );
}

#[test]
fn manifest_schema_and_parser_know_the_same_keys() {
    let base = json!({
        "name": "probe",
        "version": "0.1.0",
        "exports": {
            "peer_tasks": {"accept": true},
            "skills": [{"id": "s", "name": "S", "description": "does s", "tags": ["t"], "examples": ["e"]}],
            "input_modes": ["image/png"],
        },
        "network": {"authentication": {"scheme": "bearer"}},
        "lifecycle": {"task_acceptance": "queue", "queue_depth": 1},
        "capabilities": {"network": {"allow": ["localhost"]}, "spawn": {"allow": []}},
        "inference": {"provider": "openai", "model": "m"},
        "tools": [{"name": "w", "component": "t.wasm", "build": {"language": "rust"}, "capabilities": {"network": {"allow": ["localhost"]}}}],
        "trace": {"retain": {"max_sessions": 3}},
        "build": {"language": "python"},
    });
    let parsed = crate::manifest::parse(base.to_string().as_bytes()).unwrap();
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    // An unknown key is a W-SEC-019 warning naming its path (and the parse goes on); a known key
    // set to null is absent or a type error, never that warning.
    let remote = |steps: &[Value]| steps.first().and_then(Value::as_str) == Some("remote");
    let remote_base = json!({"name": "probe", "version": "0.1.0", "remote": {"url": "https://a.example"}});
    assert!(
        crate::manifest::parse(remote_base.to_string().as_bytes())
            .unwrap()
            .warnings
            .is_empty()
    );
    for (base, only) in [
        (&base, &(|s: &[Value]| !remote(s)) as &dyn Fn(&[Value]) -> bool),
        (&remote_base, &remote),
    ] {
        same_keys_where(
            &manifest(),
            base,
            include_str!("../manifest/parse.rs"),
            only,
            |doc, steps, key| {
                // A list item's keys are named `list[i].key`.
                let mut path = String::new();
                for s in steps {
                    match s {
                        Value::Number(n) => path.push_str(&format!("[{n}]")),
                        _ => {
                            if !path.is_empty() {
                                path.push('.');
                            }
                            path.push_str(s.as_str().unwrap_or_default());
                        }
                    }
                }
                let warning = format!(
                    "murmur.yaml: {}: unknown key; it is ignored",
                    if path.is_empty() {
                        key.to_string()
                    } else {
                        format!("{path}.{key}")
                    }
                );
                match crate::manifest::parse(doc.to_string().as_bytes()) {
                    // The warning may go on with a "did you mean".
                    Ok(p) => !p.warnings.iter().any(|w| w.message.starts_with(&warning)),
                    Err(_) => true,
                }
            },
        );
    }
}
