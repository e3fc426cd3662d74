//! A user's first hour (issue 9): completions, the man page, `--json` for scripts, the
//! reachability graph, the call tree, the JSON Schemas and the guide.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{Sandbox, stderr, stdout};

/// Builds and globally installs a manifest-only capsule `local/<name>@0.1.0`.
fn install(sb: &Sandbox, name: &str, extra: &str) {
    let src = sb.write(
        &format!("src/{name}/murmur.yaml"),
        &format!("name: {name}\nversion: 0.1.0\n{extra}"),
    );
    let dir = src.parent().unwrap().to_str().unwrap().to_string();
    let o = sb.run(sb.dir.path(), &["build", &dir]);
    assert!(o.status.success(), "build {name}: {}", stderr(&o));
    let zip = format!("{dir}/{name}-0.1.0.mur.zip");
    let o = sb.run(sb.dir.path(), &["install", "-g", &zip]);
    assert!(o.status.success(), "install {name}: {}", stderr(&o));
}

const AUTH: &str = "network: {authentication: {scheme: bearer}}\n";
const SERVES: &str = "network: {authentication: {scheme: bearer}}\nexports: {peer_tasks: {accept: true}}\n";

/// A three-member formation (lead → worker, lead → end, end → worker), installed; returns its
/// directory. `end` is a Mermaid keyword, which the graph must survive.
fn three_members(sb: &Sandbox) -> PathBuf {
    install(sb, "lead", AUTH);
    install(sb, "worker", SERVES);
    install(sb, "end", SERVES);
    sb.write(
        "frm/roster.yaml",
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/lead, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/worker, version: 0.1.0}\n  - {name: end, capsule: local/end, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker, end]}\n  - {from: end, to: [worker]}\n",
    );
    sb.path("frm")
}

