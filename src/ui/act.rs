//! What the operator does from the page: start a task on a running formation's entry, answer the
//! question a task asks, cancel a task, stop the formation. Each action takes the path its
//! command takes, with the operator's authority and nothing more: `mur send`'s and `mur answer`'s
//! client of a running door (`operator`: the running record's door at 127.0.0.1, its operator
//! token sent only to a listener this user serves, every reply read bounded) and `mur stop`'s
//! stop of a formation (`operator::stop`). The door token never leaves this side.
//!
//! An action is a `POST /act/…` that has passed what every request passes (`auth.rs`: Host,
//! Origin, `Sec-Fetch-Site`, the cookie) and, besides, carries the page token in the
//! [`PAGE_TOKEN_HEADER`] header, compared in constant time: a token minted with the server,
//! written into each page it renders, readable by the page's own script alone (no other origin
//! may read a page of `mur ui`), so a request another site makes the browser send cannot carry
//! it. It must name this origin in `Origin`, which a browser sends with every POST. A body is
//! JSON, at most [`BODY_BYTES`]. Nothing a member sends reaches here: the page's texts are
//! rendered as text, and only a person's click or key sends a request.

use std::time::Duration;

use serde_json::{Value, json};

use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::operator;
use crate::outcome::Failure;
use crate::paths::MurHome;
use crate::running::{self, RunningRecord};
use crate::wire::jsonrpc::Method;

/// The header that carries the page token.
pub const PAGE_TOKEN_HEADER: &str = "x-mur-page-token";
/// An action's body, at most: a task's text or an answer a person types.
pub const BODY_BYTES: usize = 256 << 10;
/// A door's reply to an action, read at most.
const REPLY_BYTES: usize = 256 << 10;
/// A door answers SendMessage with `returnImmediately`, GetTask and CancelTask at once.
const REPLY_WAIT: Duration = Duration::from_secs(10);
/// As `mur stop`'s default: seconds before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Sessions of one formation asked which holds a task, at most.
const MAX_MEMBERS: usize = 256;

/// One action, as its path names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `/act/send/frm_…`: a task for the formation's entry.
    Send { formation: String },
    /// `/act/answer/frm_…/tsk_…`: the answer to the task's question.
    Answer { formation: String, task: String },
    /// `/act/cancel/frm_…/tsk_…`.
    Cancel { formation: String, task: String },
    /// `/act/stop/frm_…`.
    Stop { formation: String },
}

impl Action {
    /// The action `path` names, its ids checked; `None` for any other path.
    pub fn parse(path: &str) -> Option<Action> {
        let rest = path.strip_prefix("/act/")?;
        let parts: Vec<&str> = rest.split('/').collect();
        let frm = |s: &str| ids::check(IdKind::Formation, s).ok().map(|()| s.to_owned());
        let tsk = |s: &str| ids::check(IdKind::Task, s).ok().map(|()| s.to_owned());
        match parts.as_slice() {
            ["send", f] => Some(Action::Send { formation: frm(f)? }),
            ["stop", f] => Some(Action::Stop { formation: frm(f)? }),
            ["answer", f, t] => Some(Action::Answer {
                formation: frm(f)?,
                task: tsk(t)?,
            }),
            ["cancel", f, t] => Some(Action::Cancel {
                formation: frm(f)?,
                task: tsk(t)?,
            }),
            _ => None,
        }
    }

    /// Whether the action carries a text (send, answer).
    pub fn takes_text(&self) -> bool {
        matches!(self, Action::Send { .. } | Action::Answer { .. })
    }
}

/// What an action did, for the page: `{"ok": true, …}`.
pub type Done = Value;

fn refused(message: String) -> Failure {
    Diagnostic::new(diag::E_UI_003, message).into()
}

