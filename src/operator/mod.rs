//! The operator's client of a running door: dials a running record's door at 127.0.0.1 (never a
//! resolved `localhost`), sends its operator token only to a listener this user serves
//! (`loopback`), and reads the reply bounded: the head (`wire::http1`), each event (`wire::sse`),
//! the whole stream. `mur send`, `mur answer` (`cli/send.rs`, `cli/answer.rs`) and `mur ui`'s
//! live text (`ui/live.rs`) all reach a door through it. The token is never printed, nor put in
//! argv, the environment or an error message; the request holding it is wiped once written.
//!
//! `stop` ends what runs (a session, or a formation's launcher and its members), for `mur stop`
//! and `mur ui` alike, signalling a process only while its pid still names the same start.

pub mod stop;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use zeroize::Zeroizing;

use crate::diag::{self, Code, Diagnostic, shown};
use crate::outbound::blocking::{self, Body, Check};
use crate::outcome::Failure;
use crate::running::RunningRecord;
use crate::wire::http1;
use crate::wire::sse::SseReader;

/// A door answers on its loopback port at once; one that does not is not serving.
const CONNECT: Duration = Duration::from_secs(5);
/// The stream's head comes as soon as the door admitted the task.
pub const HEAD_WAIT: Duration = Duration::from_secs(10);
/// How often a quiet stream looks whether the session still runs (a task may be quiet for long).
const LIVENESS_POLL: Duration = Duration::from_millis(500);
/// A refusal's body (HTTP errors, a JSON-RPC error sent as JSON), at most.
const MAX_REFUSAL: usize = 64 << 10;

/// Dials the record's door and sends one JSON-RPC request (`body`), asking for an event stream
/// or a JSON reply.
pub fn post(rec: &RunningRecord, body: &str, stream: bool) -> Result<TcpStream, Failure> {
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
pub fn reply(
    rec: &RunningRecord,
    mut stream: TcpStream,
    max: usize,
    wait: Duration,
) -> Result<(u16, Vec<u8>, bool), Failure> {
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

pub(crate) fn fail(code: Code, message: String) -> Failure {
    Diagnostic::new(code, message).into()
}

pub fn url(rec: &RunningRecord) -> String {
    format!("http://{}", shown(&rec.url))
}

/// Connects to the record's door at 127.0.0.1 and checks that this user serves it.
fn dial(rec: &RunningRecord) -> Result<TcpStream, Failure> {
    let no_door = |m: String| fail(diag::E_SND_003, m);
    let addr = crate::wire::channel_line::door_socket(&format!("http://{}", rec.url)).ok_or_else(|| {
        no_door(format!(
            "the running record of {} names no loopback door ({})",
            rec.session_id,
            url(rec)
        ))
    })?;
    // The request carries the operator token: only to a server of this user's.
    let stream = blocking::dial([addr], CONNECT, Check::Owner).map_err(|e| match e.kind() {
        ErrorKind::PermissionDenied => no_door(format!("the door of {}: {e}", rec.session_id)),
        _ => no_door(format!(
            "the door of {} at {} does not answer: {e}",
            rec.session_id,
            url(rec)
        )),
    })?;
    stream
        .set_read_timeout(Some(LIVENESS_POLL))
        .map_err(|e| no_door(format!("the connection to {} cannot be set up: {e}", url(rec))))?;
    Ok(stream)
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
        head.extend_from_slice(token.reveal().as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// The refusal's body, at most [`MAX_REFUSAL`] bytes of it.
fn refusal_body(
    reader: &mut Quiet<'_>,
    stream: &mut TcpStream,
    body: &mut Body,
    first: Vec<u8>,
) -> Result<Vec<u8>, Failure> {
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
    pub fn new(rec: &'a RunningRecord) -> Quiet<'a> {
        Quiet {
            rec,
            buf: vec![0; 64 << 10],
        }
    }

    /// The next bytes, or `None` at the end of the connection.
    pub fn read(&mut self, stream: &mut TcpStream, until: Option<Instant>) -> Result<Option<&[u8]>, Failure> {
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

/// How a stream read with [`events`] ended.
pub enum Streamed<T> {
    /// The door answered other than with an event stream: its HTTP status and body (at most
    /// 64 KiB of it).
    Refused { status: u16, body: Vec<u8> },
    /// The handler stopped reading with this.
    Stopped(T),
    /// The door ended the stream.
    Closed,
}

/// Reads the reply to a streaming request sent with [`post`]: its head, then each event, handed
/// to `on` until it returns `Some` (or an error), the stream ends, or more than `limit` bytes
/// came. A quiet stream is waited for as long as the record's session runs.
pub fn events<T>(
    rec: &RunningRecord,
    mut stream: TcpStream,
    limit: u64,
    mut on: impl FnMut(&Value) -> Result<Option<T>, Failure>,
) -> Result<Streamed<T>, Failure> {
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
            Ok(None) if pending.len() > MAX_REFUSAL => {
                return Err(no_door(format!(
                    "the door of {who} sent a reply head longer than 64 KiB"
                )));
            }
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
        return Ok(Streamed::Refused {
            status: head.status,
            body: text,
        });
    }
    let mut sse = SseReader::default();
    let mut total = 0u64;
    let mut chunk = first;
    loop {
        total += chunk.len() as u64;
        if total > limit {
            return Err(no_door(format!(
                "the door of {who} sent more than {} MiB; the stream was left",
                limit >> 20
            )));
        }
        let events = sse
            .push(&chunk)
            .map_err(|_| no_door(format!("the door of {who} sent an event longer than 8 MiB")))?;
        for event in events {
            if let Some(stop) = on(&event)? {
                return Ok(Streamed::Stopped(stop));
            }
        }
        if body.done() {
            return Ok(Streamed::Closed);
        }
        match reader.read(&mut stream, None)? {
            Some(bytes) => chunk = body.push(bytes).map_err(malformed)?,
            None => return Ok(Streamed::Closed),
        }
    }
}
