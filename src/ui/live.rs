//! What the records cannot show: a running task's answer text as it streams, and the question of
//! a task that waits for input. Traces hold only sizes, so this asks the member's door, through
//! `operator` (the one client of a running door, as `mur send` dials it: the running record's
//! door at 127.0.0.1, its operator token sent only to a listener this user serves): GetTask for
//! the task as it stands, then SubscribeToTask for what follows, read into a
//! `wire::live_task::LiveTask` (bounded there). The operator token stays in the thread that dials;
//! what is kept and shown is the task's state, question and text, never a record or an error's
//! wording.
//!
//! Bounded: at most [`MAX_FOLLOWING`] tasks are followed at once (each on a thread of its own,
//! blocking like `mur send`), at most [`MAX_TASKS`] remembered, one task followed at most
//! [`MAX_FOLLOWS`] times (a follow ends at a question or the task's end; the records say when it
//! goes on), and one stream read to at most [`STREAM_BYTES`]. A follow ends when the member's
//! process does (the client looks at its running record while the stream is quiet), so a formation
//! that ends closes its subscriptions.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::operator::{self, Streamed};
use crate::paths::MurHome;
use crate::running::RunningRecord;
use crate::sync::lock;
use crate::trace::view::FormationView;
use crate::wire::jsonrpc::Method;
use crate::wire::live_task::LiveTask;

/// Tasks followed at once, over every formation.
pub const MAX_FOLLOWING: usize = 8;
/// Tasks whose text is kept, over every formation.
pub const MAX_TASKS: usize = 256;
/// Follows of one task, at most (each a GetTask and, while it runs, one stream).
pub const MAX_FOLLOWS: u32 = 8;
/// One SubscribeToTask stream is read to at most this many bytes.
pub const STREAM_BYTES: u64 = 16 << 20;
/// A GetTask reply read, at most: the task's history is shown up to 1 MiB.
const GET_BYTES: usize = 2 << 20;
/// A door answers GetTask from memory at once.
const GET_WAIT: Duration = Duration::from_secs(3);

/// One task as the page shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Shown {
    pub task: LiveTask,
    /// The door was gone before the task ended: what is shown is all there will be.
    pub gone: bool,
    /// Counts changes, so a stream sends a task only when it changed.
    pub version: u64,
}

struct Entry {
    formation: String,
    shown: Shown,
    /// The records' state of the task when it was last followed.
    seen: String,
    following: bool,
    follows: u32,
}

#[derive(Default)]
pub struct Live {
    tasks: Mutex<HashMap<String, Entry>>,
    following: AtomicUsize,
}

/// Frees a follow's slot, whatever ends the thread.
struct Slot(Arc<Live>, String);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(e) = lock(&self.0.tasks).get_mut(&self.1) {
            e.following = false;
        }
        self.0.following.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Live {
    /// Follows each task of a running formation the records show open and that is not followed
    /// already (again when the records' state of it changed since: an answered question).
    pub fn watch(self: &Arc<Self>, home: &MurHome, view: &FormationView) {
        let open: Vec<(&str, &str, &str)> = view
            .members
            .iter()
            .flat_map(|m| {
                m.tasks
                    .iter()
                    .filter(|t| t.exit_status.is_none())
                    .map(move |t| (m.session_id.as_str(), t.task_id.as_str(), t.state.as_str()))
            })
            .collect();
        if open.is_empty() {
            return;
        }
        let records: Vec<RunningRecord> = crate::running::read_all(home)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.formation_id.as_deref() == Some(view.formation_id.as_str()) && r.is_live())
            .collect();
        for (session, task_id, state) in open {
            let Some(rec) = records.iter().find(|r| r.session_id == session) else {
                continue;
            };
            if !self.claim(&view.formation_id, task_id, state) {
                continue;
            }
            let live = self.clone();
            let rec = rec.clone();
            let id = task_id.to_owned();
            let slot = Slot(self.clone(), id.clone());
            let spawned = std::thread::Builder::new().name("mur-ui-follow".into()).spawn(move || {
                let _slot = slot;
                live.follow(&rec, &id);
            });
            // A thread that cannot start drops its slot with the closure.
            drop(spawned);
        }
    }

    /// Takes a follow's slot for the task, when one is free and the task is due one.
    fn claim(&self, formation: &str, task_id: &str, state: &str) -> bool {
        let mut tasks = lock(&self.tasks);
        if let Some(e) = tasks.get(task_id)
            && (e.following || e.seen == state || e.follows >= MAX_FOLLOWS)
        {
            return false;
        }
        if !tasks.contains_key(task_id) && tasks.len() >= MAX_TASKS {
            // Room is made by forgetting a task no follow holds; with none, this one waits.
            let Some(old) = tasks.iter().find(|(_, e)| !e.following).map(|(k, _)| k.clone()) else {
                return false;
            };
            tasks.remove(&old);
        }
        if self.following.fetch_add(1, Ordering::SeqCst) >= MAX_FOLLOWING {
            self.following.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let e = tasks.entry(task_id.to_owned()).or_insert_with(|| Entry {
            formation: formation.to_owned(),
            shown: Shown::default(),
            seen: String::new(),
            following: false,
            follows: 0,
        });
        e.following = true;
        e.follows += 1;
        e.seen = state.to_owned();
        true
    }

    /// The formation's tasks followed so far, by task id.
    pub fn of(&self, formation: &str) -> BTreeMap<String, Shown> {
        lock(&self.tasks)
            .iter()
            .filter(|(_, e)| e.formation == formation)
            .map(|(k, e)| (k.clone(), e.shown.clone()))
            .collect()
    }

    /// The formation's tasks whose version is not the one in `sent`: what a stream has yet to send.
    pub fn changed(&self, formation: &str, sent: &HashMap<String, u64>) -> Vec<(String, Shown)> {
        lock(&self.tasks)
            .iter()
            .filter(|(k, e)| e.formation == formation && sent.get(*k) != Some(&e.shown.version))
            .map(|(k, e)| (k.clone(), e.shown.clone()))
            .collect()
    }

    fn set(&self, task_id: &str, task: &LiveTask, gone: bool) {
        if let Some(e) = lock(&self.tasks).get_mut(task_id)
            && (e.shown.task != *task || e.shown.gone != gone)
        {
            e.shown.task = task.clone();
            e.shown.gone = gone;
            e.shown.version += 1;
        }
    }

    /// GetTask, then (while the task runs) its stream, then GetTask once more if the stream ended
    /// before the task settled.
    fn follow(&self, rec: &RunningRecord, task_id: &str) {
        let mut task = LiveTask::default();
        if let Some(t) = get_task(rec, task_id) {
            task.apply_task(&t);
            self.set(task_id, &task, false);
        }
        if !task.settled() {
            let streamed = subscribe(rec, task_id, |event| {
                task.apply_event(event);
                self.set(task_id, &task, false);
                task.settled()
            });
            if !streamed
                && !task.settled()
                && let Some(t) = get_task(rec, task_id)
            {
                task.apply_task(&t);
            }
        }
        let gone = !task.settled() && !rec.is_live();
        self.set(task_id, &task, gone);
    }
}

