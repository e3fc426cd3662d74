//! Reading the board: one task, every task, a ListTasks page, a context's earlier exchanges, and
//! waiting for a task's end.

use super::*;

impl Board {
    pub fn get(&self, task_id: &str) -> Option<TaskSnapshot> {
        self.lock().tasks.get(task_id).map(|e| e.snap.clone())
    }

    /// The deadline (Unix ms) of the grant task `task_id` came with, if it came with one.
    pub fn deadline_of(&self, task_id: &str) -> Option<u64> {
        self.lock().tasks.get(task_id).and_then(|e| e.deadline_ms)
    }

    /// The log of the events the task's streams sent, while the board keeps the task. Lock it
    /// before reading the board (`get`, `streamed_since`), never while holding anything of it.
    pub fn stream_log(&self, task_id: &str) -> Option<Arc<Mutex<StreamLog>>> {
        self.lock().tasks.get(task_id).map(|e| Arc::clone(&e.log))
    }

    /// Every task still on the board, most recent status change first.
    pub fn all(&self) -> Vec<TaskSnapshot> {
        let st = self.lock();
        st.order
            .values()
            .rev()
            .filter_map(|id| st.tasks.get(id))
            .map(|e| e.snap.clone())
            .collect()
    }

    /// Completes with the task once it is terminal; `None` for an unknown id. Hold a pin on the
    /// task meanwhile, or it may be forgotten between its end and this call's wake-up.
    pub async fn wait_terminal(&self, task_id: &str) -> Option<TaskSnapshot> {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            let snap = self.get(task_id)?;
            if snap.state.is_terminal() {
                return Some(snap);
            }
            if rx.changed().await.is_err() {
                return Some(snap);
            }
        }
    }

    /// Completes with the task once it is terminal or asks for input (what a blocking
    /// SendMessage waits for, A2A v1.0: an interrupted state ends the wait too); `None` for an
    /// unknown id. Hold a pin meanwhile, as for [`Board::wait_terminal`].
    pub async fn wait_settled(&self, task_id: &str) -> Option<TaskSnapshot> {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            let snap = self.get(task_id)?;
            if snap.state.is_terminal() || snap.state == TaskState::InputRequired {
                return Some(snap);
            }
            if rx.changed().await.is_err() {
                return Some(snap);
            }
        }
    }

    /// A receiver that changes whenever anything on the board changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// ListTasks over the tasks `visible` admits (by owner): filters, newest change first, one
    /// page after the `before` cursor. The page is a walk down the change order from the cursor;
    /// only its tasks are copied. A cursor whose task has since been forgotten still pages on.
    pub fn list(&self, q: &ListQuery, visible: impl Fn(Option<&str>) -> bool) -> ListPage {
        let st = self.lock();
        let matches = |s: &TaskSnapshot| {
            visible(s.owner.as_deref())
                && q.context_id.as_ref().is_none_or(|c| &s.context_id == c)
                && q.state.is_none_or(|st| s.state == st)
                && q.after.is_none_or(|t| s.timestamp >= t)
        };
        let total = st.tasks.values().filter(|e| matches(&e.snap)).count();
        let upto = q.before.map_or(Bound::Unbounded, Bound::Excluded);
        let mut walk = st
            .order
            .range((Bound::Unbounded, upto))
            .rev()
            .filter_map(|(_, id)| st.tasks.get(id))
            .map(|e| &e.snap)
            .filter(|s| matches(s));
        let tasks: Vec<TaskSnapshot> = walk.by_ref().take(q.page_size).cloned().collect();
        let more = walk.next().is_some();
        let next = if more { tasks.last().map(|s| s.changed) } else { None };
        ListPage { tasks, next, total }
    }
}

/// The earlier exchanges of task `id`'s context that its owner may see
/// (docs/reference/door.md#methods, as ListTasks would show them): each completed task's caller
/// message and answer, oldest first, the newest kept within [`CONTEXT_TURNS`] and
/// [`CONTEXT_BYTES`]. A context whose tasks the owner cannot see is, to it, a new one.
pub(super) fn context_turns(st: &State, id: &str) -> Vec<ContextTurn> {
    let Some(me) = st.tasks.get(id) else {
        return Vec::new();
    };
    let viewer = me.snap.owner.as_deref();
    // Borrowed while choosing, so only the exchanges kept are copied.
    let mut earlier: Vec<(u64, &Arc<str>, &str)> = st
        .tasks
        .values()
        .filter(|e| {
            e.created < me.created
                && e.snap.context_id == me.snap.context_id
                && e.snap.state == TaskState::Completed
                && owner_sees(viewer, e.snap.owner.as_deref())
        })
        .filter_map(|e| match e.snap.history.first() {
            Some(HistoryMessage {
                role: Role::User,
                text: HistoryText::Own(asked),
                ..
            }) => Some((e.created, asked, e.snap.answer.as_deref()?)),
            _ => None,
        })
        .collect();
    earlier.sort_by_key(|(created, _, _)| std::cmp::Reverse(*created));
    let mut bytes = 0usize;
    let mut kept: Vec<ContextTurn> = earlier
        .into_iter()
        .take(CONTEXT_TURNS)
        .take_while(|(_, asked, answered)| {
            bytes = bytes.saturating_add(asked.len() + answered.len());
            bytes <= CONTEXT_BYTES
        })
        .map(|(_, asked, answered)| ContextTurn {
            asked: Arc::clone(asked),
            answered: answered.to_string(),
        })
        .collect();
    kept.reverse();
    kept
}
