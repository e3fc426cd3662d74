use super::*;
use crate::tasks::retention::{MAX_PINNED_BYTES, MAX_PINNED_TASKS};

fn offer(text: &str) -> NewTask {
    NewTask {
        text: text.into(),
        context_id: None,
        message_id: "m1".into(),
        owner: Some("operator".into()),
        caller_member: None,
        origin: Origin::Event,
        trust: Trust::Untrusted,
        traceparent: None,
        grant: None,
        limits: None,
    }
}

fn fixed_clock() -> Clock {
    Arc::new(|| DateTime::from_timestamp_millis(1_700_000_000_123).unwrap_or_default())
}

fn states(board: &Board, offers: usize) -> Vec<&'static str> {
    (0..offers)
        .map(|i| board.submit(offer(&format!("t{i}"))).state.wire())
        .collect()
}

#[test]
fn admission_follows_acceptance() {
    const S: &str = "TASK_STATE_SUBMITTED";
    const R: &str = "TASK_STATE_REJECTED";
    let table: &[(Acceptance, u32, usize, &[&str])] = &[
        (Acceptance::None, 3, 2, &[R, R]),
        (Acceptance::Single, 3, 3, &[S, R, R]),
        // Nothing runs yet: one will run and `depth` wait.
        (Acceptance::Queue, 0, 2, &[S, R]),
        (Acceptance::Queue, 2, 4, &[S, S, S, R]),
    ];
    for (acc, depth, n, want) in table {
        let b = Board::new(*acc, *depth);
        assert_eq!(states(&b, *n), *want, "{acc:?} depth {depth}");
    }
}

#[actix_rt::test]
async fn queue_counts_only_tasks_waiting_behind_the_running_one() {
    let b = Board::new(Acceptance::Queue, 1);
    assert_eq!(b.submit(offer("a")).state, TaskState::Submitted);
    let w = b.next_work().await.expect("work");
    assert_eq!(w.text, "a");
    assert_eq!(b.get(&w.task_id).map(|t| t.state), Some(TaskState::Working));
    assert_eq!(b.submit(offer("b")).state, TaskState::Submitted);
    let c = b.submit(offer("c"));
    assert_eq!(
        (c.state, c.status_text.as_deref()),
        (TaskState::Rejected, Some(REJECT_BUSY))
    );
    b.finish(&w.task_id, TaskOutcome::Completed("A".into()));
    drop(w);
    let w2 = b.next_work().await.expect("work");
    assert_eq!(w2.text, "b");
}

#[actix_rt::test]
async fn an_idle_executor_waits_without_waking_itself() {
    let b = Board::new(Acceptance::Queue, 1);
    let mut rx = b.changes();
    rx.borrow_and_update();
    let idle = std::time::Duration::from_millis(20);
    assert!(tokio::time::timeout(idle, b.next_work()).await.is_err());
    assert_eq!(rx.has_changed().ok(), Some(false), "waiting changed the board");
    // The same while a task runs: the next one waits for its end without spinning.
    b.submit(offer("a"));
    let w = b.next_work().await.expect("work");
    rx.borrow_and_update();
    assert!(tokio::time::timeout(idle, b.next_work()).await.is_err());
    assert_eq!(rx.has_changed().ok(), Some(false), "waiting changed the board");
    b.finish(&w.task_id, TaskOutcome::Completed("A".into()));
    drop(w);
    b.close();
    assert!(b.next_work().await.is_none(), "closed and drained");
}

#[actix_rt::test]
async fn single_slot_is_used_by_the_local_task() {
    let b = Board::new(Acceptance::Single, 0);
    let t = b.submit_local("local");
    assert_eq!(
        (t.state, t.trust, t.owner.clone()),
        (TaskState::Submitted, Trust::Trusted, None)
    );
    assert_eq!(b.submit(offer("x")).status_text.as_deref(), Some(REJECT_BUSY));
    // A `none` door still runs its --task task.
    let n = Board::new(Acceptance::None, 0);
    assert_eq!(n.submit_local("t").state, TaskState::Submitted);
    assert_eq!(n.next_work().await.map(|w| w.text), Some("t".into()));
}