fn request(method: Method, task_id: &str) -> String {
    json!({"id": 1, "jsonrpc": "2.0", "method": method.name(), "params": {"id": task_id}}).to_string()
}

/// The task as its door holds it, or `None` when the door does not answer with it.
fn get_task(rec: &RunningRecord, task_id: &str) -> Option<Value> {
    let stream = operator::post(rec, &request(Method::GetTask, task_id), false).ok()?;
    let (status, body, cut) = operator::reply(rec, stream, GET_BYTES, GET_WAIT).ok()?;
    if status != 200 || cut {
        return None;
    }
    let v: Value = serde_json::from_slice(&body).ok()?;
    v.get("result").filter(|r| r.is_object()).cloned()
}

/// Follows the task's stream, each event to `on` until it says the task settled (`true`); whether
/// the stream ran to that.
fn subscribe(rec: &RunningRecord, task_id: &str, mut on: impl FnMut(&Value) -> bool) -> bool {
    let Ok(stream) = operator::post(rec, &request(Method::SubscribeToTask, task_id), true) else {
        return false;
    };
    let end = operator::events(rec, stream, STREAM_BYTES, |event| {
        if event.get("error").is_some() {
            return Ok(Some(false));
        }
        Ok(on(event).then_some(true))
    });
    matches!(end, Ok(Streamed::Stopped(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";

    /// What a follow's thread does as it ends.
    fn release(live: &Live, task: &str) {
        if let Some(e) = lock(&live.tasks).get_mut(task) {
            e.following = false;
        }
        live.following.fetch_sub(1, Ordering::SeqCst);
    }

    #[test]
    fn follows_are_bounded_at_once_and_per_task() {
        let live = Live::default();
        // (task, records' state, claimed): a task is followed again only once its state moved,
        // never while followed, and at most MAX_FOLLOWING at once.
        let table: &[(&str, &str, bool)] = &[
            ("tsk_a", "working", true),
            ("tsk_a", "working", false),
            ("tsk_a", "input-required", false),
        ];
        for (task, state, want) in table {
            assert_eq!(live.claim(FRM, task, state), *want, "{task} {state}");
        }
        release(&live, "tsk_a");
        assert!(!live.claim(FRM, "tsk_a", "working"), "the same state again");
        assert!(live.claim(FRM, "tsk_a", "input-required"), "the state moved on");
        for i in 1..MAX_FOLLOWING {
            assert!(live.claim(FRM, &format!("tsk_{i}"), "working"));
        }
        assert!(!live.claim(FRM, "tsk_more", "working"), "every slot is taken");
        assert_eq!(live.following.load(Ordering::SeqCst), MAX_FOLLOWING);

        // One task is followed MAX_FOLLOWS times at most, however often its state changes.
        let live = Live::default();
        let mut n = 0;
        for k in 0..3 * MAX_FOLLOWS {
            if live.claim(FRM, "tsk_x", if k % 2 == 0 { "working" } else { "input-required" }) {
                n += 1;
                release(&live, "tsk_x");
            }
        }
        assert_eq!(n, MAX_FOLLOWS);
    }

    #[test]
    fn a_stream_gets_each_change_once() {
        let live = Live::default();
        assert!(live.claim(FRM, "tsk_a", "working"));
        let mut task = LiveTask {
            text: "Hel".into(),
            ..LiveTask::default()
        };
        live.set("tsk_a", &task, false);
        let mut sent = HashMap::new();
        let first = live.changed(FRM, &sent);
        assert_eq!(first.len(), 1);
        sent.insert(first[0].0.clone(), first[0].1.version);
        assert!(live.changed(FRM, &sent).is_empty(), "nothing new");
        live.set("tsk_a", &task, false);
        assert!(live.changed(FRM, &sent).is_empty(), "the same text is no change");
        task.text.push_str("lo");
        live.set("tsk_a", &task, false);
        assert_eq!(live.changed(FRM, &sent)[0].1.task.text, "Hello");
        assert!(live.changed("frm_other", &HashMap::new()).is_empty());
    }
}
