//! Doors bind 127.0.0.1 but are advertised as `localhost`. Where /etc/hosts maps `::1` to
//! `localhost` (Debian's default), a client that resolved the name would dial `[::1]:P` first,
//! and any local user listening there would receive the bearer token and the task text.
//!
//! These tests run real formations in a private mount and network namespace whose /etc/hosts
//! lists `::1 localhost` first and whose ephemeral ports are a small known range, with a listener
//! on `[::1]` at every port of that range a door may get (the test checks each door got one), so
//! every client that dials a door by name would reach the listener: the launcher's readiness probe (with the
//! operator token), a member's call through the call import, and a component's request to a
//! virtual peer address. The listener must see nothing, and the formation must answer.
//!
//! They need root (for the namespaces, the bind mount and the sysctl) and `unshare`; without
//! either they say why and pass.

use std::path::Path;
use std::process::Command;

use crate::support::{Sandbox, formation_pids, stderr, stdout};

const GRANT: &str = "capabilities:\n  network:\n    allow: [localhost]\n";

/// The ephemeral port range inside the namespace: doors (which bind port 0) land in it.
const PORTS: (u16, u16) = (40000, 40063);

/// Listens on `[::1]` (IPv6 only) at every odd port of `lo..=hi` and appends to `log` a line for
/// each connection and every byte it receives; creates `ready` once every port is bound. It
/// never answers, so a client that reached it gets no reply. It also appends to `doors` each
/// port at which something listens on 127.0.0.1 (the doors), so the test can tell that every
/// door landed at a watched port. It runs until it is killed.
///
/// Odd ports only: Linux gives `bind(0)` ports of the other parity than the range's start first,
/// and `connect()` ports of the same parity; an explicitly bound port is never a connection's
/// source port, so listening at every port would leave clients no source port at all.
const LISTENER: &str = r#"
import selectors, socket, sys
lo, hi, log, doors, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
sel = selectors.DefaultSelector()
for port in range(lo + 1, hi + 1, 2):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::1", port))
    s.listen(16)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, None)
open(ready, "w").close()
seen = set()
with open(log, "ab", buffering=0) as out, open(doors, "a", buffering=1) as door_log:
    while True:
        for key, _ in sel.select(timeout=0.02):
            if key.data is None:
                conn, _ = key.fileobj.accept()
                conn.setblocking(False)
                out.write(b"[connection at [::1]:%d]\n" % key.fileobj.getsockname()[1])
                sel.register(conn, selectors.EVENT_READ, "conn")
            else:
                data = key.fileobj.recv(65536)
                if data:
                    out.write(data)
                else:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
        with open("/proc/net/tcp") as tcp:
            for line in tcp.readlines()[1:]:
                fields = line.split()
                local, state = fields[1], fields[3]
                if state == "0A" and local.startswith("0100007F:"):
                    port = int(local.split(":")[1], 16)
                    if port not in seen:
                        seen.add(port)
                        door_log.write("%d\n" % port)
"#;

/// Runs in the new namespaces: loopback up, the hosts file over /etc/hosts, the port range, the
/// listener; then the command in "$@", whose exit code it returns.
const SCRIPT: &str = r#"
set -e
ip link set lo up
mount --bind "$LB_HOSTS" /etc/hosts
sysctl -q -w net.ipv4.ip_local_port_range="$LB_LO $LB_HI"
python3 "$LB_LISTENER" "$LB_LO" "$LB_HI" "$LB_LOG" "$LB_DOORS" "$LB_READY" &
listener=$!
i=0
while [ ! -e "$LB_READY" ]; do
  i=$((i + 1))
  if [ "$i" -gt 200 ] || ! kill -0 "$listener" 2>/dev/null; then
    echo "the [::1] listener did not start" >&2
    exit 97
  fi
  sleep 0.05
done
set +e
"$@"
code=$?
kill "$listener"
exit "$code"
"#;

/// Why these tests cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root: the namespaces, the bind mount and the sysctl need root".into());
    }
    let found = Command::new("unshare").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        return Some("`unshare` is not installed".into());
    }
    None
}

/// What one formation run in the namespaces showed.
struct Outcome {
    code: i32,
    out: String,
    err: String,
    /// Everything the `[::1]` listener saw.
    captured: String,
    /// The ports at which something listened on 127.0.0.1.
    doors: Vec<u16>,
}

