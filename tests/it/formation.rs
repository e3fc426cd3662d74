//! `mur run --roster`: launching, readiness failures, wind-down, kills, tokens, retention.
//! Real launcher, real member processes, real doors on 127.0.0.1.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{self, Launcher, Sandbox, formation_pids, stderr, stdout, wait_until};

const TWO_ECHOES: &str = "roster_version: 1
members:
  - name: lead
    capsule: local/echo
    version: 0.1.0
    entry: true
  - name: worker
    capsule: local/echo
    version: 0.1.0
reachability:
  - from: lead
    to: [worker]
";

/// A sandbox with echo installed and a formation directory holding `roster`.
fn formation(roster: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), roster).expect("write roster");
    (sb, dir)
}

/// Every trace of the sandbox, as (path, records).
fn traces(sb: &Sandbox) -> Vec<(PathBuf, Vec<serde_json::Value>)> {
    let mut out = Vec::new();
    let mut stack = vec![sb.home().join(".murmur").join("records")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "trace.jsonl") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let recs = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
                out.push((p, recs));
            }
        }
    }
    out
}

fn event_types(recs: &[serde_json::Value]) -> Vec<String> {
    recs.iter()
        .map(|r| r["event_type"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_task_formation_answers_and_leaves_nothing_running() {
    let (sb, dir) = formation(TWO_ECHOES);
    let out = sb.run(&dir, &["run", "--roster", "--task", "hello formation"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{err}");
    assert_eq!(
        stdout(&out),
        "hello formation\n",
        "the entry's answer, and nothing else, on stdout"
    );
    let frm = err
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .expect("formation line")
        .to_string();
    assert!(err.contains("  peer   worker  local/echo@0.1.0  pid "), "{err}");
    assert!(err.contains("  entry  lead    starting"), "{err}");
    assert!(
        formation_pids(&frm).is_empty(),
        "members still running after the launcher exited"
    );
    // The peer wound down through its lifeline: formation_ended first, then session_end ok.
    let all = traces(&sb);
    let peer = all
        .iter()
        .find(|(p, _)| p.to_string_lossy().contains(&format!("formations/{frm}/worker")))
        .expect("the worker's trace");
    let types = event_types(&peer.1);
    assert_eq!(types.first().map(String::as_str), Some("session_start"));
    assert_eq!(types.last().map(String::as_str), Some("session_end"));
    let fe = types
        .iter()
        .position(|t| t == "formation_ended")
        .expect("formation_ended");
    assert_eq!(peer.1[fe]["formation_id"], frm.as_str());
    assert_eq!(peer.1.last().unwrap()["exit_status"], "ok", "an idle member ends ok");
    assert_eq!(peer.1[0]["formation_member"], "worker");
    // The peer's work folder exists, owner-only, and the runtime created nothing in it.
    let workdir = sb.home().join(".murmur/formations").join(&frm).join("worker");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&workdir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::read_dir(&workdir).unwrap().count(), 0);
    let marker =
        std::fs::read_to_string(sb.home().join(".murmur/formations").join(&frm).join("formation.json")).unwrap();
    assert!(marker.starts_with("{\"launcher_pid\":"), "{marker}");
    assert!(marker.contains(&format!(
        "\"project_dir\":\"{}\"",
        std::fs::canonicalize(&dir).unwrap().display()
    )));
}

#[test]
fn json_launch_prints_the_formation_line_first() {
    let (sb, dir) = formation(TWO_ECHOES);
    let out = sb.run(&dir, &["run", "--roster", "--json", "--deadline", "120", "--task", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(
        lines.len(),
        3,
        "formation line, entry readiness line, answer line:\n{text}"
    );
    let f = &lines[0];
    let keys: Vec<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["deadline", "entry", "formation_id", "peers"]);
    assert_eq!(f["entry"], "lead");
    assert_eq!(f["deadline"]["secs"], 120);
    assert!(f["deadline"]["at"].as_str().unwrap().ends_with('Z'));
    let peer = &f["peers"][0];
    assert_eq!(peer["name"], "worker");
    assert!(peer["url"].as_str().unwrap().starts_with("http://localhost:"));
    assert!(peer["session_id"].as_str().unwrap().starts_with("ses_"));
    assert_eq!(
        lines[1]["formation_id"], f["formation_id"],
        "the entry's readiness line names the formation"
    );
    assert_eq!(lines[2]["answer"], "x");
    assert!(!text.contains("mft1.") && !text.contains("mdt1."), "no token on stdout");
}

/// A stand-in `mur` for the peers only: the entry still runs the real binary.
fn fake_peer_binary(sb: &Sandbox, peer_script: &str) -> PathBuf {
    let path = sb.dir.path().join("fake-mur");
    let real = support::mur_bin();
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in\n  *' --readiness-tokens '*) ;;\n  *) exec '{}' \"$@\" ;;\nesac\n{peer_script}\n",
        real.display()
    );
    std::fs::write(&path, script).expect("write fake");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[test]
fn every_readiness_failure_refuses_the_launch_and_never_starts_the_entry() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "exits",
            "echo 'worker broke' >&2; echo 'second line' >&2; exit 3",
            "its process exited with status 3 before reporting; its last stderr lines were:\n    worker broke\n    second line",
        ),
        (
            "silent-exit",
            "exit 4",
            "its process exited with status 4 before reporting; it wrote nothing to stderr",
        ),
        (
            "not-json",
            "echo hello; sleep 30",
            "its first line is not a readiness line: it does not parse as JSON",
        ),
        (
            "no-formation",
            "echo '{\"session_id\":\"ses_1\",\"url\":\"localhost:1\"}'; sleep 30",
            "it reported no formation instead of frm_",
        ),
        (
            "wrong-formation",
            "echo '{\"formation_id\":\"frm_0\",\"session_id\":\"ses_1\",\"url\":\"localhost:1\"}'; sleep 30",
            "it reported formation frm_0 instead of frm_",
        ),
        (
            "no-door",
            "echo \"{\\\"formation_id\\\":\\\"$MURMUR_FORMATION_ID\\\",\\\"session_id\\\":\\\"ses_1\\\",\\\"url\\\":\\\"\\\"}\"; sleep 30",
            "it reported no door",
        ),
        (
            "no-answer",
            "echo \"{\\\"formation_id\\\":\\\"$MURMUR_FORMATION_ID\\\",\\\"session_id\\\":\\\"ses_1\\\",\\\"url\\\":\\\"localhost:1\\\"}\"; sleep 30",
            "its door at http://localhost:1 did not answer as session ses_1 within 1s; the last probe said: ",
        ),
        (
            "reports-then-exits",
            "echo \"{\\\"formation_id\\\":\\\"$MURMUR_FORMATION_ID\\\",\\\"session_id\\\":\\\"ses_1\\\",\\\"url\\\":\\\"localhost:1\\\"}\"; sleep 0.3; exit 5",
            "its process reported and then exited with status 5 before its door answered",
        ),
        ("never-reports", "sleep 30", "it did not report within 1s"),
    ];
    let (sb, dir) = formation(TWO_ECHOES);
    for (name, script, want) in cases {
        let fake = fake_peer_binary(&sb, script);
        let launch = Launcher::start(
            &sb,
            &dir,
            &["--task", "never runs"],
            &[
                ("MURMUR_MUR_BINARY", fake.to_str().unwrap()),
                ("MURMUR_TEST_TIMING", "peer_readiness=1s,launcher_grace=300ms"),
            ],
        );
        let (code, out, err) = launch.wait(Duration::from_secs(30));
        assert_eq!(code, 1, "{name}: {err}");
        assert!(
            err.contains("error[E-RUN-045]: the formation could not be launched\n  'worker' (local/echo@0.1.0): "),
            "{name}: {err}"
        );
        assert!(err.contains(want), "{name}: want {want:?} in:\n{err}");
        assert!(err.contains("\n  stopped: worker (pid "), "{name}: {err}");
        assert!(
            err.contains("  hint: the formation was not launched, and nothing it started is still running"),
            "{name}"
        );
        assert!(
            out.is_empty(),
            "{name}: the entry never started, so nothing on stdout: {out}"
        );
        assert!(!err.contains("  entry  lead"), "{name}: no formation line");
    }
    // The entry never ran in any of those launches: no session of the project's records group.
    let project_records = sb
        .home()
        .join(".murmur/records")
        .join(std::fs::canonicalize(&dir).unwrap().strip_prefix("/").unwrap());
    assert!(!project_records.exists(), "the entry member never started");
}

