//! docs/reference/ cannot drift from the code: each page is generated from, or checked against,
//! the source it describes, and every example in it that can run, runs here against the real
//! `mur` binary. `MUR_UPDATE_REFERENCE=1` rewrites the generated pages instead of failing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::support::{Sandbox, repo_root, stderr, stdout};

fn page(name: &str) -> PathBuf {
    repo_root().join("docs/reference").join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(page(name)).unwrap_or_else(|e| panic!("docs/reference/{name}: {e}"))
}

/// Rewrites a page in one step (a rename), so a test reading it meanwhile sees the old text or the
/// new, never a part.
fn write_page(name: &str, text: &str) {
    let tmp = page(&format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write the page");
    std::fs::rename(&tmp, page(name)).expect("replace the page");
}

/// Compares a generated page with the checked-in one, or rewrites it when asked to.
fn generated(name: &str, want: &str, regenerate: &str) {
    if std::env::var_os("MUR_UPDATE_REFERENCE").is_some() {
        write_page(name, want);
        return;
    }
    let have = std::fs::read_to_string(page(name)).unwrap_or_default();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "docs/reference/{name} is stale (first difference at line {}); regenerate it with:\n  {regenerate}",
            line + 1
        );
    }
}

mod cli {
    use super::*;
    use mur::cli::reference::{self, NOTES};

    #[test]
    fn cli_md_is_generated_from_the_clap_definitions() {
        generated("cli.md", &reference::markdown(), reference::REGENERATE);
    }

    #[test]
    fn every_command_and_argument_has_its_entry() {
        let commands = reference::commands();
        let paths: BTreeSet<&str> = commands.iter().map(|(p, _)| p.as_str()).collect();
        for (path, cmd) in &commands {
            assert!(
                NOTES.iter().any(|n| n.command == path),
                "`mur {path}` has no entry in src/cli/reference.rs NOTES (stdout, stderr, exit status)"
            );
            for a in reference::arguments(cmd) {
                assert!(
                    a.get_help().is_some(),
                    "`mur {path}` argument `{}` has no help text: document it where it is declared",
                    a.get_id()
                );
                if a.get_long() == Some("json") {
                    let n = NOTES.iter().find(|n| n.command == path).expect("notes");
                    assert!(!n.json.is_empty(), "`mur {path} --json` lists no fields in NOTES");
                }
            }
        }
        for n in NOTES {
            assert!(
                paths.contains(n.command),
                "NOTES has an entry for `mur {}`, which does not exist",
                n.command
            );
        }
    }

    /// Every key path of a JSON value, arrays written `[]`.
    fn key_paths(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, x) in map {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    // A list is named by its items (`artifacts[]`).
                    if !x.is_array() {
                        out.insert(p.clone());
                    }
                    key_paths(x, &p, out);
                }
            }
            serde_json::Value::Array(items) => {
                let p = format!("{prefix}[]");
                if !items.is_empty() {
                    out.insert(p.clone());
                }
                for x in items {
                    key_paths(x, &p, out);
                }
            }
            _ => {}
        }
    }

    /// The documented fields of `mur <command> --json` are exactly the ones it prints: nothing
    /// printed is undocumented, and nothing documented under a printed object is missing.
    fn fields_match(command: &str, json_line: &str) {
        let v: serde_json::Value =
            serde_json::from_str(json_line.trim()).unwrap_or_else(|e| panic!("mur {command} --json: {e}: {json_line}"));
        let mut seen = BTreeSet::new();
        key_paths(&v, "", &mut seen);
        let notes = NOTES.iter().find(|n| n.command == command).expect("notes");
        let documented: BTreeSet<String> = notes.json.iter().map(|(f, _)| f.to_string()).collect();
        let optional: BTreeSet<&str> = notes
            .json
            .iter()
            .filter(|(_, meaning)| meaning.contains("(only when"))
            .map(|(f, _)| *f)
            .collect();
        for s in &seen {
            assert!(
                documented.contains(s),
                "`mur {command} --json` prints `{s}`, which cli.md does not list"
            );
        }
        for d in &documented {
            let parent = d.rsplit_once('.').map(|(p, _)| p.to_string());
            let parent_seen = parent
                .as_ref()
                .is_none_or(|p| seen.iter().any(|s| s.starts_with(&format!("{p}."))));
            // `mur run --json` prints several kinds of line; each is checked one way only.
            let optional = optional.contains(d.as_str()) || command == "run";
            if parent_seen && !optional && !d.ends_with("[]") {
                assert!(
                    seen.contains(d),
                    "cli.md lists `{d}` for `mur {command} --json`, which it does not print"
                );
            }
        }
    }

    #[test]
    fn json_outputs_have_the_documented_fields() {
        let sb = Sandbox::new();
        sb.install_actor("echo");
        let o = sb.run(&sb.path("p"), &["list", "--json"]);
        fields_match("list", &stdout(&o));

        // A formation directory with a member, and a member source directory beside a roster.
        let dir = sb.path("f");
        std::fs::write(
            dir.join("roster.yaml"),
            "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/echo\n    version: 0.1.0\n    entry: true\n",
        )
        .unwrap();
        let o = sb.run(&dir, &["doctor", "--json"]);
        fields_match("doctor", &stdout(&o));
        let o = sb.run(&sb.dir.path().join("src/echo"), &["doctor", "--json"]);
        fields_match("doctor", &stdout(&o));
        std::fs::write(dir.join("roster.yaml"), "roster_version: 1\nmembers: []\n").unwrap();
        let o = sb.run(&dir, &["doctor", "--json"]);
        fields_match("doctor", &stdout(&o));

        // ps with a running session.
        let mut child = sb
            .mur(&sb.path("p"))
            .args(["run", "--capsule", "local/echo", "--capsule-version", "0.1.0", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
            &mut line,
        )
        .expect("readiness line");
        let o = sb.run(&sb.path("p"), &["ps", "--json"]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(stdout(&o).contains("session_id"), "{}", stdout(&o));
        fields_match("ps", &stdout(&o));

        // run --json: the readiness line and the task's line.
        let o = sb.run(
            &sb.path("p"),
            &[
                "run",
                "--capsule",
                "local/echo",
                "--capsule-version",
                "0.1.0",
                "--json",
                "--task",
                "hi",
                "--lifecycle-task-acceptance",
                "single",
                "--lifecycle-after-task",
                "exit",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let lines: Vec<&str> = std::str::from_utf8(&o.stdout).unwrap().lines().collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        for l in lines {
            fields_match("run", l);
        }
    }
}

/// The fenced blocks of a page: (info string, body), in order.
fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some("")) => out.push(open.take().expect("open block")),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// Replaces the body of the `n`-th fenced block of `text` (counting every block).
fn with_block(text: &str, n: usize, body: &str) -> String {
    let mut out = String::new();
    let mut seen = 0;
    let mut inside = false;
    let mut skipping = false;
    for line in text.split_inclusive('\n') {
        let fence = line.starts_with("```");
        if fence && !inside {
            inside = true;
            out.push_str(line);
            if seen == n {
                out.push_str(body);
                skipping = true;
            }
            continue;
        }
        if fence && inside && line.trim_end() == "```" {
            inside = false;
            skipping = false;
            seen += 1;
            out.push_str(line);
            continue;
        }
        if !skipping {
            out.push_str(line);
        }
    }
    out
}

/// Each key path of a JSON Schema (`members[].name`), as the pages' key tables write them.
fn schema_keys(schema: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
        for (k, v) in props {
            let p = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            out.insert(p.clone());
            schema_keys(v, &p, out);
        }
    }
    if let Some(items) = schema.get("items") {
        schema_keys(items, &format!("{prefix}[]"), out);
    }
    for alt in ["oneOf", "anyOf"] {
        for v in schema.get(alt).and_then(|a| a.as_array()).into_iter().flatten() {
            schema_keys(v, prefix, out);
        }
    }
}

/// The first-column keys of the page's `| Key |` table(s).
fn table_keys(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| Key |") {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            in_table = false;
        }
        if in_table && !line.starts_with("|---") {
            let first = line.split('|').nth(1).unwrap_or("").trim();
            if let Some(k) = first.strip_prefix('`').and_then(|k| k.split('`').next()) {
                out.insert(k.to_string());
            }
        }
    }
    out
}

