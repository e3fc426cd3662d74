//! The layers point one way: the runtime (launcher, session, door, capsule host, …) never imports
//! the command line, which is a thin shell over it, and nothing but the command line and the
//! session's start-up imports the door, a component the session starts: the task model is
//! `tasks`, which the door renders as A2A.
//!
//! [`ALLOWED`] is the table of which top-level module of `src/` may import which. The sources are
//! read token by token (comments and literals skipped), every `use` tree is expanded to its paths
//! (so `use crate::{door, tasks::Board}` counts as both), and every other `crate::…` or
//! `super::…` path in code counts too; a path is judged by the top-level module it lands in. The
//! pure core's modules (re-exported by `src/lib.rs`) are open to everyone and are not listed. A
//! new import fails here before it grows into a cycle, and an allowance nothing uses any more
//! fails too, so the table stays the truth.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::repo_root;

/// For each top-level module of `src/`, the top-level modules its code may import. Nothing
/// imports `cli`; only the session's start-up and `mur ui` import `door`. The model, remote
/// agents and member calls run without the WebAssembly host: they share `runner`, not `capsule`.
const ALLOWED: &[(&str, &[&str])] = &[
    ("calls", &["channel", "otel", "outbound", "runner", "tasks"]),
    ("capsule", &["channel", "peer_door", "runner", "tasks"]),
    ("channel", &[]),
    (
        "cli",
        &[
            "capsule", "deploy", "door", "launcher", "model", "operator", "outbound", "progress", "scaffold",
            "session", "tools", "ui",
        ],
    ),
    ("deploy", &["channel"]),
    ("door", &["outbound", "peer_door", "tasks"]),
    (
        "launcher",
        &["capsule", "channel", "otel", "outbound", "peer_door", "progress"],
    ),
    // otel: an MCP tool call carries its task's trace context to the server.
    ("model", &["calls", "otel", "outbound", "runner", "tasks", "tools"]),
    ("operator", &["outbound"]),
    ("otel", &["outbound"]),
    // The one way out to the network: TLS, owner-checked dials, framing, Retry-After.
    ("outbound", &["channel", "peer_door"]),
    ("peer_door", &["channel"]),
    ("progress", &[]),
    // The port the runners share: cancellation, member calls, outcomes, the outgoing-HTTP policy.
    ("runner", &["channel", "tasks"]),
    ("remote", &["otel", "outbound", "tasks"]),
    ("scaffold", &[]),
    // The session starts the door and hands it its configuration.
    (
        "session",
        &[
            "calls",
            "capsule",
            "channel",
            "door",
            "model",
            "otel",
            "peer_door",
            "progress",
            "remote",
            "runner",
            "tasks",
            "tools",
        ],
    ),
    ("tasks", &[]),
    ("tools", &["capsule", "outbound", "runner"]),
    // `mur ui` is served by the door's server, with its head, write-stall and in-flight bounds:
    // every listener of the project keeps the same ones.
    ("ui", &["door", "operator", "peer_door"]),
];

/// Imports only test code makes (a `tests.rs` or `*_tests.rs` file, or an inline `mod tests`),
/// each with why it needs them.
const ALLOWED_IN_TESTS: &[(&str, &str)] = &[
    // The calls are tested from a real component, as a member runs them.
    ("calls", "capsule"),
    // The calls client is tested against a real door, as a peer member runs it.
    ("calls", "door"),
    // The committed example tool is checked against the scaffold that writes it.
    ("capsule", "scaffold"),
    // A cluster's probe must ask for the very path the door serves its public card on.
    ("deploy", "door"),
    // The launcher's probe learns a real door's card key and hands it on an address line.
    ("door", "channel"),
    ("door", "launcher"),
    // Grant keys are tested against the member's side of the authority channel, as a member
    // asks for its key and opens the grants sealed for it.
    ("launcher", "runner"),
];