fn json_line(o: &std::process::Output) -> Value {
    let out = stdout(o);
    assert_eq!(out.lines().count(), 1, "not one line: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn completion_scripts_for_each_shell() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    for (shell, marker) in [
        ("bash", "complete -F _mur"),
        ("zsh", "#compdef mur"),
        ("fish", "complete -c mur"),
        ("elvish", "edit:completion:arg-completer[mur]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let o = sb.run(&cwd, &["completion", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains(marker), "{shell}: no {marker}");
    }
    let o = sb.run(&cwd, &["completion", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid value 'tcsh'"), "{}", stderr(&o));
}

#[test]
fn man_page_on_stdout_and_into_a_directory() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    let o = sb.run(&cwd, &["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(".TH mur 1"), "{}", stdout(&o));
    let o = sb.run(&cwd, &["man", "--dir", "pages"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).lines().any(|l| l.ends_with("pages/mur-trace-show.1")),
        "{}",
        stdout(&o)
    );
    assert!(cwd.join("pages/mur.1").is_file());
}

/// `mur man | head -1`: the reader goes away before the page is written. The command ends by
/// SIGPIPE, as other Unix tools do, instead of panicking on the next print.
#[test]
fn a_closed_stdout_ends_a_report_quietly() {
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::Stdio;
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    // The read end is closed before mur starts, so its first write fails with EPIPE whatever
    // the scheduling (closing it after spawn raced a fast enough writer).
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    let child = sb
        .mur(&cwd)
        .arg("man")
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mur man");
    let o = child.wait_with_output().expect("mur man");
    assert_eq!(o.status.signal(), Some(13), "{:?} {}", o.status, stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn list_and_ps_json() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    let o = sb.run(&cwd, &["list", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "{\"artifacts\":[]}\n");
    install(&sb, "worker", "");
    let v = json_line(&sb.run(&cwd, &["list", "--json"]));
    assert_eq!(v["artifacts"][0]["name"], "local/worker");
    assert_eq!(v["artifacts"][0]["store"], "global");
    assert_eq!(v["artifacts"][0]["version"], "0.1.0");
    assert_eq!(v["artifacts"][0]["sha256"].as_str().map(str::len), Some(64));
    let o = sb.run(&cwd, &["ps", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "{\"sessions\":[]}\n");
}

#[test]
fn doctor_json_formation_mode() {
    let sb = Sandbox::new();
    let frm = three_members(&sb);
    let o = sb.run(&frm, &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json_line(&o);
    assert_eq!(v["ok"], true);
    assert_eq!(v["member"], Value::Null);
    assert_eq!(v["errors"], serde_json::json!([]));
    let r = &v["roster"];
    assert_eq!(r["admitted"], true);
    assert_eq!(r["reachability"], "rules");
    let names: Vec<&str> = r["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(names, ["lead", "worker", "end"]);
    assert_eq!(r["members"][0]["entry"], true);
    assert_eq!(r["members"][1]["serves_peers"], true);
    assert_eq!(
        r["edges"],
        serde_json::json!([{"from": "lead", "to": "worker"}, {"from": "lead", "to": "end"}, {"from": "end", "to": "worker"}])
    );

    // A refused roster: ok false, exit 1, the code in `errors`, the diagnostic still on stderr.
    sb.write(
        "frm/roster.yaml",
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/lead, version: 0.1.0}\n",
    );
    let o = sb.run(&frm, &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json_line(&o);
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"][0]["code"], "E-ROS-002");
    assert_eq!(v["roster"]["admitted"], false);
    assert!(stderr(&o).contains("error[E-ROS-002]"), "{}", stderr(&o));
}

#[test]
fn doctor_json_member_mode() {
    let sb = Sandbox::new();
    let dir = sb.write("m/murmur.yaml", "name: m\nversion: 0.1.0\nbogus: 1\n");
    let o = sb.run(dir.parent().unwrap(), &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json_line(&o);
    assert_eq!(v["ok"], true);
    assert_eq!(v["roster"], Value::Null);
    assert_eq!(
        v["member"]["checks"][0],
        serde_json::json!({"ok": true, "text": "murmur.yaml parses: m@0.1.0"})
    );
    assert_eq!(v["warnings"][0]["code"], "W-SEC-019");
}

#[test]
fn doctor_graph_mermaid_and_dot() {
    let sb = Sandbox::new();
    let frm = three_members(&sb);
    let o = sb.run(&frm, &["doctor", "--graph"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "flowchart LR\n    m0[\"lead<br/>local/lead@0.1.0<br/>entry\"]\n    m1[\"worker<br/>local/worker@0.1.0\"]\n    m2[\"end<br/>local/end@0.1.0\"]\n    m0 --> m1\n    m0 --> m2\n    m2 --> m1\n"
    );
    let o = sb.run(&frm, &["doctor", "--dot"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "digraph formation {\n    rankdir=LR;\n    node [shape=box];\n    \"lead\" [label=\"lead\\nlocal/lead@0.1.0\\nentry\", style=bold];\n    \"worker\" [label=\"worker\\nlocal/worker@0.1.0\"];\n    \"end\" [label=\"end\\nlocal/end@0.1.0\"];\n    \"lead\" -> \"worker\";\n    \"lead\" -> \"end\";\n    \"end\" -> \"worker\";\n}\n"
    );
    // --graph and --json do not mix.
    assert_eq!(sb.run(&frm, &["doctor", "--graph", "--json"]).status.code(), Some(2));
    // No roster anywhere: E-IO-001 with a hint.
    let o = sb.run(&sb.path("empty"), &["doctor", "--graph"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("[mur doctor] error[E-IO-001]: no roster.yaml in current or parent directories"),
        "{}",
        stderr(&o)
    );
}

/// The `$` lines of the guide's `console` blocks, in order.
fn guide_commands() -> Vec<String> {
    let text = std::fs::read_to_string(crate::support::repo_root().join("docs/guide.md")).unwrap();
    let mut in_console = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_console = line == "```console";
            continue;
        }
        if in_console {
            let cmd = line
                .strip_prefix("$ ")
                .unwrap_or_else(|| panic!("a console line that is not a command: {line}"));
            out.push(cmd.to_string());
        }
    }
    out
}

#[test]
fn every_command_of_the_guide_runs() {
    let mut cmds = guide_commands();
    // The install step is what built the binary under test: it is the one line not run here.
    assert_eq!(cmds.remove(0), "cargo install --locked --path .");
    assert!(cmds.len() > 20, "{cmds:?}");
    let mut script = String::from("set -euo pipefail\n");
    for c in &cmds {
        script.push_str(&format!("echo '>>> {}'\n{c}\n", c.replace('\'', "")));
    }
    // `mur stop` ended the background formation (the guide waits for it and for the follow);
    // reap whatever is left so nothing outlives the test.
    script.push_str("wait\n");
    let sb = Sandbox::new();
    let cwd = sb.path("guide");
    std::fs::create_dir_all(sb.home()).unwrap();
    let bin_dir = crate::support::mur_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let o = std::process::Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .current_dir(&cwd)
        .env("HOME", sb.home())
        .env("PATH", path)
        .env_remove("MURMUR_FORMATION_ID")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n--- stderr\n{err}");
    for want in [
        "mur 0.1.0",
        "Scaffolded formation 'hello' in ./hello",
        "All checks passed.",
        "flowchart LR",
        "digraph formation {",
        "worker handled: say hi",
        "calls:\n  mcl_",
        "lead → worker  completed",
        "Scaffolded formation 'chat' in ./chat",
        "kind: model capsule (inference)",
        "launcher pid",
        "worker handled: say hi again",
        "  lead  session_end  ",
        "  worker  session_end  ",
        "stopped",
        "{\"artifacts\":[",
        "{\"errors\":[]",
        "{\"sessions\":[]}",
    ] {
        assert!(
            out.contains(want),
            "no `{want}` in the guide's output:\n{out}\n--- stderr\n{err}"
        );
    }
    assert!(sb.home().join(".local/share/man/man1/mur-run.1").is_file());
}