#[actix_rt::test]
async fn cancel_and_close() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let b = Board::new(Acceptance::Queue, 5);
    let sink = Arc::clone(&events);
    b.set_observer(move |e| lock(&sink).push(e.clone()));
    let a = b.submit(offer("a")).id;
    let q1 = b.submit(offer("b")).id;
    let q2 = b.submit(offer("c")).id;
    let w = b.next_work().await.expect("work");
    assert!(!w.cancel.is_cancelled());
    // Cancel a queued task: it leaves the queue.
    assert!(matches!(b.cancel(&q1, "r"), CancelResult::Canceled(s) if s.state == TaskState::Canceled));
    assert!(matches!(b.cancel(&q1, "r"), CancelResult::NotCancelable(_)));
    assert_eq!(b.cancel("tsk_nope", "r"), CancelResult::NotFound);
    b.close();
    assert!(w.cancel.is_cancelled());
    w.cancel.cancelled().await;
    assert_eq!(b.get(&a).map(|t| t.state), Some(TaskState::Canceled));
    let q2s = b.get(&q2).expect("q2");
    assert_eq!(
        (q2s.state, q2s.status_text.as_deref()),
        (TaskState::Rejected, Some(REJECT_CLOSING))
    );
    // The executor's late outcome does not overwrite the cancellation.
    assert_eq!(
        b.finish(&a, TaskOutcome::Completed("late".into())).map(|t| t.state),
        Some(TaskState::Canceled)
    );
    drop(w);
    assert!(b.next_work().await.is_none());
    assert_eq!(b.submit(offer("d")).status_text.as_deref(), Some(REJECT_CLOSING));
    assert_eq!(b.submit_local("e").status_text.as_deref(), Some(REJECT_CLOSING));
    let ends: Vec<(String, TaskState)> = lock(&events)
        .iter()
        .filter_map(|e| match e {
            BoardEvent::Ended { task_id, state, .. } => Some((task_id.clone(), *state)),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends[..3],
        [
            (q1, TaskState::Canceled),
            (q2, TaskState::Rejected),
            (a, TaskState::Canceled)
        ]
    );
    assert_eq!(
        lock(&events)
            .iter()
            .filter(|e| matches!(e, BoardEvent::Received { .. }))
            .count(),
        5
    );
}

#[actix_rt::test]
async fn dropped_work_fails_its_task_and_frees_the_slot() {
    let b = Board::new(Acceptance::Queue, 5);
    let a = b.submit(offer("a")).id;
    b.submit(offer("b"));
    drop(b.next_work().await);
    let t = b.get(&a).expect("a");
    assert_eq!((t.state, t.status_text.as_deref()), (TaskState::Failed, Some(LOST)));
    assert_eq!(b.next_work().await.map(|w| w.text), Some("b".into()));
}

#[actix_rt::test]
async fn streamed_answer_text_is_handed_out_once_and_gone_when_the_task_ends() {
    let b = Board::new(Acceptance::Queue, 5);
    let id = b.submit(offer("a")).id;
    let work = b.next_work().await.expect("work");
    let chunk = |turn, append, text: &str| {
        Some(AnswerChunk {
            turn,
            append,
            text: text.into(),
        })
    };
    let changed = b.get(&id).map(|s| s.changed);
    let mut rx = b.changes();
    rx.borrow_and_update();
    assert_eq!(b.streamed_since(&id, None), None);
    b.stream_text(&id, 1, "Hel");
    assert!(rx.has_changed().unwrap_or(false), "followers are woken");
    b.stream_text(&id, 1, "lo");
    // (what the follower has, what it is owed)
    let table = [
        (None, chunk(1, false, "Hello")),
        (Some((1, 3)), chunk(1, true, "lo")),
        (Some((1, 5)), None),
    ];
    for (have, want) in table {
        assert_eq!(b.streamed_since(&id, have), want, "{have:?}");
    }
    // A later turn starts over: a follower of turn 1 gets turn 2's text whole.
    b.stream_text(&id, 2, "Fin");
    assert_eq!(b.streamed_since(&id, Some((1, 5))), chunk(2, false, "Fin"));
    assert_eq!(b.streamed_since(&id, Some((2, 1))), chunk(2, true, "in"));
    assert_eq!(
        b.get(&id).map(|s| s.changed),
        changed,
        "streaming is not a status change"
    );
    b.finish(&id, TaskOutcome::Completed("Fin".into()));
    drop(work);
    assert_eq!(b.streamed_since(&id, None), None);
    b.stream_text(&id, 3, "late");
    assert_eq!(b.streamed_since(&id, None), None, "an ended task streams nothing");
}

fn keeping(tasks: usize, bytes: usize) -> Arc<Board> {
    Board::with_retention(Acceptance::Queue, 10, fixed_clock(), Retention { tasks, bytes })
}

/// Submits a task and ends it at once with `answer`.
fn complete(b: &Board, answer: &str) -> String {
    let id = b.submit(offer("q")).id;
    b.finish(&id, TaskOutcome::Completed(answer.into()));
    id
}

fn kept(b: &Board, ids: &[&String]) -> Vec<bool> {
    ids.iter().map(|id| b.get(id).is_some()).collect()
}

#[actix_rt::test]
async fn ended_tasks_are_forgotten_refused_first_then_oldest_first() {
    let b = Board::with_retention(
        Acceptance::Queue,
        0,
        fixed_clock(),
        Retention {
            tasks: 3,
            bytes: usize::MAX,
        },
    );
    let c1 = complete(&b, "1");
    let c2 = complete(&b, "2");
    // One runs; with no room to wait, the next two are refused.
    let s = b.submit(offer("s")).id;
    let w = b.next_work().await.expect("work");
    let r1 = b.submit(offer("r1")).id;
    let r2 = b.submit(offer("r2")).id;
    // Four ended (c1 c2 r1 r2): the older refusal goes, though c1 ended before it.
    assert_eq!(kept(&b, &[&c1, &c2, &r1, &r2, &s]), [true, true, false, true, true]);
    b.finish(&s, TaskOutcome::Completed("s".into()));
    drop(w);
    assert_eq!(kept(&b, &[&c1, &c2, &r2, &s]), [true, true, false, true]);
    // No refusal left: the oldest ended task goes.
    let c3 = complete(&b, "3");
    assert_eq!(kept(&b, &[&c1, &c2, &s, &c3]), [false, true, true, true]);
    assert_eq!(b.all().len(), 3);
}

