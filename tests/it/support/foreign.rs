//! A listener run by another user (`nobody`), for the tests that show a client sends nothing
//! to a loopback port it does not own. Starting it needs root; elsewhere
//! [`ForeignListener::start`] fails the test unless the run skips such checks on purpose.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Command, Stdio};

/// Python's socket server as `nobody` on 127.0.0.1: it accepts connections for 30 s and prints
/// `GOT <n> <first bytes>` for each once it closes.
const LISTENER: &str = r#"
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
s.settimeout(30)
try:
    while True:
        c, _ = s.accept(); c.settimeout(2); got = b""
        try:
            while True:
                d = c.recv(65536)
                if not d: break
                got += d
        except Exception: pass
        print("GOT", len(got), got[:400], flush=True); c.close()
except Exception: pass
"#;

pub struct ForeignListener {
    child: Child,
    out: BufReader<ChildStdout>,
    pub port: u16,
}

impl ForeignListener {
    /// The listener, or `None` when this process cannot start one as another user and the run
    /// skips such checks on purpose ([`super::needs`]); otherwise that fails the test.
    pub fn start() -> Option<ForeignListener> {
        if super::needs::skip_for_want_of("root", super::needs::not_root()) {
            return None;
        }
        let mut child = Command::new("python3")
            .args(["-c", LISTENER])
            .uid(65534)
            .gid(65534)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 as nobody");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut port = String::new();
        out.read_line(&mut port).expect("port");
        let port = port.trim().parse().expect("a port");
        Some(ForeignListener { child, out, port })
    }

    /// The next connection's report (`GOT <n> …`), waiting for it.
    pub fn next_report(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("the listener's report");
        line.trim_end().to_string()
    }

    /// Every report so far, once the listener is stopped.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let mut rest = String::new();
        let _ = self.out.read_to_string(&mut rest);
        let _ = self.child.wait();
        rest
    }
}

impl Drop for ForeignListener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
