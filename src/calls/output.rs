//! What a caller is shown of a callee's output (docs/reference/capsules.md#calls-between-members).
//!
//! Pure text functions: the callee's real door address replaced by its virtual one, the 64 KiB
//! cap at a UTF-8 boundary with its marker, and the fenced continuation message a model capsule
//! receives once every call of its turn has ended. No actix, HTTP or process code.

use std::time::Duration;

use serde_json::Value;

use super::{DispatchKind, Dispatched, busy_text};
use crate::runner::{CallOutcome, CallStatus};

/// Bytes of a callee's output kept before the cut marker
/// (docs/reference/capsules.md#calls-between-members, docs/reference/formation.md#timing).
pub const ANSWER_CAP: usize = 64 * 1024;

/// Appended to an output cut at [`ANSWER_CAP`] [ours text].
pub const CUT_MARKER: &str = "\n[call-member] answer cut at 64 KiB";

/// The virtual address of `member`, which stands in for its real door everywhere a caller looks.
pub fn virtual_url(member: &str) -> String {
    crate::address::virtual_peer::url(member)
}

/// Cuts `text` to at most [`ANSWER_CAP`] bytes at a character boundary and appends
/// [`CUT_MARKER`]; returns the text and whether it was cut.
pub fn cap(text: &str) -> (String, bool) {
    if text.len() <= ANSWER_CAP {
        return (text.to_string(), false);
    }
    let kept = crate::text::head(text, ANSWER_CAP);
    let mut out = String::with_capacity(kept.len() + CUT_MARKER.len());
    out.push_str(kept);
    out.push_str(CUT_MARKER);
    (out, true)
}