#[test]
fn ended_tasks_are_kept_within_a_byte_budget() {
    let answer = "a".repeat(10_000);
    // Two such tasks fit, three do not.
    let b = keeping(100, 25_000);
    let ids: Vec<String> = (0..3).map(|_| complete(&b, &answer)).collect();
    assert_eq!(kept(&b, &[&ids[0], &ids[1], &ids[2]]), [false, true, true]);
    // The books match what is kept.
    let st = b.lock();
    let held: usize = st.books.ended().map(|id| footprint(&st.tasks[id])).sum();
    assert_eq!(st.books.kept_bytes(), held);
    assert!((20_000..25_000).contains(&held), "{held}");
    assert_eq!(st.tasks.len(), st.order.len());
    drop(st);
    // An answer bigger than the whole budget goes as soon as it has ended, and takes every
    // older one with it.
    let huge = complete(&b, &"h".repeat(30_000));
    assert_eq!(kept(&b, &[&ids[1], &ids[2], &huge]), [false, false, false]);
    assert_eq!(b.lock().books.kept_bytes(), 0);
}

#[actix_rt::test]
async fn over_the_byte_budget_answers_go_before_refusals() {
    let answer = "a".repeat(10_000);
    let b = Board::with_retention(
        Acceptance::Queue,
        0,
        fixed_clock(),
        Retention {
            tasks: 100,
            bytes: 25_000,
        },
    );
    let s = b.submit(offer("s")).id;
    let w = b.next_work().await.expect("work");
    let r = b.submit(offer("r")).id;
    assert_eq!(b.get(&r).map(|t| t.state), Some(TaskState::Rejected));
    b.finish(&s, TaskOutcome::Completed(answer.clone()));
    drop(w);
    let c2 = complete(&b, &answer);
    let c3 = complete(&b, &answer);
    // The refusal is older than every answer, yet holds next to nothing.
    assert_eq!(kept(&b, &[&r, &s, &c2, &c3]), [true, false, true, true]);
}

#[actix_rt::test]
async fn live_and_pinned_tasks_are_never_forgotten() {
    let b = keeping(0, 0);
    let ids: Vec<String> = (0..3).map(|i| b.submit(offer(&i.to_string())).id).collect();
    let w = b.next_work().await.expect("work");
    assert_eq!(kept(&b, &[&ids[0], &ids[1], &ids[2]]), [true, true, true]);
    // Cancelled while its executor still holds the slot: kept until it lets go.
    b.cancel(&ids[0], "r");
    assert_eq!(b.get(&ids[0]).map(|t| t.state), Some(TaskState::Canceled));
    b.cancel(&ids[1], "r");
    assert_eq!(kept(&b, &[&ids[0], &ids[1], &ids[2]]), [true, false, true]);
    drop(w);
    assert_eq!(kept(&b, &[&ids[0], &ids[2]]), [false, true]);
    // A pinned task outlives its end until the pin is dropped; so does a refused one.
    let (snap, pin) = b.submit_pinned(offer("p"));
    b.finish(&snap.id, TaskOutcome::Completed("done".into()));
    assert_eq!(
        b.wait_terminal(&snap.id).await.map(|t| t.state),
        Some(TaskState::Completed)
    );
    drop(pin);
    assert!(b.get(&snap.id).is_none());
    let none = Board::with_retention(Acceptance::None, 0, fixed_clock(), Retention { tasks: 0, bytes: 0 });
    let (refused, pin) = none.submit_pinned(offer("x"));
    assert_eq!(none.get(&refused.id).map(|t| t.state), Some(TaskState::Rejected));
    let again = none.pin(&refused.id).unwrap();
    drop(pin);
    assert!(none.get(&refused.id).is_some(), "a second pin still holds it");
    drop(again);
    assert!(none.get(&refused.id).is_none());
    assert_eq!(kept(&b, &[&ids[2]]), [true], "the queued task is still live");
}