/// The page's key table and the schema (which a core test holds to the parser) name the same
/// keys.
fn keys_match(page_name: &str, schema: &serde_json::Value) {
    let mut want = BTreeSet::new();
    schema_keys(schema, "", &mut want);
    let have = table_keys(&read(page_name));
    let missing: Vec<_> = want.difference(&have).collect();
    let extra: Vec<_> = have.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/reference/{page_name}: keys the schema has and the table lacks: {missing:?}; keys the table has and the schema lacks: {extra:?}"
    );
}

mod roster {
    use super::*;

    /// The capsules roster.md's examples assume.
    fn install_fixtures(sb: &Sandbox) {
        let serving = "exports:\n  peer_tasks:\n    accept: true\nnetwork:\n  authentication:\n    scheme: bearer\n";
        for (name, version, extra) in [
            ("planner", "0.3.0", serving),
            ("coder", "1.2.0", serving),
            ("reviewer", "0.9.0", serving),
            ("notes", "1.0.0", ""),
            ("quiet", "1.0.0", "network:\n  authentication:\n    scheme: bearer\n"),
        ] {
            sb.install_manifest(name, &format!("name: {name}\nversion: {version}\n{extra}"));
        }
    }

    #[test]
    fn roster_md_names_every_key_of_the_schema() {
        keys_match("roster.md", &mur::schema::roster());
    }

    #[test]
    fn every_example_roster_is_admitted_or_refused_as_shown() {
        let sb = Sandbox::new();
        install_fixtures(&sb);
        let mut text = read("roster.md");
        let update = std::env::var_os("MUR_UPDATE_REFERENCE").is_some();
        let mut files: Vec<(String, String)> = Vec::new();
        let mut n_examples = 0;
        let all = blocks(&text);
        for (i, (info, body)) in all.iter().enumerate() {
            let next_is_output = all.get(i + 1).is_some_and(|(n, _)| n.starts_with("text"));
            match info.as_str() {
                "yaml murmur.lock" => files.push(("murmur.lock".into(), body.clone())),
                "yaml roster.yaml" => {
                    files.push(("roster.yaml".into(), body.clone()));
                    if !next_is_output {
                        // An example without output is admitted as it stands.
                        let dir = sb.path(&format!("ex{i}"));
                        for (f, b) in files.drain(..) {
                            std::fs::write(dir.join(f), b).unwrap();
                        }
                        let o = sb.run(&dir, &["doctor"]);
                        assert_eq!(
                            o.status.code(),
                            Some(0),
                            "roster.md block {i}: {}{}",
                            stdout(&o),
                            stderr(&o)
                        );
                        n_examples += 1;
                    }
                }
                "text" | "text admitted" if !files.is_empty() => {
                    let dir = sb.path(&format!("ex{i}"));
                    for (f, b) in files.drain(..) {
                        std::fs::write(dir.join(f), b).unwrap();
                    }
                    let got = if info == "text" {
                        let o = sb.run(&dir, &["run", "--roster", "--task", "never runs"]);
                        assert_eq!(
                            o.status.code(),
                            Some(1),
                            "roster.md block {i} was not refused: {}",
                            stderr(&o)
                        );
                        stderr(&o)
                    } else {
                        let o = sb.run(&dir, &["doctor"]);
                        assert_eq!(
                            o.status.code(),
                            Some(0),
                            "roster.md block {i}: {}{}",
                            stdout(&o),
                            stderr(&o)
                        );
                        stdout(&o)
                            .lines()
                            .filter(|l| l.trim_start().starts_with("warning["))
                            .map(|l| format!("{}\n", l.trim_start()))
                            .collect()
                    };
                    let got = got.replace(&sb.dir.path().display().to_string(), "<tmp>");
                    if update {
                        text = with_block(&text, i, &got);
                    } else {
                        assert_eq!(
                            &got, body,
                            "roster.md block {i}: the real output differs (rewrite with MUR_UPDATE_REFERENCE=1 and review the diff)"
                        );
                    }
                    n_examples += 1;
                }
                _ => {}
            }
        }
        assert!(n_examples >= 14, "{n_examples} examples");
        if update {
            write_page("roster.md", &text);
        }
    }
}

