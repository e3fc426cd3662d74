//! One call's life on the wire (docs/reference/capsules.md#calls-between-members, step 5 on), run
//! as a local task on the session's actix arbiter.
//!
//! 1. Resolve the callee through the VirtualPeerRouter and check the real door URL against the
//!    caller's `capabilities.network.allow`.
//! 2. Send the task (SendMessage, `returnImmediately`) and report the dispatch: started, busy, or
//!    ended at once.
//! 3. Busy: offer the task again after 1 s, doubling to 8 s, plus a deterministic jitter, until
//!    the callee takes it, refuses it otherwise, stays unreachable, or the bound passes.
//! 4. Started: follow the callee's task with SubscribeToTask, so its end (or its question:
//!    `TASK_STATE_INPUT_REQUIRED` is an outcome of the call too) is seen the moment it
//!    happens, then read the outcome with GetTask; when the stream fails, poll GetTask every
//!    500 ms. Two consecutive transport failures mean the door is lost, unless the stream
//!    already showed the task end (its door gone with its session): then that is the outcome.
//!    A lost door waits for the launcher's word: the new door of a restarted process, where
//!    the call follows the same task, or the member's withdrawal, which ends the call
//!    `unreachable`. The bound ends it `timed_out` and leaves the callee's task running.
//!
//! The caller giving up (its task ended) stops the watcher at once, and the callee's task is
//! cancelled (`book`). An offer still in flight at that moment (or a re-offer when the bound
//! passes) is let finish, and if the callee took the task after all, it is cancelled with
//! CancelTask `<call id>-cancel`
//! (docs/reference/capsules.md#calls-between-members).

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::book::{CallSlot, TaskInner, report_ended};
use super::client::{DoorClient, Subscription};
use super::router::{self, Resolution};
use super::wire::{self, Ended, Poll, SendReply, SseReader, StreamNews, StreamedTask};
use super::{DispatchKind, Dispatched};
use crate::runner::CallStatus;
use crate::wire::jsonrpc::Method;

/// Which came first.
enum Race<T> {
    Done(T),
    Deadline,
    GaveUp,
}

/// A call ended `unreachable`: the callee's door was withdrawn or its transport failed.
fn unreachable(member: &str, why: impl std::fmt::Display) -> Ended {
    Ended::new(
        CallStatus::Unreachable,
        format!("{member}'s door could not be reached: {why}"),
    )
}

/// Runs `fut` until it ends, the bound passes, or the caller gives up.
async fn race<T>(fut: impl Future<Output = T>, deadline: Instant, slot: &CallSlot) -> Race<T> {
    tokio::select! {
        biased;
        _ = slot.gave_up() => Race::GaveUp,
        v = fut => Race::Done(v),
        _ = tokio::time::sleep_until(deadline.into()) => Race::Deadline,
    }
}