#[test]
fn pinned_tasks_are_bounded_by_count_and_bytes_and_released_with_their_pins() {
    let b = Board::with_clock(Acceptance::Queue, u32::MAX, fixed_clock());
    let mut pins = Vec::new();
    for i in 0..MAX_PINNED_TASKS {
        let (snap, pin) = b.submit_pinned(offer(&format!("t{i}")));
        assert_eq!(snap.state, TaskState::Submitted, "{i}");
        pins.push(pin);
    }
    // Past the count: refused as busy, and no stream may pin a task either.
    let (over, refused_pin) = b.submit_pinned(offer("one more"));
    assert_eq!(over.state, TaskState::Rejected);
    assert_eq!(over.status_text.as_deref(), Some(REJECT_BUSY));
    let live = b.submit(offer("unpinned"));
    assert!(b.pin(&live.id).is_none());
    // A task pinned already may take another pin: it adds nothing.
    let first = pins[0].task_id.clone();
    assert!(b.pin(&first).is_some());
    pins.truncate(1);
    drop(refused_pin);
    assert_eq!(b.pinned().0, 1, "dropped pins are released");
    assert!(b.pin(&live.id).is_some());

    // Past the bytes: one offer of more than the bound is refused while others are pinned.
    let b = Board::with_clock(Acceptance::Queue, u32::MAX, fixed_clock());
    let half = "x".repeat(MAX_PINNED_BYTES / 2 + 1);
    let (a, pa) = b.submit_pinned(offer(&half));
    assert_eq!(a.state, TaskState::Submitted);
    let (c, _pc) = b.submit_pinned(offer(&half));
    assert_eq!(c.state, TaskState::Rejected);
    assert!(b.pinned().1 <= MAX_PINNED_BYTES);
    drop(pa);
    let (d, _pd) = b.submit_pinned(offer(&half));
    assert_eq!(d.state, TaskState::Submitted, "the bytes came back with the pin");
}

#[actix_rt::test]
async fn no_task_keeps_its_offer_once_it_cannot_run_it() {
    let big = "x".repeat(100_000);
    let none = Board::new(Acceptance::None, 0);
    let refused = none.submit(offer(&big)).id;
    assert!(none.lock().tasks[&refused].text.is_empty());
    let b = Board::new(Acceptance::Queue, 5);
    let ran = b.submit(offer(&big)).id;
    let queued = b.submit(offer(&big)).id;
    assert_eq!(b.lock().tasks[&queued].text.len(), big.len(), "a waiting task keeps it");
    let w = b.next_work().await.expect("work");
    assert_eq!(w.text.len(), big.len());
    assert!(b.lock().tasks[&ran].text.is_empty(), "the executor holds the one copy");
    b.cancel(&queued, "r");
    assert!(b.lock().tasks[&queued].text.is_empty());
}

/// A2A v1.0 §3.2.4 History Length Semantics; history is bounded in count and its bytes
/// count against the board's retention.
#[actix_rt::test]
async fn history_is_bounded_limited_and_paid_for() {
    let b = keeping(100, usize::MAX);
    let id = b.submit(offer("the question")).id;
    let w = b.next_work().await.expect("work");
    for i in 0..HISTORY_MESSAGES + 5 {
        b.set_working(&id, Some(&format!("note {i}")));
    }
    b.finish(&id, TaskOutcome::Completed("the answer".into()));
    drop(w);
    let t = b.get(&id).expect("task");
    assert_eq!(t.history.len(), HISTORY_MESSAGES);
    let texts: Vec<&str> = t.history.iter().map(|m| t.history_text(m)).collect();
    assert_eq!(texts.first(), Some(&"the question"), "the caller's message stays");
    assert_eq!(texts.last(), Some(&"the answer"), "the final word stays");
    for (limit, len) in [
        (None, HISTORY_MESSAGES),
        (Some(3), 3),
        (Some(0), 0),
        (Some(1000), HISTORY_MESSAGES),
    ] {
        let mut l = t.clone();
        l.limit_history(limit);
        assert_eq!(l.history.len(), len, "{limit:?}");
    }
    // The caller's message is paid for once the task has ended: a budget its answer alone
    // fits in, but not with a long question, forgets it.
    let tight = keeping(100, 30_000);
    let asked = tight.submit(offer(&"q".repeat(20_000))).id;
    let w = tight.next_work().await.expect("work");
    tight.finish(&asked, TaskOutcome::Completed("a".repeat(20_000)));
    drop(w);
    assert!(tight.get(&asked).is_none(), "question and answer exceed the budget");
    assert_eq!(tight.lock().books.kept_bytes(), 0);
    // A refused offer keeps no text, in the history neither: only the refusal.
    let none = Board::new(Acceptance::None, 0);
    let r = none.submit(offer(&"x".repeat(100_000)));
    assert_eq!(r.history.len(), 1);
    assert_eq!(r.history[0].role, Role::Agent);
}