/// Replaces the callee's real address in `text` with `http://<member>.formation.invalid`: the
/// spellings `http://localhost:P`, `localhost:P` and `127.0.0.1:P` (and the door URL's own host,
/// when it is another), where `P` is the door's port and is not followed by another digit. Hosts
/// match ASCII case-insensitively. Without a door URL (it was never known) nothing is replaced.
pub fn redact(text: &str, member: &str, door_url: Option<&str>) -> String {
    let Some((host, port)) = door_url.and_then(host_and_port) else {
        return text.to_string();
    };
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        hosts.push(host);
    }
    // Longest spellings first, so `http://localhost:P` is one match, never `http://` + a match.
    let mut patterns: Vec<String> = Vec::new();
    for scheme in ["http://", "https://", ""] {
        for h in &hosts {
            patterns.push(format!("{scheme}{h}:{port}"));
        }
    }
    let replacement = virtual_url(member);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hit = patterns.iter().find(|p| {
            let p = p.as_bytes();
            bytes.len() >= i + p.len()
                && bytes[i..i + p.len()].eq_ignore_ascii_case(p)
                && !bytes.get(i + p.len()).is_some_and(u8::is_ascii_digit)
        });
        match hit {
            Some(p) => {
                out.extend_from_slice(replacement.as_bytes());
                i += p.len();
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    // Only whole ASCII runs were replaced by ASCII, so the bytes are still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// What the caller is shown of a callee's text: redacted, then capped.
pub fn shown(text: &str, member: &str, door_url: Option<&str>) -> (String, bool) {
    cap(&redact(text, member, door_url))
}

/// `(host, port)` of `http://host:port[/…]`; IPv6 hosts keep their brackets.
fn host_and_port(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (host, port) = authority.rsplit_once(':')?;
    if host.is_empty() || host.ends_with(':') {
        return None;
    }
    Some((host.to_string(), port.parse().ok()?))
}

pub use crate::fence::neutralise;

/// One call's block of the continuation message (docs/reference/capsules.md#calls-between-members):
///
/// ```text
/// [call-member] call mcl_… to coder ended completed:
/// <untrusted-content source=member:coder>
/// <output>
/// </untrusted-content>
/// ```
///
/// A call that did not complete says `ended <status>, with no answer from <m>:` instead; one
/// whose callee asks a question says so, fences the question, and says how to answer it
/// (docs/reference/capsules.md#questions-across-members).
pub fn fence(outcome: &CallOutcome) -> String {
    let (id, m) = (&outcome.call_id, &outcome.member);
    if outcome.status == CallStatus::InputRequired {
        return question_fence(outcome);
    }
    let header = if outcome.status == CallStatus::Completed {
        format!("[call-member] call {id} to {m} ended completed:")
    } else {
        format!(
            "[call-member] call {id} to {m} ended {}, with no answer from {m}:",
            outcome.status.as_str()
        )
    };
    format!(
        "{header}\n{}",
        crate::fence::untrusted(&format!("member:{m}"), &outcome.output)
    )
}

/// An `input_required` call's block:
///
/// ```text
/// [call-member] call mcl_… to worker is waiting: worker asks a question (input-required):
/// <untrusted-content source=member:worker>
/// <question>
/// </untrusted-content>
/// [call-member] Answer it with call-member (member "worker", reply_to "mcl_…", task = your answer), …
/// ```
///
/// A question `worker` passes on from deeper down names who first asked it.
fn question_fence(outcome: &CallOutcome) -> String {
    let (id, m) = (&outcome.call_id, &outcome.member);
    let who = match outcome.asked_by.split_last() {
        Some((_, inner)) if !inner.is_empty() => format!("{m} passes on a question {} asked", inner.join(" via ")),
        _ => format!("{m} asks a question"),
    };
    format!(
        "[call-member] call {id} to {m} is waiting: {who} (input-required):\n{}\n\
         [call-member] Answer it with call-member (member \"{m}\", reply_to \"{id}\", task = your answer); \
         or, if only your own caller can answer, ask it with request-input (relay \"{id}\", question = the \
         question); or leave it unanswered: when your task ends, {m}'s task is cancelled.",
        crate::fence::untrusted(&format!("member:{m}"), &outcome.output)
    )
}

/// The one user message a model capsule's task continues with once every call has ended
/// (docs/reference/capsules.md#calls-between-members): each call's [`fence`] block, separated by
/// blank lines, then the members that gave no answer (when any), then the closing line.
pub fn continuation_message(outcomes: &[CallOutcome]) -> String {
    let mut parts: Vec<String> = outcomes.iter().map(fence).collect();
    let mut silent: Vec<&str> = Vec::new();
    let asking = |o: &CallOutcome| o.status == CallStatus::InputRequired;
    for o in outcomes {
        if o.status != CallStatus::Completed && !asking(o) && !silent.contains(&o.member.as_str()) {
            silent.push(&o.member);
        }
    }
    if !silent.is_empty() {
        parts.push(format!("[call-member] No answer came from: {}", silent.join(", ")));
    }
    parts.push(if outcomes.iter().any(asking) {
        "[call-member] Every other call this task made has ended.".to_string()
    } else {
        "[call-member] Every call this task made has ended.".to_string()
    });
    parts.join("\n\n")
}

/// The result a model's `call-member` tool call gets
/// (docs/reference/capsules.md#calls-between-members): whether the tool call failed, and its text —
/// the summary line, the data JSON line and a note [text beyond the summary ours].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    pub failed: bool,
    pub text: String,
}

/// Renders a dispatch as a tool result. `bound` is the call's bound (named in the busy note);
/// `task_from_member` is whether the calling task was itself sent by a member (then the failure
/// note points at `end-without-answer`).
pub fn tool_result(d: &Dispatched, bound: Duration, task_from_member: bool) -> ToolResult {
    let (id, m) = (&d.call_id, &d.member);
    // Keys are inserted in ascending order, so the line is sorted whatever serde_json's map is.
    let mut data = serde_json::Map::new();
    data.insert("call_id".into(), Value::from(id.as_str()));
    data.insert("member".into(), Value::from(m.as_str()));
    let (failed, summary, note) = match &d.kind {
        DispatchKind::Started { member_task_id } => {
            data.insert("status".into(), Value::from("started"));
            data.insert("task_id".into(), Value::from(member_task_id.as_str()));
            (
                false,
                format!("Called {m}: started"),
                format!(
                    "[call-member] {m} is now working on call {id}. Its answer is not in this \
                     result: it is delivered once your current turn is over, so end your turn \
                     when you have nothing else to do."
                ),
            )
        }
        DispatchKind::Busy => {
            data.insert("output".into(), Value::from(busy_text(m)));
            data.insert("status".into(), Value::from("busy"));
            (
                false,
                format!("Called {m}: busy"),
                format!(
                    "[call-member] {m} is busy, so call {id} has not started yet. The runtime \
                     keeps offering it the task for up to {} seconds; its answer, or why there \
                     is none, is delivered once your current turn is over.",
                    bound.as_secs()
                ),
            )
        }
        DispatchKind::Ended { status, output } => {
            data.insert("output".into(), Value::from(output.as_str()));
            data.insert("status".into(), Value::from(status.as_str()));
            let word = if *status == CallStatus::Rejected {
                "rejected"
            } else {
                "failed"
            };
            let mut note = format!(
                "[call-member] Call {id} to {m} ended {}, with no answer from {m}. Continue \
                 without it, or try again later.",
                status.as_str()
            );
            if task_from_member {
                note.push_str(
                    " If your own task cannot be done without it, end that task with \
                     end-without-answer.",
                );
            }
            (true, format!("Called {m}: {word}"), note)
        }
    };
    let data = serde_json::to_string(&Value::Object(data)).unwrap_or_default();
    ToolResult {
        failed,
        text: format!("{summary}\n{data}\n{note}"),
    }
}
