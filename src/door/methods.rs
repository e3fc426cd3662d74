//! The A2A methods a door serves (docs/reference/door.md#methods), dispatched after the pipeline's
//! steps 7–12, their params validated by `params`. Visibility, from the same section, is applied
//! here: a task the caller may not see is answered exactly as an unknown id.

use serde_json::{Map, Value};

use super::call::{Call, Reply};
use super::jsonrpc::{self, A2aError, Method, RpcError};
use super::params::{Offer, history_length, parse_list, parse_offer, task_id};
use super::push;
use super::replay;
use super::sse::Start;
use super::view::TaskObject as _;
use crate::tasks::{AnswerRefusal, CancelResult, NewTask, Pinned, TaskSnapshot, TaskState};
use crate::wire::replay::Since;

pub async fn dispatch(method: Method, params: &Map<String, Value>, call: &Call<'_>) -> Reply {
    let r = match method {
        // Boxed: the send future is large, and held inline it would make every request's
        // handler future large too (a bigger allocation per GetTask, for a method it never runs).
        Method::SendMessage => Box::pin(send(params, call, false)).await,
        Method::SendStreamingMessage => Box::pin(send(params, call, true)).await,
        Method::GetTask => get_task(params, call),
        Method::CancelTask => cancel_task(params, call),
        Method::ListTasks => list_tasks(params, call),
        Method::SubscribeToTask => subscribe(params, call),
        Method::GetExtendedAgentCard => Ok(Reply::Result(call.card.extended().clone())),
        // Boxed as `send` is: it may resolve the webhook's name.
        Method::CreatePushConfig => Ok(Box::pin(push::create(params, call)).await),
        Method::GetPushConfig => push::get(params, call),
        Method::ListPushConfigs => push::list(params, call),
        Method::DeletePushConfig => push::delete(params, call),
        // Recognised for scope purposes only [ours].
        Method::WatchSession | Method::StopSession => Err(RpcError::plain(super::jsonrpc::METHOD_NOT_FOUND)),
    };
    r.unwrap_or_else(Reply::Error)
}

async fn send(params: &Map<String, Value>, call: &Call<'_>, streaming: bool) -> Result<Reply, RpcError> {
    let offer = parse_offer(params, &call.card.facts.input_modes)?;
    // Judged before the task exists, so a refused webhook starts nothing.
    let push_config = push::from_send(params).await?;
    if offer.task_id.is_some() {
        if push_config.is_some() {
            return Err(RpcError::invalid_param(
                "configuration.taskPushNotificationConfig",
                "comes only with a new task; CreateTaskPushNotificationConfig adds one to a task that exists",
            ));
        }
        return answer(offer, call, streaming).await;
    }
    if push_config.is_some() {
        call.push.check_room(call.board)?;
    }
    // A client outside the formation may narrow the task's deadline and budget; a member's call
    // is bounded by its grant alone, so what it writes in metadata is not read
    // (docs/reference/formation.md#limits-across-the-formations-edge).
    let limits = match call.caller.member_name() {
        Some(_) => None,
        None => {
            let metadata = params.get("message").and_then(|m| m.get("metadata"));
            crate::wire::limits::read(metadata).map_err(|why| RpcError::invalid_param("message.metadata", &why))?
        }
    };
    // Pinned until the reply is built: the task's end must not be forgotten before it is shown.
    let (snap, pin) = call.board.submit_pinned(NewTask {
        text: offer.text,
        context_id: offer.context_id,
        message_id: offer.message_id,
        owner: call.caller.owner(),
        caller_member: call.caller.member_name().map(str::to_string),
        origin: call.provenance.origin,
        trust: call.provenance.trust,
        traceparent: call.traceparent.clone(),
        grant: call.grant.clone(),
        limits,
    });
    if let Some(p) = push_config {
        // Room was checked above, with no await since: a new task holds no config yet.
        call.push.add(call, snap.clone(), p)?;
    }
    // A stream opens with the task as it was created, so every stream shows where it started.
    reply_with(
        call,
        snap,
        pin,
        streaming,
        (offer.return_immediately, offer.history_length),
    )
    .await
}

/// SendMessage's reply, or SendStreamingMessage's stream opening with `snap`.
async fn reply_with(
    call: &Call<'_>,
    snap: TaskSnapshot,
    pin: Pinned,
    streaming: bool,
    (return_immediately, history_length): (bool, Option<usize>),
) -> Result<Reply, RpcError> {
    if streaming {
        return Ok(Reply::Stream {
            task_id: snap.id.clone(),
            start: Start::Task(Some(Box::new(snap))),
            pin,
        });
    }
    settled_reply(call, snap, pin, return_immediately, history_length).await
}

/// A blocking SendMessage's `{"task":Task}`: the task once it is terminal or asks for input
/// (A2A v1.0: the wait ends at an interrupted state too), or at once with `returnImmediately`.
async fn settled_reply(
    call: &Call<'_>,
    snap: TaskSnapshot,
    pin: Pinned,
    return_immediately: bool,
    history_length: Option<usize>,
) -> Result<Reply, RpcError> {
    let settled = |s: &TaskSnapshot| s.state.is_terminal() || s.state == TaskState::InputRequired;
    let mut snap = if return_immediately || settled(&snap) {
        snap
    } else {
        call.board.wait_settled(&snap.id).await.unwrap_or(snap)
    };
    snap.limit_history(history_length);
    if snap.state.is_terminal() {
        call.board.mark_end_shown(&snap.id);
    }
    let reply = jsonrpc::object([("task", snap.to_json(true))]);
    drop(pin);
    Ok(Reply::Result(reply))
}