mod manifest {
    use super::*;

    #[test]
    fn manifest_md_names_every_key_of_the_schema() {
        keys_match("manifest.md", &mur::schema::manifest());
    }

    #[test]
    fn every_example_manifest_builds_or_is_refused_as_shown() {
        let sb = Sandbox::new();
        let mut text = read("manifest.md");
        let update = std::env::var_os("MUR_UPDATE_REFERENCE").is_some();
        let wat = std::fs::read(repo_root().join("actors/echo/capsule.wat")).unwrap();
        let all = blocks(&text);
        let mut n_examples = 0;
        for (i, (info, body)) in all.iter().enumerate() {
            if info != "yaml murmur.yaml" {
                continue;
            }
            let dir = sb.path(&format!("ex{i}"));
            std::fs::write(dir.join("murmur.yaml"), body).unwrap();
            // A component the example names is there to pack.
            if let Some(rel) = body.lines().find_map(|l| l.strip_prefix("component: ")) {
                std::fs::write(dir.join(rel.trim()), &wat).unwrap();
            }
            let o = sb.run(&dir, &["build", "."]);
            let got = stderr(&o).replace(&dir.display().to_string(), "<dir>");
            n_examples += 1;
            match all.get(i + 1) {
                Some((next, want)) if next == "text" => {
                    let refused = got.starts_with("error[");
                    assert_eq!(o.status.success(), !refused, "manifest.md block {i}: {got}");
                    if update {
                        text = with_block(&text, i + 1, &got);
                    } else {
                        assert_eq!(
                            &got, want,
                            "manifest.md block {i}: the real output differs (rewrite with MUR_UPDATE_REFERENCE=1 and review the diff)"
                        );
                    }
                }
                _ => assert!(
                    o.status.success() && got.is_empty(),
                    "manifest.md block {i} does not build cleanly: {got}"
                ),
            }
        }
        assert!(n_examples >= 9, "{n_examples} examples");
        if update {
            write_page("manifest.md", &text);
        }
    }
}

mod codes {
    use super::*;
    use mur::diag::{ALL, Severity};

    const BEGIN: &str = "<!-- registry:begin -->\n";
    const END: &str = "<!-- registry:end -->\n";

    fn registry_table() -> String {
        let mut t = String::from("| Code | Severity | Meaning | Default hint |\n|---|---|---|---|\n");
        for c in ALL {
            let sev = match c.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            let anchor = c.id.to_ascii_lowercase();
            let hint = c.default_hint.unwrap_or("—").replace('|', "\\|");
            t.push_str(&format!(
                "| [{}](#{anchor}) | {sev} | {} | {hint} |\n",
                c.id,
                c.summary.replace('|', "\\|")
            ));
        }
        t
    }

    #[test]
    fn codes_md_lists_the_registry() {
        let text = read("codes.md");
        let (head, rest) = text.split_once(BEGIN).expect("codes.md has the registry:begin marker");
        let (_, tail) = rest.split_once(END).expect("codes.md has the registry:end marker");
        let want = format!("{head}{BEGIN}{}{END}{tail}", registry_table());
        generated(
            "codes.md",
            &want,
            "MUR_UPDATE_REFERENCE=1 cargo test --workspace --test it reference::codes",
        );
    }

    /// A section's `$` command, run in an empty directory with an empty home, prints its example.
    #[test]
    fn every_example_with_a_command_is_what_the_command_prints() {
        let mut text = read("codes.md");
        let update = std::env::var_os("MUR_UPDATE_REFERENCE").is_some();
        let bin_dir = crate::support::mur_bin().parent().unwrap().to_path_buf();
        let all = blocks(&text);
        let mut n = 0;
        for (i, (info, body)) in all.iter().enumerate() {
            if info != "console" {
                continue;
            }
            let cmd = body.trim_end().strip_prefix("$ ").expect("one `$` command");
            let (next, want) = all.get(i + 1).expect("an example after the command");
            assert_eq!(next, "text", "codes.md block {i}: a command without its example");
            let sb = Sandbox::new();
            let dir = sb.path("p");
            std::fs::create_dir_all(sb.home()).unwrap();
            let o = std::process::Command::new("bash")
                .args(["-c", cmd])
                .current_dir(&dir)
                .env_clear()
                .env("HOME", sb.home())
                .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
                .output()
                .unwrap();
            let got = normalise(&stderr(&o).replace(&sb.dir.path().display().to_string(), "/tmp/s"));
            assert_ne!(o.status.code(), Some(0), "`{cmd}` succeeded: {got}");
            if update {
                text = with_block(&text, i + 1, &got);
            } else {
                assert_eq!(
                    &got, want,
                    "codes.md block {i}: `{cmd}` prints otherwise (rewrite with MUR_UPDATE_REFERENCE=1 and review the diff)"
                );
            }
            n += 1;
        }
        assert!(n >= 10, "{n} commands");
        if update {
            write_page("codes.md", &text);
        }
    }