/// A2A v1.0 §3.4.2 "Context Continuity" / "Context Inheritance", with
/// docs/reference/door.md#methods visibility: a task sees the completed exchanges of its
/// context its owner may see.
#[actix_rt::test]
async fn a_task_is_handed_the_visible_exchanges_of_its_context() {
    let b = Board::new(Acceptance::Queue, 100);
    let in_ctx = |text: &str, ctx: &str, owner: Option<&str>| NewTask {
        context_id: Some(ctx.into()),
        owner: owner.map(str::to_string),
        ..offer(text)
    };
    let run = |b: &Arc<Board>, new: NewTask, answer: Option<&str>| {
        let b = Arc::clone(b);
        let answer = answer.map(str::to_string);
        async move {
            let id = b.submit(new).id;
            let w = b.next_work().await.expect("work");
            let context = w.context.clone();
            let outcome = answer.map_or(TaskOutcome::Failed("no".into()), TaskOutcome::Completed);
            b.finish(&id, outcome);
            drop(w);
            context
        }
    };
    let pairs = |turns: Vec<ContextTurn>| -> Vec<(String, String)> {
        turns.into_iter().map(|t| (t.asked.to_string(), t.answered)).collect()
    };
    let a = Some("member:a");
    assert!(run(&b, in_ctx("q1", "ctx_1", a), Some("a1")).await.is_empty());
    // A failed exchange is not part of the conversation.
    run(&b, in_ctx("qf", "ctx_1", a), None).await;
    assert_eq!(
        pairs(run(&b, in_ctx("q2", "ctx_1", a), Some("a2")).await),
        [("q1".into(), "a1".into())]
    );
    // Another member naming the same context sees none of it: to it the context is new.
    assert!(
        run(&b, in_ctx("x", "ctx_1", Some("member:b")), Some("bx"))
            .await
            .is_empty()
    );
    // Another context is not this one.
    assert!(run(&b, in_ctx("y", "ctx_2", a), Some("ay")).await.is_empty());
    assert_eq!(
        pairs(run(&b, in_ctx("q3", "ctx_1", a), Some("a3")).await),
        [("q1".into(), "a1".into()), ("q2".into(), "a2".into())]
    );
    // The operator sees every task of the context, the other member's included.
    let seen = pairs(run(&b, in_ctx("o", "ctx_1", Some("operator")), Some("ao")).await);
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[2], ("x".into(), "bx".into()));
    // Bounded in count, newest kept...
    for i in 0..CONTEXT_TURNS + 3 {
        run(&b, in_ctx(&format!("n{i}"), "ctx_3", a), Some("ok")).await;
    }
    let turns = run(&b, in_ctx("last", "ctx_3", a), Some("ok")).await;
    assert_eq!(turns.len(), CONTEXT_TURNS);
    assert_eq!(
        turns.last().map(|t| &*t.asked),
        Some(&*format!("n{}", CONTEXT_TURNS + 2))
    );
    // ...and in bytes.
    let big = "b".repeat(CONTEXT_BYTES / 3);
    for _ in 0..4 {
        run(&b, in_ctx(&big, "ctx_4", a), Some("ok")).await;
    }
    assert_eq!(run(&b, in_ctx("last", "ctx_4", a), Some("ok")).await.len(), 2);
}

#[test]
fn list_pages_on_across_forgotten_tasks() {
    let b = keeping(2, usize::MAX);
    let all = |_: Option<&str>| true;
    let [a, x, y]: [String; 3] = std::array::from_fn(|i| b.submit(offer(&i.to_string())).id);
    b.finish(&x, TaskOutcome::Completed("x".into()));
    b.finish(&y, TaskOutcome::Completed("y".into()));
    let q = ListQuery {
        page_size: 2,
        ..ListQuery::default()
    };
    let p1 = b.list(&q, all);
    let names = |p: &ListPage| p.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    assert_eq!((names(&p1), p1.total), (vec![y.clone(), x.clone()], 3));
    // A third ended task pushes out `x`, the task the page token points at.
    let z = complete(&b, "z");
    assert!(b.get(&x).is_none());
    let p2 = b.list(
        &ListQuery {
            before: p1.next,
            ..q.clone()
        },
        all,
    );
    assert_eq!((names(&p2), p2.next, p2.total), (vec![a.clone()], None, 3));
    assert_eq!(names(&b.list(&q, all)), [z, y]);
}

#[test]
fn list_pages_newest_first_with_filters() {
    let b = Board::new(Acceptance::Queue, 100);
    let ids: Vec<String> = (0..5).map(|i| b.submit(offer(&i.to_string())).id).collect();
    let all = |_: Option<&str>| true;
    let q = ListQuery {
        page_size: 2,
        ..ListQuery::default()
    };
    let p1 = b.list(&q, all);
    assert_eq!(p1.total, 5);
    assert_eq!(
        p1.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        [ids[4].clone(), ids[3].clone()]
    );
    let p2 = b.list(
        &ListQuery {
            before: p1.next,
            ..q.clone()
        },
        all,
    );
    assert_eq!(
        p2.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        [ids[2].clone(), ids[1].clone()]
    );
    let p3 = b.list(
        &ListQuery {
            before: p2.next,
            ..q.clone()
        },
        all,
    );
    assert_eq!((p3.tasks.len(), p3.next, p3.total), (1, None, 5));
    // A status change moves a task to the front.
    b.set_working(&ids[0], Some("note"));
    assert_eq!(b.list(&q, all).tasks[0].id, ids[0]);
    let working = ListQuery {
        state: Some(TaskState::Working),
        page_size: 50,
        ..ListQuery::default()
    };
    assert_eq!(b.list(&working, all).total, 1);
    assert_eq!(
        b.list(
            &ListQuery {
                page_size: 50,
                ..ListQuery::default()
            },
            |o| o == Some("x")
        )
        .total,
        0
    );
}