/// Runs `mur run --roster --task <task>` in `dir` inside fresh namespaces set up by [`SCRIPT`].
fn run_in_namespaces(sb: &Sandbox, dir: &Path, task: &str) -> Outcome {
    let work = sb.path("loopback");
    let hosts = work.join("hosts");
    std::fs::write(&hosts, "::1 localhost\n127.0.0.1 localhost\n").expect("hosts file");
    let listener = work.join("listener.py");
    std::fs::write(&listener, LISTENER).expect("listener script");
    let log = work.join("captured.log");
    let doors = work.join("doors.log");
    let ready = work.join("listener.ready");
    let _ = std::fs::remove_file(&ready);
    std::fs::write(&log, "").expect("log");
    std::fs::write(&doors, "").expect("doors log");

    let mur = sb.mur(dir);
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--net", "--", "sh", "-c", SCRIPT, "sh"])
        .arg(mur.get_program())
        .args(["run", "--roster", "--task", task])
        .current_dir(dir)
        .env("LB_HOSTS", &hosts)
        .env("LB_LISTENER", &listener)
        .env("LB_LOG", &log)
        .env("LB_DOORS", &doors)
        .env("LB_READY", &ready)
        .env("LB_LO", PORTS.0.to_string())
        .env("LB_HI", PORTS.1.to_string())
        // Bounds a run whose clients reach the silent listener instead of a door.
        .env(
            "MURMUR_TEST_TIMING",
            "peer_readiness=20s,probe_read=1s,call_send=3s,answer_request=3s,call_bound=20s,component_task=20s",
        );
    for (k, v) in mur.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("spawn unshare");
    let err = stderr(&out);
    if let Some(frm) = err.lines().find_map(|l| l.strip_prefix("formation: ")) {
        assert!(formation_pids(frm).is_empty(), "members of {frm} still running");
    }
    Outcome {
        code: out.status.code().unwrap_or(-1),
        out: stdout(&out),
        err,
        captured: String::from_utf8_lossy(&std::fs::read(&log).expect("read the listener's log")).into_owned(),
        doors: std::fs::read_to_string(&doors)
            .expect("read the doors' log")
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect(),
    }
}

/// The test proves something only if every door was at a port the `[::1]` listener watched.
fn assert_doors_watched(o: &Outcome) {
    // The launcher and the members name their doors on stderr; the listener saw the long-lived.
    let mut doors = o.doors.clone();
    for piece in o.err.split("http://localhost:").skip(1) {
        let digits: String = piece.chars().take_while(char::is_ascii_digit).collect();
        doors.extend(digits.parse::<u16>().ok());
    }
    // The listener polls every 20 ms and a warm formation can end sooner, so the doors named on
    // stderr count as seen too; at least one door must be known for the range check to mean much.
    assert!(!doors.is_empty(), "no door was seen\n{}", o.err);
    for port in &doors {
        assert!(
            (PORTS.0..=PORTS.1).contains(port) && (port - PORTS.0) % 2 == 1,
            "a door listened at {port}, where the [::1] listener was not: {doors:?}"
        );
    }
}

fn formation_dir(sb: &Sandbox, lead: &str) -> std::path::PathBuf {
    let dir = sb.path("formation");
    let roster = format!(
        "roster_version: 1\nmembers:\n  - {{name: lead, capsule: local/{lead}, version: 0.1.0, entry: true}}\n  - {{name: worker, capsule: local/echo, version: 0.1.0}}\nreachability:\n  - {{from: lead, to: [worker]}}\n"
    );
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    dir
}

#[test]
fn no_door_client_dials_localhost_by_name() {
    if crate::support::needs::skip_for_want_of("root", cannot_run()) {
        return;
    }
    let sb = Sandbox::new();
    sb.install_actor("echo");
    sb.install_component("relay", "src/capsule/testdata/relay.wat", GRANT);
    sb.install_component("probe", "src/calls/testdata/http_probe.wat", GRANT);

    // The launcher probes the worker's door with its operator token; the lead calls the worker
    // through the call import with the edge's formation token.
    let dir = formation_dir(&sb, "relay");
    let o = run_in_namespaces(&sb, &dir, "carried past [::1]");
    assert_doors_watched(&o);
    assert!(
        o.captured.is_empty(),
        "the [::1] listener received:\n{}\n(stderr: {})",
        o.captured,
        o.err
    );
    assert_eq!((o.code, o.out.as_str()), (0, "carried past [::1]\n"), "{}", o.err);
    assert!(
        !o.err.contains("mft1.") && !o.err.contains("mdt1."),
        "no token on stderr"
    );

    // A component's request to a virtual peer address, routed to the worker's door with the
    // edge's token. The door's 404 for GET /probe shows it was the door that answered.
    let dir = formation_dir(&sb, "probe");
    let o = run_in_namespaces(&sb, &dir, "worker.formation.invalid");
    assert_doors_watched(&o);
    assert!(
        o.captured.is_empty(),
        "the [::1] listener received:\n{}\n(stderr: {})",
        o.captured,
        o.err
    );
    assert_eq!((o.code, o.out.as_str()), (0, "status 404\n"), "{}", o.err);
}