#[test]
fn a_peer_that_closes_its_stdout_and_lingers_is_killed_within_two_seconds() {
    let (sb, dir) = formation(TWO_ECHOES);
    // Its stdout closes before any readiness line, and the process (a shell and its child, in
    // the peer's process group) lives on.
    let fake = fake_peer_binary(&sb, "exec >&-\necho 'stdout closed' >&2\nsleep 30\necho 'never' >&2");
    let started = Instant::now();
    let launch = Launcher::start(
        &sb,
        &dir,
        &["--task", "never runs"],
        &[("MURMUR_MUR_BINARY", fake.to_str().unwrap())],
    );
    let (code, out, err) = launch.wait(Duration::from_secs(20));
    let took = started.elapsed();
    eprintln!("a peer that closed stdout and lingered: the launch ended {took:?} after its start");
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    // docs/reference/formation.md#how-the-launcher-waits: 2 s to exit, then SIGKILL; it is reported
    // with the status that ended it, not left to the 25 s stop grace.
    assert!(
        err.contains("'worker' (local/echo@0.1.0): its process exited with status 137 before reporting; its last stderr lines were:\n    stdout closed\n"),
        "{err}"
    );
    assert!(!err.contains("never"), "{err}");
    assert!(err.contains("\n  stopped: worker (pid "), "{err}");
    assert!(took < Duration::from_secs(10), "the launch took {took:?}");
    assert!(
        crate::faults::members_of_home(&sb.home(), 0).is_empty(),
        "the peer's whole process group was killed"
    );
}

