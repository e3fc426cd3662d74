//! `mur send ID TEXT`: a task to a running session's door (`ses_…`) or a formation's entry
//! (`frm_…`), followed with SendStreamingMessage; the answer is printed as it arrives
//! (docs/reference/cli.md#mur-send).
//!
//! An A2A client of our own door, blocking and bounded: the door is found through its running
//! record (which holds the operator token, 0600), dialled at 127.0.0.1 (never a resolved
//! `localhost`), and the token goes only to a listener this user serves (`loopback`). The token
//! is never printed, nor put in argv or the environment. Every byte the door sends back is
//! bounded: the head (`wire::http1`), each event (`wire::sse`), the whole stream.
//!
//! `mur answer` (`cli/answer.rs`) is the same client: it dials, sends and follows through the
//! functions here, and reads what the door says in its own [`Voice`].

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::{Outcome, SendArgs};
use crate::diag::{self, Code, Diagnostic, shown};
use crate::ids::{self, IdKind};
use crate::paths::MurHome;
use crate::running::{self, RunningRecord};
use crate::task::CallStatus;
use crate::wire::calls::{Ended, StreamedTask};
use crate::wire::http1::{self, Dechunker, Framing};
use crate::wire::sse::SseReader;

/// A door answers on its loopback port at once; one that does not is not serving.
const CONNECT: Duration = Duration::from_secs(5);
/// The stream's head comes as soon as the door admitted the task.
const HEAD_WAIT: Duration = Duration::from_secs(10);
/// How often a quiet stream looks whether the session still runs (a task may be quiet for long).
const LIVENESS_POLL: Duration = Duration::from_millis(500);
/// The whole stream, at most: an answer streamed in many chunks still ends.
const MAX_STREAM: u64 = 64 << 20;
/// A refusal's body (HTTP errors, a JSON-RPC error sent as JSON), at most.
const MAX_REFUSAL: usize = 64 << 10;

/// The exit status of a command whose task now waits for input (its question is on stderr).
pub(super) const ASKS: u8 = 3;

/// How a command speaks of what the door answers: its name on stderr, what it sent, and the codes
/// of a refusal and of a task that ended other than completed.
pub(super) struct Voice {
    pub tag: &'static str,
    pub sent: &'static str,
    pub refused: Code,
    pub ended: Code,
}

const SEND: Voice = Voice {
    tag: "mur send",
    sent: "task",
    refused: diag::E_SND_004,
    ended: diag::E_SND_004,
};

pub fn run(a: &SendArgs) -> Outcome {
    let home = MurHome::from_env();
    let rec = find_door(&home, &a.id)?;
    let stream = post(&rec, &request_body(&a.text), true)?;
    follow(&rec, stream, &SEND)
}

/// Dials the record's door and sends one JSON-RPC request (`body`), asking for an event stream
/// or a JSON reply.
pub(super) fn post(rec: &RunningRecord, body: &str, stream: bool) -> Result<TcpStream, super::Failure> {
    let mut conn = dial(rec)?;
    let mut request = request_head(rec, body.len(), stream);
    request.extend_from_slice(body.as_bytes());
    conn.write_all(&request).and_then(|()| conn.flush()).map_err(|e| {
        fail(
            diag::E_SND_003,
            format!("the door of {} at {} took no request: {e}", rec.session_id, url(rec)),
        )
    })?;
    Ok(conn)
}