/// A task's end reaches the observer, which records it (`task_end`, the result file), before
/// any reader can see it, so a caller told `completed` always finds the answer recorded; the
/// ending event carries the answer, since the observer cannot read the board then. Found by
/// the nemesis (docs/reliability.md#nemesis-runs): GetTask saw `completed` while the result
/// file was still empty.
#[actix_rt::test]
async fn a_task_end_is_observed_before_any_reader_can_see_it() {
    let b = Board::new(Acceptance::Queue, 1);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let weak = Arc::downgrade(&b);
    let sink = Arc::clone(&seen);
    b.set_observer(move |e| {
        if let BoardEvent::Ended { task_id, answer, .. } = e {
            // A reader on another thread while the observer runs: it must not get through.
            let (tx, rx) = std::sync::mpsc::channel();
            let board = weak.upgrade().expect("board");
            let id = task_id.clone();
            std::thread::spawn(move || {
                let _ = tx.send(board.get(&id).map(|t| t.state));
            });
            let read = rx.recv_timeout(std::time::Duration::from_millis(100)).ok().flatten();
            lock(&sink).push((read, answer.clone()));
        }
    });
    let id = b.submit(offer("q")).id;
    let w = b.next_work().await.expect("work");
    b.finish(&w.task_id, TaskOutcome::Completed("the answer".into()));
    assert_eq!(*lock(&seen), vec![(None, Some("the answer".to_string()))]);
    assert_eq!(b.get(&id).map(|t| t.state), Some(TaskState::Completed));
    // Other ends carry no answer.
    let c = b.submit(offer("c")).id;
    assert!(matches!(b.cancel(&c, "r"), CancelResult::Canceled(_)));
    assert_eq!(lock(&seen).last(), Some(&(None, None)));
}

/// A board whose one task runs, with the observer's events.
async fn running(owner: &str) -> (Arc<Board>, Work, Arc<Mutex<Vec<BoardEvent>>>) {
    let b = Board::new(Acceptance::Queue, 1);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    b.set_observer(move |e| lock(&sink).push(e.clone()));
    b.submit(NewTask {
        owner: Some(owner.into()),
        ..offer("the task")
    });
    let w = b.next_work().await.expect("work");
    (b, w, events)
}

fn settled(events: &Mutex<Vec<BoardEvent>>) -> Vec<(InputOutcome, Option<usize>)> {
    lock(events)
        .iter()
        .filter_map(|e| match e {
            BoardEvent::InputSettled {
                outcome, answer_bytes, ..
            } => Some((*outcome, *answer_bytes)),
            _ => None,
        })
        .collect()
}

const LONG: std::time::Duration = std::time::Duration::from_secs(30);

#[actix_rt::test]
async fn a_question_is_shown_then_answered_once_and_the_task_works_again() {
    let (b, w, events) = running("mdt:alice").await;
    let id = w.task_id.clone();
    let asked_by = ["coder".to_string(), "lead".to_string()];
    let ask = b.ask(&id, "which colour?", &asked_by, LONG);
    let answer = async {
        let t = b.wait_settled(&id).await.expect("task");
        assert_eq!(
            (t.state, t.status_text.as_deref(), t.asked_by.as_slice()),
            (TaskState::InputRequired, Some("which colour?"), asked_by.as_slice())
        );
        let q = t.history.last().expect("the question is in the history");
        assert_eq!(
            (q.role, &q.text, t.status_message_id.as_deref()),
            (
                Role::Agent,
                &HistoryText::Own(Arc::from("which colour?")),
                Some(q.message_id.as_str())
            )
        );
        b.answer(&id, "blue", "m2", |o| o == Some("mdt:alice"))
    };
    let (asked, answered) = tokio::join!(ask, answer);
    assert!(
        matches!(asked, Asked::Answered { ref text, .. } if text == "blue"),
        "{asked:?}"
    );
    let t = answered.expect("the answer is taken");
    assert_eq!(
        (t.state, t.status_text, t.status_message_id, t.asked_by.len()),
        (TaskState::Working, None, None, 0)
    );
    let a = t.history.last().expect("the answer is in the history");
    assert_eq!(
        (a.role, a.message_id.as_str(), &a.text),
        (Role::User, "m2", &HistoryText::Own(Arc::from("blue")))
    );
    let requested = lock(&events)
        .iter()
        .filter(|e| matches!(e, BoardEvent::InputRequested { question_bytes: 13, .. }))
        .count();
    assert_eq!(requested, 1);
    assert_eq!(settled(&events), [(InputOutcome::Answered, Some(4))]);
    // The question is gone with its answer: a second one finds nothing to answer.
    assert!(matches!(
        b.answer(&id, "red", "m3", |_| true),
        Err(AnswerRefusal::NotAsking(_))
    ));
    b.finish(&id, TaskOutcome::Completed("blue it is".into()));
}

