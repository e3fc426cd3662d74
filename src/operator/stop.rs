//! Stopping what runs: one session (`ses_…`) or a whole formation (`frm_…`), for `mur stop`
//! (docs/reference/cli.md#mur-stop) and `mur ui`'s stop action alike.
//!
//! Processes are named by pid *and* start token everywhere: a signal goes out only after the
//! start token was re-read and still matches, so a recycled pid is never signalled.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::outcome::Failure;
use crate::paths::MurHome;
use crate::procinfo;
use crate::running::{self, RunningRecord};
use crate::timing::Timing;

fn refuse(msg: String) -> Failure {
    Diagnostic::new(diag::E_RUN_022, msg).into()
}

fn live_records(home: &MurHome) -> Result<Vec<RunningRecord>, Failure> {
    running::live(home).map_err(|e| refuse(format!("cannot read {}: {e}", home.running().display())))
}

/// Stops session `id`; the line `mur stop` prints.
pub fn session(home: &MurHome, id: &str, timeout: Duration) -> Result<String, Failure> {
    if let Err(why) = ids::check(IdKind::Session, id) {
        return Err(refuse(format!("'{id}' is neither a session nor a formation id: {why}")));
    }
    let records = live_records(home)?;
    let Some(rec) = records.into_iter().find(|r| r.session_id == id) else {
        return Err(refuse(format!("no session {id} is running on this machine")));
    };
    terminate(&proc_of(&rec), timeout);
    // A session ended by SIGKILL could not remove its own record.
    running::remove(home, &rec.session_id);
    Ok(format!("stopped:  {id}"))
}

/// Stops formation `id`: its launcher, then the members without a lifeline; the lines `mur stop`
/// prints. `mur ui`'s stop action (`ui/act.rs`) takes this same path.
pub fn formation(home: &MurHome, id: &str, timeout: Duration) -> Result<Vec<String>, Failure> {
    if let Err(why) = ids::check(IdKind::Formation, id) {
        return Err(refuse(format!("'{id}' is not a formation id: {why}")));
    }
    let members: Vec<RunningRecord> = live_records(home)?
        .into_iter()
        .filter(|r| r.formation_id.as_deref() == Some(id))
        .collect();
    if members.is_empty() {
        return Err(refuse(format!(
            "no member of formation {id} is running on this machine"
        )));
    }
    let mut launchers: Vec<ProcRef> = members
        .iter()
        .filter_map(|r| r.formation_launcher.as_ref())
        .map(|l| ProcRef {
            pid: l.pid,
            start: l.process_start.clone(),
        })
        .collect();
    launchers.sort();
    launchers.dedup();
    if launchers.len() > 1 {
        let pids: Vec<String> = launchers.iter().map(|l| format!("pid {}", l.pid)).collect();
        return Err(Diagnostic::new(
            diag::E_RUN_024,
            format!(
                "the running members of formation {id} name {} different launchers ({}), so it is not clear which launch to stop; nothing was signalled",
                launchers.len(),
                pids.join(", ")
            ),
        )
        .into());
    }

    let launcher_line = match launchers.first() {
        Some(l) if l.alive() => match terminate(l, timeout) {
            Ended::Exited => format!("pid {}, SIGTERM", l.pid),
            Ended::Killed => format!("pid {}, SIGTERM, then SIGKILL", l.pid),
        },
        _ => "none running".to_string(),
    };

    // Members with no lifeline do not notice the launcher going: stop them one by one.
    let lifeless: Vec<ProcRef> = members.iter().filter(|r| !r.formation_lifeline).map(proc_of).collect();
    std::thread::scope(|s| {
        for p in &lifeless {
            s.spawn(move || terminate(p, timeout));
        }
    });
    let deadline = Instant::now() + Timing::get().launcher_grace;
    while members.iter().any(|r| proc_of(r).alive()) && Instant::now() < deadline {
        std::thread::sleep(Timing::get().launcher_poll);
    }

    let mut lines = vec![format!("stopped:  {id}"), format!("launcher: {launcher_line}")];
    for r in &members {
        if !proc_of(r).alive() {
            running::remove(home, &r.session_id);
        }
        let ending = member_ending(Path::new(&r.records_dir));
        lines.push(format!(
            "member:   {}  {}@{}  {ending}",
            r.session_id, r.capsule_name, r.capsule_version
        ));
    }
    Ok(lines)
}

