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

/// One way out to the network: awc's clients and connectors are built, and TCP connections
/// dialled, in `src/outbound/` only, where the owner check, the TLS configuration and the refusal
/// of redirects are. A test module's own sockets (servers it dials to check them) are not
/// requests the runtime sends.
#[test]
fn only_the_outbound_module_builds_clients_or_dials() {
    const DIALS: &[&str] = &[
        "awc::Client::builder",
        "awc::Client::default",
        "awc::Client::new",
        "awc::ClientBuilder",
        "awc::Connector",
        "TcpStream::connect",
        "rustls::ClientConfig",
    ];
    let src = repo_root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        if rel.starts_with("outbound") || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        // A file's own unit tests come last, after `#[cfg(test)]`.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if DIALS.iter().any(|d| code.contains(d)) {
                offenders.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "outbound HTTP outside src/outbound/:\n{}",
        offenders.join("\n")
    );
}
