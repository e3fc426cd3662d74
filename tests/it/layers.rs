//! The layers point one way: the runtime (launcher, session, door, capsule host, …) never imports
//! the command line, which is a thin shell over it, and nothing but the command line imports the
//! door, a component the session starts: the task model is `tasks`, which the door renders as A2A.
//! Read from the sources, so a new import fails here before it grows into a cycle.

use std::path::Path;

use crate::support::repo_root;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn nothing_below_the_command_line_imports_it() {
    let src = repo_root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("crate::cli") || code.contains("mur::cli") {
                offenders.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "the runtime imports the CLI:\n{}",
        offenders.join("\n")
    );
}

/// The uses of `crate::door` outside the door and the command line, each with why it needs the
/// door itself rather than the task model (`crate::tasks`). Matched line by line, exactly.
const DOOR_USES: &[(&str, &str)] = &[
    // The session starts the door and hands it its configuration.
    ("session/mod.rs", "use crate::door::{Door, DoorConfig, FormationTrust};"),
    // The calls client is tested against a real door, as a peer member runs it.
    ("calls/tests.rs", "use crate::door::{Door, DoorConfig, FormationTrust};"),
    // `mur ui` is served by the door's server, with its head, write-stall and in-flight
    // bounds: every listener of the project keeps the same ones.
    ("ui/mod.rs", "use crate::door::{conn, serve};"),
    // A cluster's probe must ask for the very path the door serves its public card on.
    (
        "deploy/tests.rs",
        "assert_eq!(CARD_PATH, crate::door::auth::CARD_PATH);",
    ),
];

#[test]
fn only_the_session_and_the_command_line_import_the_door() {
    let src = repo_root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        if rel.starts_with("door") || rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if !(code.contains("crate::door") || code.contains("mur::door")) {
                continue;
            }
            let allowed = DOOR_USES
                .iter()
                .any(|(f, use_)| rel == Path::new(f) && line.trim() == *use_);
            if !allowed {
                offenders.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "the door is imported outside the session's start-up (take the task model from crate::tasks):\n{}",
        offenders.join("\n")
    );
}

/// The top-level modules of this crate a source names through `crate::` (or `mur::`), however
/// the path is written: `crate::capsule::X`, `crate::{capsule, tasks}`, `crate::{capsule::X}`,
/// across lines. Comments are left out; string literals are not, so a mention there counts too.
fn crate_modules_named(text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut named = Vec::new();
    for root in ["crate", "mur"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            from = at + root.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = code[from..].trim_start();
            let Some(rest) = rest.strip_prefix("::") else {
                continue;
            };
            let rest = rest.trim_start();
            if let Some(group) = rest.strip_prefix('{') {
                // The group's top-level items, each named by its first segment.
                let (mut depth, mut item_start) = (0usize, true);
                for (k, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if c.is_whitespace() => {}
                        _ if item_start && depth == 0 => {
                            item_start = false;
                            named.push((line_of(at), ident(&group[k..])));
                        }
                        _ => {}
                    }
                }
            } else {
                named.push((line_of(at), ident(rest)));
            }
        }
    }
    named
}

#[test]
fn the_import_reader_sees_grouped_and_split_paths() {
    let text = "use crate::{\n    tasks::Board,\n    capsule::{A, B},\n};\nuse crate :: capsule;\n// crate::capsule\nlet x = mur::capsule::Y;\nuse crate::{runner, self as c};";
    let named = crate_modules_named(text);
    let capsule: Vec<usize> = named.iter().filter(|(_, m)| m == "capsule").map(|(l, _)| *l).collect();
    assert_eq!(capsule, [1, 5, 7], "{named:?}");
    assert!(named.iter().any(|(_, m)| m == "runner"), "{named:?}");
    assert!(named.iter().any(|(_, m)| m == "tasks"), "{named:?}");
}

/// The runners that do not host WebAssembly take what they share with the component host from
/// `crate::runner` (cancellation, member calls, outcomes, the outgoing-HTTP policy), never from
/// `crate::capsule`: a model, a remote agent and the member calls run without the wasmtime host.
/// Their tests may still run a component.
#[test]
fn model_remote_and_calls_do_not_import_the_component_host() {
    let src = repo_root().join("src");
    let mut offenders = Vec::new();
    for dir in ["model", "remote", "calls"] {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        assert!(!files.is_empty(), "src/{dir} has sources");
        for file in files {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("read source");
            let rel = file.strip_prefix(&src).expect("under src");
            for (line, module) in crate_modules_named(&text) {
                if module == "capsule" {
                    offenders.push(format!("{}:{line}", rel.display()));
                }
            }
            // `super::` reaching the crate root from a module's own file.
            let depth = rel.components().count() - usize::from(rel.ends_with("mod.rs"));
            let root = "super::".repeat(depth);
            for (n, l) in text.lines().enumerate() {
                let code = l.split("//").next().unwrap_or("");
                if code.replace(' ', "").contains(&format!("{root}capsule")) {
                    offenders.push(format!("{}:{}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "the model, remote and calls runners import the component host (take the shared types from crate::runner):\n{}",
        offenders.join("\n")
    );
}
