//! `mur demo` and `mur new --roster`: the demo formation answers offline in a private home, and
//! a fresh scaffold builds, installs, is admitted and runs. Real binary, real members.

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::{Sandbox, formation_pids, stderr, stdout, wait_until};

/// Runs `mur args…` in `cwd` with the sandbox's HOME and `TMPDIR` set to the sandbox's `tmp/`,
/// failing the test rather than hanging past `limit`.
fn run_bounded(sb: &Sandbox, cwd: &Path, args: &[&str], limit: Duration) -> Output {
    let tmp = sb.path("tmp");
    let child = sb
        .mur(cwd)
        .args(args)
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mur");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for mur"),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("mur {args:?} did not end within {limit:?}");
        }
    }
}

const LIMIT: Duration = Duration::from_secs(180);

/// The demo's answer to its default task, as planner composes it.
pub(crate) const DEFAULT_ANSWER: &str = "planner split the task in two:
- analyst, on \"Mur launches formations of capsules that call each other.\": 9 words, 48 letters, longest word \"formations\"
- writer, on \"Every call is checked at the callee's door and recorded in the trace.\": \"Every call is checked at the …\" (analyst counted 13 words, 55 letters, longest word \"callee's\")
";

/// Checks the call tree `mur demo` prints after the answer, and returns the formation id.
fn assert_call_tree(out: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with("Calls in formation frm_"))
        .unwrap_or_else(|| panic!("no call tree in:\n{out}"));
    let formation = lines[head]
        .trim_start_matches("Calls in formation ")
        .trim_end_matches(':')
        .to_string();
    assert_eq!(formation.len(), 36, "{formation}");
    assert_eq!(lines[head - 1], "", "a blank line before the call tree");
    let calls = &lines[head + 1..];
    let expected = ["  planner → analyst", "  planner → writer", "    writer → analyst"];
    assert_eq!(calls.len(), expected.len(), "{out}");
    for (line, want) in calls.iter().zip(expected) {
        let rest = line
            .strip_prefix(want)
            .and_then(|r| r.strip_prefix("  completed  "))
            .and_then(|r| r.strip_suffix(" ms"))
            .unwrap_or_else(|| panic!("call line {line:?} is not `{want}  completed  <N> ms`"));
        rest.parse::<u64>().unwrap_or_else(|_| panic!("duration in {line:?}"));
    }
    formation
}

/// Nothing of the demo outlives it: no `~/.murmur`, no private home, no member process.
fn assert_nothing_left(sb: &Sandbox, formation: &str) {
    assert!(!sb.home().join(".murmur").exists(), "mur demo wrote into $HOME/.murmur");
    let left: Vec<_> = std::fs::read_dir(sb.path("tmp"))
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert!(
        wait_until(Duration::from_secs(5), || formation_pids(formation).is_empty()).is_some(),
        "members of {formation} still running: {:?}",
        formation_pids(formation)
    );
}

#[test]
fn demo_answers_its_default_task_offline_and_leaves_nothing() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("work");
    let out = run_bounded(&sb, &cwd, &["demo"], LIMIT);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
    assert!(so.starts_with(DEFAULT_ANSWER), "stdout:\n{so}\nstderr:\n{se}");
    let formation = assert_call_tree(&so);
    assert!(se.contains("mur demo: private home "), "{se}");
    assert!(
        se.contains(
            "mur demo: built and installed local/demo-planner@0.1.0, local/demo-analyst@0.1.0, local/demo-writer@0.1.0"
        ),
        "{se}"
    );
    assert!(se.contains(&format!("formation: {formation}")), "{se}");
    assert_nothing_left(&sb, &formation);
    // The work directory is left as it was.
    assert_eq!(std::fs::read_dir(&cwd).expect("cwd").count(), 0);
}