#[actix_rt::test]
async fn answers_that_cannot_land_change_nothing() {
    type Visible = fn(Option<&str>) -> bool;
    let (b, w, _) = running("mdt:alice").await;
    let id = w.task_id.clone();
    let done = b.submit_local("done").id;
    b.finish(&done, TaskOutcome::Completed("x".into()));
    let alice: Visible = |o| o == Some("mdt:alice");
    let bob: Visible = |o| o == Some("mdt:bob");
    let any: Visible = |_| true;
    // (task, who answers, the refusal): nothing is asked yet.
    let table: &[(&str, Visible, &str)] = &[
        ("tsk_unknown", any, "not found"),
        (id.as_str(), bob, "not found"),
        (id.as_str(), alice, "not asking"),
        (done.as_str(), any, "ended"),
    ];
    for (task, visible, want) in table {
        let before = b.get(task);
        let got = match b.answer(task, "blue", "m2", visible) {
            Err(AnswerRefusal::NotFound) => "not found",
            Err(AnswerRefusal::Ended(_)) => "ended",
            Err(AnswerRefusal::NotAsking(_)) => "not asking",
            Ok(_) => "taken",
        };
        assert_eq!((got, b.get(task)), (*want, before), "{task}");
    }
    // While it asks, another caller still cannot see it, and its question stays open.
    let ask = b.ask(&id, "which colour?", &[], LONG);
    let check = async {
        b.wait_settled(&id).await;
        assert!(matches!(b.answer(&id, "red", "m2", bob), Err(AnswerRefusal::NotFound)));
        assert_eq!(b.get(&id).map(|t| t.state), Some(TaskState::InputRequired));
        b.answer(&id, "blue", "m3", alice).is_ok()
    };
    let (asked, took) = tokio::join!(ask, check);
    assert!(took && matches!(asked, Asked::Answered { ref text, .. } if text == "blue"));
    b.finish(&id, TaskOutcome::Completed("x".into()));
}

#[actix_rt::test]
async fn of_two_racing_answers_exactly_one_wins() {
    for _ in 0..20 {
        let (b, w, events) = running("mdt:alice").await;
        let id = w.task_id.clone();
        let ask = b.ask(&id, "which colour?", &[], LONG);
        let race = async {
            b.wait_settled(&id).await;
            let racers: Vec<_> = ["red", "blue"]
                .into_iter()
                .map(|text| {
                    let (b, id) = (Arc::clone(&b), id.clone());
                    std::thread::spawn(move || b.answer(&id, text, "m2", |_| true).is_ok())
                })
                .collect();
            racers
                .into_iter()
                .map(|r| r.join().unwrap_or(false))
                .collect::<Vec<bool>>()
        };
        let (asked, won) = tokio::join!(ask, race);
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
        let winner = if won[0] { "red" } else { "blue" };
        assert!(
            matches!(asked, Asked::Answered { ref text, .. } if text == winner),
            "{asked:?}"
        );
        assert_eq!(settled(&events).len(), 1);
        b.finish(&id, TaskOutcome::Canceled);
    }
}

#[actix_rt::test]
async fn a_question_ends_at_its_bound_with_the_task_or_before_it_was_asked() {
    let short = std::time::Duration::from_millis(20);
    // The bound passes: withdrawn, and a late answer finds no question.
    let (b, w, events) = running("operator").await;
    let id = w.task_id.clone();
    assert_eq!(b.ask(&id, "which colour?", &[], short).await, Asked::TimedOut);
    assert!(matches!(
        b.answer(&id, "late", "m2", |_| true),
        Err(AnswerRefusal::NotAsking(_))
    ));
    assert_eq!(settled(&events), [(InputOutcome::TimedOut, None)]);
    let t = b.finish(&id, TaskOutcome::Failed("no answer".into())).expect("task");
    assert_eq!((t.state, t.asked_by.len()), (TaskState::Failed, 0));
    // The task is cancelled while it waits: the asker hears at once, not at the bound.
    let (b, w, events) = running("operator").await;
    let id = w.task_id.clone();
    let (asked, ()) = tokio::join!(b.ask(&id, "which colour?", &[], LONG), async {
        b.wait_settled(&id).await;
        b.cancel(&id, "canceled by the caller");
    });
    assert_eq!(asked, Asked::Ended);
    assert_eq!(settled(&events), [(InputOutcome::Abandoned, None)]);
    assert_eq!(
        b.get(&id).map(|t| t.asked_by.len()),
        Some(0),
        "an ended task asks nobody"
    );
    assert!(matches!(
        b.answer(&id, "late", "m2", |_| true),
        Err(AnswerRefusal::Ended(_))
    ));
    // Asked while the task is being cancelled: nothing opens, the task stays canceled.
    let (b, w, events) = running("operator").await;
    let id = w.task_id.clone();
    b.cancel(&id, "canceled by the caller");
    assert_eq!(b.ask(&id, "which colour?", &[], LONG).await, Asked::Ended);
    let t = b.get(&id).expect("task");
    assert_eq!(
        (t.state, t.status_text, t.asked_by.len()),
        (TaskState::Canceled, None, 0)
    );
    assert!(settled(&events).is_empty());
    // The session closes under an open question.
    let (b, w, _) = running("operator").await;
    let id = w.task_id.clone();
    let (asked, ()) = tokio::join!(b.ask(&id, "which colour?", &[], LONG), async {
        b.wait_settled(&id).await;
        b.close();
    });
    assert_eq!(asked, Asked::Ended);
    drop(w);
}