#[test]
fn an_unrunnable_peer_is_named_with_its_own_error() {
    let (sb, dir) = formation(
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n  - {name: shell, capsule: local/shell, version: 1.0.0}\n",
    );
    sb.install_manifest("shell", "name: shell\nversion: 1.0.0\n");
    let out = sb.run(&dir, &["run", "--roster", "--task", "t"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("'shell' (local/shell@1.0.0): its process exited with status 1 before reporting; its last stderr lines were:"), "{err}");
    assert!(
        err.contains("E-RUN-002"),
        "the peer's own refusal shows in the tail: {err}"
    );
}

#[test]
fn admission_refusal_starts_nothing() {
    let sb = Sandbox::new();
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), TWO_ECHOES).unwrap();
    let out = sb.run(&dir, &["run", "--roster", "--task", "t"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("error[E-ROS-007]: roster.yaml: member 'lead' (local/echo@0.1.0) cannot be admitted: not installed in the project or global store"), "{}", stderr(&out));
    assert!(!sb.home().join(".murmur/formations").exists(), "nothing was launched");
}

#[test]
fn front_end_refusals() {
    let (sb, dir) = formation(TWO_ECHOES);
    let out = sb
        .mur(&dir)
        .args(["run", "--roster"])
        .env("MURMUR_FORMATION_ID", "frm_x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error[E-RUN-046]: MURMUR_FORMATION_ID is set, so this process is already a member of a formation, and a formation member cannot launch a formation"), "{}", stderr(&out));
    let out = sb.run(&dir, &["run", "--roster", "--resume", "ses_1"]);
    assert_eq!(out.status.code(), Some(2), "--resume with --roster is a usage error");
    let out = sb.run(&dir, &["run", "--roster", "notes.txt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error[E-ROS-001]: notes.txt: a roster is read from roster.yaml in its project directory, and this path is neither a directory nor a file named roster.yaml"), "{}", stderr(&out));
    // The roster may be named by its file or its directory, from anywhere.
    let out = sb.run(
        sb.dir.path(),
        &[
            "run",
            "--roster",
            dir.join("roster.yaml").to_str().unwrap(),
            "--task",
            "by path",
        ],
    );
    assert_eq!(stdout(&out), "by path\n", "{}", stderr(&out));
}

#[test]
fn sigterm_stops_a_serving_formation_through_lifelines() {
    let (sb, dir) = formation(TWO_ECHOES);
    let launch = Launcher::start(&sb, &dir, &[], &[]);
    let frm = launch.formation_id();
    wait_until(Duration::from_secs(30), || formation_pids(&frm).len() == 2).expect("both members run");
    launch.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, _, err) = launch.wait(Duration::from_secs(40));
    assert_eq!(code, 143, "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("[mur run] SIGTERM: the formation was stopped; stopped: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("lead (pid ") && line.contains("worker (pid "), "{line}");
    assert!(formation_pids(&frm).is_empty());
    // Both members wound down through their lifelines (never SIGTERM): formation_ended, then ok.
    for (path, recs) in traces(&sb) {
        let types = event_types(&recs);
        assert!(
            types.contains(&"formation_ended".to_string()),
            "{}: {types:?}",
            path.display()
        );
        assert_eq!(recs.last().unwrap()["exit_status"], "ok", "{}", path.display());
    }
}

/// The pipes a process holds, by inode (`pipe:[N]` in /proc/PID/fd).
fn pipes_of(pid: u32) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|target| target.to_string_lossy().into_owned())
                .filter(|target| target.starts_with("pipe:"))
                .collect()
        })
        .unwrap_or_default()
}

