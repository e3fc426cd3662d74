//! `mur send ID TEXT`: a task to a running session's door (`ses_…`) or a formation's entry
//! (`frm_…`), followed with SendStreamingMessage; the answer is printed as it arrives
//! (docs/reference/cli.md#mur-send).
//!
//! An A2A client of our own door, blocking and bounded: the door is found through its running
//! record (which holds the operator token, 0600) and reached through `operator`, the one client
//! of a running door (dialled at 127.0.0.1, the token sent only to a listener this user serves,
//! every byte it sends back bounded).
//!
//! `mur answer` (`cli/answer.rs`) is the same client: it dials, sends and follows through the
//! functions here, and reads what the door says in its own [`Voice`].

use std::io::{IsTerminal, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

use super::{Outcome, SendArgs};
use crate::diag::{self, Code, Diagnostic, shown};
use crate::ids::{self, IdKind};
use crate::operator::{self, Streamed, fail};
pub(super) use crate::operator::{post, reply};
use crate::paths::MurHome;
use crate::running::{self, RunningRecord};
use crate::task::CallStatus;
use crate::wire::calls::{Ended, StreamedTask};
use crate::wire::jsonrpc::Method;

/// The whole stream, at most: an answer streamed in many chunks still ends.
const MAX_STREAM: u64 = 64 << 20;

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

fn request_body(text: &str) -> String {
    let message_id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    json!({
        "id": 1,
        "jsonrpc": "2.0",
        "method": Method::SendStreamingMessage.name(),
        "params": {"message": {
            "messageId": message_id,
            "parts": [{"mediaType": "text/plain", "text": text}],
            "role": "ROLE_USER",
        }},
    })
    .to_string()
}

/// Reads the reply: its head, then the event stream to the task's end, or to its question.
pub(super) fn follow(rec: &RunningRecord, stream: TcpStream, voice: &Voice) -> Outcome {
    let who = rec.session_id.as_str();
    let member = rec.formation_member.as_deref().unwrap_or(&rec.capsule_name);
    let mut printer = Printer::default();
    let mut task = StreamedTask::default();
    let mut task_id: Option<String> = None;
    let mut asking = Asking::default();
    let end = operator::events(rec, stream, MAX_STREAM, |event| {
        if let Some(e) = event.get("error") {
            return Err(fail(
                voice.refused,
                format!("the door of {who} refused the {}: {}", voice.sent, rpc_error(e)),
            ));
        }
        let Some(result) = event.get("result") else {
            return Ok(None);
        };
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
        task.apply(event);
        // Before the end: the stream closes at a question as at an end.
        if asking.see(result) {
            return Ok(Some(None));
        }
        Ok(task.ended(member).map(Some))
    })?;
    let task_id = task_id.as_deref().unwrap_or("?");
    match end {
        Streamed::Refused { status, body } => Err(refused(who, status, &body, voice)),
        Streamed::Stopped(None) => {
            printer.end_line();
            asking.show(voice.tag, task_id, member);
            Ok(ASKS)
        }
        Streamed::Stopped(Some(end)) => printer.finish(rec, task_id, end, voice),
        Streamed::Closed => {
            printer.end_line();
            Err(fail(
                diag::E_SND_003,
                format!("the door of {who} ended the stream before the task ended"),
            ))
        }
    }
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
        self.question = crate::wire::live_task::status_message_text(status);
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

    /// Prints answer text: a member's, so on a terminal its control characters are made visible
    /// (`question::for_stream`); piped, its bytes are unchanged.
    fn put(&mut self, text: &str, append: bool) {
        let mut out = std::io::stdout().lock();
        let terminal = out.is_terminal();
        let mut write = |t: &str| {
            let _ = out.write_all(crate::question::for_stream(t, terminal).as_bytes());
        };
        if append || self.printed.is_empty() {
            write(text);
            self.printed.push_str(text);
        } else if let Some(rest) = text.strip_prefix(self.printed.as_str()) {
            write(rest);
            self.printed = text.to_string();
        } else {
            // A turn's text the next one replaced stays above; the answer starts on a new line.
            write("\n");
            write(text);
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