/// A message naming a task answers the question it asked (docs/reference/door.md#asking): the
/// caller must see the task (else `-32001`, A2A v1.0 §3.1.2: "does not exist or is not
/// accessible"), and it must be waiting for input; a terminal task is `-32004` (A2A v1.0 §3.1.1:
/// "Messages sent to Tasks that are in a terminal state … cannot accept further messages"), and
/// so is a live one that asked nothing, or whose question another answer already took.
async fn answer(offer: Offer, call: &Call<'_>, streaming: bool) -> Result<Reply, RpcError> {
    let id = offer.task_id.as_deref().unwrap_or_default();
    // Pinned first, so the task cannot be forgotten between the answer and the reply.
    let pin = call.board.pin(id).ok_or_else(RpcError::too_many_open)?;
    let task = visible(call, id)?;
    if offer.context_id.as_ref().is_some_and(|c| *c != task.context_id) {
        return Err(RpcError::invalid_param(
            "message.contextId",
            "names another context than the task's; leave it out or send the task's own",
        ));
    }
    if offer.text.trim().is_empty() {
        return Err(RpcError::invalid_param(
            "message.parts",
            "an answer needs text: the task asked a question",
        ));
    }
    let snap = match call
        .board
        .answer(id, &offer.text, &offer.message_id, |owner| call.caller.sees(owner))
    {
        Ok(snap) => snap,
        Err(AnswerRefusal::NotFound) => return Err(A2aError::task_not_found(id)),
        Err(AnswerRefusal::Ended(t) | AnswerRefusal::NotAsking(t)) => {
            return Err(A2aError::UnsupportedOperation.with(&[("taskId", &t.id), ("state", t.state.wire())]));
        }
    };
    reply_with(
        call,
        snap,
        pin,
        streaming,
        (offer.return_immediately, offer.history_length),
    )
    .await
}

/// The task when it exists and the caller may see it.
fn visible(call: &Call<'_>, id: &str) -> Result<TaskSnapshot, RpcError> {
    call.board
        .get(id)
        .filter(|t| call.caller.sees(t.owner.as_deref()))
        .ok_or_else(|| A2aError::task_not_found(id))
}

fn get_task(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let id = task_id(params)?;
    let limit = history_length(params, "historyLength")?;
    let mut t = visible(call, id)?;
    if t.state.is_terminal() {
        call.board.mark_end_shown(&t.id);
    }
    t.limit_history(limit);
    Ok(Reply::Task(t))
}

fn cancel_task(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let id = task_id(params)?;
    visible(call, id)?;
    // A cancel that arrives after the task's deadline (its caller's, ended by the same deadline)
    // ends it for the deadline, as its own timer would have a moment later.
    let reason = match call.board.deadline_of(id) {
        Some(deadline) if deadline <= crate::timing::unix_ms() => crate::grant::deadline_reason(deadline),
        _ => format!("canceled by CancelTask from {}", call.caller.name()),
    };
    match call.board.cancel(id, &reason) {
        CancelResult::Canceled(t) => Ok(Reply::Task(t)),
        CancelResult::NotCancelable(_) => Err(A2aError::TaskNotCancelable.with(&[("taskId", id)])),
        CancelResult::NotFound => Err(A2aError::task_not_found(id)),
    }
}

fn subscribe(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let id = task_id(params)?;
    // Pinned before it is looked at, so a live task cannot be forgotten before the stream ends.
    let pin = call.board.pin(id).ok_or_else(RpcError::too_many_open)?;
    let t = visible(call, id)?;
    let terminal = || A2aError::UnsupportedOperation.with(&[("taskId", id)]);
    let Some(after) = call.last_event_id else {
        if t.state.is_terminal() {
            return Err(terminal());
        }
        return Ok(Reply::Stream {
            task_id: t.id,
            start: Start::Task(None),
            pin,
        });
    };
    // A stream that reconnects: what it missed, if anything (a task that ended since is
    // streamed to its end); a task that ended and owes it nothing is refused as any ended one.
    let log = call.board.stream_log(id).ok_or_else(|| A2aError::task_not_found(id))?;
    let mut log = crate::sync::lock(&log);
    let now = replay::catch_up(call.board, id, &mut log, None).ok_or_else(|| A2aError::task_not_found(id))?;
    match log.events.since(after) {
        Since::Ahead => Err(RpcError::invalid_param(
            "Last-Event-ID",
            "names no event of this task's stream",
        )),
        Since::Events(missed) if missed.is_empty() && now.state.is_terminal() => Err(terminal()),
        _ => Ok(Reply::Stream {
            task_id: t.id,
            start: Start::After(after),
            pin,
        }),
    }
}

fn list_tasks(params: &Map<String, Value>, call: &Call<'_>) -> Result<Reply, RpcError> {
    let (q, include_artifacts) = parse_list(params)?;
    let page = call.board.list(&q, |owner| call.caller.sees(owner));
    let tasks: Vec<Value> = page
        .tasks
        .into_iter()
        .map(|mut t| {
            t.limit_history(q.history);
            t.to_json(include_artifacts)
        })
        .collect();
    Ok(Reply::Result(jsonrpc::object([
        (
            "nextPageToken",
            Value::from(page.next.map(|n| n.to_string()).unwrap_or_default()),
        ),
        // The page size used (a2a.proto `ListTasksResponse.page_size`).
        ("pageSize", Value::from(q.page_size)),
        ("tasks", Value::Array(tasks)),
        ("totalSize", Value::from(page.total)),
    ])))
}
