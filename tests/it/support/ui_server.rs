//! A `mur ui` of a sandbox's home, as the browser tests and the browser bench start it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use super::Sandbox;

/// A `mur ui` serving a sandbox's home; killed when dropped.
pub struct Ui {
    pub child: Child,
    pub port: u16,
    /// The URL it printed, token included.
    url: String,
    stderr: std::sync::Arc<Mutex<String>>,
}

impl Ui {
    pub fn start(sb: &Sandbox) -> Ui {
        Ui::start_with(sb, |_| {})
    }

    /// `mur ui` with its command adjusted first (arguments, environment).
    pub fn start_with(sb: &Sandbox, adjust: impl FnOnce(&mut std::process::Command)) -> Ui {
        let mut cmd = sb.mur(&sb.path("ui"));
        cmd.arg("ui")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        adjust(&mut cmd);
        let mut child = cmd.spawn().expect("spawn mur ui");
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let stderr = std::sync::Arc::new(Mutex::new(String::new()));
        let into = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = into.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let url = loop {
            let line = rx.recv_timeout(Duration::from_secs(20)).expect("mur ui prints its URL");
            if line.starts_with("http://") {
                break line;
            }
        };
        let port = url
            .trim_start_matches("http://127.0.0.1:")
            .split('/')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a loopback URL with a port");
        Ui {
            child,
            port,
            url,
            stderr,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn token(&self) -> &str {
        self.url.rsplit_once("token=").map(|(_, t)| t).unwrap_or_default()
    }

    /// The address of `path` carrying the token (the browser trades it for the cookie).
    pub fn with_token(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}?token={}", self.port, self.token())
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