/// The text of an action's body `{"text": "…"}`: not empty, at most the door's request bound.
pub fn text_of(body: &[u8]) -> Result<String, Failure> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|_| refused("the action's body is not the JSON object {\"text\": …}".into()))?;
    let text = v
        .get("text")
        .and_then(Value::as_str)
        .ok_or_else(|| refused("the action's body has no `text`, a string".into()))?;
    if text.trim().is_empty() {
        return Err(refused("the text is empty: there is nothing to send".into()));
    }
    Ok(text.to_owned())
}

/// Carries out `action` with `text` (for send and answer); blocking, like the commands.
pub fn run(home: &MurHome, action: &Action, text: Option<&str>) -> Result<Done, Failure> {
    match action {
        Action::Send { formation } => {
            let rec = entry(home, formation)?;
            let task = send(&rec, None, text.unwrap_or_default())?;
            Ok(json!({"ok": true, "task": task}))
        }
        Action::Answer { formation, task } => {
            let rec = holder(home, formation, task)?;
            let state = send(&rec, Some(task), text.unwrap_or_default())?;
            Ok(json!({"ok": true, "task": state}))
        }
        Action::Cancel { formation, task } => {
            let rec = holder(home, formation, task)?;
            let body = rpc(Method::CancelTask, json!({"id": task}));
            let result = call(&rec, &body)?;
            Ok(json!({"ok": true, "task": task_summary(&result)}))
        }
        Action::Stop { formation } => {
            let lines = crate::operator::stop::formation(home, formation, STOP_TIMEOUT)?;
            Ok(json!({"ok": true, "lines": lines}))
        }
    }
}

fn rpc(method: Method, params: Value) -> String {
    json!({"id": 1, "jsonrpc": "2.0", "method": method.name(), "params": params}).to_string()
}

/// `{"id", "state"}` of a task a door returned.
fn task_summary(task: &Value) -> Value {
    json!({
        "id": task.get("id").cloned().unwrap_or(Value::Null),
        "state": task.pointer("/status/state").cloned().unwrap_or(Value::Null),
    })
}

/// SendMessage with `returnImmediately`: a new task for `rec`'s door, or (naming `task`) the
/// answer to its question. The task's id and state as the door took it.
fn send(rec: &RunningRecord, task: Option<&str>, text: &str) -> Result<Value, Failure> {
    let mut message = json!({
        "messageId": format!("msg_{}", uuid::Uuid::new_v4().simple()),
        "parts": [{"mediaType": "text/plain", "text": text}],
        "role": "ROLE_USER",
    });
    if let Some(t) = task {
        message["taskId"] = json!(t);
    }
    let body = rpc(
        Method::SendMessage,
        json!({"message": message, "configuration": {"returnImmediately": true}}),
    );
    if body.len() > crate::door::BODY_LIMIT {
        return Err(refused(format!(
            "the text makes a request of {} bytes, more than the {} a door takes in one",
            body.len(),
            crate::door::BODY_LIMIT
        )));
    }
    let result = call(rec, &body)?;
    Ok(task_summary(result.get("task").unwrap_or(&Value::Null)))
}

/// One request to `rec`'s door and its JSON-RPC `result`; a refusal keeps the door's code and
/// message (a member's text reaches the page as text only).
fn call(rec: &RunningRecord, body: &str) -> Result<Value, Failure> {
    let stream = operator::post(rec, body, false)?;
    let (status, reply, cut) = operator::reply(rec, stream, REPLY_BYTES, REPLY_WAIT)?;
    if cut {
        return Err(refused(format!(
            "the door of {} answered with more than {REPLY_BYTES} bytes",
            rec.session_id
        )));
    }
    let v: Value = serde_json::from_slice(&reply).unwrap_or(Value::Null);
    if let Some(e) = v.get("error") {
        let message = e.get("message").and_then(Value::as_str).unwrap_or("no message");
        let code = e.get("code").and_then(Value::as_i64).unwrap_or_default();
        return Err(refused(format!(
            "the door of {} refused: {} ({code})",
            rec.session_id,
            crate::text::head(message, 512)
        )));
    }
    match v.get("result") {
        Some(r) if status == 200 && r.is_object() => Ok(r.clone()),
        _ => Err(refused(format!(
            "the door of {} answered HTTP {status} without a result",
            rec.session_id
        ))),
    }
}