/// A board kept in a store at `path`, as a peer's session makes it.
fn kept_board(path: &std::path::Path, repeatable: bool) -> (Arc<Board>, Restored) {
    let (store, kept) = crate::tasks::store::TaskStore::open(path).expect("the store opens");
    let b = Board::new(Acceptance::Queue, 4);
    let r = b.restore(store, kept, repeatable);
    (b, r)
}

#[actix_rt::test]
async fn a_restarted_board_takes_back_its_tasks_from_the_store() {
    for repeatable in [false, true] {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("group/tasks.db");
        let (b, r) = kept_board(&path, repeatable);
        assert_eq!(r, Restored::default());
        let done = b.submit(offer("done"));
        let w = b.next_work().await.expect("work");
        b.finish(&w.task_id, TaskOutcome::Completed("D".into()));
        drop(w);
        let running = b.submit(offer("running"));
        let first = b.submit(offer("q1"));
        let second = b.submit(offer("q2"));
        let w = b.next_work().await.expect("work");
        assert_eq!(w.task_id, running.id);
        // The process dies with the task running: nothing after this reaches the store.
        b.drop_store();
        std::mem::forget(w);

        let (b, r) = kept_board(&path, repeatable);
        let done_now = b.get(&done.id).expect("the ended task is known");
        assert_eq!(
            (done_now.state, done_now.answer.as_deref()),
            (TaskState::Completed, Some("D"))
        );
        assert_eq!(done_now.history.len(), 2, "its history came back");
        let ran = b.get(&running.id).expect("the running task is known");
        let mut order = vec![first.id.clone(), second.id.clone()];
        if repeatable {
            assert_eq!(
                r,
                Restored {
                    ended: 1,
                    queued: 3,
                    failed: 0
                }
            );
            assert_eq!(ran.state, TaskState::Submitted);
            order.insert(0, running.id.clone());
        } else {
            assert_eq!(
                r,
                Restored {
                    ended: 1,
                    queued: 2,
                    failed: 1
                }
            );
            assert_eq!(ran.state, TaskState::Failed);
            let why = ran.status_text.unwrap_or_default();
            assert!(why.contains("E-RST-002"), "{why}");
        }
        let mut taken = Vec::new();
        for _ in 0..order.len() {
            let w = b.next_work().await.expect("work");
            assert!(w.text.starts_with('q') || w.text == "running", "{}", w.text);
            taken.push(w.task_id.clone());
            b.finish(&w.task_id, TaskOutcome::Completed(format!("answer to {}", w.text)));
        }
        assert_eq!(taken, order, "waiting tasks run in the order they came");

        // What the second process did is kept as well.
        b.drop_store();
        let (b, r) = kept_board(&path, repeatable);
        assert_eq!(r.ended, 4);
        for id in &order {
            let t = b.get(id).expect("known");
            assert_eq!(t.state, TaskState::Completed);
        }
        // And a new task's id never meets an old one's: the change numbers go on.
        let fresh = b.submit(offer("fresh"));
        assert!(fresh.changed > b.get(&second.id).map_or(0, |t| t.changed));
    }
}

#[test]
fn a_task_the_store_cannot_keep_is_refused_and_admission_resumes_once_it_can() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tasks.db");
    let (store, kept) = crate::tasks::store::TaskStore::open_within(&path, 64 * 1024).expect("opens");
    let b = Board::with_retention(
        Acceptance::Queue,
        1000,
        fixed_clock(),
        Retention {
            tasks: 1000,
            bytes: 1 << 30,
        },
    );
    b.restore(store, kept, false);
    let big = "x".repeat(8 * 1024);
    let mut taken = Vec::new();
    let refused = loop {
        let t = b.submit(offer(&big));
        if t.state == TaskState::Rejected {
            break t;
        }
        taken.push(t.id);
        assert!(taken.len() < 64, "a 64 KiB store took {} tasks of 8 KiB", taken.len());
    };
    assert!(!taken.is_empty());
    assert_eq!(refused.status_text.as_deref(), Some(crate::tasks::store::REJECT_UNKEPT));
    assert!(
        refused
            .history
            .iter()
            .all(|m| !matches!(&m.text, HistoryText::Own(t) if t.len() > 100))
    );
    // Given room, the very next task is kept and taken; the refused one's end, which the store
    // could not keep either, is kept with it.
    b.grow_store(1 << 20);
    assert_eq!(b.submit(offer("small")).state, TaskState::Submitted);
    b.drop_store();
    let (_, kept) = crate::tasks::store::TaskStore::open(&path).expect("opens again");
    let state_of = |id: &str| kept.iter().find(|k| k.snap.id == id).map(|k| k.snap.state);
    assert_eq!(state_of(&refused.id), Some(TaskState::Rejected));
    assert_eq!(kept.len(), taken.len() + 2);
}
