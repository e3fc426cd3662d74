//! `mur send` and `mur trace show --follow` against running sessions and formations: the real
//! binary, real doors on 127.0.0.1, the running records as the runtime writes them.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::{Launcher, Sandbox, running_record, running_records, stderr, stdout, wait_until};

const TWO_ECHOES: &str = "roster_version: 1
members:
  - {name: lead, capsule: local/echo, version: 0.1.0, entry: true}
  - {name: worker, capsule: local/echo, version: 0.1.0}
reachability:
  - {from: lead, to: [worker]}
";

const LONG: Duration = Duration::from_secs(30);

/// `mur args…` in the background, its output collected.
fn background(sb: &Sandbox, cwd: &Path, args: &[&str]) -> Launcher {
    let mut cmd = sb.mur(cwd);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Launcher::spawn(cmd)
}

/// A lone `actors/echo` session (queue + sleep, an authenticating door) and its running record.
fn lone_echo(sb: &Sandbox) -> (Launcher, serde_json::Value) {
    sb.install_actor("echo");
    let work = sb.path("work");
    let session = background(
        sb,
        &work,
        &["run", "--capsule", "local/echo", "--capsule-version", "0.1.0"],
    );
    let mut rec = None;
    wait_until(LONG, || {
        rec = running_records(sb).into_iter().next();
        rec.is_some()
    });
    let rec = rec.unwrap_or_else(|| panic!("no running record; stderr: {}", session.stderr()));
    (session, rec)
}

#[test]
fn send_talks_to_a_formations_entry_and_to_a_session_and_never_shows_the_token() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("formation");
    std::fs::write(dir.join("roster.yaml"), TWO_ECHOES).expect("roster");
    let launch = Launcher::start(&sb, &dir, &[], &[]);
    let frm = launch.formation_id();
    let lead = running_record(&sb, "lead");
    let worker = running_record(&sb, "worker");

    let out = sb.run(&dir, &["send", &frm, "hello formation"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "hello formation\n");
    let err = stderr(&out);
    assert!(
        err.starts_with("mur send: task tsk_")
            && err.contains(&format!(
                " on {} (local/echo@0.1.0)",
                lead["session_id"].as_str().unwrap()
            )),
        "{err}"
    );
    let ses = worker["session_id"].as_str().expect("session id");
    let out = sb.run(&dir, &["send", ses, "to the worker"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "to the worker\n");
    for rec in [&lead, &worker] {
        let token = rec["door_token"].as_str().expect("an operator token");
        assert!(!stdout(&out).contains(token) && !stderr(&out).contains(token));
    }

    // Followed while it runs: what was written, then what the stop appends, then the end.
    let follow = background(&sb, &dir, &["trace", "show", "--follow", &frm]);
    wait_until(LONG, || follow.stdout().contains("task_end"))
        .unwrap_or_else(|| panic!("nothing followed: {}", follow.stderr()));
    let stop = sb.run(&dir, &["stop", &frm]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    let (code, text, err) = follow.wait(LONG);
    assert_eq!(code, 0, "{err}");
    for want in [
        "  lead  session_start",
        "  worker  session_start",
        "  lead  a2a_task_received",
        "  worker  task_end",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    assert_eq!(
        text.lines().filter(|l| l.contains("  session_end  ")).count(),
        2,
        "{text}"
    );
    assert!(text.contains("  formation_ended"), "{text}");
    let _ = launch.wait(LONG);

    // Once it has ended, and for what never ran here.
    let out = sb.run(&dir, &["send", &frm, "late"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "error[E-SND-002]: formation {frm} is not running: it has ended"
        )),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&dir, &["send", ses, "late"]);
    assert!(
        stderr(&out).starts_with(&format!("error[E-SND-002]: session {ses} is not running")),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&dir, &["send", "frm_0199c4e2f1b7712a9d3e4f5061728394", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(
            "error[E-SND-001]: no formation frm_0199c4e2f1b7712a9d3e4f5061728394 on this machine\n  hint: `mur ps`"
        ),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&dir, &["send", "tsk_1", "x"]);
    assert!(
        stderr(&out).starts_with("error[E-SND-001]: 'tsk_1' is neither"),
        "{}",
        stderr(&out)
    );
}

/// A task that does not complete ends `mur send` with E-SND-004 and its state.
#[test]
fn send_exits_with_the_tasks_outcome() {
    let sb = Sandbox::new();
    sb.install_component(
        "trap",
        "actors/trap/capsule.wat",
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
    );
    let work = sb.path("work");
    let session = background(
        &sb,
        &work,
        &["run", "--capsule", "local/trap", "--capsule-version", "0.1.0"],
    );
    let mut rec = None;
    wait_until(LONG, || {
        rec = running_records(&sb).into_iter().next();
        rec.is_some()
    });
    let rec = rec.unwrap_or_else(|| panic!("no running record; stderr: {}", session.stderr()));
    let ses = rec["session_id"].as_str().expect("session id");
    let out = sb.run(&work, &["send", ses, "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(
        err.contains("error[E-SND-004]: the task tsk_") && err.contains(" ended failed: "),
        "{err}"
    );
    assert!(err.contains("/out/result_tsk_"), "{err}");
}

/// A record whose door is gone, or whose port answers as no door does, is E-SND-003 at once.
#[test]
fn a_door_that_does_not_answer_is_e_snd_003() {
    let sb = Sandbox::new();
    let work = sb.path("work");
    let record = |ses: &str, port: u16| fake_record(&sb, ses, port);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let ses = "ses_0199c4e2f1b7712a9d3e4f5061728394";
    record(ses, port);
    let out = sb.run(&work, &["send", ses, "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "error[E-SND-003]: the door of {ses} at http://localhost:{port} does not answer: "
        )),
        "{}",
        stderr(&out)
    );

    // A listener that answers as something else, and reads what it was sent.
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = other.local_addr().expect("addr").port();
    let got = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = other.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut req = vec![0u8; 4096];
        let n = s.read(&mut req).unwrap_or(0);
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n");
        String::from_utf8_lossy(&req[..n]).into_owned()
    });
    record(ses, port);
    let out = sb.run(&work, &["send", ses, "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "error[E-SND-003]: the door of {ses} answered with something that is not HTTP"
        )),
        "{}",
        stderr(&out)
    );
    let request = got.join().expect("listener");
    // The door was dialled at 127.0.0.1, and asked for the task's stream.
    assert!(request.starts_with("POST / HTTP/1.1\r\n"), "{request}");
    assert!(request.contains("\r\nAccept: text/event-stream\r\n"), "{request}");
    assert!(!stderr(&out).contains("mdt1.secret") && !stdout(&out).contains("mdt1.secret"));
}