#[test]
fn every_import_between_top_level_modules_is_in_the_table() {
    let src = repo_root().join("src");
    let core = core_modules(&src);
    let own = own_modules(&src);
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(from, to)| (*from, to.iter().copied().collect()))
        .collect();
    assert_eq!(
        allowed.keys().map(|k| k.to_string()).collect::<BTreeSet<_>>(),
        own,
        "ALLOWED has one row for each top-level module of src/"
    );
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    let mut used: BTreeSet<(String, String, bool)> = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_path(rel) else { continue };
        let text = std::fs::read_to_string(&file).expect("read source");
        for import in imports(&text, &module) {
            let from = &module[0];
            let to = &import.target;
            if to == from || core.contains(to) {
                continue;
            }
            let test = import.in_test || is_test_file(rel);
            let ok = allowed.get(from.as_str()).is_some_and(|s| s.contains(to.as_str()))
                || (test && ALLOWED_IN_TESTS.iter().any(|(f, t)| f == from && t == to));
            if ok {
                used.insert((from.clone(), to.clone(), test));
            } else {
                offenders.push(format!(
                    "{}:{}: {from} imports {to}{}",
                    rel.display(),
                    import.line,
                    if test { " (in tests)" } else { "" }
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "imports the table in tests/it/layers.rs does not allow (the runtime never imports the CLI; \
         take the task model from crate::tasks, not the door):\n{}",
        offenders.join("\n")
    );
    let mut stale = Vec::new();
    for (from, to) in ALLOWED.iter().flat_map(|(f, ts)| ts.iter().map(move |t| (*f, *t))) {
        if !used.contains(&(from.to_string(), to.to_string(), false)) {
            stale.push(format!("{from} → {to}"));
        }
    }
    for (from, to) in ALLOWED_IN_TESTS {
        if !used.contains(&(from.to_string(), to.to_string(), true)) {
            stale.push(format!("{from} → {to} (in tests)"));
        }
    }
    assert!(
        stale.is_empty(),
        "allowances no code uses any more (remove them):\n{}",
        stale.join("\n")
    );
}

/// The parser sees what the table is about: grouped, nested, renamed and `super` imports, and
/// paths in code, never comments or strings.
#[test]
fn the_import_reader_expands_use_trees_and_skips_comments_and_strings() {
    let module = vec!["session".to_string(), "startup".to_string()];
    let text = r##"
        use crate::{door::{self, Door}, tasks as t};
        pub(crate) use super::super::cli::Args;
        use std::io;
        // use crate::launcher;
        /* use crate::ui; /* nested */ */
        const S: &str = "crate::operator::x";
        const R: &str = r#"crate::remote"#;
        fn f<'a>(c: char) { let _ = 'x'; let _ = crate::model::run(); }
        #[cfg(test)]
        mod tests {
            use super::*;
            use crate::deploy::X;
        }
    "##;
    let got: Vec<(String, bool)> = imports(text, &module)
        .into_iter()
        .map(|i| (i.target, i.in_test))
        .collect();
    let want: Vec<(String, bool)> = [
        ("door", false),
        ("door", false),
        ("tasks", false),
        ("cli", false),
        ("model", false),
        ("session", true),
        ("deploy", true),
    ]
    .iter()
    .map(|(t, test)| (t.to_string(), *test))
    .collect();
    assert_eq!(got, want);
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules of `src/`: its directories and files but `lib.rs` and `main.rs`.
fn own_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("read src")
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let name = path.file_stem()?.to_str()?.to_string();
            let rust = path.is_dir() || path.extension().is_some_and(|x| x == "rs");
            (rust && name != "lib" && name != "main").then_some(name)
        })
        .collect()
}

/// The core's modules, as `src/lib.rs` re-exports them (`pub use mur_core::{…}`).
fn core_modules(src: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let tokens = tokens(&text);
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i].text == "use" {
            let (paths, end) = use_paths(&tokens, i + 1);
            for p in paths {
                if p.first().map(String::as_str) == Some("mur_core")
                    && let Some(m) = p.get(1)
                {
                    out.insert(m.clone());
                }
            }
            i = end;
        }
        i += 1;
    }
    assert!(out.contains("diag"), "lib.rs re-exports the core's modules");
    out
}

/// The module path of a file under `src/`; `None` for the crate roots.
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return None;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

fn is_test_file(rel: &Path) -> bool {
    rel.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|s| s == "tests" || s.ends_with("_tests"))
}

struct Token {
    text: String,
    line: usize,
}

/// Identifiers, `::` and single punctuation characters, with their lines; comments, strings,
/// characters and lifetimes are dropped.
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let newlines = |from: usize, to: usize| b[from..to].iter().filter(|&&c| c == b'\n').count();
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += newlines(start, i);
        } else if let Some(hashes) = raw_string_start(&b[i..]) {
            // r"…", r#"…"#, br#"…"#: ends at `"` and as many `#`.
            i += b[i..].iter().position(|&c| c == b'"').unwrap_or(0) + 1;
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i = (i + close.len()).min(b.len());
            line += newlines(start, i);
        } else if c == b'"' || (c == b'b' && b.get(i + 1) == Some(&b'"')) {
            i += if c == b'b' { 2 } else { 1 };
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            line += newlines(start, i);
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{…}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                // Past the backslash and the character it escapes.
                i += 3;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else if let Some(ch) = text[i + 1..].chars().next()
                && text[i + 1 + ch.len_utf8()..].starts_with('\'')
            {
                i += 2 + ch.len_utf8();
            } else {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            if b[i..].starts_with(b"r#") {
                i += 2;
            }
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                text: text[start..i].trim_start_matches("r#").to_string(),
                line,
            });
        } else if b[i..].starts_with(b"::") {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push(Token {
                text: text[i..i + len].to_string(),
                line,
            });
            i += len;
        }
    }
    out
}