/// A call from dispatch to outcome. `report` gets the dispatch result as soon as it is known.
pub(crate) async fn run_call(
    inner: Arc<TaskInner>,
    slot: Arc<CallSlot>,
    task: String,
    report: oneshot::Sender<Dispatched>,
) {
    let timing = inner.shared.timing;
    let deadline = slot.started + timing.call_bound;
    let member = slot.member.clone();
    let ended_now = |ended: Ended| {
        inner.settle(&slot, ended);
        report_ended(&slot)
    };

    // 1. Route: the same refusal whatever the reason, before any connection
    // (docs/reference/capsules.md#calls-by-address).
    let route = match race(router::resolve(&inner.shared.router, &member), deadline, &slot).await {
        Race::Done(Resolution::Route(r)) => r,
        Race::Done(Resolution::Denied(router::Denial::Withdrawn)) => {
            let _ = report.send(ended_now(unreachable(&member, router::Denial::Withdrawn.reason())));
            return;
        }
        Race::Done(Resolution::Denied(d)) => {
            let _ = report.send(ended_now(Ended::new(
                CallStatus::Rejected,
                format!("the runtime refused to route the call to {member}: {}", d.reason()),
            )));
            return;
        }
        Race::Deadline => {
            let _ = report.send(ended_now(Ended::new(
                CallStatus::Rejected,
                format!(
                    "the runtime refused to route the call to {member}: its door address did not \
                     arrive before the call's bound"
                ),
            )));
            return;
        }
        Race::GaveUp => return,
    };
    if !inner.shared.allow.allows_url(&route.url) {
        let _ = report.send(ended_now(Ended::new(
            CallStatus::Rejected,
            format!(
                "the runtime refused to route the call to {member}: this capsule's \
                 capabilities.network.allow does not reach its door; declare \"localhost\""
            ),
        )));
        return;
    }
    slot.set_door_url(&route.url);
    let client = Rc::new(
        DoorClient::new(route, inner.trust, timing.answer_request)
            .with_traceparent(slot.traceparent.clone())
            .with_grant(slot.grant.clone()),
    );

    // 2. The first offer; a reply's is the answer to the callee's waiting task.
    let body = match &slot.reply_to {
        Some(r) => wire::answer_body(&slot.call_id, &r.member_task_id, &task),
        None => wire::send_message_body(&slot.call_id, &slot.call_id, &task),
    };
    // Spawned, so an offer in flight when the caller gives up can still be answered: if the
    // callee took the task after all, it is cancelled.
    let mut in_flight = {
        let client = Rc::clone(&client);
        let send = timing.call_send;
        actix_rt::spawn(async move { client.post(body, send).await })
    };
    let sent = match race(&mut in_flight, deadline, &slot).await {
        Race::Done(joined) => joined.unwrap_or_else(|e| Err(e.to_string())),
        Race::Deadline => {
            in_flight.abort();
            let _ = report.send(ended_now(Ended::new(
                CallStatus::Unreachable,
                format!("{member}'s door did not answer before the call's bound"),
            )));
            return;
        }
        Race::GaveUp => {
            cancel_if_taken(&client, &slot, in_flight, timing.answer_request);
            return;
        }
    };
    let reply = match sent {
        Ok(reply) => wire::read_send_reply(&member, reply.status, &reply.body),
        Err(e) => {
            let _ = report.send(ended_now(unreachable(&member, e)));
            return;
        }
    };
    match reply {
        // The task ended while the reply was read: the call is already written off, and what
        // the callee took is cancelled.
        SendReply::Started { task_id } if slot.given_up() => {
            cancel_taken(&client, &slot, &task_id, timing.answer_request).await;
        }
        _ if slot.given_up() => {}
        SendReply::Started { task_id } => {
            slot.set_member_task(&task_id);
            // Given up just as the task was named: the book may not have seen its id to cancel it.
            if slot.given_up() {
                cancel_taken(&client, &slot, &task_id, timing.answer_request).await;
                return;
            }
            inner.trace_start(&slot, &task_id);
            let _ = report.send(Dispatched {
                call_id: slot.call_id.clone(),
                member: member.clone(),
                kind: DispatchKind::Started {
                    member_task_id: task_id.clone(),
                },
            });
            follow(&inner, &slot, client, &task_id, deadline).await;
        }
        SendReply::Busy => {
            inner.trace_busy(&slot, 1);
            let _ = report.send(Dispatched {
                call_id: slot.call_id.clone(),
                member: member.clone(),
                kind: DispatchKind::Busy,
            });
            if let Some(task_id) = reoffer(&inner, &slot, &client, &task, deadline).await {
                follow(&inner, &slot, client, &task_id, deadline).await;
            }
        }
        SendReply::Refused { status, output } => {
            let _ = report.send(ended_now(Ended::new(status, output)));
        }
    }
}