/// A running record of a live process (this test's), as the runtime writes it, whose door is at
/// `port`.
fn fake_record(sb: &Sandbox, ses: &str, port: u16) {
    let running = sb.home().join(".murmur/running");
    std::fs::create_dir_all(&running).expect("running dir");
    let rec = serde_json::json!({
        "capsule_name": "local/echo", "capsule_version": "0.1.0", "door_token": "mdt1.secret",
        "pid": std::process::id(), "process_start": mur::procinfo::own_start().expect("start"),
        "records_dir": "/nowhere", "session_id": ses, "started_at": "2026-01-01T00:00:00.000Z",
        "url": format!("localhost:{port}"), "workdir": "/nowhere",
    });
    std::fs::write(running.join(format!("{ses}.json")), rec.to_string()).expect("record");
}

/// The port a running record names, taken by a listener of another user (here `nobody`, which
/// needs root to start), gets neither the operator token nor the task.
#[test]
fn a_door_port_served_by_another_user_gets_no_token() {
    let Some(mut other) = crate::support::foreign::ForeignListener::start() else {
        return;
    };
    let port = other.port;
    let sb = Sandbox::new();
    let ses = "ses_0199c4e2f1b7712a9d3e4f5061728394";
    fake_record(&sb, ses, port);
    let sent = sb.run(&sb.path("work"), &["send", ses, "the secret plan"]);
    assert_eq!(sent.status.code(), Some(1));
    let err = stderr(&sent);
    assert!(
        err.starts_with(&format!("error[E-SND-003]: the door of {ses}: 127.0.0.1:{port} is served by user 65534, not by this user; nothing was sent to it")),
        "{err}"
    );
    assert!(
        other.next_report().starts_with("GOT 0 "),
        "bytes reached another user's listener"
    );
}

#[test]
fn follow_prints_a_sessions_records_as_they_are_appended_and_ends_with_it() {
    let sb = Sandbox::new();
    let (session, rec) = lone_echo(&sb);
    let ses = rec["session_id"].as_str().expect("session id").to_string();
    let work = sb.path("work");
    let mut follow = background(&sb, &work, &["trace", "show", "--follow", &ses]);
    wait_until(LONG, || follow.stdout().contains("  session_start  "))
        .unwrap_or_else(|| panic!("no session_start: {}", follow.stderr()));
    assert!(!follow.stdout().contains("task_end"));
    let out = sb.run(&work, &["send", &ses, "followed"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Appended while the session still runs.
    wait_until(LONG, || follow.stdout().contains("  task_end  "))
        .unwrap_or_else(|| panic!("the task's records did not follow:\n{}", follow.stdout()));
    assert!(follow.child.try_wait().expect("try_wait").is_none(), "still following");
    let stop = sb.run(&work, &["stop", &ses]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    let (code, text, err) = follow.wait(LONG);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.lines().last().is_some_and(|l| l.contains("  session_end  ")),
        "{text}"
    );
    drop(session);

    // A session killed without its session_end: the follow ends once its process is gone.
    let sb = Sandbox::new();
    let (mut session, rec) = lone_echo(&sb);
    let ses = rec["session_id"].as_str().expect("session id").to_string();
    let follow = background(&sb, &sb.path("work"), &["trace", "show", "-f", &ses]);
    wait_until(LONG, || follow.stdout().contains("  session_start  ")).expect("session_start");
    session.child.kill().expect("kill");
    let _ = session.child.wait();
    let (code, text, err) = follow.wait(LONG);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains("session_end"), "{text}");

    // --follow and --json do not mix; an unknown session is E-TRC-002.
    assert_eq!(
        sb.run(sb.dir.path(), &["trace", "show", "-f", "--json", &ses])
            .status
            .code(),
        Some(2)
    );
    let out = sb.run(
        sb.dir.path(),
        &["trace", "show", "-f", "ses_0199c4e2f1b7712a9d3e4f5061728394"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("error[E-TRC-002]: "), "{}", stderr(&out));
}