/// A JSON reply to a request sent with [`post`]: its HTTP status and body, at most `max` bytes
/// of it read (a longer body is cut, and `true` says so), within `wait`.
pub(super) fn reply(
    rec: &RunningRecord,
    mut stream: TcpStream,
    max: usize,
    wait: Duration,
) -> Result<(u16, Vec<u8>, bool), super::Failure> {
    let mut reader = Quiet::new(rec);
    let until = Instant::now() + wait;
    let mut pending = Vec::new();
    let (head, at) = loop {
        let Some(bytes) = reader.read(&mut stream, Some(until))? else {
            return Err(fail(
                diag::E_SND_003,
                format!("the door of {} closed the connection without a reply", rec.session_id),
            ));
        };
        pending.extend_from_slice(bytes);
        match http1::head(&pending) {
            Ok(Some(h)) => break h,
            Ok(None) if pending.len() > MAX_REFUSAL => {
                return Err(fail(
                    diag::E_SND_003,
                    format!("the door of {} sent a reply head longer than 64 KiB", rec.session_id),
                ));
            }
            Ok(None) => {}
            Err(m) => {
                return Err(fail(
                    diag::E_SND_003,
                    format!(
                        "the door of {} answered with something that is not HTTP: {}",
                        rec.session_id, m.0
                    ),
                ));
            }
        }
    };
    let mut body = Body::new(head.framing);
    let malformed = |m: http1::Malformed| {
        fail(
            diag::E_SND_003,
            format!("the door of {} sent a malformed body: {}", rec.session_id, m.0),
        )
    };
    let mut out = body.push(&pending[at..]).map_err(malformed)?;
    while out.len() <= max && !body.done() {
        match reader.read(&mut stream, Some(until))? {
            Some(bytes) => out.extend(body.push(bytes).map_err(malformed)?),
            None => break,
        }
    }
    let cut = out.len() > max;
    out.truncate(max);
    Ok((head.status, out, cut))
}

fn fail(code: Code, message: String) -> super::Failure {
    Diagnostic::new(code, message).into()
}

/// The live record whose door takes the task: the session's own, or the formation's entry's.
fn find_door(home: &MurHome, id: &str) -> Result<RunningRecord, super::Failure> {
    let unknown = |m: String| fail(diag::E_SND_001, m);
    let ended = |m: String| fail(diag::E_SND_002, m);
    let live = running::live(home).map_err(|e| unknown(format!("cannot read {}: {e}", home.running().display())))?;
    if id.starts_with(IdKind::Formation.prefix()) {
        ids::check(IdKind::Formation, id)
            .map_err(|e| unknown(format!("'{}' is not a formation id: {e}", shown(id))))?;
        if let Some(r) = live
            .iter()
            .find(|r| r.formation_id.as_deref() == Some(id) && r.formation_entry)
        {
            return Ok(r.clone());
        }
        if live.iter().any(|r| r.formation_id.as_deref() == Some(id)) {
            return Err(ended(format!(
                "formation {id} runs, but its entry member serves no door: it is still starting, or it has ended"
            )));
        }
        if home.formation(id).exists() {
            return Err(ended(format!("formation {id} is not running: it has ended")));
        }
        return Err(unknown(format!("no formation {id} on this machine")));
    }
    ids::check(IdKind::Session, id).map_err(|e| {
        unknown(format!(
            "'{}' is neither a session id nor a formation id: {e}",
            shown(id)
        ))
    })?;
    if let Some(r) = live.into_iter().find(|r| r.session_id == id) {
        return Ok(r);
    }
    if super::trace::find_session_trace(home, id).is_some() {
        return Err(ended(format!("session {id} is not running: it has ended")));
    }
    Err(unknown(format!("no session {id} on this machine")))
}

fn url(rec: &RunningRecord) -> String {
    format!("http://{}", shown(&rec.url))
}

/// Connects to the record's door at 127.0.0.1 and checks that this user serves it.
fn dial(rec: &RunningRecord) -> Result<TcpStream, super::Failure> {
    let no_door = |m: String| fail(diag::E_SND_003, m);
    let addr = crate::wire::channel_line::door_socket(&format!("http://{}", rec.url)).ok_or_else(|| {
        no_door(format!(
            "the running record of {} names no loopback door ({})",
            rec.session_id,
            url(rec)
        ))
    })?;
    let stream = TcpStream::connect_timeout(&addr, CONNECT).map_err(|e| {
        no_door(format!(
            "the door of {} at {} does not answer: {e}",
            rec.session_id,
            url(rec)
        ))
    })?;
    // The request carries the operator token: only to a server of this user's.
    crate::loopback::verify_stream(&stream).map_err(|e| no_door(format!("the door of {}: {e}", rec.session_id)))?;
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(LIVENESS_POLL))
        .map_err(|e| no_door(format!("the connection to {} cannot be set up: {e}", url(rec))))?;
    Ok(stream)
}

fn request_body(text: &str) -> String {
    let message_id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    json!({
        "id": 1,
        "jsonrpc": "2.0",
        "method": "SendStreamingMessage",
        "params": {"message": {
            "messageId": message_id,
            "parts": [{"mediaType": "text/plain", "text": text}],
            "role": "ROLE_USER",
        }},
    })
    .to_string()
}