fn live_members(home: &MurHome, formation: &str) -> Result<Vec<RunningRecord>, Failure> {
    let live = running::live(home).map_err(|e| refused(format!("cannot read {}: {e}", home.running().display())))?;
    let members: Vec<RunningRecord> = live
        .into_iter()
        .filter(|r| r.formation_id.as_deref() == Some(formation))
        .collect();
    if members.is_empty() {
        return Err(
            Diagnostic::new(diag::E_UI_003, format!("formation {formation} is not running"))
                .with_hint("a formation that ended takes no task: start it again with `mur run`")
                .into(),
        );
    }
    Ok(members)
}

/// The running entry of the formation: whose door takes a new task.
fn entry(home: &MurHome, formation: &str) -> Result<RunningRecord, Failure> {
    live_members(home, formation)?
        .into_iter()
        .find(|r| r.formation_entry)
        .ok_or_else(|| {
            refused(format!(
                "formation {formation} runs, but its entry member serves no door: it is still starting, or it has ended"
            ))
        })
}

/// The running member of the formation whose door holds `task` (GetTask, as `mur answer` asks).
fn holder(home: &MurHome, formation: &str, task: &str) -> Result<RunningRecord, Failure> {
    let body = rpc(Method::GetTask, json!({"id": task, "historyLength": 0}));
    for rec in live_members(home, formation)?.into_iter().take(MAX_MEMBERS) {
        let Ok(stream) = operator::post(&rec, &body, false) else {
            continue;
        };
        let Ok((200, reply, false)) = operator::reply(&rec, stream, REPLY_BYTES, REPLY_WAIT) else {
            continue;
        };
        let v: Value = serde_json::from_slice(&reply).unwrap_or(Value::Null);
        if v.pointer("/result/id").and_then(Value::as_str) == Some(task) {
            return Ok(rec);
        }
    }
    Err(refused(format!(
        "no running member of formation {formation} holds task {task}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_action_paths_name_an_action() {
        let f = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let t = "tsk_0199c4e2f1b7712a9d3e4f5061728394";
        let send = Action::Send { formation: f.into() };
        let answer = Action::Answer {
            formation: f.into(),
            task: t.into(),
        };
        let table: Vec<(String, Option<Action>)> = vec![
            (format!("/act/send/{f}"), Some(send)),
            (format!("/act/stop/{f}"), Some(Action::Stop { formation: f.into() })),
            (format!("/act/answer/{f}/{t}"), Some(answer)),
            (
                format!("/act/cancel/{f}/{t}"),
                Some(Action::Cancel {
                    formation: f.into(),
                    task: t.into(),
                }),
            ),
            (format!("/act/send/{f}/"), None),
            (format!("/act/answer/{f}"), None),
            (format!("/act/cancel/{t}/{f}"), None),
            ("/act/send/frm_x".into(), None),
            (format!("/act/delete/{f}"), None),
            (format!("/formation/{f}"), None),
            (format!("/act/send/../{f}"), None),
        ];
        for (path, want) in table {
            assert_eq!(Action::parse(&path), want, "{path}");
        }
    }

    #[test]
    fn a_body_must_carry_a_text() {
        let table: &[(&[u8], Option<&str>)] = &[
            (br#"{"text":"hi"}"#, Some("hi")),
            (br#"{"text":"  "}"#, None),
            (br#"{"text":1}"#, None),
            (br#"{}"#, None),
            (b"text=hi", None),
            (b"", None),
        ];
        for (body, want) in table {
            let got = text_of(body).ok();
            assert_eq!(got.as_deref(), *want, "{}", String::from_utf8_lossy(body));
        }
        let e = text_of(b"").err().map(|f| f.diag.code.id);
        assert_eq!(e, Some("E-UI-003"));
    }
}
