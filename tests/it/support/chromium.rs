//! Debian's headless Chromium: the system's own where Debian's `chromium` is installed, else
//! provisioned by the tests themselves without installing anything: `apt-get download` of
//! `chromium`, the packages built from its source and the libraries this machine lacks
//! ([`super::debian::plan`]), unpacked with `dpkg-deb -x` under `target/test-chromium/<tag>/`,
//! once per machine, and run through a wrapper that sets `LD_LIBRARY_PATH`. `MUR_TEST_CHROMIUM`
//! names a `chromium` binary to use as is.
//!
//! [`Browser`] drives it over the DevTools protocol on a pipe (`--remote-debugging-pipe`: the
//! browser reads commands from its descriptor 3 and writes replies to 4, NUL-terminated JSON),
//! so no WebSocket client is needed.

use super::debian::{Plan, download, facts, output, plan, run};
use super::toolchains::{lock_file, target_dir};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const PACKAGES: &str = "chromium";

static PROVISIONING: Mutex<()> = Mutex::new(());
static PROVISIONED: OnceLock<PathBuf> = OnceLock::new();

/// The `chromium` to run, provisioned on first use.
pub fn chromium() -> PathBuf {
    PROVISIONED.get_or_init(provision).clone()
}

fn provision() -> PathBuf {
    if let Some(bin) = std::env::var_os("MUR_TEST_CHROMIUM").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    let _guard = PROVISIONING.lock().unwrap_or_else(|e| e.into_inner());
    let facts = facts(&[PACKAGES]).unwrap_or_else(|e| panic!("{e}"));
    let packages = match plan(&[PACKAGES], &facts, |_| false) {
        Plan::System => return PathBuf::from("/usr/bin/chromium"),
        Plan::Unpack(packages) => packages,
    };
    let base = target_dir().join("test-chromium");
    // The layout's version is part of the name: a tree an earlier rule unpacked without the
    // packages built from Chromium's source is never used again.
    let root = base.join(super::toolchains::tag(&[PACKAGES, "2"]));
    let wrapper = root.join("bin/chromium");
    let ready = |root: &Path| root.join("packages.txt").is_file();
    if ready(&root) {
        return wrapper;
    }
    std::fs::create_dir_all(&base).expect("create target/test-chromium");
    let _lock = lock_file(&root);
    if ready(&root) {
        return wrapper;
    }
    let staging = root.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&staging);
    let debs = staging.join("debs");
    std::fs::create_dir_all(&debs).expect("create the download directory");
    eprintln!(
        "provisioning Debian's chromium under {} (once; about 120 MB)",
        root.display()
    );
    download(&packages, &debs).unwrap_or_else(|e| panic!("{e}"));
    let unpacked = staging.join("root");
    let mut versions = String::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&debs)
        .expect("read the downloads")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    files.sort();
    for deb in &files {
        run(
            Command::new("dpkg-deb").arg("-x").arg(deb).arg(&unpacked),
            "dpkg-deb -x",
        );
        versions.push_str(&output(
            Command::new("dpkg-deb").arg("-f").arg(deb).args(["Package", "Version"]),
        ));
    }
    let _ = std::fs::remove_dir_all(&debs);
    let _ = std::fs::remove_dir_all(unpacked.join("usr/share/doc"));
    let binary = unpacked.join("usr/lib/chromium/chromium");
    assert!(
        binary.is_file(),
        "the unpacked packages have no usr/lib/chromium/chromium:\n{versions}"
    );
    // Every directory of unpacked shared libraries, as the final paths will name them.
    let mut libs = Vec::new();
    let mut stack = vec![unpacked.join("usr/lib")];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        let mut has = false;
        for e in entries.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else if e.file_name().to_string_lossy().contains(".so") {
                has = true;
            }
        }
        if has {
            libs.push(root.join("root").join(d.strip_prefix(&unpacked).expect("under root")));
        }
    }
    libs.sort();
    let bin = staging.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin");
    let libs: Vec<String> = libs.iter().map(|l| l.display().to_string()).collect();
    let script = format!(
        "#!/bin/sh\nLD_LIBRARY_PATH='{}'${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} exec '{}' \"$@\"\n",
        libs.join(":"),
        root.join("root/usr/lib/chromium/chromium").display()
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(bin.join("chromium"), script).expect("write the wrapper");
        std::fs::set_permissions(bin.join("chromium"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::rename(&staging, &root).expect("publish chromium");
    output(Command::new(&wrapper).arg("--version"));
    std::fs::write(root.join("packages.txt"), versions).expect("record the packages");
    wrapper
}

/// The flags every run takes: no sandbox (tests run as any user, root included), no GPU, no
/// first-run work, a profile of its own.
fn base_args(profile: &Path) -> Vec<String> {
    vec![
        "--headless".into(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--no-first-run".into(),
        "--disable-extensions".into(),
        "--disable-background-networking".into(),
        "--disable-dev-shm-usage".into(),
        format!("--user-data-dir={}", profile.display()),
    ]
}

/// `chromium --screenshot`: a PNG of `url` at `width`×`height`.
pub fn screenshot(url: &str, out: &Path, width: u32, height: u32) {
    let profile = tempfile::tempdir().expect("a profile");
    let status = Command::new(chromium())
        .args(base_args(profile.path()))
        .arg(format!("--screenshot={}", out.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg("--hide-scrollbars")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run chromium");
    assert!(status.success() && out.is_file(), "no screenshot of {url}");
}

/// A browser driven over the DevTools protocol, with one page attached.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: BufReader<std::fs::File>,
    next: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start() -> Browser {
        let profile = tempfile::tempdir().expect("a profile");
        // Pipes the child sees as 3 (commands in) and 4 (replies out).
        // Close-on-exec, so other tests' children inherit none of them; dup2 clears the flag on
        // the copies the browser gets.
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (cmd_r, cmd_w) = nix::unistd::pipe2(cloexec).expect("pipe");
        let (rep_r, rep_w) = nix::unistd::pipe2(cloexec).expect("pipe");
        let (cr, rw) = (cmd_r.as_raw_fd(), rep_w.as_raw_fd());
        let mut cmd = Command::new(chromium());
        cmd.args(base_args(profile.path()))
            .arg("--remote-debugging-pipe")
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe dup2 calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Both ends moved above 3 and 4 first, so each dup2 really copies (and clears
                // close-on-exec) even when a pipe end already is descriptor 3 or 4.
                let (cr, rw) = (
                    nix::libc::fcntl(cr, nix::libc::F_DUPFD, 10),
                    nix::libc::fcntl(rw, nix::libc::F_DUPFD, 10),
                );
                if cr < 0 || rw < 0 || nix::libc::dup2(cr, 3) < 0 || nix::libc::dup2(rw, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        drop(cmd_r);
        drop(rep_w);
        let to = std::fs::File::from(cmd_w);
        let from = BufReader::new(std::fs::File::from(rep_r));
        let mut b = Browser {
            child,
            to,
            from,
            next: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = b.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().expect("a target").to_string();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().expect("a session").to_string();
        b.call(Some(()), "Page.enable", json!({}));
        b
    }

    /// Sends one command (to the page when `page` is `Some`) and returns its result, skipping
    /// the events that come in between.
    fn call(&mut self, page: Option<()>, method: &str, params: Value) -> Value {
        self.try_call(page, method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// As [`call`](Self::call), with the browser's error as `Err` (e.g. an evaluation whose page
    /// went away while the browser moved on to another).
    fn try_call(&mut self, page: Option<()>, method: &str, params: Value) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if page.is_some() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).expect("read from chromium");
            assert!(n > 0, "chromium closed its pipe");
            buf.pop();
            let v: Value = serde_json::from_slice(&buf).expect("a DevTools message");
            if v["id"] == id {
                if let Some(e) = v.get("error") {
                    return Err(e.clone());
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Loads `url` and waits until its document finished loading.
    pub fn goto(&mut self, url: &str) {
        self.call(Some(()), "Page.navigate", json!({"url": url}));
        let loaded = self.wait_for("document.readyState === 'complete'", Duration::from_secs(20));
        assert!(loaded.is_some(), "{url} did not load");
    }

    /// The value of `expression` in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            Some(()),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluates `condition` until it is true or `limit` passes; the time it took. A page that
    /// is being replaced (a redirect, a refresh) counts as not yet.
    pub fn wait_for(&mut self, condition: &str, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            let r = self.try_call(
                Some(()),
                "Runtime.evaluate",
                json!({"expression": format!("!!({condition})"), "returnByValue": true, "awaitPromise": true}),
            );
            if r.is_ok_and(|r| r["result"]["value"] == json!(true)) {
                return Some(start.elapsed());
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A PNG of the page at `width`×`height`.
    pub fn screenshot(&mut self, width: u32, height: u32) -> Vec<u8> {
        use base64::Engine as _;
        self.call(
            Some(()),
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        let r = self.call(Some(()), "Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("png data"))
            .expect("base64")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