/// The request head; it holds the token, so the request is wiped once written.
fn request_head(rec: &RunningRecord, body_len: usize, stream: bool) -> Zeroizing<Vec<u8>> {
    let mut head = Zeroizing::new(Vec::with_capacity(512));
    let accept = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    head.extend_from_slice(
        format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: {accept}\r\nA2A-Version: 1.0\r\nContent-Length: {body_len}\r\nConnection: close\r\n",
            rec.url
        )
        .as_bytes(),
    );
    if let Some(token) = &rec.door_token {
        head.extend_from_slice(b"Authorization: Bearer ");
        head.extend_from_slice(token.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Reads the reply: its head, then the event stream to the task's end, or to its question.
pub(super) fn follow(rec: &RunningRecord, mut stream: TcpStream, voice: &Voice) -> Outcome {
    let no_door = |m: String| fail(diag::E_SND_003, m);
    let who = rec.session_id.as_str();
    let malformed = |m: http1::Malformed| no_door(format!("the door of {who} sent a malformed body: {}", m.0));
    let mut reader = Quiet::new(rec);
    let mut pending = Vec::new();
    let head_by = Instant::now() + HEAD_WAIT;
    let (head, at) = loop {
        let Some(bytes) = reader.read(&mut stream, Some(head_by))? else {
            return Err(no_door(format!(
                "the door of {who} closed the connection without a reply"
            )));
        };
        pending.extend_from_slice(bytes);
        match http1::head(&pending) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(m) => {
                return Err(no_door(format!(
                    "the door of {who} answered with something that is not HTTP: {}",
                    m.0
                )));
            }
        }
    };
    let mut body = Body::new(head.framing);
    let first = body.push(&pending[at..]).map_err(malformed)?;
    let is_stream = head
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if head.status != 200 || !is_stream {
        let text = refusal_body(&mut reader, &mut stream, &mut body, first)?;
        return Err(refused(who, head.status, &text, voice));
    }

    let mut printer = Printer::default();
    let mut sse = SseReader::default();
    let mut task = StreamedTask::default();
    let mut task_id: Option<String> = None;
    let mut asking = Asking::default();
    let mut total = 0u64;
    let mut chunk = first;
    loop {
        total += chunk.len() as u64;
        if total > MAX_STREAM {
            return Err(no_door(format!(
                "the door of {who} sent more than 64 MiB; the stream was left"
            )));
        }
        let events = sse
            .push(&chunk)
            .map_err(|_| no_door(format!("the door of {who} sent an event longer than 8 MiB")))?;
        for event in events {
            if let Some(e) = event.get("error") {
                return Err(fail(
                    voice.refused,
                    format!("the door of {who} refused the {}: {}", voice.sent, rpc_error(e)),
                ));
            }
            let Some(result) = event.get("result") else { continue };
            if task_id.is_none()
                && let Some(id) = result.get("task").and_then(|t| t.get("id")).and_then(Value::as_str)
            {
                eprintln!(
                    "{}: task {} on {who} ({}@{})",
                    voice.tag,
                    shown(id),
                    rec.capsule_name,
                    rec.capsule_version
                );
                task_id = Some(id.to_string());
            }
            printer.show(result);
            task.apply(&event);
            let member = rec.formation_member.as_deref().unwrap_or(&rec.capsule_name);
            // Before the end: the stream closes at a question as at an end.
            if asking.see(result) {
                printer.end_line();
                asking.show(voice.tag, task_id.as_deref().unwrap_or("?"), member);
                return Ok(ASKS);
            }
            if let Some(end) = task.ended(member) {
                return printer.finish(rec, task_id.as_deref().unwrap_or("?"), end, voice);
            }
        }
        if body.done() {
            break;
        }
        match reader.read(&mut stream, None)? {
            Some(bytes) => {
                chunk = body.push(bytes).map_err(malformed)?;
            }
            None => break,
        }
    }
    printer.end_line();
    Err(no_door(format!(
        "the door of {who} ended the stream before the task ended"
    )))
}

/// The question of a task the stream shows waiting for input (it closes there).
#[derive(Default)]
struct Asking {
    asked_by: Vec<String>,
    question: String,
}

impl Asking {
    /// Whether this result shows the task asking; keeps who asked, as the task object says.
    fn see(&mut self, result: &Value) -> bool {
        let task = result.get("task");
        if let Some(list) = task
            .and_then(|t| t.pointer("/metadata/murmur/askedBy"))
            .and_then(Value::as_array)
        {
            self.asked_by = list.iter().filter_map(Value::as_str).map(str::to_string).collect();
        }
        let status = task
            .or_else(|| result.get("statusUpdate"))
            .and_then(|t| t.get("status"));
        if status.and_then(|s| s.get("state")).and_then(Value::as_str) != Some("TASK_STATE_INPUT_REQUIRED") {
            return false;
        }
        let question: String = status
            .and_then(|s| s.pointer("/message/parts"))
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        self.question = question;
        true
    }

    fn show(&self, tag: &str, task_id: &str, member: &str) {
        let who = crate::question::who_asks(&self.asked_by, member);
        eprintln!(
            "{tag}: task {} waits for input; {who}:\n{}\n{tag}: answer it with `mur answer {} TEXT`",
            shown(task_id),
            crate::question::printable(&self.question),
            shown(task_id)
        );
    }
}

/// A door's refusal as a diagnostic: the credential, the request, or a JSON-RPC error.
pub(super) fn refused(who: &str, status: u16, body: &[u8], voice: &Voice) -> super::Failure {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    let rpc = v.as_ref().and_then(|v| v.get("error")).filter(|e| e.is_object());
    let detail = match (rpc, v.as_ref().and_then(|v| v.get("message")).and_then(Value::as_str)) {
        (Some(e), _) => rpc_error(e),
        (None, Some(m)) => format!("HTTP {status}: {}", shown(m)),
        (None, None) => format!("HTTP {status}"),
    };
    let d = Diagnostic::new(
        voice.refused,
        format!("the door of {who} refused the {}: {detail}", voice.sent),
    );
    match status {
        401 | 403 => d
            .with_hint(
                "the running record's operator token is not this door's: the session was replaced; `mur ps` lists it",
            )
            .into(),
        _ => d.into(),
    }
}

/// `JSON-RPC error <code>: <message>`, and the task's state when A2A's ErrorInfo names it as
/// the reason (-32004).
fn rpc_error(e: &Value) -> String {
    let state = e
        .pointer("/data/0/metadata/state")
        .and_then(Value::as_str)
        .map(|s| format!(" (the task is {})", shown(s)))
        .unwrap_or_default();
    format!(
        "JSON-RPC error {}: {}{state}",
        e.get("code").and_then(Value::as_i64).unwrap_or(0),
        shown(e.get("message").and_then(Value::as_str).unwrap_or(""))
    )
}

/// The refusal's body, at most [`MAX_REFUSAL`] bytes of it.
fn refusal_body(
    reader: &mut Quiet<'_>,
    stream: &mut TcpStream,
    body: &mut Body,
    first: Vec<u8>,
) -> Result<Vec<u8>, super::Failure> {
    let mut out = first;
    let until = Instant::now() + HEAD_WAIT;
    while out.len() < MAX_REFUSAL && !body.done() {
        match reader.read(stream, Some(until))? {
            Some(bytes) => match body.push(bytes) {
                Ok(b) => out.extend(b),
                Err(_) => break,
            },
            None => break,
        }
    }
    out.truncate(MAX_REFUSAL);
    Ok(out)
}

/// Reads a socket whose reads time out every [`LIVENESS_POLL`]: a quiet door is waited for as
/// long as its session runs (and, given a deadline, no longer than that).
struct Quiet<'a> {
    rec: &'a RunningRecord,
    buf: Vec<u8>,
}

