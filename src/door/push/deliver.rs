//! One config's delivery: it follows the task on the board and POSTs each update to the webhook
//! as a `StreamResponse` in `application/a2a+json` (the object an SSE event carries in `result`:
//! `{"task":…}` first, then `{"artifactUpdate":…}` and `{"statusUpdate":…}`), with the config's
//! `token` as `X-A2A-Notification-Token` and its `authentication` as `Authorization`.
//!
//! At most one POST is in flight per config and updates go in order: the delivery reads the task
//! only after the previous update was delivered or given up, so a webhook that falls behind gets
//! the changes it missed coalesced into the task's latest state (never an older state after a
//! newer one), and the final state is always the last update sent. The queue is thus at most the
//! one snapshot's two or three updates, and every body is bounded as a door's task object is.
//! The delivery runs on the door's thread as its own future and holds no lock across an await,
//! so it never holds up the task, the board or another request.
//!
//! Each POST resolves the webhook's name again and judges every address (a name that resolves
//! elsewhere later is refused then), connects to the address it judged and nowhere else, follows
//! no redirect, and is bounded by [`push::TIMEOUT`]; a plain-`http://` loopback webhook is used
//! only once the kernel says this user serves it, as for every other loopback endpoint the
//! runtime sends to (`outbound`). Failures are retried by the core's plan
//! ([`push::next`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use awc::http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::watch;

use super::may_connect;
use crate::door::replay::{StreamEvent, stream_response};
use crate::door::view::TaskObject as _;
use crate::push::{self, Attempt, ConfigParams, Host, Next, Scheme};
use crate::tasks::{Board, TaskSnapshot};

/// The header the official SDKs' servers send the config's token in, and their webhooks read.
/// A2A v1.0.1 (§4.3.3, a2aproject/A2A#1793) defines only `Authorization`; the token goes on
/// being sent for the webhooks the SDKs wrote.
const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-a2a-notification-token");

/// The body's media type: A2A's own, as v1.0.1's push notification example sends it (§4.3.3,
/// a2aproject/A2A#1753).
const A2A_JSON: &str = "application/a2a+json";

/// The updates owed for a task, as an SSE stream computes them, without the streamed chunks.
#[derive(Debug, Default)]
struct Tracker {
    /// Change number of the last state handed out; `None` before the first.
    sent: Option<u64>,
    artifact_sent: bool,
    done: bool,
}

impl Tracker {
    fn owed(&mut self, snap: &TaskSnapshot) -> Vec<Value> {
        let mut out = Vec::new();
        match self.sent {
            None => {
                out.push(stream_response(StreamEvent::Task {
                    task: snap,
                    resumed: false,
                }));
                self.artifact_sent = snap.answer.is_some();
            }
            Some(c) if c != snap.changed => {
                if !self.artifact_sent && snap.artifact_json().is_some() {
                    out.push(stream_response(StreamEvent::Artifact(snap)));
                    self.artifact_sent = true;
                }
                out.push(stream_response(StreamEvent::Status(snap)));
            }
            Some(_) => return out,
        }
        self.sent = Some(snap.changed);
        // Unlike a stream, a delivery goes on past TASK_STATE_INPUT_REQUIRED: the task does.
        self.done = snap.state.is_terminal();
        out
    }
}

/// Starts the delivery of `params` for `task` on the current (door) thread.
pub(super) fn start(
    board: Arc<Board>,
    task: TaskSnapshot,
    params: Arc<ConfigParams>,
    stop: watch::Receiver<bool>,
    done: Arc<AtomicBool>,
) {
    actix_rt::spawn(async move {
        follow(board, task, params, stop).await;
        done.store(true, Ordering::Relaxed);
    });
}