/// Offers the task again until the callee takes it (→ its task id) or the call ends.
async fn reoffer(
    inner: &TaskInner,
    slot: &CallSlot,
    client: &Rc<DoorClient>,
    task: &str,
    deadline: Instant,
) -> Option<String> {
    let timing = inner.shared.timing;
    let member = &slot.member;
    let stayed_busy = |offers: u32| {
        Ended::new(
            CallStatus::Rejected,
            format!(
                "{member} stayed busy with other work and did not take the task; it was offered \
                 {offers} time(s) within the call's bound of {}",
                span(timing.call_bound)
            ),
        )
    };
    let mut offer: u32 = 1;
    let mut failures = 0u32;
    loop {
        let next = offer + 1;
        let wait = wire::busy_wait(&slot.call_id, next, timing.busy_first, timing.busy_max);
        if Instant::now() + wait >= deadline {
            // No further offer fits in the bound: wait it out (a task ending first wins).
            match race(std::future::pending::<()>(), deadline, slot).await {
                Race::GaveUp => return None,
                _ => {
                    inner.settle(slot, stayed_busy(offer));
                    return None;
                }
            }
        }
        if let Race::GaveUp = race(tokio::time::sleep(wait), deadline, slot).await {
            return None;
        }
        offer = next;
        let body = wire::send_message_body(&format!("{}-{offer}", slot.call_id), &slot.call_id, task);
        // Spawned, so a re-offer in flight when the caller gives up can still be answered: if
        // the callee took the task after all, it is cancelled.
        let mut in_flight = {
            let client = Rc::clone(client);
            let send = timing.call_send;
            actix_rt::spawn(async move { client.post(body, send).await })
        };
        let sent = match race(&mut in_flight, deadline, slot).await {
            Race::Done(joined) => joined.unwrap_or_else(|e| Err(e.to_string())),
            gave_up_or_bound => {
                cancel_if_taken(client, slot, in_flight, timing.answer_request);
                if let Race::Deadline = gave_up_or_bound {
                    inner.settle(slot, stayed_busy(offer));
                }
                return None;
            }
        };
        match sent {
            Err(e) => {
                failures += 1;
                if failures >= 2 {
                    inner.settle(slot, unreachable(member, e));
                    return None;
                }
            }
            Ok(reply) => {
                failures = 0;
                match wire::read_send_reply(member, reply.status, &reply.body) {
                    // Given up between the reply and here: cancel what the callee took.
                    SendReply::Started { task_id } if slot.given_up() => {
                        cancel_taken(client, slot, &task_id, timing.answer_request).await;
                        return None;
                    }
                    SendReply::Started { task_id } => {
                        slot.set_member_task(&task_id);
                        if slot.given_up() {
                            cancel_taken(client, slot, &task_id, timing.answer_request).await;
                            return None;
                        }
                        inner.trace_start(slot, &task_id);
                        return Some(task_id);
                    }
                    SendReply::Busy => inner.trace_busy(slot, offer),
                    SendReply::Refused { status, output } => {
                        inner.settle(slot, Ended::new(status, output));
                        return None;
                    }
                }
            }
        }
    }
}

/// Cancels the callee's task `task_id`, which it took for a call the caller has given up on.
async fn cancel_taken(client: &DoorClient, slot: &CallSlot, task_id: &str, timeout: std::time::Duration) {
    if !super::book::cancels_go_out() {
        return;
    }
    let body = wire::task_method_body(Method::CancelTask, &format!("{}-cancel", slot.call_id), task_id);
    let _ = client.post(body, timeout).await;
}

/// Lets an offer in flight finish; if the callee took the task, cancels it
/// (docs/reference/capsules.md#calls-between-members).
fn cancel_if_taken(
    client: &Rc<DoorClient>,
    slot: &CallSlot,
    in_flight: tokio::task::JoinHandle<Result<super::client::Reply, String>>,
    timeout: std::time::Duration,
) {
    let client = Rc::clone(client);
    let (call_id, member) = (slot.call_id.clone(), slot.member.clone());
    actix_rt::spawn(async move {
        let Ok(Ok(reply)) = in_flight.await else {
            return;
        };
        if let SendReply::Started { task_id } = wire::read_send_reply(&member, reply.status, &reply.body)
            && super::book::cancels_go_out()
        {
            let body = wire::task_method_body(Method::CancelTask, &format!("{call_id}-cancel"), &task_id);
            let _ = client.post(body, timeout).await;
        }
    });
}

/// A call ended `timed_out`: the bound passed while the callee worked.
fn timed_out(member: &str, bound: std::time::Duration) -> Ended {
    Ended::new(
        CallStatus::TimedOut,
        format!(
            "{member} did not answer within the call's bound of {}; its task was left running",
            span(bound)
        ),
    )
}

/// How following the task at one door ended.
enum Followed {
    /// The call has its outcome (or the caller gave up).
    Settled,
    /// The door stopped answering: the transport error.
    Lost(String),
}