impl<'a> Quiet<'a> {
    fn new(rec: &'a RunningRecord) -> Quiet<'a> {
        Quiet {
            rec,
            buf: vec![0; 64 << 10],
        }
    }

    /// The next bytes, or `None` at the end of the connection.
    fn read(&mut self, stream: &mut TcpStream, until: Option<Instant>) -> Result<Option<&[u8]>, super::Failure> {
        loop {
            match stream.read(&mut self.buf) {
                Ok(0) => return Ok(None),
                Ok(n) => return Ok(Some(&self.buf[..n])),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    // A zombie is gone too: its parent has yet to reap it.
                    if !self.rec.is_live() || !crate::procinfo::is_alive(self.rec.pid, None) {
                        return Err(fail(
                            diag::E_SND_002,
                            format!("session {} ended before its task did", self.rec.session_id),
                        ));
                    }
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return Err(fail(
                            diag::E_SND_003,
                            format!(
                                "the door of {} at {} did not answer within {} s",
                                self.rec.session_id,
                                url(self.rec),
                                HEAD_WAIT.as_secs()
                            ),
                        ));
                    }
                }
                Err(e) => {
                    return Err(fail(
                        diag::E_SND_003,
                        format!("the connection to the door of {} broke: {e}", self.rec.session_id),
                    ));
                }
            }
        }
    }
}