async fn follow(board: Arc<Board>, task: TaskSnapshot, params: Arc<ConfigParams>, mut stop: watch::Receiver<bool>) {
    let task_id = task.id.clone();
    let mut rx = board.changes();
    let mut first = Some(task);
    let mut tracker = Tracker::default();
    loop {
        // Marked seen before reading, so a change after the read wakes the loop.
        rx.borrow_and_update();
        // The opening snapshot may be older than the mark: the board is read again after it.
        let opening = first.is_some();
        let Some(snap) = first.take().or_else(|| board.get(&task_id)) else {
            return;
        };
        for update in tracker.owed(&snap) {
            let body = crate::door::jsonrpc::to_bytes(&update);
            if !deliver(&params, body, &mut stop).await {
                return;
            }
        }
        if tracker.done {
            return;
        }
        if opening {
            continue;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// One update, retried by the plan. `false` when the delivery was stopped meanwhile.
async fn deliver(params: &ConfigParams, body: Vec<u8>, stop: &mut watch::Receiver<bool>) -> bool {
    let mut made = 0;
    loop {
        if *stop.borrow() {
            return false;
        }
        made += 1;
        let attempt = tokio::select! {
            a = post(params, body.clone()) => a,
            _ = stop.changed() => return false,
        };
        match push::next(made, attempt) {
            Next::Delivered => return true,
            Next::GiveUp => {
                tracing::debug!(attempts = made, "a push notification update was given up");
                return true;
            }
            Next::Retry(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return false,
                }
            }
        }
    }
}

/// A webhook name's addresses, within the delivery's bound.
pub(super) async fn resolve(name: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    match tokio::time::timeout(push::TIMEOUT, tokio::net::lookup_host((name, port))).await {
        Ok(Ok(addrs)) => Ok(addrs.map(|a| a.ip()).collect()),
        Ok(Err(_)) => Err(format!("{name} cannot be resolved")),
        Err(_) => Err(format!("{name} was not resolved within {} s", push::TIMEOUT.as_secs())),
    }
}

/// The one address this POST connects to, judged now.
pub(super) async fn target(params: &ConfigParams) -> Result<SocketAddr, String> {
    let w = &params.webhook;
    let ip = match &w.host {
        Host::Ip(ip) => {
            may_connect(w.scheme, *ip)?;
            *ip
        }
        Host::Localhost => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Host::Name(name) => {
            let addrs = resolve(name, w.port).await?;
            if let Some(why) = push::resolved_refusal(w.scheme, name, &addrs) {
                return Err(why);
            }
            addrs[0]
        }
    };
    Ok(SocketAddr::new(ip, w.port))
}

/// One POST of `body`: the webhook's status, or a failure. Neither the token nor the credentials
/// is ever in an error or a log line.
async fn post(params: &ConfigParams, body: Vec<u8>) -> Attempt {
    let addr = match target(params).await {
        Ok(a) => a,
        Err(why) => {
            tracing::debug!(%why, "a push notification's webhook was refused at delivery");
            return Attempt::Failed;
        }
    };
    // TLS over `addr` for `https://` (the URL's host names the certificate), this user's
    // loopback listener for `http://`.
    let route = crate::outbound::Route::Pinned {
        https: params.webhook.scheme == Scheme::Https,
        addr,
    };
    let bounds = crate::outbound::Bounds {
        connect: push::TIMEOUT,
        request: Some(push::TIMEOUT),
        keep_alive: None,
    };
    let Ok(http) = crate::outbound::Client::new(route, bounds) else {
        return Attempt::Failed;
    };
    let mut req = http
        .post(&params.webhook.request_url())
        .insert_header((CONTENT_TYPE, HeaderValue::from_static(A2A_JSON)));
    if let Some(v) = params
        .token
        .as_ref()
        .and_then(|t| crate::outbound::credential(t.reveal()))
    {
        req = req.insert_header((TOKEN_HEADER, v));
    }
    if let Some(v) = params
        .auth
        .as_ref()
        .and_then(|a| crate::outbound::credential(&format!("{} {}", a.scheme, a.credentials.reveal())))
    {
        req = req.insert_header((AUTHORIZATION, v));
    }
    // The reply's body is never read: only its status counts.
    match tokio::time::timeout(push::TIMEOUT, req.send_body(body)).await {
        Ok(Ok(resp)) => Attempt::Status(resp.status().as_u16()),
        _ => Attempt::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{Origin, TaskState, Trust};

    fn snap(state: TaskState, changed: u64, answer: Option<&str>) -> TaskSnapshot {
        TaskSnapshot {
            id: "tsk_1".into(),
            context_id: "ctx_1".into(),
            state,
            timestamp: chrono::DateTime::from_timestamp(0, 0).unwrap_or_default(),
            status_text: None,
            status_message_id: None,
            answer: answer.map(str::to_string),
            no_answer_below: None,
            owner: None,
            trust: Trust::Untrusted,
            origin: Origin::Event,
            changed,
            history: Vec::new(),
            asked_by: Vec::new(),
            cost: None,
        }
    }

    fn kinds(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|u| u.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_default())
            .collect()
    }

    /// The task first, a status per change seen, the artifact once before the status that ends
    /// the task, nothing for a state seen already, and done only at a terminal state.
    #[test]
    fn updates_are_owed_once_each_in_order() {
        let mut t = Tracker::default();
        assert_eq!(kinds(&t.owed(&snap(TaskState::Submitted, 1, None))), ["task"]);
        assert!(t.owed(&snap(TaskState::Submitted, 1, None)).is_empty());
        assert_eq!(kinds(&t.owed(&snap(TaskState::Working, 2, None))), ["statusUpdate"]);
        let ask = t.owed(&snap(TaskState::InputRequired, 3, None));
        assert_eq!(kinds(&ask), ["statusUpdate"]);
        assert!(!t.done, "a delivery goes on past a question");
        let end = t.owed(&snap(TaskState::Completed, 5, Some("ok")));
        assert_eq!(kinds(&end), ["artifactUpdate", "statusUpdate"]);
        assert_eq!(end[1]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
        assert!(t.done);

        // A task already completed when the config came: the task (with its artifact) alone.
        let mut late = Tracker::default();
        let first = late.owed(&snap(TaskState::Completed, 9, Some("ok")));
        assert_eq!(kinds(&first), ["task"]);
        assert_eq!(first[0]["task"]["artifacts"][0]["parts"][0]["text"], "ok");
        assert!(late.done);
    }
}