    #[test]
    fn every_code_has_one_section_and_every_section_a_code() {
        let text = read("codes.md");
        let mut sections: BTreeMap<String, String> = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(id) = line.strip_prefix("### ") {
                assert!(
                    sections.insert(id.to_string(), String::new()).is_none(),
                    "codes.md: {id} has two sections"
                );
                current = Some(id.to_string());
            } else if line.starts_with("## ") {
                current = None;
            } else if let Some(id) = &current {
                let s = sections.get_mut(id).expect("section");
                s.push_str(line);
                s.push('\n');
            }
        }
        let ids: BTreeSet<String> = ALL.iter().map(|c| c.id.to_string()).collect();
        for c in ALL {
            let body = sections.get(c.id).unwrap_or_else(|| {
                panic!(
                    "{} is in the registry but codes.md has no `### {}` section (when it fires, an example)",
                    c.id, c.id
                )
            });
            assert!(
                body.contains("**When it fires:**"),
                "codes.md {}: no **When it fires:**",
                c.id
            );
            let example = blocks(body)
                .into_iter()
                .find(|(info, _)| info == "text")
                .unwrap_or_else(|| panic!("codes.md {}: no example message", c.id));
            let word = match c.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            let head = format!("{word}[{}]: ", c.id);
            let first = example.1.lines().next().unwrap_or("");
            assert!(
                first.contains(&head),
                "codes.md {}: the example does not start with `{head}`: {first}",
                c.id
            );
        }
        for id in sections.keys() {
            assert!(
                ids.contains(id),
                "codes.md has a section for {id}, which is not in the registry"
            );
        }
    }
}

