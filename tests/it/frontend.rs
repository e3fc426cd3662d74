//! One admission front end (docs/reference/formation.md#launch-sequence steps 3–6): every admission
//! refusal, run through `mur run --roster`, `mur doctor` and `mur deploy --kubernetes` on the real
//! binary, is refused by all three with the same code, message and hint. The lock is read before
//! the roster is admitted, so an unreadable lock is the refusal whatever the roster holds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Sandbox, stderr, stdout};

const AUTH: &str = "network: {authentication: {scheme: bearer}}\n";
const SERVES: &str = "exports: {peer_tasks: {accept: true}}\n";

const LEAD: &str = "{name: lead, capsule: local/lead, version: 1.0.0, entry: true}";
const WORKER: &str = "{name: worker, capsule: local/worker, version: 1.0.0}";

const BAD_LOCK: &str = "lock_version: 2\n";

/// A roster of `members` (flow mappings) and the `reachability` line `reach` (may be empty).
fn roster(members: &[&str], reach: &str) -> String {
    let mut s = String::from("roster_version: 1\nmembers:\n");
    for m in members {
        s.push_str(&format!("  - {m}\n"));
    }
    s.push_str(reach);
    s
}

/// A lock pinning `local/worker` at `version` and `sha256.any` (or only per platform).
fn worker_lock(version: &str, sha: Option<&str>) -> String {
    let pin = match sha {
        Some(h) => format!("{{any: {h}}}"),
        None => "{platforms: {linux-x86_64: aaaa}}".into(),
    };
    format!("lock_version: 3\nartifacts:\n  - name: local/worker\n    resolved_version: {version}\n    sha256: {pin}\n")
}

/// The global store's `local/<name>@1.0.0` file ending in `ext`.
fn global_artifact(sb: &Sandbox, name: &str, ext: &str) -> PathBuf {
    sb.home()
        .join(format!(".murmur/artifacts/local/{name}/1.0.0/{name}-1.0.0.{ext}"))
}

fn worker_sha(sb: &Sandbox) -> String {
    std::fs::read_to_string(global_artifact(sb, "worker", "sha256"))
        .expect("sidecar")
        .trim()
        .to_string()
}

/// Puts `zip` bytes into the formation's project store as `local/<name>@1.0.0`, with `sha` as
/// its recorded hash.
fn project_store(dir: &Path, name: &str, zip: &[u8], sha: &str) {
    let store = dir.join(format!(".murmur/artifacts/local/{name}/1.0.0"));
    std::fs::create_dir_all(&store).expect("mkdir store");
    std::fs::write(store.join(format!("{name}-1.0.0.mur.zip")), zip).expect("zip");
    std::fs::write(store.join(format!("{name}-1.0.0.sha256")), format!("{sha}\n")).expect("sidecar");
}

/// A `.mur.zip` holding only a `murmur.yaml` with `manifest`, which `mur build` would refuse.
fn zip_with_manifest(manifest: &str) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    w.start_file("murmur.yaml", zip::write::SimpleFileOptions::default())
        .expect("zip entry");
    w.write_all(manifest.as_bytes()).expect("zip write");
    w.finish().expect("zip finish").into_inner()
}

type Prepare = Box<dyn Fn(&Sandbox, &Path)>;

struct Case {
    why: &'static str,
    /// `None`: no roster.yaml is written (`prepare` makes one).
    roster: Option<String>,
    lock: Option<String>,
    prepare: Option<Prepare>,
    code: &'static str,
}

fn case(why: &'static str, roster: String, lock: Option<String>, code: &'static str) -> Case {
    Case {
        why,
        roster: Some(roster),
        lock,
        prepare: None,
        code,
    }
}

/// lead (entry, authenticates), worker (serves peers, authenticates), loner (authenticates,
/// refuses peers) and open (serves peers, public door), each `local/<name>@1.0.0`, installed
/// globally.
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    for (name, extra) in [
        ("lead", AUTH.to_string()),
        ("worker", format!("{SERVES}{AUTH}")),
        ("loner", AUTH.to_string()),
        ("open", SERVES.to_string()),
    ] {
        sb.install_manifest(name, &format!("name: {name}\nversion: 1.0.0\n{extra}"));
    }
    sb
}