/// Follows the callee's task `task_id` until the call has an outcome. When its door stops
/// answering, the call waits for the launcher's word: a new door of a restarted process, where it
/// follows the same task (its store kept it), or the member's withdrawal, which ends the call
/// `unreachable` (docs/reference/formation.md#calls-across-a-restart).
async fn follow(inner: &TaskInner, slot: &CallSlot, client: Rc<DoorClient>, task_id: &str, deadline: Instant) {
    let timing = inner.shared.timing;
    let member = &slot.member;
    let mut client = client;
    let mut streamed = StreamedTask::default();
    loop {
        let lost = match follow_at(inner, slot, &client, task_id, deadline, &mut streamed).await {
            Followed::Settled => return,
            Followed::Lost(e) => e,
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        let moved = router::resolve_moved(&inner.shared.router, member, client.door(), wait);
        match race(moved, deadline, slot).await {
            Race::GaveUp => return,
            Race::Deadline => {
                inner.settle(slot, timed_out(member, timing.call_bound));
                return;
            }
            Race::Done(Resolution::Route(route)) if inner.shared.allow.allows_url(&route.url) => {
                slot.set_door_url(&route.url);
                client = Rc::new(client.moved(route, timing.answer_request));
            }
            Race::Done(_) => {
                inner.settle(
                    slot,
                    Ended::new(
                        CallStatus::Unreachable,
                        format!("{member}'s door stopped answering while it worked on the task: {lost}"),
                    ),
                );
                return;
            }
        }
    }
}

/// Follows `task_id` at one door: a stream, then GetTask polls.
async fn follow_at(
    inner: &TaskInner,
    slot: &CallSlot,
    client: &DoorClient,
    task_id: &str,
    deadline: Instant,
    streamed: &mut StreamedTask,
) -> Followed {
    let timing = inner.shared.timing;
    let member = &slot.member;
    let timed_out = || timed_out(member, timing.call_bound);
    let mut failures = 0u32;

    // The stream first: its terminal event is the signal to read the outcome.
    let body = wire::task_method_body(Method::SubscribeToTask, &slot.call_id, task_id);
    match race(client.subscribe(body, timing.answer_request), deadline, slot).await {
        Race::GaveUp => return Followed::Settled,
        Race::Deadline => {
            inner.settle(slot, timed_out());
            return Followed::Settled;
        }
        Race::Done(Err(_)) => failures += 1,
        // A refusal (e.g. the task already ended): GetTask tells the rest.
        Race::Done(Ok(Subscription::NotAStream)) => {}
        Race::Done(Ok(Subscription::Stream(mut stream))) => {
            let mut sse = SseReader::default();
            'stream: loop {
                match race(stream.chunk(), deadline, slot).await {
                    Race::GaveUp => return Followed::Settled,
                    Race::Deadline => {
                        inner.settle(slot, timed_out());
                        return Followed::Settled;
                    }
                    // The door closes a stream only after a terminal state, so an end or a read
                    // error before one means the connection was lost.
                    Race::Done(Ok(None)) | Race::Done(Err(_)) => {
                        failures += 1;
                        break 'stream;
                    }
                    Race::Done(Ok(Some(bytes))) => {
                        let Ok(events) = sse.push(&bytes) else {
                            break 'stream;
                        };
                        for e in &events {
                            streamed.apply(e);
                            match wire::stream_news(e) {
                                StreamNews::Live => {}
                                StreamNews::Terminal | StreamNews::Error => break 'stream,
                            }
                        }
                    }
                }
            }
        }
    }

    // GetTask: at once after the stream, then every poll interval.
    let body = wire::task_method_body(Method::GetTask, &slot.call_id, task_id);
    loop {
        match race(client.post(body.clone(), timing.answer_request), deadline, slot).await {
            Race::GaveUp => return Followed::Settled,
            Race::Deadline => {
                inner.settle(slot, timed_out());
                return Followed::Settled;
            }
            Race::Done(Err(e)) => {
                // The stream showed the task end: its outcome stands even though the door has
                // gone (a callee whose session ended with that task).
                if let Some(ended) = streamed.ended(member) {
                    inner.settle(slot, ended);
                    return Followed::Settled;
                }
                failures += 1;
                if failures >= 2 {
                    return Followed::Lost(e);
                }
            }
            Race::Done(Ok(reply)) => {
                failures = 0;
                if let Poll::Ended(ended) = wire::read_get_task(member, reply.status, &reply.body) {
                    inner.settle(slot, ended);
                    return Followed::Settled;
                }
            }
        }
        match race(tokio::time::sleep(timing.answer_poll), deadline, slot).await {
            Race::GaveUp => return Followed::Settled,
            Race::Deadline => {
                inner.settle(slot, timed_out());
                return Followed::Settled;
            }
            Race::Done(()) => {}
        }
    }
}

/// A bound as text: `600 s`, or `250 ms` when it is not whole seconds (shortened in tests).
fn span(d: std::time::Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