/// `prefix` + 32 lowercase hex digits → `prefix…`; times → a fixed one; door ports → `PORT`; a
/// card's signatures → `[…]`.
fn normalise(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let is_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    'scan: while i < b.len() {
        // A card's signatures differ per door (each signs with a key of its own).
        if s[i..].starts_with(r#""signatures":["#)
            && let Some(e) = s[i..].find(']')
        {
            out.push_str(r#""signatures":[…]"#);
            i += e + 1;
            continue;
        }
        for p in ["tsk_", "ctx_", "ses_", "mcl_", "evt_", "msg_", "frm_"] {
            let end = i + p.len() + 32;
            if s[i..].starts_with(p) && end <= b.len() && b[i + p.len()..end].iter().all(|&c| is_hex(c)) {
                // The formation id of the examples is fixed, and shown as it is.
                if p == "frm_" {
                    out.push_str(&s[i..end]);
                } else {
                    out.push_str(p);
                    out.push('…');
                }
                i = end;
                continue 'scan;
            }
        }
        // 2026-11-30T22:49:42.123Z
        if i + 24 <= b.len()
            && b[i..i + 4].iter().all(u8::is_ascii_digit)
            && b[i + 4] == b'-'
            && b[i + 10] == b'T'
            && b[i + 23] == b'Z'
        {
            out.push_str("2026-01-01T00:00:00.000Z");
            i += 24;
            continue;
        }
        for p in ["localhost:", "127.0.0.1:"] {
            if s[i..].starts_with(p) && b.get(i + p.len()).is_some_and(u8::is_ascii_digit) {
                out.push_str(p);
                out.push_str("PORT");
                i += p.len();
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                continue 'scan;
            }
        }
        let c = s[i..].chars().next().expect("a char");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

mod door {
    use super::*;
    use crate::door::{AUTH, Door, FRM, Key, Member, PEERS, install, serve};
    use std::io::{Read, Write};

    /// The first `tsk_` id in `s`.
    fn task_id(s: &str) -> Option<String> {
        let i = s.find("\"tsk_")? + 1;
        s.get(i..i + 36).map(str::to_string)
    }

    /// A chunked body, joined.
    fn dechunk(mut body: &str) -> String {
        let mut out = String::new();
        while let Some((size, rest)) = body.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || rest.len() < n {
                break;
            }
            out.push_str(&rest[..n]);
            body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
        }
        out
    }

    /// Sends `request` (head and body as the page writes them) and renders the answer as the page
    /// shows it: status line, `content-type` and `www-authenticate`, a blank line, the body.
    fn exchange(port: &str, request: &str) -> String {
        let (head, body) = request.split_once("\n\n").unwrap_or((request.trim_end(), ""));
        let body = body.strip_suffix('\n').unwrap_or(body);
        let mut wire = String::new();
        for line in head.lines() {
            wire.push_str(line);
            wire.push_str("\r\n");
        }
        wire.push_str(&format!("host: localhost:{port}\r\nconnection: close\r\n"));
        if !body.is_empty() {
            wire.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        wire.push_str("\r\n");
        wire.push_str(body);
        let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        s.write_all(wire.as_bytes()).expect("send");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let raw = String::from_utf8(raw).expect("utf-8 answer");
        let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
        let mut lines = head.split("\r\n");
        let mut shown = format!("{}\n", lines.next().unwrap_or(""));
        let mut chunked = false;
        // Header order is the server's choice: shown sorted.
        let mut headers = Vec::new();
        for h in lines {
            let (name, value) = h.split_once(':').unwrap_or((h, ""));
            let name = name.to_ascii_lowercase();
            if name == "transfer-encoding" && value.trim() == "chunked" {
                chunked = true;
            }
            if name == "content-type" || name == "www-authenticate" {
                headers.push(format!("{name}: {}\n", value.trim()));
            }
        }
        headers.sort();
        shown.extend(headers);
        let body = if chunked { dechunk(body) } else { body.to_string() };
        shown.push('\n');
        shown.push_str(&body);
        if !body.is_empty() && !body.ends_with('\n') {
            shown.push('\n');
        }
        shown
    }

    /// Every JSON-RPC error a door answers, by the code's own list. The match is exhaustive, so a
    /// new A2A error does not compile here until it is listed, and then needs its row.
    fn door_errors() -> Vec<(i32, String)> {
        use mur::wire::jsonrpc::{self, A2aError, RpcError};
        let listed = |e: A2aError| match e {
            A2aError::TaskNotFound
            | A2aError::TaskNotCancelable
            | A2aError::UnsupportedOperation
            | A2aError::ContentTypeNotSupported
            | A2aError::VersionNotSupported => (e.code(), e.message().to_string()),
        };
        let mut out: Vec<(i32, String)> = [
            jsonrpc::PARSE_ERROR,
            jsonrpc::INVALID_REQUEST,
            jsonrpc::METHOD_NOT_FOUND,
            jsonrpc::INVALID_PARAMS,
        ]
        .into_iter()
        .map(|c| (c, RpcError::plain(c).message))
        .collect();
        out.extend(
            [
                A2aError::TaskNotFound,
                A2aError::TaskNotCancelable,
                A2aError::UnsupportedOperation,
                A2aError::ContentTypeNotSupported,
                A2aError::VersionNotSupported,
            ]
            .map(listed),
        );
        out
    }

    #[test]
    fn the_error_table_is_the_codes_errors() {
        let text = read("door.md");
        let table = text.split_once("| Code | Message | When |").expect("the error table").1;
        let documented: BTreeMap<i32, String> = table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (
                    cells[1].parse().expect("a code"),
                    cells[2].trim_matches('`').to_string(),
                )
            })
            .collect();
        let real: BTreeMap<i32, String> = door_errors().into_iter().collect();
        assert_eq!(documented, real, "door.md's error table and the door's errors differ");
    }

    #[test]
    fn every_example_exchange_is_what_a_real_door_answers() {
        let sb = Sandbox::new();
        install(&sb, "echo", "coder", &format!("{AUTH}{PEERS}{}", serve(2)));
        let key = Key::new(7);
        let m = Member {
            key: &key,
            formation: FRM,
            name: "coder",
        };
        let door = Door::member(&sb, "coder", &m);
        let port = door.local_url().rsplit(':').next().expect("port").to_string();
        let op = door.op();
        let op = op.strip_prefix("Bearer ").expect("bearer");
        let update = std::env::var_os("MUR_UPDATE_REFERENCE").is_some();
        let mut text = read("door.md");
        let all = blocks(&text);
        let mut last_task: Option<String> = None;
        let mut n = 0;
        for (i, (info, request)) in all.iter().enumerate() {
            if info != "http request" {
                continue;
            }
            let (next, want) = all.get(i + 1).expect("a response block");
            assert_eq!(
                next, "http response",
                "door.md block {i}: a request without its response"
            );
            let mut req = request
                .replace("<operator>", op)
                .replace("<mft1 planner→coder>", &key.mint(FRM, "planner", "coder"))
                .replace("<mft1 planner→reviewer>", &key.mint(FRM, "planner", "reviewer"));
            if let Some(t) = &last_task {
                req = req.replace("\"tsk_…\"", &format!("\"{t}\""));
            }
            let got = exchange(&port, &req);
            if let Some(t) = task_id(&got) {
                last_task = Some(t);
            }
            let got = normalise(&got);
            if update {
                text = with_block(&text, i + 1, &got);
            } else {
                assert_eq!(
                    &got, want,
                    "door.md block {i}: the real door answers otherwise (rewrite with MUR_UPDATE_REFERENCE=1 and review the diff)"
                );
            }
            n += 1;
        }
        assert!(n >= 14, "{n} exchanges");
        if update {
            write_page("door.md", &text);
        }
    }
}

/// A text's shape: ids, paths and numbers blanked, runs of spaces as one.
fn shape(s: &str) -> String {
    let mut s = normalise(s);
    while let Some(i) = s
        .find("frm_")
        .filter(|&i| s.len() >= i + 36 && s[i + 4..i + 36].bytes().all(|c| c.is_ascii_hexdigit()))
    {
        s.replace_range(i..i + 36, "frm_…");
    }
    s.lines()
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    if w.starts_with('/') {
                        "PATH".to_string()
                    } else {
                        let mut out = String::new();
                        let mut in_digits = false;
                        for c in w.chars() {
                            if c.is_ascii_digit() {
                                if !in_digits {
                                    out.push('N');
                                }
                                in_digits = true;
                            } else {
                                out.push(c);
                                in_digits = false;
                            }
                        }
                        out
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

mod formation {
    use super::*;
    use crate::door::{FRM, Key};
    use mur::wire::channel_line::{self, Call, FirstLine, LauncherId};

    fn block(text: &str, info: &str) -> (usize, String) {
        blocks(text)
            .into_iter()
            .enumerate()
            .find(|(_, (i, _))| i == info)
            .map(|(n, (_, b))| (n, b))
            .unwrap_or_else(|| panic!("formation.md has no ```{info} block"))
    }

    #[test]
    fn the_channel_and_readiness_lines_read_as_shown() {
        let mut text = read("formation.md");
        let (n, first) = block(&text, "json channel first line");
        if std::env::var_os("MUR_UPDATE_REFERENCE").is_some() {
            let key = Key::new(7);
            let line = FirstLine {
                formation_id: FRM.into(),
                member: "lead".into(),
                launcher: Some(LauncherId {
                    pid: 4242,
                    process_start: "123456".into(),
                }),
                entry: true,
                verify_key: key.verify_key(),
                calls: vec![Call {
                    name: "worker".into(),
                    token: mur::secret::Secret::new(key.mint(FRM, "lead", "worker")),
                }],
            };
            text = with_block(&text, n, &line.to_line());
            write_page("formation.md", &text);
        }
        let (_, first) = if first.is_empty() {
            block(&text, "json channel first line")
        } else {
            (n, first)
        };
        let parsed = FirstLine::parse(first.trim_end()).unwrap_or_else(|e| panic!("the first line does not read: {e}"));
        parsed.check_tokens().expect("its token verifies under its own key");
        assert_eq!(parsed.to_line(), first, "the first line is not in the fixed key order");

        let (_, addresses) = block(&text, "json channel address line");
        let parsed = channel_line::parse_address_line(addresses.trim_end()).expect("the address line reads");
        assert_eq!(channel_line::address_line(&parsed.addresses), addresses);

        let (_, ready) = block(&text, "json readiness line");
        let r = mur::readiness::parse(ready.trim_end(), FRM).expect("the readiness line reads");
        assert_eq!(r.url, "http://localhost:41873");
    }

    #[test]
    fn the_timing_table_is_the_timing_constant() {
        let text = read("formation.md");
        let table = text
            .split_once("| Name | Value | Bounds |")
            .expect("the timing table")
            .1;
        let documented: BTreeMap<String, String> = table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_string(), cells[2].to_string())
            })
            .collect();
        let debug = format!("{:?}", mur::timing::Timing::SPEC);
        let inner = debug.split_once('{').expect("struct").1.trim_end_matches('}');
        let mut names = BTreeSet::new();
        for pair in inner.split(", ") {
            let (name, value) = pair.split_once(": ").expect("name: value");
            let (name, value) = (name.trim(), value.trim());
            names.insert(name.to_string());
            let doc = documented
                .get(name)
                .unwrap_or_else(|| panic!("Timing::{name} has no row in formation.md's timing table"));
            let unbounded = value.starts_with("18446744073709551615");
            assert!(
                doc == value || (unbounded && doc == "unbounded"),
                "formation.md says {name} is {doc}; Timing::SPEC says {value}"
            );
        }
        for name in documented.keys() {
            assert!(
                names.contains(name),
                "formation.md's timing table has {name}, which Timing lacks"
            );
        }
    }

    /// The record table: event type → its fields, `(optional)` ones marked.
    fn record_table(text: &str) -> BTreeMap<String, Vec<(String, bool)>> {
        let table = text
            .split_once("| `event_type` | Fields after the common five |")
            .expect("the record table")
            .1;
        table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let fields = cells[2]
                    .split(", ")
                    .map(|f| {
                        let optional = f.starts_with('(');
                        (
                            f.trim_matches(|c| c == '(' || c == ')' || c == '`').to_string(),
                            optional,
                        )
                    })
                    .collect();
                (cells[1].trim_matches('`').to_string(), fields)
            })
            .collect()
    }

    /// `rec`'s own fields are the documented ones for its type, in their order.
    fn record_matches(table: &BTreeMap<String, Vec<(String, bool)>>, line: &str) {
        let v: serde_json::Value = serde_json::from_str(line).expect("a trace record");
        let keys: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        // serde_json keeps insertion order only with preserve_order; read the order from the text.
        let mut in_order: Vec<(usize, &String)> = keys
            .iter()
            .map(|k| (line.find(&format!("\"{k}\":")).expect("key in line"), k))
            .collect();
        in_order.sort();
        let keys: Vec<&str> = in_order.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(
            &keys[..5],
            ["event_type", "event_id", "parent_id", "session_id", "timestamp"],
            "{line}"
        );
        let kind = v["event_type"].as_str().expect("event_type");
        let fields = table
            .get(kind)
            .unwrap_or_else(|| panic!("formation.md's record table has no `{kind}`; a real trace wrote:\n{line}"));
        let mut want = fields
            .iter()
            .filter(|(f, optional)| !optional || keys.contains(&f.as_str()));
        for k in &keys[5..] {
            let next = want.next().map(|(f, _)| f.as_str());
            assert_eq!(
                next,
                Some(*k),
                "`{kind}`: formation.md lists its fields otherwise; a real trace wrote:\n{line}"
            );
        }
        assert!(
            want.next().is_none(),
            "`{kind}`: a documented field is missing from:\n{line}"
        );
    }

    #[test]
    fn a_real_launch_matches_the_formation_line_traces_and_trace_show() {
        let sb = Sandbox::new();
        let cwd = sb.path("w");
        let run = |args: &[&str]| {
            let o = sb.run(&cwd, args);
            assert!(o.status.success(), "mur {args:?}: {}", stderr(&o));
            o
        };
        run(&["new", "--roster", "hello"]);
        for m in ["lead", "worker"] {
            run(&["build", &format!("hello/{m}")]);
            run(&["install", "-g", &format!("hello/{m}/hello-{m}-0.1.0.mur.zip")]);
        }
        let text = read("formation.md");
        let o = run(&["run", "--roster", "hello", "--task", "say hi", "--deadline", "600"]);
        let err = stderr(&o);
        let start = err.find("formation: ").expect("the formation line");
        let got: String = err[start..].lines().take(5).map(|l| format!("{l}\n")).collect();
        let (_, want) = block(&text, "text formation line");
        assert_eq!(shape(&got), shape(&want), "the formation line reads otherwise:\n{got}");

        // Every record of both sessions, as the table says.
        let table = record_table(&text);
        let mut n = 0;
        let mut stack = vec![sb.home().join(".murmur/records")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.ends_with("trace.jsonl") {
                    for line in std::fs::read_to_string(&p).unwrap().lines() {
                        record_matches(&table, line);
                        n += 1;
                    }
                }
            }
        }
        assert!(n >= 10, "{n} records");

        let frm = normalise_id(&got);
        let o = run(&["trace", "show", &frm]);
        let (_, want) = block(&text, "text trace show");
        assert_eq!(
            shape(&stdout(&o)),
            shape(&want),
            "mur trace show reads otherwise:\n{}",
            stdout(&o)
        );

        // The --json formation line has the example's keys.
        let o = run(&[
            "run",
            "--roster",
            "hello",
            "--task",
            "say hi",
            "--deadline",
            "600",
            "--json",
        ]);
        let line = stdout(&o).lines().next().unwrap_or("").to_string();
        let (_, want) = block(&text, "json formation line");
        let keys = |s: &str| {
            let mut k = BTreeSet::new();
            crate::reference::key_paths_of(&serde_json::from_str(s.trim()).expect("json"), &mut k);
            k
        };
        assert_eq!(keys(&line), keys(&want), "the --json formation line: {line}");
    }

    /// A model capsule's session (a provider that fails once, then answers) writes only records the
    /// table lists, with their fields in order: the records of model turns are caught here.
    #[test]
    fn a_model_session_writes_the_documented_records() {
        use crate::support::provider::{Provider, Reply, openai};
        let sb = Sandbox::new();
        let provider = Provider::start(vec![
            Reply::status(500, r#"{"error":"overloaded"}"#).into(),
            Reply::json(openai::text("after a retry")).into(),
        ]);
        let manifest = format!(
            "name: solo\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  api_key: ${{MUR_IT_KEY}}\n",
            provider.url()
        );
        sb.install_manifest("solo", &manifest);
        let o = sb
            .mur(&sb.path("work"))
            .args([
                "run",
                "--capsule",
                "local/solo",
                "--capsule-version",
                "0.1.0",
                "--json",
                "--task",
                "hi",
            ])
            .env("MUR_IT_KEY", "sk-it-0123456789")
            .output()
            .expect("mur run");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let ready: serde_json::Value = serde_json::from_str(stdout(&o).lines().next().expect("readiness")).unwrap();
        let dir = PathBuf::from(ready["records_dir"].as_str().expect("records_dir"));
        let table = record_table(&read("formation.md"));
        let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
        for line in trace.lines() {
            record_matches(&table, line);
        }
        assert!(trace.contains("\"inference_retry\""), "{trace}");
    }

    /// The `frm_…` id in `s`.
    fn normalise_id(s: &str) -> String {
        let i = s.find("frm_").expect("a formation id");
        s[i..i + 36].to_string()
    }
}