fn cases(sb: &Sandbox) -> Vec<Case> {
    let sha = worker_sha(sb);
    let worker_zip = std::fs::read(global_artifact(sb, "worker", "mur.zip")).expect("worker zip");
    let rules = |to: &str| format!("reachability: [{{from: lead, to: [{to}]}}]\n");
    let dup = roster(&[LEAD, WORKER, WORKER], "");
    vec![
        // Check 1.
        case(
            "YAML syntax",
            "roster_version: 1\nmembers: [\n".into(),
            None,
            "E-ROS-001",
        ),
        case(
            "roster_version 2",
            roster(&[LEAD], "").replace("roster_version: 1", "roster_version: 2"),
            None,
            "E-ROS-001",
        ),
        case(
            "bare capsule name",
            roster(&[&LEAD.replace("local/lead", "lead")], ""),
            None,
            "E-ROS-001",
        ),
        case(
            "self-call",
            roster(&[LEAD, WORKER], "reachability: [{from: worker, to: [worker]}]\n"),
            None,
            "E-ROS-001",
        ),
        Case {
            why: "roster.yaml a dangling symlink",
            roster: None,
            lock: None,
            prepare: Some(Box::new(|_, dir| {
                std::os::unix::fs::symlink(dir.join("elsewhere.yaml"), dir.join("roster.yaml")).expect("symlink");
            })),
            code: "E-ROS-001",
        },
        // Checks 2–5: no store read.
        case("duplicate member name", dup.clone(), None, "E-ROS-003"),
        case("no entry", roster(&[WORKER], ""), None, "E-ROS-002"),
        case(
            "two entries",
            roster(&[LEAD, &WORKER.replace("}", ", entry: true}")], ""),
            None,
            "E-ROS-002",
        ),
        case(
            "rule names a stranger",
            roster(&[LEAD, WORKER], &rules("worker, ghost")),
            None,
            "E-ROS-004",
        ),
        case(
            "rule from a stranger",
            roster(&[LEAD, WORKER], "reachability: [{from: ghost, to: [worker]}]\n"),
            None,
            "E-ROS-004",
        ),
        case(
            "rule calls the entry",
            roster(&[LEAD, WORKER], "reachability: [{from: worker, to: [lead]}]\n"),
            None,
            "E-ROS-008",
        ),
        // Check 6.
        case(
            "not installed",
            roster(&[LEAD, "{name: ghost, capsule: local/ghost, version: 1.0.0}"], ""),
            None,
            "E-ROS-007",
        ),
        case(
            "installed at another version",
            roster(&[LEAD, &WORKER.replace("1.0.0", "2.0.0")], ""),
            None,
            "E-ROS-007",
        ),
        case(
            "version that leaves the store",
            roster(&[LEAD, &WORKER.replace("1.0.0", "'../../lead/1.0.0'")], ""),
            None,
            "E-ROS-007",
        ),
        Case {
            why: "project-store bytes that do not match their sidecar",
            roster: Some(roster(&[LEAD, WORKER], "")),
            lock: None,
            // The global copy is good: lookup never falls through on a mismatch.
            prepare: Some(Box::new(move |_, dir| {
                project_store(dir, "worker", &worker_zip, &"0".repeat(64))
            })),
            code: "E-ROS-007",
        },
        Case {
            why: "packed murmur.yaml that does not parse",
            roster: Some(roster(
                &[LEAD, "{name: broken, capsule: local/broken, version: 1.0.0}"],
                "",
            )),
            lock: None,
            prepare: Some(Box::new(|_, dir| {
                let zip = zip_with_manifest("name: broken\n");
                project_store(dir, "broken", &zip, &mur::digest::sha256_hex(&zip));
            })),
            code: "E-ROS-007",
        },
        case(
            "lock pins another version",
            roster(&[LEAD, WORKER], ""),
            Some(worker_lock("0.9.0", Some(&sha))),
            "E-REG-005",
        ),
        case(
            "lock pins other bytes",
            roster(&[LEAD, WORKER], ""),
            Some(worker_lock("1.0.0", Some(&"f".repeat(64)))),
            "E-REG-005",
        ),
        case(
            "lock pins per platform only",
            roster(&[LEAD, WORKER], ""),
            Some(worker_lock("1.0.0", None)),
            "E-REG-005",
        ),
        // Checks 7–8.
        case(
            "callee refuses peers",
            roster(
                &[LEAD, "{name: loner, capsule: local/loner, version: 1.0.0}"],
                &rules("loner"),
            ),
            None,
            "E-ROS-005",
        ),
        case(
            "public door with peer traffic",
            roster(
                &[LEAD, WORKER, "{name: open, capsule: local/open, version: 1.0.0}"],
                &rules("worker"),
            ),
            None,
            "E-ROS-006",
        ),
        // The lock (docs/reference/formation.md#launch-sequence step 5), read before admission
        // (step 6).
        case(
            "lock_version 2",
            roster(&[LEAD, WORKER], ""),
            Some(BAD_LOCK.into()),
            "E-RUN-003",
        ),
        case(
            "lock YAML syntax",
            roster(&[LEAD, WORKER], ""),
            Some("lock_version: [\n".into()),
            "E-RUN-003",
        ),
        Case {
            why: "lock a directory",
            roster: Some(roster(&[LEAD, WORKER], "")),
            lock: None,
            prepare: Some(Box::new(|_, dir| {
                std::fs::create_dir(dir.join("murmur.lock")).expect("mkdir lock")
            })),
            code: "E-RUN-003",
        },
        case(
            "duplicate member name and an unreadable lock",
            dup,
            Some(BAD_LOCK.into()),
            "E-RUN-003",
        ),
        case(
            "YAML syntax and an unreadable lock",
            "roster_version: 1\nmembers: [\n".into(),
            Some(BAD_LOCK.into()),
            "E-RUN-003",
        ),
        case(
            "rule calls the entry and an unreadable lock",
            roster(&[LEAD, WORKER], "reachability: [{from: worker, to: [lead]}]\n"),
            Some(BAD_LOCK.into()),
            "E-RUN-003",
        ),
        case(
            "not installed and an unreadable lock",
            roster(&[LEAD, "{name: ghost, capsule: local/ghost, version: 1.0.0}"], ""),
            Some(BAD_LOCK.into()),
            "E-RUN-003",
        ),
    ]
}

