//! @NAME@: a mur capsule written in Rust. `run` takes one task and returns the answer; a fresh
//! instance runs each task. When the roster lets this member call others, it hands the task to
//! each of them with call-member and answers with their answers, one line each; otherwise it
//! answers "<member> handled: <task>". For outgoing HTTP, use the `wasip2` crate's `http` module.

wit_bindgen::generate!({ world: "capsule", path: "wit" });

use murmur::capsule::call_member::{CallStatus, await_all, start};
use murmur::capsule::identity::member_name;

/// The members this one may call: `MURMUR_FORMATION_PEERS` is `name=url name=url`. Read through
/// wasi:cli/environment, which both targets `mur build` uses have (`std::env` only on wasip2).
fn callees() -> Vec<String> {
    wasip2::cli::environment::get_environment()
        .into_iter()
        .find_map(|(k, v)| (k == "MURMUR_FORMATION_PEERS").then_some(v))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.split('=').next())
        .map(str::to_string)
        .collect()
}

/// A call's final status as the trace spells it.
fn status(s: CallStatus) -> &'static str {
    match s {
        CallStatus::Completed => "completed",
        CallStatus::Failed => "failed",
        CallStatus::Canceled => "canceled",
        CallStatus::Rejected => "rejected",
        CallStatus::TimedOut => "timed-out",
        CallStatus::Unreachable => "unreachable",
        CallStatus::Abandoned => "abandoned",
        CallStatus::NoAnswer => "no-answer",
    }
}

struct Capsule;

impl Guest for Capsule {
    fn run(task: String) -> Result<String, Failure> {
        let me = member_name().unwrap_or_else(|| "@NAME@".to_string());
        let members = callees();
        if members.is_empty() {
            return Ok(format!("{me} handled: {task}"));
        }
        for member in &members {
            start(member, &task).map_err(|e| Failure::Error(format!("{me} could not call {member}: {e}")))?;
        }
        let answers: Vec<String> = await_all()
            .into_iter()
            .map(|o| format!("{} [{}]: {}", o.member, status(o.status), o.output))
            .collect();
        Ok(answers.join("\n"))
    }
}

export!(Capsule);
