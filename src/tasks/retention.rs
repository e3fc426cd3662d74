//! How much a board keeps, so it never grows for the session's life: an ended task is kept only
//! within [`Retention`] (oldest forgotten first; over the count refused tasks go first, over the
//! bytes answers do). Live tasks, and ended ones a reply or stream still owes a caller (pinned),
//! are never forgotten, so pins are bounded apart ([`MAX_PINNED_TASKS`], [`MAX_PINNED_BYTES`]).
//!
//! The [`Books`] hold ids and sizes only, so this module knows nothing of the board: the board
//! files each task as it ends, asks which to forget after every change, and forgets them.

use std::collections::VecDeque;

/// Ended tasks a board keeps for GetTask and ListTasks [ours]. A caller collects an outcome
/// within moments of its end (call-member polls every 500 ms), while a peer sending without
/// pause would otherwise grow the member for its whole life.
pub const KEEP_ENDED_TASKS: usize = 1000;
/// Bytes the kept ended tasks may hold: answers, status texts, ids [ours]. Two answers the size of
/// the largest body the door reads, so recent outcomes survive and an idle member stays small.
pub const KEEP_ENDED_BYTES: usize = 16 * 1024 * 1024;
/// Tasks that open replies and streams may hold on the board at once [ours]. A pinned task is
/// never forgotten, so pins are bounded apart from [`KEEP_ENDED_TASKS`]: past either bound a
/// new pinned offer is refused as busy, and a new stream is refused.
pub const MAX_PINNED_TASKS: usize = 256;
/// Bytes those tasks may hold, counted when each is pinned (its offer, or all it holds) [ours].
pub const MAX_PINNED_BYTES: usize = 64 * 1024 * 1024;

/// How much of its ended tasks a board keeps; past either limit the oldest are forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub tasks: usize,
    pub bytes: usize,
}

impl Retention {
    pub const DEFAULT: Retention = Retention {
        tasks: KEEP_ENDED_TASKS,
        bytes: KEEP_ENDED_BYTES,
    };
}

/// The books of the ended tasks a board keeps and of its pins. Ids and sizes only: the board owns
/// the tasks, and forgets those [`Books::evict`] gives up.
#[derive(Debug, Default)]
pub(super) struct Books {
    /// Ended tasks still kept, each list oldest end first, with what each holds. Over the count,
    /// refused tasks are forgotten before the others: their caller had the refusal in the
    /// SendMessage reply, and a flood of refusals must not push out the outcomes other callers
    /// have yet to collect.
    refused: VecDeque<(String, usize)>,
    ended: VecDeque<(String, usize)>,
    /// Sum of what `refused` and `ended` hold.
    kept_bytes: usize,
    /// Tasks with a pin, and the bytes charged for them (see [`MAX_PINNED_TASKS`]).
    pinned_tasks: usize,
    pinned_bytes: usize,
}

impl Books {
    /// Whether one more task of `bytes` may be pinned.
    pub(super) fn may_pin(&self, bytes: usize) -> bool {
        self.pinned_tasks < MAX_PINNED_TASKS && self.pinned_bytes.saturating_add(bytes) <= MAX_PINNED_BYTES
    }

    /// Counts a first pin of a task charged `bytes`.
    pub(super) fn charge_pin(&mut self, bytes: usize) {
        self.pinned_tasks += 1;
        self.pinned_bytes = self.pinned_bytes.saturating_add(bytes);
    }

    /// A task's last pin was dropped: it and the bytes it was charged no longer count.
    pub(super) fn release_pin(&mut self, charge: usize) {
        self.pinned_tasks = self.pinned_tasks.saturating_sub(1);
        self.pinned_bytes = self.pinned_bytes.saturating_sub(charge);
    }

    /// Tasks pinned now, and the bytes charged for them.
    pub(super) fn pinned(&self) -> (usize, usize) {
        (self.pinned_tasks, self.pinned_bytes)
    }

    /// Bytes the kept ended tasks hold.
    #[cfg(test)]
    pub(super) fn kept_bytes(&self) -> usize {
        self.kept_bytes
    }