/// A reply body as its head frames it.
enum Body {
    Chunked(Dechunker),
    Length(u64),
    Close,
}

impl Body {
    fn new(f: Framing) -> Body {
        match f {
            Framing::Chunked => Body::Chunked(Dechunker::default()),
            Framing::Length(n) => Body::Length(n),
            Framing::Close => Body::Close,
        }
    }

    fn push(&mut self, bytes: &[u8]) -> Result<Vec<u8>, http1::Malformed> {
        match self {
            Body::Chunked(d) => d.push(bytes),
            Body::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len());
                *left -= n as u64;
                Ok(bytes[..n].to_vec())
            }
            Body::Close => Ok(bytes.to_vec()),
        }
    }

    fn done(&self) -> bool {
        match self {
            Body::Chunked(d) => d.done(),
            Body::Length(left) => *left == 0,
            Body::Close => false,
        }
    }
}

/// Prints the `response` artifact's text as the stream brings it (docs/reference/door.md: chunks
/// with `append: true` add to it; one without replaces it).
#[derive(Default)]
struct Printer {
    printed: String,
}

impl Printer {
    fn show(&mut self, result: &Value) {
        if let Some(u) = result.get("artifactUpdate") {
            let append = u.get("append").and_then(Value::as_bool).unwrap_or(false);
            if let Some(text) = u.get("artifact").and_then(text_of) {
                self.put(&text, append);
            }
        } else if let Some(list) = result
            .get("task")
            .and_then(|t| t.get("artifacts"))
            .and_then(Value::as_array)
        {
            let response = list
                .iter()
                .find(|a| a.get("artifactId").and_then(Value::as_str) == Some("response"));
            if let Some(text) = response.or_else(|| list.first()).and_then(text_of) {
                self.put(&text, false);
            }
        }
    }

    fn put(&mut self, text: &str, append: bool) {
        let mut out = std::io::stdout().lock();
        if append || self.printed.is_empty() {
            let _ = out.write_all(text.as_bytes());
            self.printed.push_str(text);
        } else if let Some(rest) = text.strip_prefix(self.printed.as_str()) {
            let _ = out.write_all(rest.as_bytes());
            self.printed = text.to_string();
        } else {
            // A turn's text the next one replaced stays above; the answer starts on a new line.
            let _ = out.write_all(b"\n");
            let _ = out.write_all(text.as_bytes());
            self.printed = text.to_string();
        }
        let _ = out.flush();
    }

    /// Ends the answer with a newline, as `mur run` prints one.
    fn end_line(&self) {
        if !self.printed.is_empty() && !self.printed.ends_with('\n') {
            println!();
        }
    }

    fn finish(mut self, rec: &RunningRecord, task_id: &str, end: Ended, voice: &Voice) -> Outcome {
        if end.status == CallStatus::Completed {
            if self.printed.is_empty() && !end.output.is_empty() {
                self.put(&end.output, false);
            }
            self.end_line();
            return Ok(0);
        }
        self.end_line();
        Err(Diagnostic::new(
            voice.ended,
            format!(
                "the task {} ended {}: {}",
                shown(task_id),
                end.status.as_str(),
                shown(&end.output)
            ),
        )
        .with_hint(format!(
            "{}/out/result_{}.txt holds its whole result; `mur trace show {}` shows what happened",
            rec.records_dir,
            shown(task_id),
            rec.session_id
        ))
        .into())
    }
}

/// The text parts of an artifact, joined.
fn text_of(artifact: &Value) -> Option<String> {
    let parts = artifact.get("parts")?.as_array()?;
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}