#[test]
fn demo_runs_the_task_it_is_given() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("work");
    // One sentence: planner splits it at " and ". The text also names a file in no directory
    // the launch reads, and is passed verbatim.
    let out = run_bounded(
        &sb,
        &cwd,
        &["demo", "Count these words and summarise roster.yaml"],
        LIMIT,
    );
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "stdout:\n{so}\nstderr:\n{se}");
    assert!(
        so.starts_with(
            "planner split the task in two:
- analyst, on \"Count these words\": 3 words, 15 letters, longest word \"Count\"
- writer, on \"summarise roster.yaml\": \"summarise roster.yaml\" (analyst counted 2 words, 19 letters, longest word \"roster.yaml\")
"
        ),
        "stdout:\n{so}\nstderr:\n{se}"
    );
    let formation = assert_call_tree(&so);
    assert_nothing_left(&sb, &formation);
}

#[test]
fn demo_refuses_a_blank_task() {
    let sb = Sandbox::unshared();
    let out = run_bounded(&sb, &sb.path("work"), &["demo", "  "], LIMIT);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error[E-DEMO-001]: the task is blank\n  hint: give the formation a task in words, or none for the demo's own\n"
    );
    assert_eq!(stdout(&out), "");
    assert_eq!(std::fs::read_dir(sb.path("tmp")).expect("tmp").count(), 0);
}

// ---- mur new --roster ----