/// The pipe behind a member's `MURMUR_FORMATION_CHANNEL` descriptor, while it holds it.
fn channel_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let fd = environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"MURMUR_FORMATION_CHANNEL="))
        .map(|fd| String::from_utf8_lossy(fd).into_owned())?;
    let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    Some(target.to_string_lossy().into_owned()).filter(|t| t.starts_with("pipe:"))
}

#[test]
fn no_member_inherits_a_pipe_of_another_member_or_of_the_launchers_parent() {
    // Members start one after another while the launcher holds every earlier member's pipes:
    // each must come up holding its own channel, lifeline and output pipes and nothing else.
    // The launcher itself is started holding one more pipe its parent left open at fd 200 (as a
    // build tool's jobserver is): that one is the launcher's, never a member's.
    let (sb, dir) = formation(
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}\n\
         \x20 - {name: a, capsule: local/echo, version: 0.1.0}\n  - {name: b, capsule: local/echo, version: 0.1.0}\n\
         \x20 - {name: c, capsule: local/echo, version: 0.1.0}\nreachability: all\n",
    );
    let (left_open, _write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let left_open_fd = std::os::fd::AsRawFd::as_raw_fd(&left_open);
    let mut cmd = sb.mur(&dir);
    cmd.args(["run", "--roster"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: dup2(2) is async-signal-safe; the duplicate, unlike the original, is inheritable.
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(left_open_fd, 200) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let launch = Launcher::spawn(cmd);
    let frm = launch.formation_id();
    wait_until(Duration::from_secs(30), || formation_pids(&frm).len() == 4).expect("all four members run");
    let launcher = pipes_of(launch.child.id());
    let parents = format!(
        "pipe:[{}]",
        std::fs::metadata(format!("/proc/self/fd/{left_open_fd}"))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .expect("pipe inode")
    );
    assert!(
        launcher.contains(&parents),
        "the launcher holds its parent's pipe: {launcher:?}"
    );
    // Between starts, nothing of the launcher's beyond stdin, stdout and stderr is inheritable.
    // A member's pid exists from its fork, a moment before its start returns and its own
    // descriptors are close-on-exec again (src/launcher/spawn.rs), so the last start may still
    // be finishing: the launcher must reach that state once it is done.
    let inheritable = || {
        let mut found = Vec::new();
        let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fdinfo", launch.child.id())) else {
            return found;
        };
        for entry in fds.flatten() {
            let fd: i32 = entry.file_name().to_string_lossy().parse().expect("fd number");
            let info = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| i32::from_str_radix(f.trim(), 8).ok());
            if let Some(flags) = flags.filter(|_| fd > 2)
                && flags & nix::libc::O_CLOEXEC == 0
            {
                found.push(format!("fd {fd}: {info}"));
            }
        }
        found
    };
    wait_until(Duration::from_secs(10), || inheritable().is_empty())
        .unwrap_or_else(|| panic!("the launcher keeps inheritable descriptors: {:?}", inheritable()));
    let members: Vec<(u32, _)> = formation_pids(&frm)
        .into_iter()
        .map(|pid| (pid, pipes_of(pid)))
        .collect();
    for (pid, pipes) in &members {
        // Channel and lifeline, and for a peer its stdout and stderr.
        assert!(pipes.len() >= 2, "member {pid} holds {pipes:?}");
        assert!(
            !pipes.contains(&parents),
            "member {pid} inherited the launcher's parent's pipe"
        );
        // The entry's channel is complete when it starts, so the launcher closes its end at
        // once; until the entry has read it to the end, the entry alone holds that pipe.
        let own_channel = channel_of(*pid);
        for pipe in pipes {
            assert!(
                launcher.contains(pipe) || own_channel.as_ref() == Some(pipe),
                "member {pid} holds {pipe}, which is not the launcher's"
            );
            for (other, theirs) in &members {
                assert!(
                    other == pid || !theirs.contains(pipe),
                    "members {pid} and {other} both hold {pipe}"
                );
            }
        }
    }
}

