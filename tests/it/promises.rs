//! What docs/reference/roster.md and formation.md promise and a user could still break: a symlinked
//! `$HOME`, the `noAnswerBelow` of a component, the layout of `mur trace show frm_…`, a lock pinned
//! only per platform. Real launcher, real members, real doors on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::support::{Sandbox, member_traces, repo_root, stderr, stdout};

/// Runs `mur args…` in `cwd` with `HOME` set to `home`.
fn run_with_home(sb: &Sandbox, home: &Path, cwd: &Path, args: &[&str]) -> Output {
    sb.mur(cwd).env("HOME", home).args(args).output().expect("spawn mur")
}

/// The formation id of a finished launch, from its formation line on stderr.
fn formation_id(out: &Output) -> String {
    stderr(out)
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .unwrap_or_else(|| panic!("no formation line:\n{}", stderr(out)))
        .trim()
        .to_string()
}

/// Every `trace.jsonl` under `root`.
fn trace_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.ends_with("trace.jsonl") {
                out.push(p);
            }
        }
    }
    out
}

/// Installs `keeper`, echo's component with `trace.retain.max_sessions: 2`, beside echo.
fn install_keeper_and_echo(sb: &Sandbox) {
    sb.install_actor("echo");
    sb.install_component(
        "keeper",
        "actors/echo/capsule.wat",
        "trace:\n  retain:\n    max_sessions: 2\n",
    );
}

/// What a caller needs to reach its callees' loopback doors.
const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";

const KEEPER_AND_WORKER: &str = "roster_version: 1
members:
  - {name: lead, capsule: local/keeper, version: 0.1.0, entry: true}
  - {name: worker, capsule: local/echo, version: 0.1.0}
reachability:
  - {from: lead, to: [worker]}
";

/// Item: a `$HOME` reached through a symlink. Members canonicalise their work folder, so their
/// records name the home's real path; the launcher, `mur trace show` and retention must name
/// the same one.
#[test]
fn a_symlinked_home_keeps_every_members_records_in_reach() {
    let sb = Sandbox::new();
    install_keeper_and_echo(&sb);
    let real = sb.home().canonicalize().expect("home");
    let link = sb.dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).expect("symlink the home");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), KEEPER_AND_WORKER).expect("roster");

    let mut ids = Vec::new();
    for i in 0..3 {
        let out = run_with_home(&sb, &link, &dir, &["run", "--roster", "--task", &format!("run {i}")]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        ids.push(formation_id(&out));
        if i == 0 {
            let shown = run_with_home(&sb, &link, &dir, &["trace", "show", &ids[0]]);
            assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
            let text = stdout(&shown);
            let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("ses_")).collect();
            assert_eq!(rows.len(), 2, "every member's session, the peer's too:\n{text}");
            assert!(rows.iter().any(|r| r.contains("  worker  local/echo ")), "{text}");
            assert!(rows.iter().any(|r| r.contains("  lead    local/keeper ")), "{text}");
        }
    }
    // The third launch's retention pass removed the first formation, its peers' records too.
    let formations = real.join(".murmur/formations");
    assert!(
        !formations.join(&ids[0]).exists(),
        "the first formation's directory is gone"
    );
    assert!(formations.join(&ids[1]).exists() && formations.join(&ids[2]).exists());
    let peers_records = real
        .join(".murmur/records")
        .join(formations.join(&ids[0]).strip_prefix("/").expect("absolute"));
    assert!(
        !peers_records.exists(),
        "the peers' records went with the formation: {} is left",
        peers_records.display()
    );
    let left: Vec<PathBuf> = trace_files(&real.join(".murmur/records"))
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .next()
                .is_some_and(|l| l.contains(&ids[0]) && l.contains("\"formation_member\":\"worker\""))
        })
        .collect();
    assert!(
        left.is_empty(),
        "a peer's trace of the removed formation is left: {left:?}"
    );
}