/// (exit code, stderr, stdout).
fn seen(o: &Output) -> (Option<i32>, String, String) {
    (o.status.code(), stderr(o), stdout(o))
}

#[test]
fn run_doctor_and_deploy_refuse_every_roster_alike() {
    let sb = sandbox();
    let mut wrong = Vec::new();
    for (i, c) in cases(&sb).iter().enumerate() {
        let dir = std::fs::canonicalize(sb.path(&format!("cases/{i}"))).expect("case dir");
        if let Some(r) = &c.roster {
            std::fs::write(dir.join("roster.yaml"), r).expect("roster");
        }
        if let Some(l) = &c.lock {
            std::fs::write(dir.join("murmur.lock"), l).expect("lock");
        }
        if let Some(p) = &c.prepare {
            p(&sb, &dir);
        }
        let arg = dir.to_str().expect("utf-8");
        let (run_code, run_err, _) = seen(&sb.run(sb.dir.path(), &["run", "--roster", arg]));
        let (doc_code, doc_err, doc_out) = seen(&sb.run(&dir, &["doctor"]));
        let (dep_code, dep_err, dep_out) = seen(&sb.run(sb.dir.path(), &["deploy", "--roster", arg, "--kubernetes"]));

        let head = format!("error[{}]: ", c.code);
        let doc_err = doc_err.strip_prefix("[mur doctor] ").unwrap_or(&doc_err).to_string();
        let message = run_err.strip_prefix(&head).and_then(|r| r.lines().next()).unwrap_or("");
        let ok = run_code == Some(1)
            && doc_code == Some(1)
            && dep_code == Some(1)
            && run_err.starts_with(&head)
            && doc_err == run_err
            && dep_err == run_err
            && doc_out.contains(&format!("  \u{2717}  {message}\n"))
            && dep_out.is_empty();
        if !ok {
            wrong.push(format!(
                "{} (want {}):\n  run    {run_code:?} {run_err:?}\n  doctor {doc_code:?} {doc_err:?}\n  deploy {dep_code:?} {dep_err:?}",
                c.why, c.code
            ));
        }
    }
    assert!(wrong.is_empty(), "refused differently:\n{}", wrong.join("\n"));
}

/// `--roster PATH` naming neither a directory nor a roster.yaml
/// (docs/reference/formation.md#launch-sequence step 3): run and deploy take the path, doctor does
/// not.
#[test]
fn run_and_deploy_refuse_a_path_that_names_no_roster_alike() {
    let sb = Sandbox::new();
    let file = sb.write("formation/other.yaml", "roster_version: 1\n");
    let arg = file.to_str().expect("utf-8");
    let run = sb.run(sb.dir.path(), &["run", "--roster", arg]);
    let dep = sb.run(sb.dir.path(), &["deploy", "--roster", arg, "--kubernetes"]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(
        stderr(&run).lines().next().unwrap_or(""),
        format!(
            "error[E-ROS-001]: {arg}: a roster is read from roster.yaml in its project directory, and this path is neither a directory nor a file named roster.yaml"
        )
    );
    assert_eq!((dep.status.code(), stderr(&dep)), (Some(1), stderr(&run)));
}