/// Every key path of a JSON value (lists as `[]`).
fn key_paths_of(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    fn walk(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.insert(p.clone());
                    walk(x, &p, out);
                }
            }
            serde_json::Value::Array(items) => {
                for x in items {
                    walk(x, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    walk(v, "", out);
}

mod capsules {
    use super::*;

    /// Each ```<info> block that must be a repository file verbatim.
    const VERBATIM: [(&str, &str); 4] = [
        ("wit capsule.wit", "src/capsule/wit/capsule.wit"),
        ("wit tool.wit", "src/tools/wit/tool.wit"),
        ("rust lib.rs", "actors/demo/scaffold/worker/src/lib.rs"),
        ("wat capsule.wat", "actors/echo/capsule.wat"),
    ];

    #[test]
    fn the_world_and_the_sources_are_shown_verbatim() {
        let mut text = read("capsules.md");
        let update = std::env::var_os("MUR_UPDATE_REFERENCE").is_some();
        for (info, file) in VERBATIM {
            let want = std::fs::read_to_string(repo_root().join(file)).unwrap();
            let (n, have) = blocks(&text)
                .into_iter()
                .enumerate()
                .find(|(_, (i, _))| i == info)
                .map(|(n, (_, b))| (n, b))
                .unwrap_or_else(|| panic!("capsules.md has no ```{info} block"));
            if update {
                text = with_block(&text, n, &want);
            } else {
                assert_eq!(
                    have, want,
                    "capsules.md's ```{info} block is not {file} (rewrite with MUR_UPDATE_REFERENCE=1)"
                );
            }
        }
        if update {
            write_page("capsules.md", &text);
        }
    }

    #[test]
    fn the_echo_capsule_builds_installs_and_runs_as_shown() {
        let text = read("capsules.md");
        let all = blocks(&text);
        let body = |info: &str| {
            all.iter()
                .find(|(i, _)| i == info)
                .map(|(_, b)| b.clone())
                .unwrap_or_else(|| panic!("capsules.md has no ```{info} block"))
        };
        let sb = Sandbox::new();
        let dir = sb.path("echo");
        std::fs::write(dir.join("capsule.wat"), body("wat capsule.wat")).unwrap();
        std::fs::write(dir.join("murmur.yaml"), body("yaml murmur.yaml")).unwrap();
        let console = body("console");
        let mut steps: Vec<(String, String)> = Vec::new();
        for line in console.lines() {
            match line.strip_prefix("$ ") {
                Some(cmd) => steps.push((cmd.to_string(), String::new())),
                None => {
                    let (_, out) = steps.last_mut().expect("output after a command");
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        assert!(steps.len() >= 3, "{steps:?}");
        let bin_dir = crate::support::mur_bin().parent().unwrap().to_path_buf();
        for (cmd, want) in steps {
            let o = std::process::Command::new("bash")
                .args(["-c", &cmd])
                .current_dir(&dir)
                .env_clear()
                .env("HOME", sb.home())
                .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
                .output()
                .unwrap();
            assert!(o.status.success(), "`{cmd}`: {}", stderr(&o));
            assert_eq!(stdout(&o), want, "`{cmd}` printed otherwise");
        }
    }
}

mod links {
    use super::*;

    /// GitHub's anchor of a heading.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    }

    fn anchors(text: &str) -> BTreeSet<String> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut out = BTreeSet::new();
        let mut fenced = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            if let Some(h) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) {
                let s = slug(h);
                let n = seen.entry(s.clone()).or_insert(0);
                out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
                *n += 1;
            }
            // An anchor of its own for a paragraph: `<a id="name"></a>`.
            let mut rest = line;
            while let Some(at) = rest.find("<a id=\"") {
                rest = &rest[at + 7..];
                if let Some(end) = rest.find('"') {
                    out.insert(rest[..end].to_string());
                }
            }
        }
        out
    }

    /// Every `docs/<page>.md#<anchor>` a message, hint or comment of the sources names is an
    /// anchor of that page, so a link someone follows from an error lands somewhere.
    #[test]
    fn every_docs_anchor_the_sources_name_exists() {
        let root = repo_root();
        let mut broken = Vec::new();
        let mut files = Vec::new();
        for top in ["src", "crates/mur-core/src"] {
            let mut stack = vec![root.join(top)];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(&dir).expect("read_dir").flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        files.push(p);
                    }
                }
            }
        }
        for path in files {
            let text = std::fs::read_to_string(&path).expect("read");
            let mut rest = text.as_str();
            while let Some(at) = rest.find("docs/") {
                rest = &rest[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-#".contains(c)))
                    .unwrap_or(rest.len());
                let link = rest[..end].trim_end_matches('.');
                rest = &rest[end.max(1)..];
                let Some((page, anchor)) = link.split_once(".md#") else {
                    continue;
                };
                let page_text = std::fs::read_to_string(root.join(format!("{page}.md"))).unwrap_or_default();
                if !anchors(&page_text).contains(anchor) {
                    broken.push(format!("{}: {link}", path.display()));
                }
            }
        }
        assert!(
            broken.is_empty(),
            "anchors that are not on their page:\n{}",
            broken.join("\n")
        );
    }

    /// Every relative link target `](target)` outside code.
    fn links(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut fenced = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            let mut rest = line;
            while let Some(i) = rest.find("](") {
                rest = &rest[i + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = &rest[..end];
                if !target.contains("://") && !target.starts_with("mailto:") {
                    out.push(target.to_string());
                }
                rest = &rest[end..];
            }
        }
        out
    }

    /// Every code a page names is in the registry.
    #[test]
    fn every_code_a_page_names_exists() {
        let mut unknown = Vec::new();
        for e in std::fs::read_dir(repo_root().join("docs/reference")).unwrap().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let b = text.as_bytes();
            for (i, _) in text.match_indices('-') {
                // <E|W>-<LETTERS>-<3 digits>, the letters ending at i.
                let Some(start) = text[..i].rfind(|c: char| !c.is_ascii_uppercase()).map(|s| s + 1) else {
                    continue;
                };
                if start < 2 || i - start < 2 || b[start - 1] != b'-' || !matches!(b[start - 2], b'E' | b'W') {
                    continue;
                }
                if start >= 3 && b[start - 3].is_ascii_alphanumeric() {
                    continue;
                }
                let digits = &text[i + 1..];
                if digits.len() < 3 || !digits.as_bytes()[..3].iter().all(u8::is_ascii_digit) {
                    continue;
                }
                let id = &text[start - 2..i + 4];
                if mur::diag::lookup(id).is_none() {
                    unknown.push(format!("{}: {id}", e.path().display()));
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "codes named in docs/reference but not in the registry:\n{}",
            unknown.join("\n")
        );
    }

    /// Every link between the reference, the guide, the architecture map and the README resolves,
    /// anchors included.
    #[test]
    fn every_link_and_anchor_resolves() {
        let root = repo_root();
        let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs/reference"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        pages.extend(
            ["README.md", "docs/guide.md", "docs/architecture.md", "docs/a2a.md"]
                .iter()
                .map(|p| root.join(p)),
        );
        let mut broken = Vec::new();
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            for link in links(&text) {
                let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
                let target = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                if !target.exists() {
                    broken.push(format!("{}: {link} (no such file)", page.display()));
                    continue;
                }
                if !anchor.is_empty() && target.extension().is_some_and(|x| x == "md") {
                    let t = std::fs::read_to_string(&target).unwrap();
                    if !anchors(&t).contains(anchor) {
                        broken.push(format!("{}: {link} (no such heading)", page.display()));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    }
}
