//! `mur answer TASK_ID TEXT`: answers the question a running task asked
//! (docs/reference/cli.md#mur-answer, docs/reference/door.md#asking), then prints what followed
//! as `mur send` prints it: the answer as it streams, or the next question.
//!
//! A task id does not say which session holds it, so each of this user's running sessions is
//! asked (GetTask, with its running record's operator token, newest first, at most
//! [`MAX_SESSIONS`] and each within [`PROBE_WAIT`]) until one knows it. The answer then goes to
//! that door as SendStreamingMessage naming the task in `message.taskId`, through `mur send`'s
//! client (`cli/send.rs`): the same dialling, owner check and bounds.

use std::io::Read;
use std::time::Duration;

use serde_json::{Value, json};

use super::send::{self, Voice};
use super::{AnswerArgs, Outcome};
use crate::diag::{self, Diagnostic, shown};
use crate::ids::{self, IdKind};
use crate::paths::MurHome;
use crate::running::{self, RunningRecord};
use crate::wire::jsonrpc::Method;

/// Sessions asked for the task, at most [ours]: one user's machine runs far fewer.
pub const MAX_SESSIONS: usize = 64;
/// One session's GetTask: a door answers it from memory at once.
const PROBE_WAIT: Duration = Duration::from_secs(3);
/// A GetTask reply read, at most: an error is far shorter, so a longer reply is a task.
const PROBE_READ: usize = 64 << 10;

const ANSWER: Voice = Voice {
    tag: "mur answer",
    sent: "answer",
    refused: diag::E_ANS_002,
    ended: diag::E_ANS_003,
};

fn fail(code: diag::Code, message: String) -> super::Failure {
    Diagnostic::new(code, message).into()
}

pub fn run(a: &AnswerArgs) -> Outcome {
    ids::check(IdKind::Task, &a.task_id).map_err(|e| {
        fail(
            diag::E_ANS_001,
            format!("'{}' is not a task id: {e}", shown(&a.task_id)),
        )
    })?;
    let text = answer_text(a)?;
    if text.trim().is_empty() {
        return Err(fail(
            diag::E_ANS_002,
            "the answer is empty: the task asked a question, and an empty text answers none".into(),
        ));
    }
    // The door answers a larger body 413, maybe before it is sent in full: refused here instead.
    let body = answer_body(&a.task_id, &text);
    if body.len() > crate::door::BODY_LIMIT {
        return Err(fail(
            diag::E_ANS_002,
            format!(
                "the answer makes a request of {} bytes, more than the {} a door takes in one",
                body.len(),
                crate::door::BODY_LIMIT
            ),
        ));
    }
    let home = MurHome::from_env();
    let rec = holder(&home, &a.task_id)?;
    let stream = send::post(&rec, &body, true)?;
    send::follow(&rec, stream, &ANSWER).map_err(|mut f| {
        if f.diag.code == diag::E_ANS_002 && f.diag.hint().is_none() {
            f.diag = f.diag.with_hint(format!(
                "`mur trace show {}` shows the task's questions and how each ended",
                rec.session_id
            ));
        }
        f
    })
}

/// The answer: `TEXT`, or `--file` (`-` is stdin), read to at most the door's body bound.
fn answer_text(a: &AnswerArgs) -> Result<String, super::Failure> {
    let limit = crate::door::BODY_LIMIT;
    let Some(path) = &a.file else {
        return Ok(a.text.clone().unwrap_or_default());
    };
    let cannot = |e: std::io::Error| {
        fail(
            diag::E_ANS_002,
            format!(
                "the answer cannot be read from {}: {e}",
                shown(&path.display().to_string())
            ),
        )
    };
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .take(limit as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(limit as u64 + 1).read_to_end(&mut bytes))
            .map_err(cannot)?;
    }
    if bytes.len() > limit {
        return Err(fail(
            diag::E_ANS_002,
            format!("the answer is more than the {limit} bytes a door takes in one request"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        fail(
            diag::E_ANS_002,
            format!("{} is not UTF-8 text", shown(&path.display().to_string())),
        )
    })
}

fn answer_body(task_id: &str, text: &str) -> String {
    json!({
        "id": 1,
        "jsonrpc": "2.0",
        "method": Method::SendStreamingMessage.name(),
        "params": {"message": {
            "messageId": format!("msg_{}", uuid::Uuid::new_v4().simple()),
            "parts": [{"mediaType": "text/plain", "text": text}],
            "role": "ROLE_USER",
            "taskId": task_id,
        }},
    })
    .to_string()
}

/// The running session whose door knows the task.
fn holder(home: &MurHome, task_id: &str) -> Result<RunningRecord, super::Failure> {
    let mut live = running::live(home).map_err(|e| {
        fail(
            diag::E_ANS_001,
            format!("cannot read {}: {e}", home.running().display()),
        )
    })?;
    // The newest first: a question is most likely a recent session's.
    live.sort_by(|a, b| b.started_at.cmp(&a.started_at));
    let asked = live.len().min(MAX_SESSIONS);
    let mut silent = 0;
    for rec in live.iter().take(MAX_SESSIONS) {
        match knows(rec, task_id) {
            Ok(true) => return Ok(rec.clone()),
            Ok(false) => {}
            Err(_) => silent += 1,
        }
    }
    let mut message = match asked {
        0 => format!("no session runs on this machine, so none holds task {task_id}"),
        n => format!("none of the {n} running sessions holds task {task_id}"),
    };
    if silent > 0 {
        message.push_str(&format!(" ({silent} of them did not answer)"));
    }
    if live.len() > MAX_SESSIONS {
        message.push_str(&format!(
            "; only the newest {MAX_SESSIONS} of {} were asked",
            live.len()
        ));
    }
    Err(fail(diag::E_ANS_001, message))
}

/// Whether `rec`'s door knows the task (GetTask with its operator token).
fn knows(rec: &RunningRecord, task_id: &str) -> Result<bool, super::Failure> {
    let body = json!({
        "id": 1,
        "jsonrpc": "2.0",
        "method": Method::GetTask.name(),
        "params": {"id": task_id, "historyLength": 0},
    })
    .to_string();
    let stream = send::post(rec, &body, false)?;
    let (status, reply, cut) = send::reply(rec, stream, PROBE_READ, PROBE_WAIT)?;
    if status != 200 {
        return Ok(false);
    }
    if cut {
        return Ok(true);
    }
    let v: Value = serde_json::from_slice(&reply).unwrap_or(Value::Null);
    Ok(v.get("result")
        .is_some_and(|r| r.get("id").and_then(Value::as_str) == Some(task_id)))
}