/// Item: a component that ends without an answer reports, like a model capsule, the calls of its
/// task that ended without one (docs/reference/door.md#methods,
/// docs/reference/capsules.md#model-capsules).
#[test]
fn a_components_no_answer_names_the_calls_that_ended_without_one() {
    let sb = Sandbox::new();
    let peer = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";
    sb.install_component("fan", "tests/it/testdata/fan.wat", GRANT);
    sb.install_component("giveup", "tests/it/testdata/giveup.wat", &format!("{GRANT}{peer}"));
    sb.install_component("trapper", "actors/trap/capsule.wat", peer);
    let dir = sb.path("formation");
    // lead (fan) calls g (giveup), which calls worker (trap): worker fails, g gives no answer.
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1
members:
  - {name: lead, capsule: local/fan, version: 0.1.0, entry: true}
  - {name: g, capsule: local/giveup, version: 0.1.0}
  - {name: worker, capsule: local/trapper, version: 0.1.0}
reachability:
  - {from: lead, to: [g]}
  - {from: g, to: [worker]}
",
    )
    .expect("roster");
    let out = sb.run(&dir, &["run", "--roster", "--task", "anything"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // fan answers with the member's letter and '0' + the call's status: 7 is no-answer.
    assert_eq!(stdout(&out), "g7\n", "{}", stderr(&out));

    let lead = member_traces(&sb, "lead");
    let call = lead
        .iter()
        .flatten()
        .find(|r| r["event_type"] == "member_call" && r["member"] == "g")
        .unwrap_or_else(|| panic!("the lead's member_call to g: {lead:?}"));
    assert_eq!(call["status"], "no_answer", "{call}");
    assert_eq!(
        call["no_answer_below"],
        json!([{"member": "worker", "status": "failed"}]),
        "the caller sees what ended without an answer below g: {call}"
    );
    // g's own record of its call agrees.
    let g = member_traces(&sb, "g");
    let below: Vec<&Value> = g
        .iter()
        .flatten()
        .filter(|r| r["event_type"] == "member_call")
        .collect();
    assert_eq!(below.len(), 1, "{g:?}");
    assert_eq!(below[0]["member"], "worker");
    assert_eq!(below[0]["status"], "failed");
}

/// Replaces what differs between runs: the sandbox's path, ids (numbered in order of
/// appearance, per kind), durations.
fn normalised(text: &str, sandbox: &Path) -> String {
    let sb = sandbox.display().to_string();
    let mut text = text.replace(sb.trim_start_matches('/'), "<SANDBOX>");
    for prefix in ["frm_", "ses_", "mcl_"] {
        let mut seen: Vec<String> = Vec::new();
        let mut out = String::new();
        let mut rest = text.as_str();
        while let Some(pos) = rest.find(prefix) {
            let (head, tail) = rest.split_at(pos);
            out.push_str(head);
            let hex = tail[prefix.len()..]
                .bytes()
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            if hex != 32 {
                out.push_str(prefix);
                rest = &tail[prefix.len()..];
                continue;
            }
            let id = &tail[..prefix.len() + 32];
            let n = seen.iter().position(|s| s == id).unwrap_or_else(|| {
                seen.push(id.to_string());
                seen.len() - 1
            });
            out.push_str(&format!("{prefix}<{n}>"));
            rest = &tail[id.len()..];
        }
        out.push_str(rest);
        text = out;
    }
    // The usage table's numbers (times among them) and so its column widths vary by run: its
    // rows keep their words, each number shown as <N>.
    let mut in_usage = false;
    text.lines()
        .map(|line| {
            if line == "usage:" {
                in_usage = true;
            } else if in_usage && line.starts_with("  ") {
                let words: Vec<&str> = line
                    .split_whitespace()
                    .map(|w| {
                        if w.bytes().all(|b| b.is_ascii_digit()) {
                            "<N>"
                        } else {
                            w
                        }
                    })
                    .collect();
                return format!("  {}", words.join(" "));
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .iter()
        .map(|line| {
            // A call line may end in its subtree's cost (`  [subtree: 0 tokens in, …, 2 ms]`)
            // and its callee's grant (`  [task: lead]`) after the duration.
            let (body, tail) = match line.find(" ms  [") {
                Some(i) => line.split_at(i + " ms".len()),
                None => (line.as_str(), ""),
            };
            let tail = numbers_in_subtree_cost(tail);
            match body.strip_suffix(" ms").and_then(|l| l.rsplit_once("  ")) {
                Some((head, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{head}  <N> ms{tail}\n")
                }
                _ => format!("{line}\n"),
            }
        })
        .collect()
}

/// The numbers of a `[subtree: …]` bracket (its time varies by run) shown as `<N>`; the rest of
/// the line as it is.
fn numbers_in_subtree_cost(tail: &str) -> String {
    let Some(start) = tail.find("[subtree: ") else {
        return tail.to_string();
    };
    let end = tail[start..].find(']').map_or(tail.len(), |e| start + e);
    let mut cost = String::new();
    let mut in_number = false;
    for ch in tail[start..end].chars() {
        if ch.is_ascii_digit() {
            if !in_number {
                cost.push_str("<N>");
            }
            in_number = true;
        } else {
            in_number = false;
            cost.push(ch);
        }
    }
    format!("{}{cost}{}", &tail[..start], &tail[end..])
}

fn snapshot(rel: &str, actual: &str) {
    let path = repo_root().join("tests/it/snapshots").join(rel);
    if std::env::var_os("MUR_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; write it with MUR_UPDATE_SNAPSHOTS=1", path.display()));
    assert_eq!(
        want,
        actual,
        "{} differs from the output; refresh with MUR_UPDATE_SNAPSHOTS=1 if the change is meant",
        path.display()
    );
}

/// Item: `mur trace show frm_…` has the page's layout
/// (docs/reference/formation.md#formation-traces): one `searched:` line per root, every column
/// padded.
#[test]
fn trace_show_of_a_formation_has_the_pages_layout() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1
members:
  - {name: lead, capsule: local/relay, version: 0.1.0, entry: true}
  - {name: worker, capsule: local/echo, version: 0.1.0}
reachability:
  - {from: lead, to: [worker]}
",
    )
    .expect("roster");
    let out = sb.run(&dir, &["run", "--roster", "--task", "relayed"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "relayed\n");
    let frm = formation_id(&out);
    let shown = sb.run(&dir, &["trace", "show", &frm]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let sandbox = sb.dir.path().canonicalize().expect("sandbox");
    snapshot("trace/formation.txt", &normalised(&stdout(&shown), &sandbox));
}

/// Item: a lock entry pinned only per platform is refused by admission and by `mur run
/// --capsule` alike, with the same code.
#[test]
fn a_lock_pinned_only_per_platform_is_refused_by_both_runs() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("project");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n",
    )
    .expect("roster");
    let sha = std::fs::read_to_string(sb.home().join(".murmur/artifacts/local/echo/0.1.0/echo-0.1.0.sha256"))
        .expect("sidecar");
    let lock = |sha256: &str| {
        std::fs::write(
            dir.join("murmur.lock"),
            format!(
                "lock_version: 3\nartifacts:\n  - name: local/echo\n    resolved_version: 0.1.0\n    sha256: {sha256}\n"
            ),
        )
        .expect("lock");
    };
    // echo serves on after its task; this run ends with it.
    let capsule = [
        "run",
        "--capsule",
        "local/echo",
        "--capsule-version",
        "0.1.0",
        "--lifecycle-after-task",
        "exit",
        "--task",
        "hi",
    ];

    // A pin that agrees admits both ways.
    lock(&format!("{{any: {}}}", sha.trim()));
    let out = sb.run(&dir, &["run", "--roster", "--task", "hi"]);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "hi\n".into()),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&dir, &capsule);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(0), "hi\n".into()),
        "{}",
        stderr(&out)
    );

    lock(&format!("{{platforms: {{linux-x86_64: {}}}}}", sha.trim()));
    let what = "murmur.lock conflict for 'local/echo': 'local/echo' is pinned only per platform (sha256.platforms without any), which this runtime cannot compare";
    let roster = sb.run(&dir, &["run", "--roster", "--task", "hi"]);
    assert_eq!(roster.status.code(), Some(1), "{}", stderr(&roster));
    assert!(
        stderr(&roster).contains(&format!("error[E-REG-005]: roster.yaml: member 'lead': {what}")),
        "{}",
        stderr(&roster)
    );
    let single = sb.run(&dir, &capsule);
    assert_eq!(single.status.code(), Some(1), "{}", stderr(&single));
    assert!(
        stderr(&single).contains(&format!(
            "error[E-REG-005]: capsule 'local/echo@0.1.0' cannot be run: {what}"
        )),
        "{}",
        stderr(&single)
    );
    assert_eq!(stdout(&single), "", "nothing ran");
}