    /// The ids of the ended tasks kept, refused ones aside, oldest end first.
    #[cfg(test)]
    pub(super) fn ended(&self) -> impl Iterator<Item = &str> {
        self.ended.iter().map(|(id, _)| id.as_str())
    }

    /// Files a task that just ended, holding `bytes`, for forgetting; `refused`: it was refused.
    pub(super) fn file(&mut self, task_id: String, bytes: usize, refused: bool) {
        self.kept_bytes += bytes;
        let list = if refused { &mut self.refused } else { &mut self.ended };
        list.push_back((task_id, bytes));
    }

    /// Gives up ended tasks, each kind oldest first, until `keep` holds, and returns their ids for
    /// the board to forget. Over the count, refused tasks go first; over the bytes, the others do
    /// (they hold the answers). A task `held` names (pinned, or still in the running slot) is
    /// passed over.
    pub(super) fn evict(&mut self, keep: Retention, held: impl Fn(&str) -> bool) -> Vec<String> {
        let mut gone = Vec::new();
        while self.refused.len() + self.ended.len() > keep.tasks {
            if !self.give_up_oldest(true, &held, &mut gone) && !self.give_up_oldest(false, &held, &mut gone) {
                break;
            }
        }
        while self.kept_bytes > keep.bytes {
            if !self.give_up_oldest(false, &held, &mut gone) && !self.give_up_oldest(true, &held, &mut gone) {
                break;
            }
        }
        gone
    }

    /// Gives up the oldest ended task of one kind that nothing holds; false when there is none.
    fn give_up_oldest(&mut self, refused: bool, held: &impl Fn(&str) -> bool, gone: &mut Vec<String>) -> bool {
        let list = if refused { &mut self.refused } else { &mut self.ended };
        let Some(i) = list.iter().position(|(id, _)| !held(id)) else {
            return false;
        };
        if let Some((id, bytes)) = list.remove(i) {
            self.kept_bytes = self.kept_bytes.saturating_sub(bytes);
            gone.push(id);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(tasks: usize, bytes: usize) -> Retention {
        Retention { tasks, bytes }
    }

    fn filed(tasks: &[(&str, usize, bool)]) -> Books {
        let mut b = Books::default();
        for (id, bytes, refused) in tasks {
            b.file(id.to_string(), *bytes, *refused);
        }
        b
    }

    #[test]
    fn over_the_count_refusals_go_first_and_over_the_bytes_answers_do() {
        let mut b = filed(&[("a", 10, false), ("r", 1, true), ("c", 10, false)]);
        assert_eq!(b.evict(keep(2, usize::MAX), |_| false), ["r"]);
        assert_eq!(b.evict(keep(2, 10), |_| false), ["a"]);
        assert_eq!(b.kept_bytes, 10);
        // Over the bytes with no answer left to give up, refusals go too.
        let mut b = filed(&[("r1", 1, true), ("r2", 1, true)]);
        assert_eq!(b.evict(keep(10, 1), |_| false), ["r1"]);
    }

    #[test]
    fn held_tasks_are_passed_over() {
        let mut b = filed(&[("a", 1, false), ("b", 1, false), ("r", 5, true)]);
        assert_eq!(b.evict(keep(1, usize::MAX), |id| id == "a"), ["r", "b"]);
        // Nothing left that nothing holds: the books stay over the bound rather than loop.
        assert!(b.evict(keep(0, 0), |_| true).is_empty());
        assert_eq!(b.kept_bytes, 1);
    }

    #[test]
    fn pins_are_bounded_by_count_and_bytes() {
        let mut b = Books::default();
        for _ in 0..MAX_PINNED_TASKS {
            assert!(b.may_pin(0));
            b.charge_pin(0);
        }
        assert!(!b.may_pin(0));
        b.release_pin(0);
        assert!(b.may_pin(MAX_PINNED_BYTES));
        assert!(!b.may_pin(MAX_PINNED_BYTES + 1));
        b.charge_pin(MAX_PINNED_BYTES);
        b.release_pin(MAX_PINNED_BYTES);
        assert_eq!(b.pinned(), (MAX_PINNED_TASKS - 1, 0));
    }
}