/// Measures how long members of a formation survive a SIGKILL of `target`.
fn members_gone_after_kill(target: &str) -> Duration {
    let (sb, dir) = formation(TWO_ECHOES);
    let launch = Launcher::start(&sb, &dir, &[], &[]);
    let frm = launch.formation_id();
    wait_until(Duration::from_secs(30), || formation_pids(&frm).len() == 2).expect("both members run");
    let launcher = nix::unistd::Pid::from_raw(launch.child.id() as i32);
    let killed = Instant::now();
    match target {
        "launcher" => nix::sys::signal::kill(launcher, nix::sys::signal::Signal::SIGKILL).unwrap(),
        "group" => nix::sys::signal::killpg(launcher, nix::sys::signal::Signal::SIGKILL).unwrap(),
        "entry" => {
            // The entry shares the launcher's process group; the peer has a group of its own.
            let entry = formation_pids(&frm)
                .into_iter()
                .find(|p| nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(*p as i32))).ok() == Some(launcher))
                .expect("the entry runs in the launcher's process group");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(entry as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
        }
        _ => unreachable!(),
    }
    wait_until(Duration::from_secs(30), || formation_pids(&frm).is_empty())
        .unwrap_or_else(|| panic!("members of {frm} still running 30 s after kill -KILL of the {target}"));
    let took = killed.elapsed();
    eprintln!("kill -KILL of the {target}: last member gone after {took:?}");
    drop(launch);
    took
}

#[test]
fn kill_of_the_launcher_leaves_no_member_running() {
    assert!(members_gone_after_kill("launcher") < Duration::from_secs(30));
}

#[test]
fn kill_of_the_launchers_group_leaves_no_member_running() {
    assert!(members_gone_after_kill("group") < Duration::from_secs(30));
}

#[test]
fn kill_of_the_entry_ends_the_formation() {
    assert!(members_gone_after_kill("entry") < Duration::from_secs(30));
}

#[test]
fn deadline_ends_every_member_at_one_instant() {
    let (sb, dir) = formation(TWO_ECHOES);
    let started = Instant::now();
    let launch = Launcher::start(&sb, &dir, &["--deadline", "2"], &[]);
    let (code, _, err) = launch.wait(Duration::from_secs(40));
    assert_eq!(code, 1, "the launcher exits with the entry's 1: {err}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(err.contains("E-RUN-053"), "{err}");
    let all = traces(&sb);
    // (member, the deadline instant its record names, when it wrote deadline_reached), Unix ms.
    let mut ends = Vec::new();
    for member in ["lead", "worker"] {
        let mine: Vec<_> = all
            .iter()
            .filter(|(_, recs)| recs.first().is_some_and(|r| r["formation_member"] == member))
            .collect();
        assert_eq!(mine.len(), 1, "one trace of {member}: {all:?}");
        let (path, recs) = mine[0];
        let last = recs.last().expect("records");
        assert_eq!(last["event_type"], "session_end", "{}", path.display());
        assert_eq!(last["exit_status"], "deadline_reached", "{}", path.display());
        assert!(
            !event_types(recs).contains(&"formation_ended".to_string()),
            "{}",
            path.display()
        );
        let reached = recs
            .iter()
            .find(|r| r["event_type"] == "deadline_reached")
            .unwrap_or_else(|| panic!("{}: no deadline_reached", path.display()));
        let at = chrono::DateTime::parse_from_rfc3339(reached["deadline_at"].as_str().expect("deadline_at"))
            .expect("an RFC 3339 deadline")
            .timestamp_millis();
        let wrote = reached["timestamp"].as_i64().expect("timestamp");
        assert!(wrote >= at, "{member} ended {} ms before the deadline", at - wrote);
        ends.push((member, at, wrote));
    }
    eprintln!("deadline ends (member, instant, written at): {ends:?}");
    assert_eq!(ends[0].1, ends[1].1, "every member was handed the same instant");
    let spread = ends.iter().map(|e| e.2).max().unwrap_or(0) - ends.iter().map(|e| e.2).min().unwrap_or(0);
    // Each member ends itself on its own timer; only scheduling separates them.
    assert!(spread <= 750, "the members ended {spread} ms apart: {ends:?}");
}

#[test]
fn a_deadline_that_falls_before_the_entry_starts_is_e_run_053() {
    let (sb, dir) = formation(TWO_ECHOES);
    let fake = fake_peer_binary(&sb, "sleep 30");
    let launch = Launcher::start(
        &sb,
        &dir,
        &["--deadline", "1", "--task", "t"],
        &[
            ("MURMUR_MUR_BINARY", fake.to_str().unwrap()),
            ("MURMUR_TEST_TIMING", "launcher_grace=300ms"),
        ],
    );
    let (code, out, err) = launch.wait(Duration::from_secs(40));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("error[E-RUN-053]: the formation reached its --deadline of 1 seconds before its entry member started\n  stopped: worker (pid "), "{err}");
    assert!(out.is_empty());
}

