//! The door end to end through the real `mur` binary (docs/reference/door.md#authentication; the
//! page's "What a door answers"): every method, every JSON-RPC error a door emits, every
//! authentication case, and the official A2A Python SDK client against real doors.
//!
//! Formation tokens are tested at a member the test launches itself: it writes the member's
//! channel first line with a signing key it holds, as `mur run --roster` would, so it can mint
//! genuine tokens for any edge as well as forged and foreign ones.
//!
//! The harness here (`Door`, `Client`, `install`) is shared with `capsules.rs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::ops::Deref;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::Signer as _;
use mur::token::SigningKey;
use serde_json::{Value, json};

use crate::support::provider::{Provider, Reply, Step, openai};
use crate::support::{Sandbox, repo_root, stderr, wait_until};

pub(crate) const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const OTHER_FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728395";

/// Manifest blocks for [`install`].
pub(crate) const AUTH: &str = "network:\n  authentication:\n    scheme: bearer\n";
pub(crate) const PEERS: &str = "exports:\n  peer_tasks:\n    accept: true\n";
pub(crate) fn serve(queue_depth: u32) -> String {
    format!("lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: {queue_depth}\n")
}

const DOOR_EXT: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const CAPSULE_EXT: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";

/// How long a door gets to print its readiness line (it compiles its component first).
const READY: Duration = Duration::from_secs(60);
/// Bound of any wait for a task state.
const SETTLE: Duration = Duration::from_secs(20);

/// Builds `actors/<actor>/capsule.wat` as `local/<name>@0.1.0` with the manifest blocks `rest`, and
/// installs it into the sandbox's global store.
pub(crate) fn install(sb: &Sandbox, actor: &str, name: &str, rest: &str) {
    let dir = sb.path(&format!("src/{name}"));
    std::fs::copy(
        repo_root().join("actors").join(actor).join("capsule.wat"),
        dir.join("capsule.wat"),
    )
    .expect("copy wat");
    let manifest = format!("name: {name}\nversion: 0.1.0\ncomponent: capsule.wat\n{rest}");
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("manifest");
    let out = sb.run(&dir, &["build", "."]);
    assert!(out.status.success(), "build {name}: {}", stderr(&out));
    let zip = dir.join(format!("{name}-0.1.0.mur.zip"));
    let out = sb.run(&dir, &["install", "-g", zip.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "install {name}: {}", stderr(&out));
}

/// A status, the headers the spec pins, and the body.
#[derive(Debug)]
pub(crate) struct Http {
    pub status: u16,
    pub content_type: Option<String>,
    pub content_length: Option<String>,
    pub www_authenticate: Option<String>,
    pub body: String,
}

impl Http {
    /// The body as JSON; of a stream of one event, that event's data.
    pub(crate) fn json(&self) -> Value {
        let body = match self.content_type.as_deref() {
            Some("text/event-stream") => self
                .body
                .strip_prefix("data: ")
                .and_then(|b| b.strip_suffix("\n\n"))
                .unwrap_or(&self.body),
            _ => &self.body,
        };
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build()
}

fn response(r: Result<ureq::Response, ureq::Error>) -> Http {
    let resp = match r {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport: {e}"),
    };
    let h = |n: &str| resp.header(n).map(str::to_string);
    let (content_type, content_length, www_authenticate) =
        (h("content-type"), h("content-length"), h("www-authenticate"));
    let status = resp.status();
    let body = resp.into_string().expect("body");
    Http {
        status,
        content_type,
        content_length,
        www_authenticate,
        body,
    }
}

/// HTTP to one door at `127.0.0.1:<port>`. Cheap to clone into another thread.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    addr: String,
}

impl Client {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn get(&self, path: &str, auth: Option<&str>) -> Http {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        self.get_with(path, &headers)
    }

    pub(crate) fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Http {
        let mut r = agent().get(&self.url(path));
        for (k, v) in headers {
            r = r.set(k, v);
        }
        response(r.call())
    }

    /// `POST /` with exactly these headers.
    pub(crate) fn post_bare(&self, headers: &[(&str, &str)], body: &str) -> Http {
        let mut r = agent().post(&self.url("/"));
        for (k, v) in headers {
            r = r.set(k, v);
        }
        response(r.send_string(body))
    }

    /// `POST /` as an A2A client: JSON, `A2A-Version: 1.0`, the `Authorization` value given, and
    /// any extra headers.
    pub(crate) fn post(&self, auth: Option<&str>, extra: &[(&str, &str)], body: &str) -> Http {
        let mut h = vec![("content-type", "application/json"), ("A2A-Version", "1.0")];
        if let Some(a) = auth {
            h.push(("authorization", a));
        }
        h.extend_from_slice(extra);
        self.post_bare(&h, body)
    }

    /// One JSON-RPC call with id 1.
    pub(crate) fn call(&self, auth: Option<&str>, method: &str, params: Value) -> Http {
        let body = json!({"id": 1, "jsonrpc": "2.0", "method": method, "params": params}).to_string();
        self.post(auth, &[], &body)
    }

    /// A JSON-RPC call that must be answered 200 with a JSON body carrying `content-length`.
    pub(crate) fn rpc(&self, auth: Option<&str>, method: &str, params: Value) -> Value {
        let h = self.call(auth, method, params);
        assert_eq!(h.status, 200, "{method}: {}", h.body);
        assert_eq!(h.content_type.as_deref(), Some("application/json"), "{method}");
        assert!(h.content_length.is_some(), "{method}: no content-length");
        h.json()
    }

    /// SendMessage of one text part; returns the Task.
    pub(crate) fn send(&self, auth: Option<&str>, text: &str, immediately: bool) -> Value {
        let params = json!({
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]},
            "configuration": {"returnImmediately": immediately},
        });
        let reply = self.rpc(auth, "SendMessage", params);
        assert!(reply["result"]["task"].is_object(), "SendMessage: {reply}");
        reply["result"]["task"].clone()
    }

    pub(crate) fn task(&self, auth: Option<&str>, id: &str) -> Value {
        let reply = self.rpc(auth, "GetTask", json!({ "id": id }));
        assert!(reply["result"].is_object(), "GetTask {id}: {reply}");
        reply["result"].clone()
    }

    /// Polls GetTask until the task is in `state`; returns it.
    pub(crate) fn wait_state(&self, auth: Option<&str>, id: &str, state: &str) -> Value {
        let mut last = Value::Null;
        let reached = wait_until(SETTLE, || {
            last = self.task(auth, id);
            last["status"]["state"] == state
        });
        assert!(reached.is_some(), "{id} never reached {state}; last seen {last}");
        last
    }

    /// An SSE request; asserts the stream's headers.
    pub(crate) fn stream(&self, auth: Option<&str>, method: &str, params: Value) -> Sse {
        let body = json!({"id": "s1", "jsonrpc": "2.0", "method": method, "params": params}).to_string();
        let mut r = agent()
            .post(&self.url("/"))
            .set("content-type", "application/json")
            .set("A2A-Version", "1.0");
        if let Some(a) = auth {
            r = r.set("authorization", a);
        }
        let resp = r.send_string(&body).unwrap_or_else(|e| panic!("{method}: {e}"));
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.header("content-type"), Some("text/event-stream"));
        assert_eq!(resp.header("content-length"), None, "a stream has no content-length");
        Sse(Box::new(BufReader::new(resp.into_reader())))
    }

    /// Raw bytes over a fresh connection (for requests ureq will not form); the status and body.
    pub(crate) fn raw(&self, request: &str) -> (u16, String) {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        // The door may answer (413) and close before it has read everything.
        let _ = s.write_all(request.as_bytes());
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }
}

/// An SSE response read event by event.
pub(crate) struct Sse(Box<dyn BufRead + Send>);

impl Sse {
    /// The next `data:` event, `None` at the end of the stream.
    pub(crate) fn next(&mut self) -> Option<Value> {
        loop {
            let mut line = String::new();
            if self.0.read_line(&mut line).expect("sse line") == 0 {
                return None;
            }
            if let Some(data) = line.strip_suffix('\n').and_then(|l| l.strip_prefix("data: ")) {
                return Some(serde_json::from_str(data).expect("event json"));
            }
        }
    }

