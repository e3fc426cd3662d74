//! What the launcher prints: the formation line (docs/reference/formation.md#formation-line) and
//! how a formation ended (docs/reference/formation.md#how-the-launcher-waits,
//! docs/reference/formation.md#lifelines).

use serde_json::{Value, json};

use super::LaunchPlan;
use crate::diag::{self, Diagnostic};
use crate::readiness::Reported;

/// Where a peer is in its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    Starting,
    Ready,
    Failed,
}

/// Progress lines while a formation starts: one per peer and state, only when stderr is a
/// terminal (scripts and logs get the formation line alone); coloured unless `NO_COLOR` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub enabled: bool,
    pub color: bool,
}

impl Progress {
    pub fn for_stderr() -> Progress {
        use std::io::IsTerminal;
        let enabled = std::io::stderr().is_terminal();
        let color = enabled && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Progress { enabled, color }
    }

    /// `[mur run] worker: ready`, or nothing when disabled.
    pub fn line(&self, peer: &str, state: PeerState) -> Option<String> {
        if !self.enabled {
            return None;
        }
        let (word, color) = match state {
            PeerState::Starting => ("starting", "2"),
            PeerState::Ready => ("ready", "32"),
            PeerState::Failed => ("failed", "31"),
        };
        Some(if self.color {
            format!("[mur run] {peer}: \x1b[{color}m{word}\x1b[0m")
        } else {
            format!("[mur run] {peer}: {word}")
        })
    }

    pub fn show(&self, peer: &str, state: PeerState) {
        if let Some(l) = self.line(peer, state) {
            eprintln!("{l}");
        }
    }
}

/// Prints the formation line: JSON on stdout with `--json`, else the human block on stderr.
pub fn formation_line(plan: &LaunchPlan, ready: &[Option<(Reported, u32)>]) {
    if plan.json {
        println!("{}", formation_json(plan, ready));
    } else {
        eprint!("{}", formation_human(plan, ready));
    }
}

pub fn formation_json(plan: &LaunchPlan, ready: &[Option<(Reported, u32)>]) -> String {
    let peers: Vec<Value> = plan
        .members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let (r, pid) = ready.get(i)?.as_ref()?;
            Some(json!({
                "name": m.name,
                "pid": pid,
                "session_id": r.session_id,
                "url": r.url,
                "workdir": r.workdir.clone().unwrap_or_else(|| plan.home.member_dir(&plan.formation_id, &m.name).display().to_string()),
            }))
        })
        .collect();
    let deadline = match &plan.deadline {
        Some(d) => json!({"at": d.at, "secs": d.secs}),
        None => Value::Null,
    };
    json!({
        "deadline": deadline,
        "entry": plan.members[plan.entry].name,
        "formation_id": plan.formation_id,
        "peers": peers,
    })
    .to_string()
}

pub fn formation_human(plan: &LaunchPlan, ready: &[Option<(Reported, u32)>]) -> String {
    let width = plan.members.iter().map(|m| m.name.len()).max().unwrap_or(0);
    let mut out = format!("formation: {}\n", plan.formation_id);
    if let Some(d) = &plan.deadline {
        out.push_str(&format!("  deadline {}  ({}s after mur run started)\n", d.at, d.secs));
    }
    for (i, m) in plan.members.iter().enumerate() {
        let Some(Some((r, pid))) = ready.get(i) else { continue };
        let workdir = r
            .workdir
            .clone()
            .unwrap_or_else(|| plan.home.member_dir(&plan.formation_id, &m.name).display().to_string());
        out.push_str(&format!(
            "  peer   {:<width$}  {}@{}  pid {}  {}  {}\n",
            m.name, m.capsule, m.version, pid, r.session_id, r.url
        ));
        out.push_str(&format!("         {:<width$}  workdir {}\n", "", workdir));
    }
    out.push_str(&format!(
        "  entry  {:<width$}  starting\n",
        plan.members[plan.entry].name
    ));
    out
}

/// How the stop came about, for the final report.
#[derive(Debug, Clone, Copy)]
pub enum EndingView<'a> {
    PeerFailed { index: usize, reason: &'a str },
    Signal(i32),
    DeadlineBeforeEntry,
    EntryExited(i32),
    Internal(&'a str),
}

/// `coder (pid 41), reviewer (pid 42)`, or `none`.
pub fn stopped_list(plan: &LaunchPlan, stopped: &[(usize, u32)]) -> String {
    if stopped.is_empty() {
        return "none".into();
    }
    stopped
        .iter()
        .map(|(i, pid)| format!("{} (pid {pid})", plan.members[*i].name))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn signal_name(n: i32) -> String {
    nix::sys::signal::Signal::try_from(n)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {n}"))
}

/// Prints the ending and returns the launcher's exit code (docs/reference/formation.md#lifelines).
pub fn ending(plan: &LaunchPlan, ending: EndingView<'_>, stopped: &[(usize, u32)]) -> u8 {
    let list = stopped_list(plan, stopped);
    match ending {
        EndingView::EntryExited(code) => code.clamp(0, 255) as u8,
        EndingView::PeerFailed { index, reason } => {
            let m = &plan.members[index];
            let reason = reason.replace('\n', "\n  ");
            Diagnostic::new(
                diag::E_RUN_045,
                format!("the formation could not be launched\n  '{}' ({}@{}): {reason}\n  stopped: {list}", m.name, m.capsule, m.version),
            )
            .with_hint(format!(
                "the formation was not launched, and nothing it started is still running; fix the member named above and launch again. `mur run --capsule {} --capsule-version {}` runs one member on its own and shows its whole output",
                m.capsule, m.version
            ))
            .eprint("");
            1
        }
        EndingView::Signal(n) => {
            if stopped.iter().any(|(i, _)| *i == plan.entry) {
                eprintln!(
                    "[mur run] {}: the formation was stopped; stopped: {list}",
                    signal_name(n)
                );
            } else {
                eprintln!(
                    "[mur run] the formation launch was interrupted by {} before every member was ready",
                    signal_name(n)
                );
                eprintln!("  stopped: {list}");
            }
            (128 + n).clamp(0, 255) as u8
        }
        EndingView::DeadlineBeforeEntry => {
            let secs = plan.deadline.as_ref().map(|d| d.secs).unwrap_or(0);
            Diagnostic::new(
                diag::E_RUN_053,
                format!("the formation reached its --deadline of {secs} seconds before its entry member started\n  stopped: {list}"),
            )
            .with_hint("raise --deadline so it covers the members' launch as well as the task; nothing the formation started is still running")
            .eprint("");
            1
        }
        EndingView::Internal(msg) => {
            Diagnostic::new(
                diag::E_RUN_045,
                format!("the formation could not be launched: {msg}\n  stopped: {list}"),
            )
            .without_hint()
            .eprint("");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_only_on_terminals_and_colour_only_without_no_color() {
        let off = Progress {
            enabled: false,
            color: false,
        };
        assert_eq!(off.line("worker", PeerState::Ready), None);
        let plain = Progress {
            enabled: true,
            color: false,
        };
        assert_eq!(
            plain.line("worker", PeerState::Starting).as_deref(),
            Some("[mur run] worker: starting")
        );
        assert_eq!(
            plain.line("worker", PeerState::Failed).as_deref(),
            Some("[mur run] worker: failed")
        );
        let colored = Progress {
            enabled: true,
            color: true,
        };
        assert_eq!(
            colored.line("worker", PeerState::Ready).as_deref(),
            Some("[mur run] worker: \x1b[32mready\x1b[0m")
        );
    }
}