#[test]
fn retention_keeps_the_newest_formation_directories() {
    let sb = Sandbox::new();
    let src = sb.install_actor("echo");
    // The entry member declares trace.retain: a second capsule built from echo's component.
    let retained = sb.dir.path().join("src").join("keeper");
    std::fs::create_dir_all(&retained).unwrap();
    std::fs::copy(src.join("capsule.wat"), retained.join("capsule.wat")).unwrap();
    std::fs::write(
        retained.join("murmur.yaml"),
        "name: keeper\nversion: 0.1.0\ncomponent: capsule.wat\ntrace:\n  retain:\n    max_sessions: 2\nnetwork:\n  authentication:\n    scheme: bearer\n",
    )
    .unwrap();
    let out = sb.run(sb.dir.path(), &["build", retained.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = sb.run(
        sb.dir.path(),
        &["install", "-g", retained.join("keeper-0.1.0.mur.zip").to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = sb.path("formation");
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, capsule: local/keeper, version: 0.1.0, entry: true}\n  - {name: worker, capsule: local/echo, version: 0.1.0}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let out = sb.run(&dir, &["run", "--roster", "--task", &format!("run {i}")]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let err = stderr(&out);
        ids.push(
            err.lines()
                .find_map(|l| l.strip_prefix("formation: "))
                .unwrap()
                .to_string(),
        );
        if i == 2 {
            assert!(
                err.contains(&format!(
                    "[mur run] retention: removed formation {} (max_sessions)",
                    ids[0]
                )),
                "{err}"
            );
            assert!(stdout(&out) == "run 2\n", "nothing of retention on stdout");
        }
    }
    let formations = sb.home().join(".murmur/formations");
    assert!(!formations.join(&ids[0]).exists());
    assert!(
        !sb.home()
            .join(".murmur/records")
            .join(formations.join(&ids[0]).strip_prefix("/").unwrap())
            .exists(),
        "its records went with it"
    );
    assert!(formations.join(&ids[1]).exists() && formations.join(&ids[2]).exists());
    let store_of = |frm: &str| {
        sb.home()
            .join(".murmur/records")
            .join(formations.join(frm).join("worker").strip_prefix("/").unwrap())
            .join("tasks.db")
    };
    assert!(store_of(&ids[1]).exists(), "a peer keeps a task store");
    assert!(!store_of(&ids[0]).exists(), "retention removed it with its formation");
}

/// Scans a directory tree for a byte string.
fn files_containing(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file()
                && let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                hits.push(p);
            }
        }
    }
    hits
}

