//! W-ROS-001 (docs/reference/codes.md#w-ros-001): more members may call a member than it holds
//! tasks at once.
//!
//! The roster is still admitted; the warning names the member, its callers and the
//! `lifecycle.queue_depth` that would hold every caller.

use crate::diag::{Diagnostic, W_ROS_001};
use crate::manifest::Acceptance;

const DOCS: &str = "`mur explain W-ROS-001`";

/// One member whose callers outnumber the tasks it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub member: String,
    /// `<capsule>@<version>`, for the doctor's fix line.
    pub capsule_version: String,
    pub acceptance: Acceptance,
    pub queue_depth: u32,
    /// Names of the members that may call it, in roster order.
    pub callers: Vec<String>,
}

impl Overflow {
    /// Tasks held at once: none 0, single 1, queue `queue_depth + 1`.
    pub fn holds(&self) -> u64 {
        match self.acceptance {
            Acceptance::None => 0,
            Acceptance::Single => 1,
            Acceptance::Queue => u64::from(self.queue_depth) + 1,
        }
    }

    /// The queue depth that holds every caller: `max(callers − 1, 1)`.
    pub fn depth(&self) -> usize {
        self.callers.len().saturating_sub(1).max(1)
    }

    /// The warning, without the `warning[W-ROS-001]: ` head.
    pub fn message(&self) -> String {
        let d = self.depth();
        let (holding, rejection, remedy) = match self.acceptance {
            Acceptance::Queue => (
                format!(
                    "{} tasks at once \u{2014} one running and lifecycle.queue_depth: {} waiting \u{2014}",
                    self.holds(),
                    self.queue_depth
                ),
                "a call that finds it full is offered again until its deadline",
                format!("lifecycle.queue_depth: {d}"),
            ),
            Acceptance::Single => (
                "1 task at once \u{2014} lifecycle.task_acceptance: single \u{2014}".to_string(),
                "a call that finds it full is offered again until its deadline",
                format!("lifecycle.task_acceptance: queue with lifecycle.queue_depth: {d}"),
            ),
            Acceptance::None => (
                "no task \u{2014} lifecycle.task_acceptance: none \u{2014}".to_string(),
                "no call is ever taken",
                format!("lifecycle.task_acceptance: queue with lifecycle.queue_depth: {d}"),
            ),
        };
        format!(
            "roster.yaml lets {} member(s) call '{}' ({}), but it holds {holding} so {rejection}; {remedy} would hold them all ({DOCS})",
            self.callers.len(),
            self.member,
            self.callers.join(", "),
        )
    }

    pub fn diagnostic(&self) -> Diagnostic {
        Diagnostic::new(W_ROS_001, self.message())
    }

    /// `mur doctor`'s `Fix:` text for this warning (docs/reference/cli.md#mur-doctor).
    pub fn fix(&self) -> String {
        let d = self.depth();
        let setting = match self.acceptance {
            Acceptance::Queue => format!("lifecycle.queue_depth: {d}"),
            Acceptance::Single | Acceptance::None => {
                format!("lifecycle.task_acceptance: queue and lifecycle.queue_depth: {d}")
            }
        };
        let held = match self.callers.len() {
            1 => "the 1 member that may call it is held".to_string(),
            n => format!("all {n} members that may call it are held"),
        };
        format!(
            "{} ({}): set {setting} in its murmur.yaml so {held} at once, or narrow its callers in roster.yaml (warning[W-ROS-001])",
            self.member, self.capsule_version
        )
    }
}

/// The overflow of one member, if its callers outnumber what it holds.
pub fn check(
    member: &str,
    capsule_version: &str,
    acceptance: Acceptance,
    queue_depth: u32,
    callers: Vec<String>,
) -> Option<Overflow> {
    let o = Overflow {
        member: member.into(),
        capsule_version: capsule_version.into(),
        acceptance,
        queue_depth,
        callers,
    };
    (o.callers.len() as u64 > o.holds()).then_some(o)
}