/// Runs `mur args…` in `cwd` and asserts it succeeded.
fn ok(sb: &Sandbox, cwd: &Path, args: &[&str]) -> Output {
    let out = run_bounded(sb, cwd, args, LIMIT);
    assert!(
        out.status.success(),
        "mur {args:?}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// Runs each `mur …` of the scaffold's `Next:` build-and-install lines, as a shell would.
fn build_and_install(sb: &Sandbox, cwd: &Path, next: &str) {
    for line in next.lines().filter(|l| l.starts_with("  mur build ")) {
        for cmd in line.trim().split(" && ") {
            let args: Vec<&str> = cmd.split(' ').skip(1).collect();
            ok(sb, cwd, &args);
        }
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn new_roster_scaffold_builds_installs_is_admitted_and_runs_offline() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("work");
    let out = ok(&sb, &cwd, &["new", "--roster", "crew"]);
    assert_eq!(
        stdout(&out),
        "Scaffolded formation 'crew' in ./crew
  crew/roster.yaml
  crew/lead/murmur.yaml
  crew/lead/capsule.wasm
  crew/worker/murmur.yaml
  crew/worker/capsule.wasm
  crew/.schemas/roster.schema.json
  crew/.schemas/murmur.schema.json

Next:
  mur build crew/lead && mur install -g crew/lead/crew-lead-0.1.0.mur.zip
  mur build crew/worker && mur install -g crew/worker/crew-worker-0.1.0.mur.zip
  mur run --roster crew --task \"<your task>\"
"
    );
    assert_eq!(stderr(&out), "");
    assert_eq!(entries(&cwd), ["crew"], "the staging directory is gone");
    assert_eq!(
        entries(&cwd.join("crew")),
        [".schemas", "lead", "roster.yaml", "worker"]
    );

    build_and_install(&sb, &cwd, &stdout(&out));
    let doctor = ok(&sb, &cwd.join("crew"), &["doctor"]);
    let report = stdout(&doctor);
    assert!(report.contains("reachability: lead → worker"), "{report}");
    assert!(report.contains("All checks passed."), "{report}");

    let run = ok(&sb, &cwd, &["run", "--roster", "crew", "--task", "x"]);
    assert_eq!(stdout(&run), "worker handled: x\n", "stderr:\n{}", stderr(&run));
}

#[test]
fn new_roster_with_inference_scaffolds_model_members_that_are_admitted() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("work");
    sb.write(
        "home/.murmur/config.yaml",
        "inference:\n  provider: openai\n  endpoint: http://127.0.0.1:9\n  model: local-model\n",
    );
    let out = ok(&sb, &cwd, &["new", "--roster", "team", "--inference", "openai"]);
    let text = stdout(&out);
    assert!(text.starts_with(
        "Scaffolded formation 'team' in ./team
  team/roster.yaml
  team/lead/murmur.yaml
  team/worker/murmur.yaml
  team/.schemas/roster.schema.json
  team/.schemas/murmur.schema.json

Next:
"
    ));
    assert!(
        text.contains("  export OPENAI_API_KEY=…   (the key both members send to http://127.0.0.1:9)\n"),
        "{text}"
    );
    let lead = std::fs::read_to_string(cwd.join("team/lead/murmur.yaml")).expect("lead manifest");
    for want in [
        "  provider: openai\n",
        "  endpoint: http://127.0.0.1:9\n",
        "  model: local-model\n",
        "  api_key: ${OPENAI_API_KEY}\n",
    ] {
        assert!(lead.contains(want), "{want:?} not in:\n{lead}");
    }
    build_and_install(&sb, &cwd, &text);
    // As the scaffold's "Next:" says: doctor checks the key variable is set, as a launch would.
    let doctor = sb
        .mur(&cwd.join("team"))
        // The scaffold's endpoint is a placeholder nothing listens on: the key check, not the dial.
        .args(["doctor", "--offline"])
        .env("OPENAI_API_KEY", "sk-scaffold-0123456789")
        .output()
        .expect("mur doctor");
    assert!(
        stdout(&doctor).contains("All checks passed."),
        "{}{}",
        stdout(&doctor),
        stderr(&doctor)
    );

    // Anthropic, with a configuration naming another provider: the provider's defaults.
    let out = ok(&sb, &cwd, &["new", "--roster", "other", "--inference", "anthropic"]);
    let worker = std::fs::read_to_string(cwd.join("other/worker/murmur.yaml")).expect("worker manifest");
    assert!(worker.contains("  endpoint: https://api.anthropic.com\n"), "{worker}");
    assert!(worker.contains("  api_key: ${ANTHROPIC_API_KEY}\n"), "{worker}");
    assert!(stdout(&out).contains("export ANTHROPIC_API_KEY="));
}

#[test]
fn new_roster_refuses_bad_names_existing_paths_and_unknown_providers() {
    let sb = Sandbox::unshared();
    let cwd = sb.path("work");
    std::fs::create_dir(cwd.join("taken")).expect("mkdir");
    std::fs::write(cwd.join("file"), "x").expect("write");
    std::os::unix::fs::symlink(cwd.join("nowhere"), cwd.join("dangling")).expect("symlink");
    let long = "a".repeat(94);
    let table: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["Crew"],
            "error[E-NEW-002]: 'Crew' cannot name a formation: the name may hold only lowercase letters, digits and '-'".into(),
        ),
        (
            vec!["crew-"],
            "error[E-NEW-002]: 'crew-' cannot name a formation: the name must not start or end with '-'".into(),
        ),
        (
            vec![&long],
            format!(
                "error[E-NEW-002]: '{}…' cannot name a formation: its worker's capsule name '{long}-worker' is longer than 100 characters",
                &long[..80]
            ),
        ),
        (vec!["taken"], "error[E-NEW-003]: ./taken already exists (a directory)".into()),
        (vec!["file"], "error[E-NEW-003]: ./file already exists (a file)".into()),
        (vec!["dangling"], "error[E-NEW-003]: ./dangling already exists (a symbolic link)".into()),
        (
            vec!["crew", "--inference", "gemini"],
            "error[E-NEW-004]: 'gemini' is not an inference provider mur new can scaffold; it knows openai and anthropic".into(),
        ),
    ];
    for (args, first_line) in table {
        let mut full = vec!["new", "--roster"];
        full.extend(&args);
        let out = run_bounded(&sb, &cwd, &full, LIMIT);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().next(), Some(first_line.as_str()), "{args:?}: {err}");
        assert!(err.lines().nth(1).is_some_and(|h| h.starts_with("  hint: ")), "{err}");
        assert_eq!(stdout(&out), "", "{args:?}");
        assert_eq!(
            entries(&cwd),
            ["dangling", "file", "taken"],
            "{args:?} left something behind"
        );
    }
    // The dangling symlink is still dangling: nothing was written through it.
    assert!(!cwd.join("nowhere").exists());
}
