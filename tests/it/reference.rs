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

/// Compares a generated page with the checked-in one, or rewrites it when asked to.
fn generated(name: &str, want: &str, regenerate: &str) {
    if std::env::var_os("MUR_UPDATE_REFERENCE").is_some() {
        std::fs::write(page(name), want).expect("write the page");
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