/// A process named by pid and start token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ProcRef {
    pid: u32,
    start: String,
}

impl ProcRef {
    /// Alive with the same start token, and not a zombie waiting for its parent to reap it.
    fn alive(&self) -> bool {
        procinfo::is_alive(self.pid, Some(&self.start)) && procinfo::is_alive(self.pid, None)
    }

    /// Sends `sig` only if the process is still the one we mean.
    fn signal(&self, sig: Signal) -> bool {
        let Ok(raw) = i32::try_from(self.pid) else {
            return false;
        };
        self.alive() && kill(Pid::from_raw(raw), sig).is_ok()
    }
}

fn proc_of(r: &RunningRecord) -> ProcRef {
    ProcRef {
        pid: r.pid,
        start: r.process_start.clone(),
    }
}

enum Ended {
    Exited,
    Killed,
}

/// SIGTERM, wait up to `timeout`, then SIGKILL and wait briefly for it to go.
fn terminate(p: &ProcRef, timeout: Duration) -> Ended {
    p.signal(Signal::SIGTERM);
    if wait_gone(p, timeout) {
        return Ended::Exited;
    }
    p.signal(Signal::SIGKILL);
    wait_gone(p, Duration::from_secs(5));
    Ended::Killed
}

fn wait_gone(p: &ProcRef, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        if !p.alive() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Timing::get().launcher_poll);
    }
}

/// How a member's session ended, from its trace (docs/reference/cli.md#mur-stop):
/// `formation_ended`, `session_end <exit_status>` or `no session_end`.
pub fn member_ending(records_dir: &Path) -> String {
    let records = crate::trace::read_records(&records_dir.join("trace.jsonl")).unwrap_or_default();
    ending_of(&records)
}

fn ending_of(records: &[serde_json::Value]) -> String {
    let mut end = None;
    for r in records {
        match r.get("event_type").and_then(|t| t.as_str()) {
            Some("formation_ended") => return "formation_ended".to_string(),
            Some("session_end") => {
                let status = r.get("exit_status").and_then(|s| s.as_str()).unwrap_or("?");
                end = Some(format!("session_end {status}"));
            }
            _ => {}
        }
    }
    end.unwrap_or_else(|| "no session_end".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ending_reads_the_trace() {
        let table = [
            ("", "no session_end"),
            ("{\"event_type\":\"session_start\"}\nnot json\n", "no session_end"),
            (
                "{\"event_type\":\"session_start\"}\n{\"event_type\":\"session_end\",\"exit_status\":\"ok\"}\n",
                "session_end ok",
            ),
            (
                "{\"event_type\":\"session_start\"}\n{\"event_type\":\"formation_ended\"}\n{\"event_type\":\"session_end\",\"exit_status\":\"formation_ended\"}\n",
                "formation_ended",
            ),
            (
                "{\"event_type\":\"session_end\",\"exit_status\":\"canceled\"}",
                "session_end canceled",
            ),
        ];
        for (trace, want) in table {
            let records = crate::trace::read::parse_records(trace.as_bytes());
            assert_eq!(ending_of(&records), want, "{trace:?}");
        }
    }

    #[test]
    fn a_dead_or_recycled_process_is_never_signalled() {
        let me = ProcRef {
            pid: std::process::id(),
            start: "1".into(),
        };
        assert!(!me.alive());
        assert!(!me.signal(Signal::SIGTERM));
        let me = ProcRef {
            pid: std::process::id(),
            start: procinfo::own_start().unwrap_or_default(),
        };
        assert!(me.alive());
    }
}