#[test]
fn no_formation_token_appears_in_env_argv_files_or_output() {
    let (sb, dir) = formation(TWO_ECHOES);
    let launch = Launcher::start(&sb, &dir, &["--json"], &[]);
    let frm = wait_until(Duration::from_secs(60), || launch.stdout().contains("formation_id"))
        .map(|_| {
            let line = launch.stdout().lines().next().unwrap().to_string();
            serde_json::from_str::<serde_json::Value>(&line).unwrap()["formation_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .expect("formation line");
    wait_until(Duration::from_secs(30), || formation_pids(&frm).len() == 2).expect("members run");
    let mut pids = formation_pids(&frm);
    pids.push(launch.child.id());
    for pid in &pids {
        for what in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
            for tok in [&b"mft1."[..], b"mdt1."] {
                assert!(
                    !bytes.windows(tok.len()).any(|w| w == tok),
                    "a token in /proc/{pid}/{what}"
                );
            }
        }
    }
    launch.signal(nix::sys::signal::Signal::SIGTERM);
    let (_, out, err) = launch.wait(Duration::from_secs(40));
    assert!(
        !out.contains("mft1.") && !err.contains("mft1.") && !err.contains("mdt1."),
        "no token in the launcher's output"
    );
    assert!(
        files_containing(sb.dir.path(), b"mft1.").is_empty(),
        "no formation token in any file"
    );
}

#[test]
fn trace_show_lists_every_member_session_of_a_formation() {
    let (sb, dir) = formation(TWO_ECHOES);
    let out = sb.run(&dir, &["run", "--roster", "--task", "traced"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let frm = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .unwrap()
        .to_string();
    let shown = sb.run(&dir, &["trace", "show", &frm]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let text = stdout(&shown);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("── Formation ──────────────────────────────"));
    assert_eq!(lines.next(), Some(format!("formation:  {frm}").as_str()));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("ses_")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().any(|r| r.contains("  lead    local/echo  ok")), "{text}");
    assert!(rows.iter().any(|r| r.contains("  worker  local/echo  ok")), "{text}");
    // Each session's own trace reads back too.
    let ses = rows[0].split_whitespace().next().unwrap();
    let one = sb.run(&dir, &["trace", "show", ses]);
    assert!(
        stdout(&one).lines().next().unwrap().contains("  session_start  "),
        "{}",
        stdout(&one)
    );
    assert!(
        stdout(&one).lines().last().unwrap().contains("  session_end  "),
        "{}",
        stdout(&one)
    );
    let none = sb.run(&dir, &["trace", "show", "frm_0199c4e2f1b7712a9d3e4f5061728394"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        stderr(&none).starts_with("error[E-TRC-002]: no session under "),
        "{}",
        stderr(&none)
    );
}

#[test]
fn mur_stop_and_ps_see_a_launched_formation() {
    let (sb, dir) = formation(TWO_ECHOES);
    let launch = Launcher::start(&sb, &dir, &[], &[]);
    let frm = launch.formation_id();
    wait_until(Duration::from_secs(30), || {
        let ps = stdout(&sb.run(&dir, &["ps"]));
        ps.contains("  2 member(s)")
    })
    .expect("both members in mur ps");
    let ps = stdout(&sb.run(&dir, &["ps"]));
    let summary = format!("formation {frm}  launcher pid {}  2 member(s)", launch.child.id());
    assert!(ps.contains(&summary), "{ps}");
    let stop = sb.run(&dir, &["stop", &frm]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    let text = stdout(&stop);
    assert!(
        text.starts_with(&format!(
            "stopped:  {frm}\nlauncher: pid {}, SIGTERM",
            launch.child.id()
        )),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("member:   ses_")).count(),
        2,
        "{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.starts_with("member:"))
            .all(|l| l.ends_with("formation_ended")),
        "{text}"
    );
    let (code, _, _) = launch.wait(Duration::from_secs(30));
    assert_eq!(code, 143);
    assert!(formation_pids(&frm).is_empty());
}

/// Every `mft1.` token in the memory of `pid` (readable: the test is the member's ancestor).
fn tokens_in_memory(pid: u32) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let Ok(mut mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return Vec::new();
    };
    let mut found = std::collections::BTreeSet::new();
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !perms.starts_with("rw") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        if b - a > 256 << 20 || mem.seek(SeekFrom::Start(a)).is_err() {
            continue;
        }
        let mut buf = vec![0u8; (b - a) as usize];
        if mem.read_exact(&mut buf).is_err() {
            continue;
        }
        let mut i = 0;
        while let Some(off) = buf[i..].windows(5).position(|w| w == b"mft1.") {
            let start = i + off;
            let end = buf[start..]
                .iter()
                .position(|c| !(c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_' || *c == b'.'))
                .map_or(buf.len(), |e| start + e);
            let tok = String::from_utf8_lossy(&buf[start..end]).into_owned();
            if tok.split('.').count() == 3 && tok.len() > 100 {
                found.insert(tok);
            }
            i = start + 5;
        }
    }
    found.into_iter().collect()
}

#[test]
fn a_token_from_an_earlier_launch_is_refused_at_every_door_of_a_new_one() {
    let (sb, dir) = formation(TWO_ECHOES);
    // First launch: the entry member holds its token for the worker's door, in memory only.
    let first = Launcher::start(&sb, &dir, &["--json"], &[]);
    let frm1 = wait_until(Duration::from_secs(60), || first.stdout().lines().count() >= 2)
        .map(|_| serde_json::from_str::<serde_json::Value>(first.stdout().lines().next().unwrap()).unwrap())
        .expect("formation line")["formation_id"]
        .as_str()
        .unwrap()
        .to_string();
    let lead = formation_pids(&frm1)
        .into_iter()
        .find(|p| {
            nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(*p as i32))).ok()
                == Some(nix::unistd::Pid::from_raw(first.child.id() as i32))
        })
        .expect("the entry member");
    let old_tokens = tokens_in_memory(lead);
    assert!(!old_tokens.is_empty(), "the entry member holds its formation token");
    first.signal(nix::sys::signal::Signal::SIGTERM);
    let _ = first.wait(Duration::from_secs(30));

    // Second launch of the same roster: new formation id, new key.
    let second = Launcher::start(&sb, &dir, &["--json"], &[]);
    wait_until(Duration::from_secs(60), || second.stdout().lines().count() >= 2).expect("formation and entry lines");
    let out = second.stdout();
    let mut lines = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
    let formation_line = lines.next().unwrap();
    let entry_ready = lines.next().unwrap();
    assert_ne!(formation_line["formation_id"].as_str().unwrap(), frm1);
    let doors = [
        formation_line["peers"][0]["url"].as_str().unwrap().to_string(),
        format!("http://{}", entry_ready["url"].as_str().unwrap()),
    ];
    for door in &doors {
        for token in &old_tokens {
            let resp = ureq::post(&format!("{door}/"))
                .set("authorization", &format!("Bearer {token}"))
                .set("a2a-version", "1.0")
                .set("content-type", "application/json")
                .send_string(r#"{"id":1,"jsonrpc":"2.0","method":"ListTasks","params":{}}"#);
            let Err(ureq::Error::Status(401, resp)) = resp else {
                panic!("{door}: an earlier launch's token was not refused")
            };
            let body: serde_json::Value = serde_json::from_str(&resp.into_string().unwrap()).unwrap();
            assert_eq!(body["error"], "invalid_token", "{door}");
        }
    }
    second.signal(nix::sys::signal::Signal::SIGTERM);
    let _ = second.wait(Duration::from_secs(30));
}

/// Runs `mur run --roster --task t` with stderr on a pseudo-terminal; returns what it printed.
fn launch_on_a_terminal(sb: &Sandbox, dir: &Path, env: &[(&str, &str)]) -> String {
    use std::io::Read;
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let mut cmd = sb.mur(dir);
    cmd.args(["run", "--roster", "--task", "t"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(pty.slave));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
    drop(cmd); // the parent's copy of the terminal's slave side
    let mut master = std::fs::File::from(pty.master);
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // Reading ends with EIO once every holder of the slave side has exited.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    assert!(child.wait().expect("wait").success());
    reader.join().expect("reader")
}

#[test]
fn a_terminal_sees_a_progress_line_per_peer_and_no_color_is_honoured() {
    let (sb, dir) = formation(TWO_ECHOES);
    let out = launch_on_a_terminal(&sb, &dir, &[]);
    assert!(out.contains("[mur run] worker: \x1b[2mstarting\x1b[0m"), "{out:?}");
    assert!(out.contains("[mur run] worker: \x1b[32mready\x1b[0m"), "{out:?}");
    let plain = launch_on_a_terminal(&sb, &dir, &[("NO_COLOR", "1")]);
    assert!(
        plain.contains("[mur run] worker: starting") && plain.contains("[mur run] worker: ready"),
        "{plain:?}"
    );
    assert!(!plain.contains('\x1b'), "NO_COLOR: no escape sequences: {plain:?}");
    // Not a terminal: no progress lines at all.
    let piped = sb.run(&dir, &["run", "--roster", "--task", "t"]);
    assert!(!stderr(&piped).contains("[mur run] worker:"), "{}", stderr(&piped));
}

/// `n` echo members, every one reachable from every other but the entry (`reachability: all`).
fn echoes_all(n: usize) -> String {
    let mut r = String::from("roster_version: 1\nmembers:\n");
    for i in 0..n {
        let name = if i == 0 { "lead".to_string() } else { format!("w{i:02}") };
        r.push_str(&format!(
            "  - name: {name}\n    capsule: local/echo\n    version: 0.1.0\n"
        ));
        if i == 0 {
            r.push_str("    entry: true\n");
        }
    }
    r.push_str("reachability: all\n");
    r
}

/// `mur run --roster --task t` under an open-file limit of `soft` / `hard`, set in the child
/// before exec as `ulimit -n` would.
fn run_with_nofile(sb: &Sandbox, dir: &Path, soft: u64, hard: u64) -> std::process::Output {
    let mut cmd = sb.mur(dir);
    cmd.args(["run", "--roster", "--task", "t"]);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, soft, hard)
                .map_err(std::io::Error::from)
        });
    }
    cmd.output().expect("run mur")
}

#[test]
fn a_formation_past_the_hard_open_file_limit_is_refused_before_anything_starts() {
    // 16 members hold 64 pipe ends before the first spawn: more than a hard limit of 64.
    let (sb, dir) = formation(&echoes_all(16));
    let out = run_with_nofile(&sb, &dir, 64, 64);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "error[E-RUN-045]: the formation could not be launched: its 16 members need 160 open file descriptors in the launcher, and the hard limit (RLIMIT_NOFILE) is 64\n  hint: raise the hard open-file limit to at least 160"
        ),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "the entry never started");
    assert!(
        !sb.home().join(".murmur/formations").exists(),
        "no member was started, so no formation directory exists"
    );
}

#[test]
fn a_formation_above_the_soft_open_file_limit_raises_it_and_runs() {
    // The soft limit alone is too low for 16 members; the hard one is not.
    let (sb, dir) = formation(&echoes_all(16));
    let out = run_with_nofile(&sb, &dir, 64, 4096);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "t\n", "{err}");
    let frm = err
        .lines()
        .find_map(|l| l.strip_prefix("formation: "))
        .expect("formation line");
    assert!(
        formation_pids(frm).is_empty(),
        "members still running after the launcher exited"
    );
}