    pub(crate) fn rest(mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

/// A formation signing key held by the test. It mints `mft1` tokens by
/// docs/reference/door.md#formation-tokens on its own, independently of the runtime's minting code,
/// and signs any payload bytes the test chooses.
pub(crate) struct Key(ed25519_dalek::SigningKey);

impl Key {
    pub(crate) fn new(seed: u8) -> Key {
        Key(ed25519_dalek::SigningKey::from_bytes(&[seed; 32]))
    }

    /// The verify key on the wire: 32 raw bytes as base64url without padding (43 characters).
    pub(crate) fn verify_key(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0.verifying_key().as_bytes())
    }

    /// `mft1.<B64(payload)>.<B64(signature)>` over exactly these payload bytes.
    pub(crate) fn sign(&self, payload: &str) -> String {
        let payload_b64 = URL_SAFE_NO_PAD.encode(payload);
        let mut input = b"murmur-formation-token-v1\x1fmft1\x1f".to_vec();
        input.extend_from_slice(payload_b64.as_bytes());
        let signature = self.0.sign(&input).to_bytes();
        format!("mft1.{payload_b64}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// The token of the edge `from → to`: compact payload, keys sorted.
    pub(crate) fn mint(&self, formation: &str, from: &str, to: &str) -> String {
        self.sign(&format!(r#"{{"formation":"{formation}","from":"{from}","to":"{to}"}}"#))
    }
}

/// A member's grant key as the test holds it: what it seals grants for that member with
/// (docs/reference/formation.md#grants), independently of the runtime's sealing code.
pub(crate) struct GrantKeyBytes(pub [u8; 32]);

impl GrantKeyBytes {
    /// `mgr2.<B64(payload)>.<B64(HMAC-SHA256(key, "murmur-grant-v2" 0x1F "mgr2" 0x1F B64(payload)))>`:
    /// a grant over exactly these payload bytes.
    pub(crate) fn seal(&self, payload: &str) -> String {
        use hmac::Mac as _;
        let payload_b64 = URL_SAFE_NO_PAD.encode(payload);
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0).expect("any key length");
        mac.update(b"murmur-grant-v2\x1fmgr2\x1f");
        mac.update(payload_b64.as_bytes());
        format!(
            "mgr2.{payload_b64}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    }
}

/// A member of a formation the test made up: its channel's first line carries `key`'s verify key.
pub(crate) struct Member<'k> {
    pub key: &'k Key,
    pub formation: &'k str,
    pub name: &'k str,
}

/// A running `mur run --capsule … --json --readiness-tokens`, killed on drop.
pub(crate) struct Door {
    child: Child,
    err: Arc<Mutex<String>>,
    client: Client,
    pub ready: Value,
    /// The write end of the member's lifeline; dropping it winds the member down.
    _lifeline: Option<OwnedFd>,
    /// The stderr reader, joined once the process has exited so `stderr()` is complete.
    err_reader: Option<std::thread::JoinHandle<()>>,
}

impl Deref for Door {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Door {
    fn command(sb: &Sandbox, capsule: &str, env: &[(&str, &str)]) -> Command {
        let work = sb.path("work");
        let mut cmd = sb.mur(&work);
        cmd.args([
            "run",
            "--capsule",
            &format!("local/{capsule}"),
            "--capsule-version",
            "0.1.0",
        ])
        .args(["--json", "--readiness-tokens"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// A session on its own (in no formation).
    pub(crate) fn start(sb: &Sandbox, capsule: &str, env: &[(&str, &str)]) -> Door {
        Door::spawn(Door::command(sb, capsule, env), None)
    }

    /// As [`Door::start`], under a soft open-file limit of `nofile` (as `ulimit -n` sets it).
    pub(crate) fn start_with_nofile(sb: &Sandbox, capsule: &str, env: &[(&str, &str)], nofile: u64) -> Door {
        let mut cmd = Door::command(sb, capsule, env);
        // SAFETY: only the async-signal-safe setrlimit runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                use nix::sys::resource::{Resource, getrlimit, setrlimit};
                let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
                setrlimit(Resource::RLIMIT_NOFILE, nofile.min(hard), hard).map_err(std::io::Error::from)
            });
        }
        Door::spawn(cmd, None)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the session's process has exited (reaping it).
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().is_ok_and(|s| s.is_some())
    }

    /// A session started as formation member `m.name`, as the launcher starts a peer
    /// (docs/reference/formation.md#member-environment): its channel holds a first line
    /// (docs/reference/formation.md#the-formation-channel) with no callees, and it holds a
    /// lifeline.
    pub(crate) fn member(sb: &Sandbox, capsule: &str, m: &Member) -> Door {
        Door::member_with(sb, capsule, m, &[])
    }

    /// As [`Door::member`], with `env` set for the member (e.g. a model capsule's key).
    pub(crate) fn member_with(sb: &Sandbox, capsule: &str, m: &Member, env: &[(&str, &str)]) -> Door {
        Door::member_env(sb, capsule, m, env, None)
    }

    /// As [`Door::member_with`], also handing descriptor `extra.0` over as `extra.1`.
    fn member_env(sb: &Sandbox, capsule: &str, m: &Member, env: &[(&str, &str)], extra: Option<(i32, &str)>) -> Door {
        let mut cmd = Door::command(sb, capsule, env);
        let line = format!(
            "{{\"formation_id\":\"{}\",\"member\":\"{}\",\"verify_key\":\"{}\",\"calls\":[]}}\n",
            m.formation,
            m.name,
            m.key.verify_key()
        );
        let (channel_r, channel_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        std::fs::File::from(channel_w)
            .write_all(line.as_bytes())
            .expect("first line");
        // The write end is closed now: a member that calls nobody needs no address line.
        let (life_r, life_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let fds = [
            channel_r.as_raw_fd(),
            life_r.as_raw_fd(),
            extra.map_or(channel_r.as_raw_fd(), |(fd, _)| fd),
        ];
        cmd.env("MURMUR_FORMATION_ID", m.formation)
            .env("MURMUR_FORMATION_CHANNEL", fds[0].to_string())
            .env("MURMUR_FORMATION_LIFELINE", fds[1].to_string());
        if let Some((fd, var)) = extra {
            cmd.env(var, fd.to_string());
        }
        // SAFETY: only async-signal-safe fcntl calls run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                for fd in fds {
                    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                        .map_err(std::io::Error::from)?;
                }
                Ok(())
            });
        }
        let door = Door::spawn(cmd, Some(life_w));
        drop((channel_r, life_r));
        door
    }

    /// As [`Door::member`], also handed an authority channel (docs/reference/formation.md#the-authority-channel)
    /// on which this test plays the launcher: it answers the member's `grant-key` ask with
    /// `grant_key` and nothing else.
    pub(crate) fn member_with_grant_key(sb: &Sandbox, capsule: &str, m: &Member, grant_key: &GrantKeyBytes) -> Door {
        let (theirs, ours) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let answer = format!("{}\n", URL_SAFE_NO_PAD.encode(grant_key.0));
        std::thread::spawn(move || {
            let mut writer = ours.try_clone().expect("clone");
            for line in BufReader::new(ours).lines().map_while(Result::ok) {
                let Some(id) = line.strip_prefix("grant-key ") else {
                    return;
                };
                if writer.write_all(format!("grant-key {id} {answer}").as_bytes()).is_err() {
                    return;
                }
            }
        });
        let fd = theirs.as_raw_fd();
        let door = Door::member_env(sb, capsule, m, &[], Some((fd, "MURMUR_FORMATION_AUTHORITY")));
        drop(theirs);
        door
    }

    fn spawn(mut cmd: Command, lifeline: Option<OwnedFd>) -> Door {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn mur run");
        let out = child.stdout.take().expect("stdout");
        let errs = child.stderr.take().expect("stderr");
        let (tx, lines): (_, Receiver<String>) = channel();
        std::thread::spawn(move || {
            // Drains stdout to the end, so the session never writes into a closed pipe.
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let err = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&err);
        let err_reader = std::thread::spawn(move || {
            let mut r = BufReader::new(errs);
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().expect("stderr lock").push_str(&line);
                line.clear();
            }
        });
        let mut door = Door {
            child,
            err,
            client: Client { addr: String::new() },
            ready: Value::Null,
            _lifeline: lifeline,
            err_reader: Some(err_reader),
        };
        let line = lines
            .recv_timeout(READY)
            .unwrap_or_else(|_| panic!("no readiness line; stderr: {}", door.stderr()));
        door.ready = serde_json::from_str(&line).unwrap_or_else(|e| panic!("readiness line {line:?}: {e}"));
        let url = door.ready["url"].as_str().expect("url").to_string();
        assert!(url.starts_with("localhost:"), "{url}");
        door.client.addr = url.replacen("localhost", "127.0.0.1", 1);
        door
    }

    pub(crate) fn stderr(&self) -> String {
        self.err.lock().expect("stderr lock").clone()
    }

    /// `Bearer <operator token>`.
    pub(crate) fn op(&self) -> String {
        let t = self.ready["tokens"]["operator"]
            .as_str()
            .expect("an authenticating door's operator token");
        format!("Bearer {t}")
    }

    /// `localhost:<port>`, as the card and the readiness line spell it.
    pub(crate) fn local_url(&self) -> String {
        self.ready["url"].as_str().expect("url").to_string()
    }

    pub(crate) fn session_id(&self) -> String {
        self.ready["session_id"].as_str().expect("session_id").to_string()
    }

    pub(crate) fn records_dir(&self) -> PathBuf {
        PathBuf::from(self.ready["records_dir"].as_str().expect("records_dir"))
    }

    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub(crate) fn terminate(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    }

    /// The exit code, waiting at most `within`.
    pub(crate) fn wait(&mut self, within: Duration) -> Option<i32> {
        let mut code = None;
        wait_until(within, || match self.child.try_wait() {
            Ok(Some(s)) => {
                code = s.code();
                true
            }
            _ => false,
        })?;
        if let Some(reader) = self.err_reader.take() {
            let _ = reader.join();
        }
        code
    }

    /// Trace records of this session so far.
    pub(crate) fn trace(&self) -> Vec<Value> {
        trace_of(&self.records_dir())
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn trace_of(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("trace.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `a2a_task_received` record of `task_id`, once written.
fn received(d: &Door, task_id: &str) -> Value {
    let mut rec = Value::Null;
    let found = wait_until(SETTLE, || {
        rec = d
            .trace()
            .into_iter()
            .find(|r| r["event_type"] == "a2a_task_received" && r["task_id"] == task_id)
            .unwrap_or(Value::Null);
        !rec.is_null()
    });
    assert!(found.is_some(), "no a2a_task_received for {task_id}");
    rec
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `^<prefix>[0-9a-f]{32}$`.
pub(crate) fn is_id(v: &Value, prefix: &str) -> bool {
    v.as_str()
        .and_then(|s| s.strip_prefix(prefix))
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// RFC 3339 UTC with milliseconds: `2025-01-02T03:04:05.678Z`.
pub(crate) fn is_timestamp_ms(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    s.len() == 24 && s.ends_with('Z') && s.as_bytes()[19] == b'.' && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

/// An A2A error body (docs/reference/door.md#request-pipeline) for request id `id` (JSON text).
fn a2a_error(id: &str, code: i32, message: &str, reason: &str, metadata: &str) -> String {
    format!(
        r#"{{"error":{{"code":{code},"data":[{{"@type":"type.googleapis.com/google.rpc.ErrorInfo","domain":"a2a-protocol.org","metadata":{metadata},"reason":"{reason}"}}],"message":"{message}"}},"id":{id},"jsonrpc":"2.0"}}"#
    )
}

fn not_found(task: &str) -> String {
    a2a_error(
        "1",
        -32001,
        "Task not found",
        "TASK_NOT_FOUND",
        &format!(r#"{{"taskId":"{task}"}}"#),
    )
}

fn not_cancelable(task: &str) -> String {
    a2a_error(
        "1",
        -32002,
        "Task cannot be canceled",
        "TASK_NOT_CANCELABLE",
        &format!(r#"{{"taskId":"{task}"}}"#),
    )
}

fn unsupported(metadata: &str) -> String {
    a2a_error(
        "1",
        -32004,
        "This operation is not supported",
        "UNSUPPORTED_OPERATION",
        metadata,
    )
}

fn plain_error(id: &str, code: i32, message: &str) -> String {
    format!(r#"{{"error":{{"code":{code},"message":"{message}"}},"id":{id},"jsonrpc":"2.0"}}"#)
}

/// Asserts a JSON-RPC reply: HTTP 200, JSON, content-length, exactly `body`. A streaming method
/// refused before its stream starts answers the same way (docs/a2a.md, "Streaming errors").
#[track_caller]
fn assert_rpc(h: &Http, body: &str) {
    assert_eq!((h.status, h.body.as_str()), (200, body));
    assert_eq!(h.content_type.as_deref(), Some("application/json"));
    assert_eq!(h.content_length.as_deref(), Some(body.len().to_string().as_str()));
}

const UNAUTHENTICATED: &str = r#"{"error":"unauthenticated","message":"this door takes a token this capsule's runtime minted, as Authorization: Bearer <token>"}"#;
const INVALID_TOKEN: &str =
    r#"{"error":"invalid_token","message":"the Authorization header does not present a token this session minted"}"#;
const PEER_NOT_ACCEPTED: &str =
    r#"{"error":"peer_not_accepted","message":"this capsule does not accept tasks from peers"}"#;

/// Asserts a docs/reference/door.md#authentication refusal: status, JSON content type, exact body
/// and `www-authenticate`.
#[track_caller]
fn assert_refusal(h: &Http, status: u16, body: &str, challenge: Option<&str>) {
    assert_eq!((h.status, h.body.as_str()), (status, body));
    assert_eq!(h.content_type.as_deref(), Some("application/json"));
    assert_eq!(h.www_authenticate.as_deref(), challenge);
    assert_eq!(
        h.content_length,
        Some(body.len().to_string()),
        "every non-streaming response has a length"
    );
}

#[track_caller]
fn assert_invalid(h: &Http, realm: &str) {
    let challenge = format!(r#"Bearer realm="{realm}", error="invalid_token""#);
    assert_refusal(h, 401, INVALID_TOKEN, Some(&challenge));
}

#[track_caller]
fn assert_out_of_scope(h: &Http, realm: &str, credential: &str, scope: &str) {
    let body =
        format!(r#"{{"error":"insufficient_scope","message":"credential '{credential}' does not reach {scope}"}}"#);
    let challenge = format!(r#"Bearer realm="{realm}", error="insufficient_scope", scope="{scope}""#);
    assert_refusal(h, 403, &body, Some(&challenge));
}

fn text_message(text: &str) -> Value {
    json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text, "mediaType": "text/plain"}]}})
}

/// The same token with one signature character changed (well inside the segment, so it still
/// decodes: the signature check, not the decoding, refuses it).
fn altered(token: &str) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    let i = chars.len() - 5;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

// ---------------------------------------------------------------------------------------------
// Methods

#[test]
fn the_card_is_public_and_the_extended_card_needs_a_valid_token() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    install(
        &sb,
        "echo",
        "open",
        &format!("{}capabilities:\n  network:\n    allow: [localhost]\n", serve(1)),
    );
    let d = Door::start(&sb, "echo", &[]);
    assert_eq!(d.ready["auth"], "bearer");
    let port_url = d.local_url();
    let door_ext = format!(
        r#"{{"params":{{"methods":["SendMessage","SendStreamingMessage","GetTask","ListTasks","CancelTask","SubscribeToTask","GetExtendedAgentCard","CreateTaskPushNotificationConfig","GetTaskPushNotificationConfig","ListTaskPushNotificationConfigs","DeleteTaskPushNotificationConfig"],"peerTasks":true}},"uri":"{DOOR_EXT}"}}"#
    );
    let capsule_ext = format!(
        r#"{{"params":{{"network":[],"planes":[],"sessionId":"{}","shell":false,"tools":[]}},"uri":"{CAPSULE_EXT}"}}"#,
        d.session_id()
    );
    // [ours] Every door declares the limits extension, last.
    let limits_ext = r#"{"description":"a task's deadline (Unix ms) and budget; they only narrow what the formation grants","required":false,"uri":"urn:mur:a2a:limits:v1"}"#;
    let card = |extensions: &str| {
        format!(
            r#"{{"capabilities":{{"extendedAgentCard":true,"extensions":[{extensions}],"pushNotifications":true,"streaming":true}},"defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain"],"description":"local/echo@0.1.0","name":"local/echo","securityRequirements":[{{"schemes":{{"bearer":{{"list":[]}}}}}}],"securitySchemes":{{"bearer":{{"httpAuthSecurityScheme":{{"description":"minted by this door's runtime: for its operator, or for a formation member that may call it","scheme":"Bearer"}}}}}},"skills":[{{"description":"local/echo@0.1.0","id":"echo","name":"local/echo","tags":["echo"]}}],"supportedInterfaces":[{{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"http://{port_url}"}}],"version":"0.1.0"}}"#
        )
    };

    // The public card: never authenticated, whatever Authorization says; no capsule extension.
    let public = card(&format!("{door_ext},{limits_ext}"));
    for auth in [None, Some("Bearer nonsense"), Some("Basic x")] {
        let h = d.get("/.well-known/agent-card.json", auth);
        assert_eq!((h.status, strip_signatures(&h.body)), (200, public.clone()), "{auth:?}");
        assert_eq!(h.content_type.as_deref(), Some("application/json"));
        assert_eq!(h.content_length, Some(h.body.len().to_string()));
    }

    // The extended card needs a token, and then carries the capsule extension.
    let none = d.call(None, "GetExtendedAgentCard", json!({}));
    assert_refusal(&none, 401, UNAUTHENTICATED, Some(r#"Bearer realm="local/echo""#));
    let ext = d.call(Some(&d.op()), "GetExtendedAgentCard", json!({}));
    let want = format!(
        r#"{{"id":1,"jsonrpc":"2.0","result":{}}}"#,
        card(&format!("{door_ext},{capsule_ext},{limits_ext}"))
    );
    assert_eq!((ext.status, strip_signatures(&ext.body)), (200, want));
    // Signed (A2A v1.0 §8.4), by the key the public card names too.
    let signed = ext.json()["result"].clone();
    let key = mur::card_sig::named_key(&signed).expect("the card names its key");
    assert_eq!(mur::card_sig::verify(&signed, &key), Ok(()));
    let public: Value = serde_json::from_str(&d.get("/.well-known/agent-card.json", None).body).expect("card");
    assert_eq!(mur::card_sig::named_key(&public), Some(key));

    // A public door shows everything on its public card and has no extended card.
    let p = Door::start(&sb, "open", &[]);
    assert_eq!(p.ready.get("auth"), None);
    assert_eq!(p.ready.get("tokens"), None, "a public door has no operator token");
    let want = format!(
        r#"{{"capabilities":{{"extendedAgentCard":false,"extensions":[{{"params":{{"methods":["SendMessage","SendStreamingMessage","GetTask","ListTasks","CancelTask","SubscribeToTask","CreateTaskPushNotificationConfig","GetTaskPushNotificationConfig","ListTaskPushNotificationConfigs","DeleteTaskPushNotificationConfig"],"peerTasks":false}},"uri":"{DOOR_EXT}"}},{{"params":{{"network":["localhost"],"planes":[],"sessionId":"{}","shell":false,"tools":[]}},"uri":"{CAPSULE_EXT}"}},{limits_ext}],"pushNotifications":true,"streaming":true}},"defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain"],"description":"local/open@0.1.0","name":"local/open","skills":[{{"description":"local/open@0.1.0","id":"open","name":"local/open","tags":["open"]}}],"supportedInterfaces":[{{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"http://{}"}}],"version":"0.1.0"}}"#,
        p.session_id(),
        p.local_url()
    );
    assert_eq!(
        strip_signatures(&p.get("/.well-known/agent-card.json", None).body),
        want
    );
    let h = p.call(Some("Bearer whatever"), "GetExtendedAgentCard", json!({}));
    assert_rpc(&h, &unsupported(r#"{"method":"GetExtendedAgentCard"}"#));
}

#[test]
fn send_message_blocks_until_the_end_or_returns_at_once() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();

    // Blocking: the reply is the completed task with its answer as the `response` artifact.
    let t = d.send(Some(&op), "hello door", false);
    let keys: Vec<&String> = t.as_object().expect("task").keys().collect();
    // `history` per A2A v1.0 §4.1.1 (docs/a2a.md, where the door departs from
    // docs/reference/door.md#methods).
    assert_eq!(keys, ["artifacts", "contextId", "history", "id", "status"], "{t}");
    assert!(is_id(&t["id"], "tsk_") && is_id(&t["contextId"], "ctx_"), "{t}");
    assert_eq!(
        t["artifacts"],
        json!([{"artifactId": "response", "name": "response", "parts": [{"text": "hello door"}]}])
    );
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(is_timestamp_ms(&t["status"]["timestamp"]), "{t}");
    assert_eq!(t["status"].get("message"), None, "{t}");
    let id = t["id"].as_str().expect("id").to_string();
    assert_eq!(d.task(Some(&op), &id), t, "GetTask shows the same task");
    let with_history = d.rpc(Some(&op), "GetTask", json!({"id": id, "historyLength": 3}));
    assert_eq!(with_history["result"], t, "historyLength is ignored");
    // The door task's answer is kept in the records [ours].
    let result = d.records_dir().join(format!("out/result_{id}.txt"));
    assert!(
        wait_until(SETTLE, || std::fs::read_to_string(&result)
            .is_ok_and(|r| r == "hello door"))
        .is_some()
    );
    let rec = received(&d, &id);
    assert_eq!(rec["traceparent_from_caller"], Value::Null);
    assert_eq!(
        (&rec["context_id"], &rec["message_id"]),
        (&t["contextId"], &json!("m1"))
    );
    assert_eq!(rec.get("caller_member"), None, "the operator is no member: {rec}");

    // The caller's traceparent is recorded with the task.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body =
        json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": text_message("traced")}).to_string();
    let traced = d.post(Some(&op), &[("traceparent", tp)], &body).json();
    let traced_id = traced["result"]["task"]["id"].as_str().expect("id").to_string();
    assert_eq!(received(&d, &traced_id)["traceparent_from_caller"], tp);

    // Text parts are joined with a newline; a given contextId is kept.
    let params = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "contextId": "ctx_mine",
        "parts": [{"text": "a", "mediaType": "text/plain"}, {"text": "b"}]}});
    let t = d.rpc(Some(&op), "SendMessage", params)["result"]["task"].clone();
    assert_eq!(
        (&t["contextId"], &t["artifacts"][0]["parts"][0]["text"]),
        (&json!("ctx_mine"), &json!("a\nb"))
    );

    // returnImmediately: the task as admitted, which then runs to its end.
    let t = d.send(Some(&op), "later", true);
    assert_eq!(t["status"]["state"], "TASK_STATE_SUBMITTED", "{t}");
    assert_eq!(t.get("artifacts"), None);
    let id = t["id"].as_str().expect("id");
    let done = d.wait_state(Some(&op), id, "TASK_STATE_COMPLETED");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "later");
    assert_eq!(done["contextId"], t["contextId"]);
}

#[test]
fn a_busy_capsule_rejects_and_cancel_task_reaches_running_and_queued_tasks() {
    let sb = Sandbox::new();
    // Never answers, one running and one waiting.
    install(&sb, "spin", "held", &format!("{}{AUTH}", serve(1)));
    let d = Door::start(&sb, "held", &[]);
    let op = d.op();

    let a = d.send(Some(&op), "a", true);
    let a_id = a["id"].as_str().expect("id").to_string();
    d.wait_state(Some(&op), &a_id, "TASK_STATE_WORKING");
    let b = d.send(Some(&op), "b", true);
    assert_eq!(b["status"]["state"], "TASK_STATE_SUBMITTED");
    let b_id = b["id"].as_str().expect("id").to_string();

    // No room: REJECTED, the reason as the status message.
    let c = d.send(Some(&op), "c", false);
    assert_eq!(c["status"]["state"], "TASK_STATE_REJECTED", "{c}");
    let msg = &c["status"]["message"];
    assert_eq!(msg["parts"], json!([{"text": "task rejected: capsule is busy"}]));
    assert_eq!(
        (&msg["role"], &msg["taskId"], &msg["contextId"]),
        (&json!("ROLE_AGENT"), &c["id"], &c["contextId"])
    );
    assert!(msg["messageId"].as_str().is_some_and(|m| !m.is_empty()), "{c}");

    // Streamed, a task refused for want of room is one event, and the stream ends.
    let events = d.stream(Some(&op), "SendStreamingMessage", text_message("d")).rest();
    assert_eq!(events.len(), 1, "{events:?}");
    let refused = &events[0]["result"]["task"];
    assert_eq!(refused["status"]["state"], "TASK_STATE_REJECTED", "{refused}");
    assert_eq!(
        refused["status"]["message"]["parts"][0]["text"],
        "task rejected: capsule is busy"
    );

    // The queued task, then the running one; a terminal task is not cancelable.
    let r = d.rpc(Some(&op), "CancelTask", json!({"id": b_id}));
    assert_eq!(
        (&r["result"]["id"], &r["result"]["status"]["state"]),
        (&json!(b_id), &json!("TASK_STATE_CANCELED"))
    );
    assert_rpc(
        &d.call(Some(&op), "CancelTask", json!({"id": b_id})),
        &not_cancelable(&b_id),
    );
    let r = d.rpc(Some(&op), "CancelTask", json!({"id": a_id}));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    assert_eq!(d.task(Some(&op), &a_id)["status"]["state"], "TASK_STATE_CANCELED");
    let c_id = c["id"].as_str().expect("id");
    assert_rpc(
        &d.call(Some(&op), "CancelTask", json!({"id": c_id})),
        &not_cancelable(c_id),
    );
    let unknown = "tsk_00000000000000000000000000000000";
    assert_rpc(
        &d.call(Some(&op), "CancelTask", json!({"id": unknown})),
        &not_found(unknown),
    );

    // A blocking SendMessage answers when the task is cancelled from elsewhere.
    let (other, op2) = (d.client(), op.clone());
    let waiting = std::thread::spawn(move || other.send(Some(&op2), "wait", false));
    let mut live = Value::Null;
    let seen = wait_until(SETTLE, || {
        let l = d.rpc(Some(&op), "ListTasks", json!({"status": "TASK_STATE_WORKING"}));
        live = l["result"]["tasks"][0].clone();
        !live.is_null()
    });
    assert!(seen.is_some(), "the blocking task never ran");
    d.rpc(Some(&op), "CancelTask", json!({"id": live["id"]}));
    let ended = waiting.join().expect("blocking send");
    assert_eq!(
        (&ended["id"], &ended["status"]["state"]),
        (&live["id"], &json!("TASK_STATE_CANCELED"))
    );
    let list = d.rpc(Some(&op), "ListTasks", json!({"status": "TASK_STATE_CANCELED"}));
    assert_eq!(list["result"]["totalSize"], 3, "{list}");
    let list = d.rpc(Some(&op), "ListTasks", json!({"status": "TASK_STATE_REJECTED"}));
    assert_eq!(list["result"]["totalSize"], 2, "{list}");
}

#[test]
fn list_tasks_pages_newest_first_with_filters() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut params = text_message(&format!("t{i}"));
        if i % 2 == 0 {
            params["message"]["contextId"] = json!("ctx_even");
        }
        let t = d.rpc(Some(&op), "SendMessage", params)["result"]["task"].clone();
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED");
        ids.push(t["id"].as_str().expect("id").to_string());
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();

    // Pages of two, following nextPageToken to an empty one.
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut sizes = Vec::new();
    loop {
        let r = d.rpc(Some(&op), "ListTasks", json!({"pageSize": 2, "pageToken": token}))["result"].clone();
        assert_eq!((&r["pageSize"], &r["totalSize"]), (&json!(2), &json!(5)), "{r}");
        let tasks = r["tasks"].as_array().expect("tasks").clone();
        sizes.push(tasks.len());
        for t in &tasks {
            assert_eq!(t.get("artifacts"), None, "artifacts only when asked for: {t}");
            seen.push(t["id"].as_str().expect("id").to_string());
        }
        token = r["nextPageToken"].as_str().expect("nextPageToken").to_string();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!((sizes, seen), (vec![2, 2, 1], newest_first.clone()));

    // Defaults, clamping, artifacts and filters.
    let all = d.rpc(Some(&op), "ListTasks", json!({}))["result"].clone();
    assert_eq!(
        (&all["pageSize"], &all["totalSize"], &all["nextPageToken"]),
        (&json!(50), &json!(5), &json!(""))
    );
    let ids_of = |r: &Value| -> Vec<String> {
        r["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["id"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(ids_of(&all), newest_first);
    let most = d.rpc(Some(&op), "ListTasks", json!({"pageSize": 100}))["result"].clone();
    assert_eq!(most["pageSize"], 100);
    let with = d.rpc(Some(&op), "ListTasks", json!({"pageSize": 1, "includeArtifacts": true}))["result"].clone();
    assert_eq!(with["tasks"][0]["artifacts"][0]["parts"][0]["text"], "t4");
    let even = d.rpc(Some(&op), "ListTasks", json!({"contextId": "ctx_even"}))["result"].clone();
    assert_eq!(ids_of(&even), [ids[4].clone(), ids[2].clone(), ids[0].clone()]);
    assert_eq!(even["totalSize"], 3);
    let done = d.rpc(Some(&op), "ListTasks", json!({"status": "TASK_STATE_COMPLETED"}))["result"].clone();
    assert_eq!(done["totalSize"], 5);
    let working = d.rpc(Some(&op), "ListTasks", json!({"status": "TASK_STATE_WORKING"}))["result"].clone();
    assert_eq!((&working["totalSize"], &working["tasks"]), (&json!(0), &json!([])));
    let future = d.rpc(
        Some(&op),
        "ListTasks",
        json!({"statusTimestampAfter": "2999-01-01T00:00:00.000Z"}),
    );
    assert_eq!(future["result"]["totalSize"], 0);
    let past = d.rpc(
        Some(&op),
        "ListTasks",
        json!({"statusTimestampAfter": "2000-01-01T00:00:00Z"}),
    );
    assert_eq!(past["result"]["totalSize"], 5);
    for (bad, field) in [
        (json!({"pageToken": "x"}), "pageToken"),
        (json!({"status": "working"}), "status"),
        (json!({"pageSize": -1}), "pageSize"),
    ] {
        let e = d.rpc(Some(&op), "ListTasks", bad)["error"].clone();
        assert_eq!(
            (&e["code"], &e["data"][0]["fieldViolations"][0]["field"]),
            (&json!(-32602), &json!(field))
        );
    }
}

/// A2A v1.0 §3.1.4 List Tasks and `a2a.proto` `ListTasksRequest`/`ListTasksResponse`: `pageSize`
/// is 1 to 100, `historyLength` is not negative, `statusTimestampAfter` is an inclusive bound and
/// a timestamp; §3.3.2 "Validation Errors": `-32602` names the parameter.
#[test]
fn list_tasks_validates_its_parameters_as_a2a_states_them() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let t = d.send(Some(&op), "one", false);
    let _ = d.send(Some(&op), "two", false);
    let refused = |params: Value, field: &str, why: &str| {
        let h = d.call(Some(&op), "ListTasks", params.clone());
        assert_eq!(h.status, 200, "{params}");
        let body = format!(
            r#"{{"error":{{"code":-32602,"data":[{{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{{"description":"{why}","field":"{field}"}}]}}],"message":"Invalid params"}},"id":1,"jsonrpc":"2.0"}}"#
        );
        assert_eq!(h.body, body, "{params}");
    };
    let page_size = "must be an integer from 1 to 100";
    for n in [json!(0), json!(101), json!(-1), json!(2.5), json!("2")] {
        refused(json!({ "pageSize": n }), "pageSize", page_size);
    }
    for n in [json!(-1), json!(-100), json!(0.5)] {
        refused(
            json!({ "historyLength": n }),
            "historyLength",
            "must be an integer of 0 or more",
        );
    }
    for ts in ["yesterday", "2025-13-01T00:00:00Z", "2025-01-01 00:00:00"] {
        refused(
            json!({ "statusTimestampAfter": ts }),
            "statusTimestampAfter",
            "must be an RFC 3339 timestamp, e.g. 2025-01-02T03:04:05.678Z",
        );
    }
    // The page size used, at both ends of the range.
    for n in [1, 100] {
        let r = d.rpc(Some(&op), "ListTasks", json!({ "pageSize": n }))["result"].clone();
        assert_eq!(r["pageSize"], n, "{r}");
    }
    // Inclusive: the task whose status time is exactly the bound is listed.
    let done = d.task(Some(&op), t["id"].as_str().expect("id"));
    let at = done["status"]["timestamp"].clone();
    let r = d.rpc(Some(&op), "ListTasks", json!({ "statusTimestampAfter": at }))["result"].clone();
    let listed: Vec<&Value> = r["tasks"].as_array().expect("tasks").iter().map(|t| &t["id"]).collect();
    assert!(listed.contains(&&t["id"]), "{at} must be included: {r}");
}

/// The conversation a provider request carried, without its instructions: `(role, text)`.
fn conversation(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "user" || m["role"] == "assistant")
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or("").to_string(),
                        m["content"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A2A v1.0 §3.4.1 Context Identifier Semantics and §3.4.2 Multi-Turn Conversation Patterns: a
/// message naming a `contextId` and no `taskId` starts a new task in that context, and a model
/// capsule is shown the context's earlier exchanges; ListTasks filters by `contextId`; a message
/// naming a terminal task is `-32004` (§3.1.1 errors), an unknown or invisible one `-32001`.
/// docs/reference/door.md#methods holds for contexts: another caller's context is, to a caller, an
/// unknown one, which A2A has a server accept as given (§3.4.1: "MUST accept and preserve
/// client-provided contextId values"), so it starts afresh under that id, seeing and listing
/// nothing of it.
#[test]
fn contexts_continue_with_their_earlier_exchanges_and_stay_private() {
    let sb = Sandbox::new();
    let answers: Vec<Step> = (0..8)
        .map(|_| {
            Step::func(|r| {
                let asked = conversation(&r.json())
                    .last()
                    .map(|(_, t)| t.clone())
                    .unwrap_or_default();
                Reply::json(openai::text(&format!("A:{asked}")))
            })
        })
        .collect();
    let provider = Provider::start(answers);
    let manifest = format!(
        "name: talker\nversion: 0.1.0\ninference:\n  provider: openai\n  endpoint: {}\n  model: test-model\n  \
         api_key: ${{MUR_IT_PROVIDER_KEY}}\n  system_prompt: You talk.\n{}{AUTH}{PEERS}",
        provider.url(),
        serve(4)
    );
    sb.install_manifest("talker", &manifest);
    let key = Key::new(7);
    let d = Door::member_with(
        &sb,
        "talker",
        &Member {
            key: &key,
            formation: FRM,
            name: "talker",
        },
        &[("MUR_IT_PROVIDER_KEY", "sk-it-0123456789")],
    );
    let op = d.op();
    let planner = format!("Bearer {}", key.mint(FRM, "planner", "talker"));
    let in_context = |auth: &str, text: &str, ctx: Option<&Value>| {
        let mut params = text_message(text);
        if let Some(c) = ctx {
            params["message"]["contextId"] = c.clone();
        }
        let t = d.rpc(Some(auth), "SendMessage", params)["result"]["task"].clone();
        assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
        t
    };
    let turn = |role: &str, text: &str| (role.to_string(), text.to_string());

    let first = in_context(&op, "q1", None);
    let ctx = first["contextId"].clone();
    let second = in_context(&op, "q2", Some(&ctx));
    assert_eq!(second["contextId"], ctx);
    assert_ne!(second["id"], first["id"], "a new task in the same context");
    assert_eq!(second["artifacts"][0]["parts"][0]["text"], "A:q2");
    let seen = provider.requests();
    assert_eq!(conversation(&seen[0].json()), [turn("user", "q1")]);
    assert_eq!(
        conversation(&seen[1].json()),
        [turn("user", "q1"), turn("assistant", "A:q1"), turn("user", "q2")]
    );

    // The planner names the operator's context: to it the context is new.
    let theirs = in_context(&planner, "p1", Some(&ctx));
    assert_eq!(theirs["contextId"], ctx, "the id is kept as given");
    in_context(&planner, "p2", Some(&ctx));
    let seen = provider.requests();
    assert_eq!(conversation(&seen[2].json()), [turn("user", "p1")]);
    assert_eq!(
        conversation(&seen[3].json()),
        [turn("user", "p1"), turn("assistant", "A:p1"), turn("user", "p2")]
    );
    let listed = |auth: &str| {
        let r = d.rpc(Some(auth), "ListTasks", json!({ "contextId": ctx }))["result"].clone();
        (r["totalSize"].as_u64(), r["tasks"].as_array().map(Vec::len))
    };
    assert_eq!(listed(&planner), (Some(2), Some(2)), "only its own tasks");
    assert_eq!(listed(&op), (Some(4), Some(4)), "the operator sees every task");

    // A message naming a task: terminal → -32004 with its state, another caller's or unknown →
    // -32001.
    let naming = |auth: &str, task: &Value| {
        let mut params = text_message("more");
        params["message"]["taskId"] = task.clone();
        d.call(Some(auth), "SendMessage", params)
    };
    let first_id = first["id"].as_str().expect("id");
    assert_rpc(
        &naming(&op, &first["id"]),
        &unsupported(&format!(r#"{{"state":"TASK_STATE_COMPLETED","taskId":"{first_id}"}}"#)),
    );
    assert_rpc(&naming(&planner, &first["id"]), &not_found(first_id));
    assert_rpc(
        &naming(&op, &json!("tsk_0199c4e2f1b7712a9d3e4f5061728394")),
        &not_found("tsk_0199c4e2f1b7712a9d3e4f5061728394"),
    );
    // A context id is bounded [ours]: every history message repeats it.
    let mut params = text_message("long");
    params["message"]["contextId"] = json!("c".repeat(257));
    let e = d.rpc(Some(&op), "SendMessage", params)["error"].clone();
    assert_eq!(
        (&e["code"], &e["data"][0]["fieldViolations"][0]["field"]),
        (&json!(-32602), &json!("message.contextId"))
    );
    assert_eq!(provider.requests().len(), 4, "no refused message reached the model");
}

/// The text of each history message of a task, with its role.
fn history_of(task: &Value) -> Vec<(String, String)> {
    task["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or("").to_string(),
                        m["parts"][0]["text"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A2A v1.0 §4.1.1 `Task.history` and §3.2.4 History Length Semantics: a task holds the caller's
/// message and the agent's final one; `historyLength` on GetTask, ListTasks and SendMessage's
/// configuration keeps the newest, 0 leaves the field out, unset keeps all.
#[test]
fn tasks_carry_their_history_within_history_length() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let t = d.send(Some(&op), "hello there", false);
    let id = t["id"].as_str().expect("id").to_string();
    let both = vec![
        ("ROLE_USER".to_string(), "hello there".to_string()),
        ("ROLE_AGENT".to_string(), "hello there".to_string()),
    ];
    assert_eq!(history_of(&t), both, "{t}");
    let first = &t["history"][0];
    assert_eq!(
        (&first["messageId"], &first["taskId"], &first["contextId"]),
        (&json!("m1"), &t["id"], &t["contextId"])
    );
    assert_eq!(history_of(&d.task(Some(&op), &id)), both);
    let get = |n: Value| d.rpc(Some(&op), "GetTask", json!({"id": id, "historyLength": n}))["result"].clone();
    assert_eq!(history_of(&get(json!(1))), both[1..]);
    assert_eq!(history_of(&get(json!(5))), both);
    assert_eq!(get(json!(0)).get("history"), None, "0 leaves the field out");
    let e = d.rpc(Some(&op), "GetTask", json!({"id": id, "historyLength": -1}));
    assert_eq!(e["error"]["data"][0]["fieldViolations"][0]["field"], "historyLength");
    let listed = |n: Value| d.rpc(Some(&op), "ListTasks", json!({ "historyLength": n }))["result"]["tasks"][0].clone();
    assert_eq!(history_of(&listed(json!(1))), both[1..]);
    assert_eq!(listed(json!(0)).get("history"), None);
    assert_eq!(history_of(&listed(Value::Null)), both);
    let mut params = text_message("again");
    params["configuration"] = json!({"historyLength": 0});
    let r = d.rpc(Some(&op), "SendMessage", params)["result"]["task"].clone();
    assert_eq!(
        (r["status"]["state"].as_str(), r.get("history")),
        (Some("TASK_STATE_COMPLETED"), None)
    );
    let mut params = text_message("once more");
    params["configuration"] = json!({"historyLength": 1});
    let r = d.rpc(Some(&op), "SendMessage", params)["result"]["task"].clone();
    assert_eq!(history_of(&r), [("ROLE_AGENT".to_string(), "once more".to_string())]);
}

#[test]
fn streams_follow_a_task_to_its_end() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    install(&sb, "spin", "held", &format!("{}{AUTH}", serve(1)));
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();

    // SendStreamingMessage: the task as created, its answer, its terminal status; then the end.
    let events = d
        .stream(Some(&op), "SendStreamingMessage", text_message("streamed"))
        .rest();
    assert!(events.len() >= 3, "{events:?}");
    for e in &events {
        assert_eq!((&e["id"], &e["jsonrpc"]), (&json!("s1"), &json!("2.0")), "{e}");
    }
    let first = &events[0]["result"]["task"];
    assert_eq!(first["status"]["state"], "TASK_STATE_SUBMITTED", "{events:?}");
    let id = first["id"].clone();
    let n = events.len();
    assert_eq!(
        events[n - 2]["result"],
        json!({"artifactUpdate": {"artifact": {"artifactId": "response", "name": "response", "parts": [{"text": "streamed"}]}, "contextId": first["contextId"], "taskId": id}})
    );
    let last = &events[n - 1]["result"]["statusUpdate"];
    assert_eq!((&last["taskId"], &last["contextId"]), (&id, &first["contextId"]));
    assert_eq!(last["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(is_timestamp_ms(&last["status"]["timestamp"]), "{last}");

    // SubscribeToTask on a terminal task is refused (A2A rule).
    let done = id.as_str().expect("id");
    let h = d.call(Some(&op), "SubscribeToTask", json!({"id": done}));
    assert_rpc(&h, &unsupported(&format!(r#"{{"taskId":"{done}"}}"#)));

    // A live task: the stream opens with it as it stands and ends with its cancellation.
    let h = Door::start(&sb, "held", &[]);
    let hop = h.op();
    let t = h.send(Some(&hop), "hold", true);
    let tid = t["id"].as_str().expect("id").to_string();
    h.wait_state(Some(&hop), &tid, "TASK_STATE_WORKING");
    let mut sub = h.stream(Some(&hop), "SubscribeToTask", json!({"id": tid}));
    let opening = sub.next().expect("first event");
    assert_eq!(
        opening["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{opening}"
    );
    assert_eq!(opening["result"]["task"]["id"], json!(tid));
    h.rpc(Some(&hop), "CancelTask", json!({"id": tid}));
    let rest = sub.rest();
    let end = &rest.last().expect("a terminal event")["result"]["statusUpdate"];
    assert_eq!(
        (&end["taskId"], &end["status"]["state"]),
        (&json!(tid), &json!("TASK_STATE_CANCELED"))
    );

    // SendStreamingMessage of a task that waits behind another: it shows SUBMITTED, then its end.
    let runner = h.send(Some(&hop), "run", true);
    h.wait_state(Some(&hop), runner["id"].as_str().expect("id"), "TASK_STATE_WORKING");
    let mut s = h.stream(Some(&hop), "SendStreamingMessage", text_message("queued"));
    let opening = s.next().expect("first event");
    assert_eq!(opening["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    h.rpc(Some(&hop), "CancelTask", json!({"id": opening["result"]["task"]["id"]}));
    let rest = s.rest();
    let end = &rest.last().expect("a terminal event")["result"]["statusUpdate"];
    assert_eq!(end["status"]["state"], "TASK_STATE_CANCELED", "{rest:?}");
}

#[test]
fn every_json_rpc_error_a_door_emits_and_the_http_fallbacks() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let a = Some(op.as_str());
    let json_headers = [
        ("content-type", "application/json"),
        ("A2A-Version", "1.0"),
        ("authorization", &op),
    ];

    // -32700, -32600: the request as a whole.
    for (body, id) in [("{", "null"), ("nul", "null")] {
        assert_rpc(&d.post(a, &[], body), &plain_error(id, -32700, "Parse error"));
    }
    for (body, id) in [
        ("[]", "null"),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#, "null"),
        (r#"{"jsonrpc":"2.0","method":"GetTask"}"#, "null"),
        (r#"{"jsonrpc":"2.0","id":true,"method":"GetTask"}"#, "null"),
        (r#"{"jsonrpc":"1.0","id":7,"method":"GetTask"}"#, "7"),
        (r#"{"jsonrpc":"2.0","id":"x","method":5}"#, r#""x""#),
    ] {
        assert_rpc(&d.post(a, &[], body), &plain_error(id, -32600, "Invalid Request"));
    }

    // -32009: A2A-Version missing, wrong, or twice (checked before the method is even looked at).
    let version = |requested: &str| {
        a2a_error(
            "1",
            -32009,
            "A2A protocol version not supported",
            "VERSION_NOT_SUPPORTED",
            &format!(r#"{{"requested":"{requested}","supported":"1.0"}}"#),
        )
    };
    let get = r#"{"id":1,"jsonrpc":"2.0","method":"GetTask","params":{"id":"tsk_x"}}"#;
    let h = d.post_bare(&[("content-type", "application/json"), ("authorization", &op)], get);
    assert_rpc(&h, &version(""));
    for v in ["1.1", "0.3", "1.0.x"] {
        let h = d.post_bare(&[json_headers[0], ("A2A-Version", v), json_headers[2]], get);
        assert_rpc(&h, &version(v));
    }
    let nosuch = r#"{"id":1,"jsonrpc":"2.0","method":"NoSuchMethod","params":{}}"#;
    let h = d.post_bare(&[json_headers[0], ("A2A-Version", "2.0"), json_headers[2]], nosuch);
    assert_rpc(&h, &version("2.0"));
    let h = d.post_bare(&[json_headers[0], ("A2A-Version", "1.0.3"), json_headers[2]], get);
    assert_rpc(&h, &not_found("tsk_x"));
    let twice = format!(
        "POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\nauthorization: {op}\r\nA2A-Version: 1.0\r\nA2A-Version: 1.0\r\ncontent-length: {}\r\n\r\n{get}",
        get.len()
    );
    assert_eq!(d.raw(&twice), (200, version("1.0")));

    // -32601: method resolution.
    for m in [
        "NoSuchMethod",
        "message/send",
        "sendMessage",
        "murmur.WatchSession",
        "murmur.StopSession",
    ] {
        assert_rpc(&d.call(a, m, json!({})), &plain_error("1", -32601, "Method not found"));
    }
    // The push-notification methods are served: a config names its task.
    for m in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        assert_eq!(d.call(a, m, json!({})).json()["error"]["code"], -32602, "{m}");
    }

    // -32602: params.
    let invalid = plain_error("1", -32602, "Invalid params");
    for (m, params) in [
        ("GetTask", json!([1])),
        ("GetTask", json!({})),
        ("GetTask", json!({"id": 5})),
        ("CancelTask", json!({})),
        ("SubscribeToTask", json!("x")),
        ("SendMessage", json!({"message": {"parts": [{"text": "a"}]}})),
        ("SendMessage", json!({"message": {"messageId": "m", "parts": []}})),
    ] {
        assert_rpc(&d.call(a, m, params.clone()), &invalid);
    }
    // A ListTasks parameter is named (A2A v1.0 §3.3.2 "Validation Errors").
    let e = d.rpc(a, "ListTasks", json!({"includeArtifacts": 1}))["error"].clone();
    assert_eq!(
        (&e["code"], &e["message"], &e["data"][0]["fieldViolations"][0]["field"]),
        (&json!(-32602), &json!("Invalid params"), &json!("includeArtifacts"))
    );

    // -32001, -32004, -32005.
    assert_rpc(&d.call(a, "GetTask", json!({"id": "tsk_nope"})), &not_found("tsk_nope"));
    // A message naming a task this door does not know (A2A v1.0 §3.1.2 errors).
    let with_task = json!({"message": {"messageId": "m", "taskId": "tsk_earlier", "parts": [{"text": "a"}]}});
    assert_rpc(&d.call(a, "SendMessage", with_task), &not_found("tsk_earlier"));
    let content = |metadata: &str| {
        a2a_error(
            "1",
            -32005,
            "Incompatible content types: a media type is not supported",
            "CONTENT_TYPE_NOT_SUPPORTED",
            metadata,
        )
    };
    let markdown = json!({"message": {"messageId": "m", "parts": [{"text": "# a", "mediaType": "text/markdown"}]}});
    assert_rpc(
        &d.call(a, "SendMessage", markdown),
        &content(r#"{"mediaType":"text/markdown"}"#),
    );
    let file = json!({"message": {"messageId": "m", "parts": [{"url": "https://x/y.png", "mediaType": "image/png"}]}});
    assert_rpc(
        &d.call(a, "SendStreamingMessage", file),
        &content(r#"{"mediaType":"image/png"}"#),
    );
    let total = d.rpc(a, "ListTasks", json!({}))["result"]["totalSize"].clone();
    assert_eq!(total, 0, "no refused request made a task");

    // Not JSON-RPC at all: 404 with an empty body; too large: 413.
    let empty = |h: Http| {
        assert_eq!(h.content_length.as_deref(), Some("0"), "{}", h.status);
        (h.status, h.body)
    };
    assert_eq!(empty(d.get("/", a)), (404, String::new()));
    assert_eq!(empty(d.get("/.well-known/other.json", a)), (404, String::new()));
    assert_eq!(empty(d.get("/resources/anything", a)), (404, String::new()));
    let rpc_body = r#"{"id":1,"jsonrpc":"2.0","method":"ListTasks","params":{}}"#;
    let h = agent()
        .post(&d.url("/tasks"))
        .set("content-type", "application/json")
        .set("authorization", &op);
    assert_eq!(empty(response(h.send_string(rpc_body))), (404, String::new()));
    let h = d.post_bare(
        &[
            ("content-type", "text/plain"),
            ("A2A-Version", "1.0"),
            ("authorization", &op),
        ],
        rpc_body,
    );
    assert_eq!(empty(h), (404, String::new()));
    assert_eq!(empty(d.post(a, &[], "")), (404, String::new()));
    let h = agent()
        .put(&d.url("/"))
        .set("content-type", "application/json")
        .set("authorization", &op);
    assert_eq!(empty(response(h.send_string(rpc_body))), (404, String::new()));
    // `application/json; charset=utf-8` is JSON too.
    let h = d.post_bare(
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("A2A-Version", "1.0"),
            ("authorization", &op),
        ],
        rpc_body,
    );
    assert_eq!(h.status, 200, "{}", h.body);
    let big = format!(
        "POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\nauthorization: {op}\r\nA2A-Version: 1.0\r\ncontent-length: {}\r\n\r\n{{",
        8 * 1024 * 1024 + 1
    );
    assert_eq!(d.raw(&big).0, 413);
    // Also when the length is not declared up front.
    let mut chunked = format!(
        "POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\nauthorization: {op}\r\nA2A-Version: 1.0\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let chunk = " ".repeat(1 << 20);
    for _ in 0..9 {
        chunked.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    chunked.push_str("0\r\n\r\n");
    assert_eq!(d.raw(&chunked).0, 413);
    // A null id is an id, echoed.
    let null_id = r#"{"id":null,"jsonrpc":"2.0","method":"GetTask","params":{"id":"tsk_q"}}"#;
    let want = a2a_error(
        "null",
        -32001,
        "Task not found",
        "TASK_NOT_FOUND",
        r#"{"taskId":"tsk_q"}"#,
    );
    assert_rpc(&d.post(a, &[], null_id), &want);
}

#[test]
fn a_door_that_takes_no_tasks() {
    let sb = Sandbox::new();
    install(
        &sb,
        "echo",
        "shut",
        "lifecycle:\n  task_acceptance: none\n  after_task: exit\n",
    );
    // The idle wait for a first task would end the session; this test outlasts nothing near it.
    let d = Door::start(&sb, "shut", &[("MURMUR_A2A_TIMEOUT_SECS", "300")]);
    let card = d.get("/.well-known/agent-card.json", None).json();
    assert_eq!(
        card["capabilities"]["extensions"][0]["params"],
        json!({"methods": [
            "GetTask",
            "ListTasks",
            "CancelTask",
            "CreateTaskPushNotificationConfig",
            "GetTaskPushNotificationConfig",
            "ListTaskPushNotificationConfigs",
            "DeleteTaskPushNotificationConfig"
        ], "peerTasks": false})
    );
    for m in ["SendMessage", "SendStreamingMessage", "SubscribeToTask"] {
        let h = d.call(None, m, text_message("x"));
        assert_rpc(&h, &unsupported(&format!(r#"{{"method":"{m}"}}"#)));
    }
    assert_rpc(&d.call(None, "GetTask", json!({"id": "tsk_a"})), &not_found("tsk_a"));
    let l = d.rpc(None, "ListTasks", json!({}));
    assert_eq!(
        l["result"],
        json!({"nextPageToken": "", "pageSize": 50, "tasks": [], "totalSize": 0})
    );
}

#[test]
fn a_session_that_winds_down_ends_every_open_request() {
    let sb = Sandbox::new();
    install(&sb, "spin", "held", &format!("{}{AUTH}", serve(1)));
    let mut d = Door::start(&sb, "held", &[]);
    let op = d.op();
    let running = d.send(Some(&op), "a", true)["id"].as_str().expect("id").to_string();
    d.wait_state(Some(&op), &running, "TASK_STATE_WORKING");
    // Open requests: the queued task's SendStreamingMessage stream and the running task's
    // SubscribeToTask stream.
    let mut queued = d.stream(Some(&op), "SendStreamingMessage", text_message("b"));
    let opening = queued.next().expect("first event");
    assert_eq!(opening["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    let mut live = d.stream(Some(&op), "SubscribeToTask", json!({ "id": running }));
    assert_eq!(
        live.next().expect("first event")["result"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );

    let asked = Instant::now();
    d.terminate();
    let queued_end = queued.rest();
    let end = &queued_end.last().expect("an end event")["result"]["statusUpdate"]["status"];
    assert_eq!(end["state"], "TASK_STATE_REJECTED", "{queued_end:?}");
    assert_eq!(
        end["message"]["parts"][0]["text"],
        "task rejected: the session is closing"
    );
    let live_end = live.rest();
    let end = &live_end.last().expect("an end event")["result"]["statusUpdate"]["status"];
    assert_eq!(end["state"], "TASK_STATE_CANCELED", "{live_end:?}");
    assert_eq!(d.wait(Duration::from_secs(15)), Some(1), "{}", d.stderr());
    assert!(asked.elapsed() < Duration::from_secs(10), "{:?}", asked.elapsed());
    assert!(d.stderr().contains("error[E-RUN-040]"), "{}", d.stderr());
    // The door is gone with the session.
    assert!(TcpStream::connect(d.url("").trim_start_matches("http://")).is_err());
}

// ---------------------------------------------------------------------------------------------
// Authentication

#[test]
fn every_authentication_case_at_a_door_in_no_formation() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let other = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let token = op.strip_prefix("Bearer ").expect("bearer").to_string();
    let realm = "local/echo";
    let key = Key::new(1);

    // No header at all.
    let h = d.call(None, "ListTasks", json!({}));
    assert_refusal(&h, 401, UNAUTHENTICATED, Some(r#"Bearer realm="local/echo""#));
    // Authentication comes before everything else of the pipeline.
    assert_refusal(
        &d.post(None, &[], "{"),
        401,
        UNAUTHENTICATED,
        Some(r#"Bearer realm="local/echo""#),
    );
    assert_eq!(d.get("/nowhere", None).status, 401);
    let peer = d.post(None, &[("x-murmur-task-origin", "peer")], "{");
    assert_eq!((peer.status, peer.body.as_str()), (401, UNAUTHENTICATED));

    // Malformed, forged or altered: one body for all.
    // A payload of our own under the genuine MAC.
    let parts: Vec<&str> = token.split('.').collect();
    let fewer = mur::token::b64(br#"{"credential":"operator","scopes":["GetTask"]}"#);
    let payload_swapped = format!("{}.{fewer}.{}", parts[0], parts[2]);
    let invalid = [
        format!("Basic {token}"),
        token.clone(),
        "Bearer".to_string(),
        format!("Bearer {token} extra"),
        format!("Bearer {}", altered(&token)),
        format!("Bearer {payload_swapped}"),
        // A genuine operator token of another session.
        other.op(),
        "Bearer mdt1.e30.AAAA".to_string(),
        // Any formation token at a door in no formation, however genuine.
        format!("Bearer {}", key.mint(FRM, "planner", "echo")),
        "Bearer mft1.abc.def".to_string(),
    ];
    for auth in &invalid {
        assert_invalid(&d.call(Some(auth), "ListTasks", json!({})), realm);
        // The refusal does not depend on the method or the body.
        assert_invalid(&d.post(Some(auth), &[], "{"), realm);
    }
    // Two Authorization headers, even both genuine.
    let body = r#"{"id":1,"jsonrpc":"2.0","method":"ListTasks","params":{}}"#;
    let twice = format!(
        "POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\nA2A-Version: 1.0\r\nauthorization: {op}\r\nauthorization: {op}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(d.raw(&twice), (401, INVALID_TOKEN.to_string()));

    // The genuine token, with the scheme in any case; still genuine after refusals.
    for auth in [op.clone(), format!("bEaReR {token}"), format!("bearer {token}")] {
        assert_eq!(
            d.rpc(Some(&auth), "ListTasks", json!({}))["result"]["totalSize"],
            0,
            "{auth}"
        );
    }
    assert!(!d.stderr().contains(&token), "the token never reaches stderr");

    // A session that names a formation but was handed no channel is a door in no formation:
    // it refuses every formation token, that formation's included.
    let child = Door::start(&sb, "echo", &[("MURMUR_FORMATION_ID", FRM)]);
    assert_eq!(child.ready["formation_id"], FRM);
    for to in ["echo", "coder"] {
        let auth = format!("Bearer {}", key.mint(FRM, "planner", to));
        assert_invalid(&child.call(Some(&auth), "ListTasks", json!({})), realm);
    }
    assert_eq!(
        child.rpc(Some(&child.op()), "ListTasks", json!({}))["result"]["totalSize"],
        0
    );
}

#[test]
fn formation_tokens_at_a_member_the_test_launched() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let key = Key::new(2);
    let member = Member {
        key: &key,
        formation: FRM,
        name: "coder",
    };
    let d = Door::member(&sb, "echo", &member);
    let realm = "local/echo";
    assert_eq!(d.ready["formation_id"], FRM);
    let record = sb.home().join(format!(".murmur/running/{}.json", d.session_id()));
    let record: Value = serde_json::from_str(&std::fs::read_to_string(record).expect("running record")).expect("json");
    assert_eq!(
        (&record["formation_member"], &record["formation_lifeline"]),
        (&json!("coder"), &json!(true))
    );
    assert!(!d.stderr().contains("W-RUN-007"), "{}", d.stderr());
    // The running record (0600) holds the operator token the readiness line gave.
    let op = d.op();
    assert_eq!(
        record["door_token"].as_str().map(|t| format!("Bearer {t}")),
        Some(op.clone())
    );

    let planner_token = key.mint(FRM, "planner", "coder");
    // The runtime's own verifier agrees with this independent minting of
    // docs/reference/door.md#formation-tokens.
    let vk = mur::token::VerifyKey::from_b64(&key.verify_key()).expect("verify key");
    assert_eq!(
        mur::token::verify(&vk, &planner_token, FRM, "coder"),
        mur::token::Verdict::Member { from: "planner".into() }
    );
    let planner = format!("Bearer {planner_token}");
    let reviewer = format!("Bearer {}", key.mint(FRM, "reviewer", "coder"));

    // Served as member:planner within its five scopes.
    let mine = d.send(Some(&planner), "from planner", false);
    assert_eq!(mine["artifacts"][0]["parts"][0]["text"], "from planner", "{mine}");
    let mine_id = mine["id"].as_str().expect("id").to_string();
    assert_eq!(received(&d, &mine_id)["caller_member"], "planner");
    let theirs = d.send(Some(&reviewer), "from reviewer", false);
    let theirs_id = theirs["id"].as_str().expect("id").to_string();
    assert_eq!(received(&d, &theirs_id)["caller_member"], "reviewer");
    let ops = d.send(Some(&op), "from operator", false);
    let ops_id = ops["id"].as_str().expect("id").to_string();
    assert_eq!(received(&d, &ops_id).get("caller_member"), None);

    // Each member sees only the tasks it started; the operator sees all.
    assert_eq!(d.task(Some(&planner), &mine_id)["id"], json!(mine_id));
    for hidden in [&theirs_id, &ops_id] {
        assert_rpc(
            &d.call(Some(&planner), "GetTask", json!({"id": hidden})),
            &not_found(hidden),
        );
        // Not -32002, although the task is terminal: it is invisible, so nothing is cancelled.
        assert_rpc(
            &d.call(Some(&planner), "CancelTask", json!({"id": hidden})),
            &not_found(hidden),
        );
        assert_rpc(
            &d.call(Some(&planner), "SubscribeToTask", json!({"id": hidden})),
            &not_found(hidden),
        );
    }
    assert_rpc(
        &d.call(Some(&planner), "CancelTask", json!({"id": mine_id})),
        &not_cancelable(&mine_id),
    );
    let listed = |auth: &str| -> (Value, Vec<Value>) {
        let r = d.rpc(Some(auth), "ListTasks", json!({}))["result"].clone();
        let ids = r["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["id"].clone())
            .collect();
        (r["totalSize"].clone(), ids)
    };
    assert_eq!(listed(&planner), (json!(1), vec![json!(mine_id)]));
    assert_eq!(listed(&reviewer), (json!(1), vec![json!(theirs_id)]));
    assert_eq!(listed(&op).0, json!(3));
    assert_eq!(d.task(Some(&op), &mine_id)["id"], json!(mine_id));

    // A peer task is served here: this capsule consents.
    let peer_task = d.post(
        Some(&planner),
        &[("x-murmur-task-origin", "peer"), ("x-murmur-task-trust", "trusted")],
        &json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": text_message("as a peer")}).to_string(),
    );
    assert_eq!(
        peer_task.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        peer_task.body
    );

    // Any valid token reaches the extended card.
    let card = d.rpc(Some(&planner), "GetExtendedAgentCard", json!({}));
    assert_eq!(
        card["result"]["capabilities"]["extensions"][1]["params"]["sessionId"],
        json!(d.session_id())
    );

    // Outside the five scopes: 403 naming the credential and the scope.
    for m in [
        "SendStreamingMessage",
        "murmur.WatchSession",
        "murmur.StopSession",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        assert_out_of_scope(
            &d.call(Some(&planner), m, text_message("x")),
            realm,
            "member:planner",
            m,
        );
    }
    let h = d.get("/resources/files/a.txt", Some(&planner));
    assert_out_of_scope(&h, realm, "member:planner", "resources/files");
    // Order: JSON-RPC steps 7–10 come before the scope, the params after it.
    assert_rpc(
        &d.post(Some(&planner), &[], "{"),
        &plain_error("null", -32700, "Parse error"),
    );
    assert_rpc(
        &d.call(Some(&planner), "NoSuchMethod", json!({})),
        &plain_error("1", -32601, "Method not found"),
    );
    let stream_body = r#"{"id":1,"jsonrpc":"2.0","method":"SendStreamingMessage","params":[]}"#;
    let h = d.post_bare(
        &[("content-type", "application/json"), ("authorization", &planner)],
        stream_body,
    );
    assert_eq!(h.json()["error"]["code"], -32009);
    assert_out_of_scope(
        &d.post(Some(&planner), &[], stream_body),
        realm,
        "member:planner",
        "SendStreamingMessage",
    );

    // A genuine token for another member's door: 403 naming only the member that presented it.
    let elsewhere = format!("Bearer {}", key.mint(FRM, "planner", "reviewer"));
    for h in [
        d.call(Some(&elsewhere), "SendMessage", text_message("x")),
        d.post(Some(&elsewhere), &[], "{"),
    ] {
        assert_refusal(
            &h,
            403,
            r#"{"error":"not_permitted","message":"member 'planner' may not call this capsule"}"#,
            Some(r#"Bearer realm="local/echo", error="insufficient_scope""#),
        );
    }

    // Forged, altered, another formation's: 401, the same body as any invalid token.
    let stranger = SigningKey::generate().expect("key");
    let parts: Vec<&str> = planner_token.split('.').collect();
    let to_reviewer: Vec<String> = key
        .mint(FRM, "planner", "reviewer")
        .split('.')
        .map(str::to_string)
        .collect();
    for bad in [
        stranger.mint(FRM, "planner", "coder"),
        altered(&planner_token),
        altered(&key.mint(FRM, "planner", "reviewer")),
        // A genuine payload under another edge's signature.
        format!("{}.{}.{}", parts[0], parts[1], to_reviewer[2]),
        key.mint(OTHER_FRM, "planner", "coder"),
        stranger.mint(OTHER_FRM, "planner", "coder"),
        format!("{}.{}", parts[0], parts[1]),
        format!("{planner_token}.x"),
        format!("mft2.{}.{}", parts[1], parts[2]),
    ] {
        assert_invalid(&d.call(Some(&format!("Bearer {bad}")), "ListTasks", json!({})), realm);
    }
    // Genuinely signed payloads that are not exactly {formation, from, to} of strings with member
    // names: invalid too.
    for payload in [
        format!(r#"{{"formation":"{FRM}","from":"planner","to":"coder","scopes":["SendStreamingMessage"]}}"#),
        format!(r#"{{"formation":"{FRM}","from":"planner"}}"#),
        format!(r#"{{"formation":"{FRM}","from":"Planner","to":"coder"}}"#),
        format!(r#"{{"formation":"{FRM}","from":"planner","to":"coder","from":"reviewer"}}"#),
        format!(r#"{{"formation":"{FRM}","from":1,"to":"coder"}}"#),
        format!(r#"["{FRM}","planner","coder"]"#),
        "not json".to_string(),
    ] {
        let h = d.call(Some(&format!("Bearer {}", key.sign(&payload))), "ListTasks", json!({}));
        assert_invalid(&h, realm);
    }
    // The signature covers the bytes sent, so key order and spacing are the signer's business.
    for payload in [
        format!(r#"{{"to":"coder","from":"planner","formation":"{FRM}"}}"#),
        format!(r#"{{ "formation": "{FRM}", "from": "planner", "to": "coder" }}"#),
    ] {
        let h = d.call(Some(&format!("Bearer {}", key.sign(&payload))), "ListTasks", json!({}));
        assert_eq!(
            (h.status, &h.json()["result"]["totalSize"]),
            (200, &json!(2)),
            "{payload}: {}",
            h.body
        );
    }
    let h = d.call(
        Some(&format!(
            "Bearer {}",
            key.sign(&format!(r#"{{"to":"reviewer","from":"planner","formation":"{FRM}"}}"#))
        )),
        "ListTasks",
        json!({}),
    );
    assert_eq!(
        (h.status, h.json()["error"].clone()),
        (403, json!("not_permitted")),
        "{}",
        h.body
    );
    // Refusals change nothing for the genuine token.
    assert_eq!(listed(&planner).0, json!(2));
    // No token reaches the records (trace, logs, results) or stderr.
    let op_token = op.trim_start_matches("Bearer ");
    for file in files_under(&d.records_dir()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&planner_token) && !text.contains(op_token),
            "{} holds a token",
            file.display()
        );
    }
    assert!(!d.stderr().contains(&planner_token) && !d.stderr().contains(op_token));
}

#[test]
fn formation_callers_see_and_cancel_only_their_own_live_tasks() {
    let sb = Sandbox::new();
    install(&sb, "spin", "runner", &format!("{}{AUTH}{PEERS}", serve(4)));
    let key = Key::new(3);
    let d = Door::member(
        &sb,
        "runner",
        &Member {
            key: &key,
            formation: FRM,
            name: "runner",
        },
    );
    let op = d.op();
    let planner = format!("Bearer {}", key.mint(FRM, "planner", "runner"));
    let reviewer = format!("Bearer {}", key.mint(FRM, "reviewer", "runner"));

    let a = d.send(Some(&op), "a", true)["id"].as_str().expect("id").to_string();
    d.wait_state(Some(&op), &a, "TASK_STATE_WORKING");
    let b = d.send(Some(&planner), "b", true)["id"]
        .as_str()
        .expect("id")
        .to_string();
    let c = d.send(Some(&reviewer), "c", true)["id"]
        .as_str()
        .expect("id")
        .to_string();

    // Another caller's live tasks are unknown ids: nothing is cancelled, nothing followed.
    for other in [&a, &c] {
        assert_rpc(
            &d.call(Some(&planner), "CancelTask", json!({"id": other})),
            &not_found(other),
        );
        assert_rpc(
            &d.call(Some(&planner), "SubscribeToTask", json!({"id": other})),
            &not_found(other),
        );
        assert_rpc(
            &d.call(Some(&planner), "GetTask", json!({"id": other})),
            &not_found(other),
        );
    }
    assert_eq!(d.task(Some(&op), &a)["status"]["state"], "TASK_STATE_WORKING");
    assert_eq!(d.task(Some(&op), &c)["status"]["state"], "TASK_STATE_SUBMITTED");
    let working = d.rpc(Some(&planner), "ListTasks", json!({"status": "TASK_STATE_WORKING"}));
    assert_eq!(
        working["result"]["totalSize"], 0,
        "the operator's running task is invisible: {working}"
    );
    let total = |auth: &str| d.rpc(Some(auth), "ListTasks", json!({}))["result"]["totalSize"].clone();
    assert_eq!(
        (total(&planner), total(&reviewer), total(&op)),
        (json!(1), json!(1), json!(3))
    );

    // Its own live task: followed with SubscribeToTask and cancelled with CancelTask.
    let mut sub = d.stream(Some(&planner), "SubscribeToTask", json!({"id": b}));
    let opening = sub.next().expect("first event");
    assert_eq!(
        (
            &opening["result"]["task"]["id"],
            &opening["result"]["task"]["status"]["state"]
        ),
        (&json!(b), &json!("TASK_STATE_SUBMITTED"))
    );
    let r = d.rpc(Some(&planner), "CancelTask", json!({"id": b}));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED");
    let rest = sub.rest();
    assert_eq!(
        rest.last().expect("end")["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert_eq!(d.task(Some(&op), &a)["status"]["state"], "TASK_STATE_WORKING");
    assert_eq!(d.task(Some(&op), &c)["status"]["state"], "TASK_STATE_SUBMITTED");
}

/// A real `mur run --roster --json` in its own process group; SIGKILLed (group and all) on drop.
struct Launch(Child);

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.wait();
    }
}

#[test]
fn the_doors_of_a_real_formation_refuse_tokens_its_launcher_did_not_issue() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let dir = sb.path("formation");
    let roster = "roster_version: 1\nmembers:\n  - name: lead\n    capsule: local/echo\n    version: 0.1.0\n    entry: true\n  - name: worker\n    capsule: local/echo\n    version: 0.1.0\nreachability:\n  - from: lead\n    to: [worker]\n";
    std::fs::write(dir.join("roster.yaml"), roster).expect("roster");
    let mut cmd = sb.mur(&dir);
    cmd.args(["run", "--roster", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let mut launch = Launch(cmd.spawn().expect("spawn launcher"));
    let mut lines = BufReader::new(launch.0.stdout.take().expect("stdout")).lines();
    let mut line = || -> Value {
        let l = lines.next().expect("a stdout line").expect("read");
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}"))
    };
    let formation = line();
    let entry = line();
    let frm = formation["formation_id"].as_str().expect("formation id").to_string();
    assert_eq!(entry["formation_id"], json!(frm));
    assert_eq!(entry.get("tokens"), None, "the entry's readiness line carries no token");
    let peer = &formation["peers"][0];
    assert_eq!(peer["name"], "worker");
    // The operator tokens are in the members' 0600 running records, as for any session.
    let running = |ses: &Value| -> Value {
        let path = sb
            .home()
            .join(format!(".murmur/running/{}.json", ses.as_str().expect("session id")));
        serde_json::from_str(&std::fs::read_to_string(path).expect("running record")).expect("json")
    };
    let worker_rec = running(&peer["session_id"]);
    let lead_rec = running(&entry["session_id"]);
    assert_eq!(
        (&worker_rec["formation_member"], &lead_rec["formation_member"]),
        (&json!("worker"), &json!("lead"))
    );

    let stranger = SigningKey::generate().expect("key");
    let mine = Key::new(9);
    for (rec, name, url) in [
        (
            &worker_rec,
            "worker",
            peer["url"]
                .as_str()
                .expect("url")
                .trim_start_matches("http://")
                .to_string(),
        ),
        (&lead_rec, "lead", entry["url"].as_str().expect("url").to_string()),
    ] {
        let c = Client {
            addr: url.replacen("localhost", "127.0.0.1", 1),
        };
        let op = format!("Bearer {}", rec["door_token"].as_str().expect("door token"));
        let h = c.call(None, "ListTasks", json!({}));
        assert_refusal(&h, 401, UNAUTHENTICATED, Some(r#"Bearer realm="local/echo""#));
        // Tokens for this very formation and door, but not signed by its launcher's key.
        for forged in [
            stranger.mint(&frm, "lead", name),
            mine.mint(&frm, "lead", name),
            mine.mint(&frm, "worker", name),
        ] {
            assert_invalid(
                &c.call(Some(&format!("Bearer {forged}")), "ListTasks", json!({})),
                "local/echo",
            );
        }
        let card = c.rpc(Some(&op), "GetExtendedAgentCard", json!({}));
        assert_eq!(
            card["result"]["capabilities"]["extensions"][1]["params"]["sessionId"],
            rec["session_id"]
        );
        let t = c.send(Some(&op), &format!("to {name}"), false);
        assert_eq!(
            t["artifacts"][0]["parts"][0]["text"],
            json!(format!("to {name}")),
            "{t}"
        );
    }

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(launch.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let mut code = None;
    let ended = wait_until(Duration::from_secs(40), || {
        code = launch.0.try_wait().ok().flatten().and_then(|s| s.code());
        code.is_some()
    });
    assert!(ended.is_some(), "the launcher did not end after SIGTERM");
    assert_eq!(code, Some(143));
}

#[test]
fn a_door_that_refuses_peers_answers_every_peer_request_alike() {
    let sb = Sandbox::new();
    install(&sb, "echo", "gate", &format!("{}{AUTH}", serve(1)));
    install(&sb, "echo", "open", &serve(1));
    let key = Key::new(4);
    let d = Door::member(
        &sb,
        "gate",
        &Member {
            key: &key,
            formation: FRM,
            name: "gate",
        },
    );
    let planner = format!("Bearer {}", key.mint(FRM, "planner", "gate"));
    let op = d.op();
    let send = json!({"id": 1, "jsonrpc": "2.0", "method": "SendMessage", "params": text_message("x")}).to_string();
    let peer = [("x-murmur-task-origin", "peer")];
    let trusted = [("x-murmur-task-origin", "peer"), ("x-murmur-task-trust", "trusted")];

    // After authentication, whoever asks and whatever the body: the same bytes.
    for (auth, headers, body) in [
        (&planner, &peer[..], send.as_str()),
        (&planner, &trusted[..], send.as_str()),
        (&op, &peer[..], send.as_str()),
        (&planner, &peer[..], "{"),
        (
            &planner,
            &peer[..],
            r#"{"id":1,"jsonrpc":"2.0","method":"GetTask","params":{"id":"tsk_x"}}"#,
        ),
    ] {
        assert_refusal(&d.post(Some(auth), headers, body), 403, PEER_NOT_ACCEPTED, None);
    }
    // Paths outside JSON-RPC too; only the card comes before peer consent.
    let h = d.get_with("/resources/files/x", &[peer[0], ("authorization", &planner)]);
    assert_refusal(&h, 403, PEER_NOT_ACCEPTED, None);
    let h = d.get_with("/nowhere", &[peer[0], ("authorization", &op)]);
    assert_refusal(&h, 403, PEER_NOT_ACCEPTED, None);
    let card = d.get_with("/.well-known/agent-card.json", &peer);
    assert_eq!(card.status, 200, "{}", card.body);
    // Authentication still comes first.
    let h = d.post(None, &peer, &send);
    assert_refusal(&h, 401, UNAUTHENTICATED, Some(r#"Bearer realm="local/gate""#));
    assert_invalid(&d.post(Some("Bearer mft1.x.y"), &peer, &send), "local/gate");
    // Other origins are served.
    for origin in [None, Some("event"), Some("completion"), Some("Peer")] {
        let headers: Vec<(&str, &str)> = origin.map(|o| ("x-murmur-task-origin", o)).into_iter().collect();
        let h = d.post(Some(&planner), &headers, &send);
        assert_eq!(
            h.json()["result"]["task"]["status"]["state"],
            "TASK_STATE_COMPLETED",
            "{origin:?}: {}",
            h.body
        );
    }

    // A public door that does not consent refuses peer tasks the same way.
    let p = Door::start(&sb, "open", &[]);
    assert_refusal(&p.post(None, &peer, &send), 403, PEER_NOT_ACCEPTED, None);
    assert_refusal(
        &p.post(Some("Bearer anything"), &peer, &send),
        403,
        PEER_NOT_ACCEPTED,
        None,
    );
    assert_eq!(p.send(None, "event", false)["status"]["state"], "TASK_STATE_COMPLETED");
}

// ---------------------------------------------------------------------------------------------
// The official A2A SDK

use crate::support::pins::A2A_PY as A2A_SDK;

#[test]
fn official_a2a_sdk_client_interoperates() {
    let py = crate::support::python::python_with(A2A_SDK, "a2a.client, a2a.types.a2a_pb2, httpx");

    let sb = Sandbox::new();
    sb.install_actor("echo");
    install(&sb, "spin", "held", &format!("{}{AUTH}", serve(4)));
    let echo = Door::start(&sb, "echo", &[]);
    let held = Door::start(&sb, "held", &[]);
    let token = |d: &Door| d.op().trim_start_matches("Bearer ").to_string();
    let script = repo_root().join("tests/interop/a2a_sdk_check.py");
    let out = Command::new(&py)
        .arg(&script)
        .args([format!("http://{}", echo.local_url()), token(&echo)])
        .args([format!("http://{}", held.local_url()), token(&held)])
        .stdin(Stdio::null())
        .output()
        .expect("run the SDK check");
    let (so, se) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a2a_sdk_check.py failed\n--- stdout\n{so}\n--- stderr\n{se}"
    );
    assert!(so.contains("checks passed"), "{so}");

    // What the SDK did is what the door saw.
    // Two, then a follow-up in the second one's context; the refused message made none.
    let tasks = echo.rpc(Some(&echo.op()), "ListTasks", json!({}));
    assert_eq!(tasks["result"]["totalSize"], 3, "{tasks}");
    let tasks = held.rpc(Some(&held.op()), "ListTasks", json!({"status": "TASK_STATE_CANCELED"}));
    assert_eq!(tasks["result"]["totalSize"], 3, "{tasks}");
}

#[test]
fn the_door_keeps_serving_while_requests_come_from_several_threads() {
    let sb = Sandbox::new();
    sb.install_actor("echo");
    let d = Door::start(&sb, "echo", &[]);
    let op = d.op();
    let started = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let (c, op) = (d.client(), op.clone());
            std::thread::spawn(move || {
                (0..5)
                    .map(|j| c.send(Some(&op), &format!("{i}-{j}"), false)["artifacts"][0]["parts"][0]["text"].clone())
                    .collect::<Vec<Value>>()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let answers = h.join().expect("thread");
        let want: Vec<Value> = (0..5).map(|j| json!(format!("{i}-{j}"))).collect();
        assert_eq!(answers, want);
    }
    assert!(started.elapsed() < SETTLE, "{:?}", started.elapsed());
    assert_eq!(d.rpc(Some(&op), "ListTasks", json!({}))["result"]["totalSize"], 20);
}

/// A card's bytes without its `signatures` member (A2A v1.0 §8.4: they sign the rest), which
/// differ per door as each signs with a key of its own.
fn strip_signatures(card: &str) -> String {
    let Some(at) = card.find(r#""signatures":["#) else {
        return card.to_string();
    };
    let end = card[at..].find(']').map_or(card.len(), |e| at + e + 1);
    let end = if card[end..].starts_with(',') { end + 1 } else { end };
    format!("{}{}", &card[..at], &card[end..])
}