/// The number of `#` of a raw string starting here, if one does.
fn raw_string_start(b: &[u8]) -> Option<usize> {
    let rest = b.strip_prefix(b"br").or_else(|| b.strip_prefix(b"r"))?;
    let hashes = rest.iter().take_while(|&&c| c == b'#').count();
    (rest.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The paths of the `use` tree starting at `tokens[i]`, and the index of its `;`.
fn use_paths(tokens: &[Token], i: usize) -> (Vec<Vec<String>>, usize) {
    let mut out = Vec::new();
    let end = tree(tokens, i, Vec::new(), &mut out);
    let semi = (end..tokens.len())
        .find(|&j| tokens[j].text == ";")
        .unwrap_or(tokens.len());
    (out, semi)
}

/// Reads one use tree at `i` under `prefix` into `out`; returns the index after it.
fn tree(tokens: &[Token], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    if tokens.get(i).is_some_and(|t| t.text == "::") {
        // `::std::…`: an external crate, never ours.
        prefix.push("::".into());
        i += 1;
    }
    loop {
        let Some(t) = tokens.get(i) else { return i };
        match t.text.as_str() {
            "{" => {
                i += 1;
                while tokens.get(i).is_some_and(|t| t.text != "}") {
                    i = tree(tokens, i, prefix.clone(), out);
                    if tokens.get(i).is_some_and(|t| t.text == ",") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            "*" => {
                out.push(prefix);
                return i + 1;
            }
            _ => {
                if t.text != "self" || prefix.is_empty() {
                    prefix.push(t.text.clone());
                }
                i += 1;
                if tokens.get(i).is_some_and(|t| t.text == "::") {
                    i += 1;
                    continue;
                }
                if tokens.get(i).is_some_and(|t| t.text == "as") {
                    i += 2;
                }
                out.push(prefix);
                return i;
            }
        }
    }
}

struct Import {
    /// The top-level module the path lands in.
    target: String,
    /// The whole path from the crate's root, `super`s and `self`s resolved.
    path: Vec<String>,
    line: usize,
    in_test: bool,
}

/// Every path of `text` (the file of module `module`) that names a top-level module: `use` trees
/// expanded, and `crate::…`/`super::…` paths in code.
fn imports(text: &str, module: &[String]) -> Vec<Import> {
    let tokens = tokens(text);
    let mut out = Vec::new();
    // Inline `mod name {` blocks: their names and the brace depth they close at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(m, _)| m.clone()))
            .collect();
        let in_test = inline.iter().any(|(m, _)| m == "tests" || m.ends_with("_tests"));
        match tokens[i].text.as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t.text == "{") => {
                inline.push((tokens[i + 1].text.clone(), depth));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let line = tokens[i].line;
                let (paths, end) = use_paths(&tokens, i + 1);
                for p in paths {
                    if let (Some(target), Some(path)) = (top_level(&p, &here), absolute(&p, &here)) {
                        out.push(Import {
                            target,
                            path,
                            line,
                            in_test,
                        });
                    }
                }
                i = end + 1;
                continue;
            }
            "crate" | "super" if tokens.get(i + 1).is_some_and(|t| t.text == "::") => {
                // A path in code: `crate`/`super` segments joined by `::`, up to the first other.
                let after_dollar = i > 0 && tokens[i - 1].text == "$";
                let after_colons = i > 0 && tokens[i - 1].text == "::";
                let mut path = vec![tokens[i].text.clone()];
                let mut j = i + 1;
                while tokens.get(j).is_some_and(|t| t.text == "::")
                    && let Some(next) = tokens.get(j + 1)
                    && next.text.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                {
                    path.push(next.text.clone());
                    j += 2;
                }
                if !after_dollar
                    && !after_colons
                    && let (Some(target), Some(absolute)) = (top_level(&path, &here), absolute(&path, &here))
                {
                    out.push(Import {
                        target,
                        path: absolute,
                        line: tokens[i].line,
                        in_test,
                    });
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `path`, written in module `here`, from the crate's root; `None` for paths into other crates.
fn absolute(path: &[String], here: &[String]) -> Option<Vec<String>> {
    let mut at: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => here.to_vec(),
        _ => return None,
    };
    for (k, segment) in path.iter().enumerate() {
        match segment.as_str() {
            "crate" if k == 0 => {}
            "super" => {
                at.pop();
            }
            "self" => {}
            other => at.push(other.to_string()),
        }
    }
    Some(at)
}

/// The top-level module `path`, written in module `here`, lands in; `None` for paths into other
/// crates or that stay where they are without naming a module.
fn top_level(path: &[String], here: &[String]) -> Option<String> {
    let mut at: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => here.to_vec(),
        _ => return None,
    };
    let mut rest = if path[0] == "crate" { &path[1..] } else { path };
    while let Some(first) = rest.first() {
        match first.as_str() {
            "super" => {
                at.pop();
            }
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    match at.first() {
        Some(top) => Some(top.clone()),
        None => rest.first().cloned(),
    }
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

/// Loops between files of one folder that are known and not broken yet, each as the test prints
/// it (from its smallest file), with why it stands. A loop not listed fails; so does a listed one
/// that is gone.
const KNOWN_LOOPS: &[(&str, &str)] = &[
    // The push-config methods are served through the door's `Call`, which carries the configs.
    (
        "src: door/call → door/push → door/call",
        "push's JSON-RPC methods take the door's Call",
    ),
    // The providers' dialects write and read the turn model's types, which pick a dialect.
    (
        "crates/mur-core/src: wire/model → wire/provider → wire/model",
        "the turn model picks its provider's dialect",
    ),
    (
        "crates/mur-core/src: wire/model → wire/provider → wire/model_stream → wire/model",
        "the turn model picks its provider's dialect",
    ),
    (
        "crates/mur-core/src: wire/model_stream → wire/provider → wire/model_stream",
        "a stream's events are each dialect's",
    ),
];

/// No two files of one folder import each other, directly or round a loop: a folder's files
/// depend one way, so each can be read (and changed) after the ones it uses. The parent's
/// `mod.rs` is the folder's shared place and is not a sibling; tests are left out. Both crates.
#[test]
fn no_files_of_one_folder_import_each_other_round_a_loop() {
    let root = repo_root();
    let mut cycles = Vec::new();
    for src in [root.join("src"), root.join("crates/mur-core/src")] {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeMap<Vec<String>, PathBuf> = files
            .iter()
            .filter_map(|f| {
                let rel = f.strip_prefix(&src).expect("under src");
                module_path(rel).map(|m| (m, rel.to_path_buf()))
            })
            .collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, rel) in &modules {
            if is_test_file(rel) || module.is_empty() {
                continue;
            }
            let text = std::fs::read_to_string(src.join(rel)).expect("read source");
            let parent = &module[..module.len() - 1];
            for import in imports(&text, module) {
                if import.in_test {
                    continue;
                }
                // The file the path lands in: its longest prefix that is a module of a file.
                let Some(landed) = (1..=import.path.len())
                    .rev()
                    .map(|n| import.path[..n].to_vec())
                    .find(|p| modules.contains_key(p))
                else {
                    continue;
                };
                let sibling =
                    landed.len() == module.len() && landed[..landed.len() - 1] == *parent && landed != *module;
                if sibling {
                    edges.entry(module.clone()).or_default().insert(landed);
                }
            }
        }
        // Depth-first, each loop reported once by its smallest member.
        for start in edges.keys() {
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            while let Some((at, trail)) = stack.pop() {
                for next in edges.get(&at).into_iter().flatten() {
                    if next == start {
                        if trail.iter().all(|m| m >= start) {
                            let names: Vec<String> = trail.iter().map(|m| m.join("/")).collect();
                            let tree = src.strip_prefix(&root).unwrap_or(&src).display().to_string();
                            cycles.push(format!("{}: {} → {}", tree, names.join(" → "), start.join("/")));
                        }
                    } else if !trail.contains(next) {
                        let mut t = trail.clone();
                        t.push(next.clone());
                        stack.push((next.clone(), t));
                    }
                }
            }
        }
    }
    let new: Vec<&String> = cycles
        .iter()
        .filter(|c| !KNOWN_LOOPS.iter().any(|(k, _)| k == c))
        .collect();
    assert!(
        new.is_empty(),
        "files of one folder that import each other (move what they share to one of them, or to the folder's mod.rs):\n{}",
        new.iter().map(|c| c.as_str()).collect::<Vec<_>>().join("\n")
    );
    let gone: Vec<&str> = KNOWN_LOOPS
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| !cycles.iter().any(|c| c == k))
        .collect();
    assert!(
        gone.is_empty(),
        "loops KNOWN_LOOPS lists that are gone (remove them):\n{}",
        gone.join("\n")
    );
}
