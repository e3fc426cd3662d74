//! The member runtime, `mur run --capsule` (docs/reference/formation.md#how-a-formation-ends): one
//! session of one capsule, with its door.
//!
//! [`run`] goes through the start-up order of docs/reference/formation.md#member-intake: checks and
//! resolution ([`startup`]), then the session is staged (id, [`records`] directory, `session_start`
//! in the [`journal`]), then, on one `actix_rt::System`, the door is bound, the running record
//! written and the [`crate::readiness`] line printed, and the controller (`control`) runs the
//! [`lifecycle`] until the session ends on its own or [`winddown`] ends it. The [`executor`] runs
//! tasks on an arbiter of its own, with member calls wired in when the channel names callees; the
//! [`recorder`] turns the task board events into trace records and results; [`retention`] bounds
//! old sessions at the end.

mod control;
pub mod executor;
pub mod journal;
pub mod lifecycle;
mod questions;
pub mod recorder;
pub mod records;
pub mod retention;
pub mod startup;
pub mod winddown;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::mpsc;

use crate::diag::{self, Diagnostic};
use crate::door::{Door, DoorConfig, FormationTrust};
use crate::ids::{self, IdKind};
use crate::outcome::Outcome;
use crate::paths::MurHome;
use crate::running::{self, LauncherRef, RunningRecord};
use crate::tasks::Board;
use crate::timing::Timing;

use control::{Controller, Inbox};
use executor::ExecEvent;
use journal::Journal;
use recorder::Recorder;
use records::{Console, Records};
use startup::{Prepared, StartupRefusal};

/// What `mur run --capsule` was asked: the operator's flags and the ones the launcher passes to
/// its members.
#[derive(Debug, Default, Clone)]
pub struct SessionOptions {
    /// The installed capsule, as `<scope>/<name>`, and its exact version.
    pub capsule: Option<String>,
    pub capsule_version: Option<String>,
    /// A task: its text, or a file (relative to the current directory) holding it.
    pub task: Option<String>,
    /// The readiness line and the outcome as JSON on stdout.
    pub json: bool,
    /// The address the door binds (`ADDR` or `ADDR:PORT`); 127.0.0.1 by default.
    pub bind: Option<String>,
    /// The work folder; the current directory by default.
    pub workdir: Option<PathBuf>,
    /// A session to resume (refused: not supported).
    pub resume: Option<String>,
    /// The sha256 admission bound the capsule to (E-RUN-047 when the bytes differ).
    pub capsule_sha256: Option<String>,
    /// The project whose stores and lock the capsule resolves from.
    pub store_root: Option<PathBuf>,
    /// The readiness line carries the door's tokens (the launcher's probe needs the operator's).
    pub readiness_tokens: bool,
    /// The formation's deadline, or a lone session's `--deadline`, in Unix milliseconds.
    pub inherited_deadline: Option<u64>,
    /// A lone session's `--max-tokens`: its token budget, the smaller of this and the manifest's
    /// `inference.max_session_tokens` (docs/reference/formation.md#budgets); the default guard
    /// (crate::guard) when neither is given, none with `unlimited`.
    pub max_tokens: crate::guard::Limit,
    /// `--max-turns`: model turns per task, the smaller of this and `inference.max_turns`; the
    /// default guard when neither is given.
    pub max_turns: crate::guard::Limit,
    /// Lifecycle overrides the launcher sets for the entry member.
    pub lifecycle_task_acceptance: Option<String>,
    pub lifecycle_after_task: Option<String>,
}

/// `mur run --capsule`: runs the session and returns its exit code.
pub fn run(args: &SessionOptions) -> Outcome {
    let console = Console::new();
    ignore_sigpipe();
    ignore_terminal_signals_in_a_formation();
    let code = match startup::prepare(args, &console) {
        Err(StartupRefusal::Usage(msg)) => {
            console.err_line(&format!("error: {msg}"));
            2
        }
        Err(StartupRefusal::Diag(d)) => {
            console.diag(&d);
            1
        }
        Ok(p) => match Session::stage(p, &console) {
            Err(d) => {
                console.diag(&d);
                1
            }
            Ok((session, p)) => {
                start_telemetry(&session, &p, &console);
                let code = session.serve(args, p);
                // Spans still queued go out now, within a bound, so a normal end loses none.
                crate::otel::shutdown(crate::otel::FLUSH_BOUND);
                code
            }
        },
    };
    Ok(code)
}

/// OpenTelemetry export, when the `OTEL_*` variables ask for it: its warnings go to stderr and
/// `logs/bootstrap.log`, its closing count to the log only.
fn start_telemetry(session: &Session, p: &Prepared, console: &Console) {
    let who = crate::otel::Identity {
        formation_id: p.membership.as_ref().map(|m| m.formation_id.clone()),
        member: p
            .membership
            .as_ref()
            .and_then(|m| m.first.as_ref())
            .map(|f| f.member.clone()),
        session_id: Some(session.id.clone()),
    };
    // In a formation the launcher warns on stderr for everyone; a member only logs it.
    let in_formation = p.membership.is_some();
    let console = console.clone();
    crate::otel::init(
        who,
        Arc::new(move |note| match note {
            crate::otel::Note::Warn(d) if in_formation => console.log_only(&d.render("")),
            crate::otel::Note::Warn(d) => console.diag(&d),
            crate::otel::Note::Log(line) => console.log_only(&line),
        }),
    );
}

/// Members ignore SIGPIPE (docs/reference/formation.md#how-the-launcher-waits): a launcher gone
/// must not kill a member mid wind-down.
fn ignore_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_IGN installs no handler code; it only changes the disposition.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

/// A formation member ends when its lifeline closes (docs/reference/formation.md#lifelines), and
/// the launcher closes every lifeline on SIGINT, SIGTERM or SIGHUP. The entry shares the launcher's
/// process group, so a terminal's ^C or hangup reaches it directly as well: a member ignores both
/// and winds down through its lifeline, instead of dying with no `formation_ended` and no
/// `session_end`. A process handed no lifeline is a standalone session and keeps the default
/// dispositions. (A lifeline that proves invalid is refused with E-RUN-046 at once, so ignoring
/// them from the first instruction changes nothing for it.)
fn ignore_terminal_signals_in_a_formation() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    if std::env::var_os("MURMUR_FORMATION_LIFELINE").is_none() {
        return;
    }
    for sig in [Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: SIG_IGN installs no handler code; it only changes the disposition.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
}

fn rfc3339_ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The byte bound of this session's trace: `writer::MAX_TRACE_BYTES`, or the smaller one a test
/// sets (`MURMUR_TEST_TRACE_BYTES`, announced as W-ENV-001).
fn trace_bound(console: &Console) -> u64 {
    use crate::trace::writer;
    let env = std::env::var(writer::TRACE_BYTES_ENV).ok();
    match writer::test_trace_bytes(env.as_deref()) {
        Some(b) => {
            console.diag(
                &Diagnostic::new(
                    diag::W_ENV_001,
                    format!(
                        "{} is set, so this session's trace stops growing at {b} bytes",
                        writer::TRACE_BYTES_ENV
                    ),
                )
                .with_hint(format!(
                    "unset {}: it shrinks the trace's bound for the runtime's own tests",
                    writer::TRACE_BYTES_ENV
                )),
            );
            b
        }
        None => writer::MAX_TRACE_BYTES,
    }
}

/// A staged session: its id, records directory and trace.
struct Session {
    id: String,
    started: Instant,
    started_at: DateTime<Utc>,
    records: Records,
    journal: Journal,
    session_start: String,
    console: Console,
    home: MurHome,
    /// `<scope>/<name>` of the capsule: the retention pass prunes this capsule's sessions only.
    capsule: String,
}

impl Session {
    /// docs/reference/formation.md#member-intake step 6: mint `ses_`, make the records directory,
    /// write `session_start`, W-RUN-008.
    fn stage(p: Prepared, console: &Console) -> Result<(Session, Prepared), Diagnostic> {
        let id = ids::mint(IdKind::Session);
        let home = MurHome::from_env();
        let staging = |what: &str, e: std::io::Error| Diagnostic::new(diag::E_RUN_012, format!("{what}: {e}"));
        let dir = home.session_records(&p.workdir, &id);
        let records = Records::create(dir.clone())
            .map_err(|e| staging(&format!("the records directory {} cannot be made", dir.display()), e))?;
        console
            .attach_log(&records.bootstrap_log())
            .map_err(|e| staging("logs/bootstrap.log cannot be written", e))?;
        let journal = Journal::create(&records.trace_path(), &id, trace_bound(console), console.clone())
            .map_err(|e| staging("trace.jsonl cannot be written", e))?;

        let started_at = Utc::now();
        let callees = crate::channel::line::FirstLine::callees_of(p.membership.as_ref().and_then(|m| m.first.as_ref()));
        let deadline_at = p.deadline.map(rfc3339_ms);
        let agent = match &p.host {
            executor::Runner::Model(agent) => Some(agent),
            executor::Runner::Component(_) | executor::Runner::Deferred(_) | executor::Runner::Remote(_) => None,
        };
        if let Some(a) = agent {
            journal.set_usage(a.totals());
        }
        let tools = p.host.tools_declared();
        let start = journal::Start {
            capsule_name: &p.capsule.name.to_string(),
            capsule_version: &p.capsule.version,
            model: agent.map(|a| a.model()),
            max_turns: agent.and_then(|a| a.max_turns()),
            tools_declared: &tools,
            formation_id: p.membership.as_ref().map(|m| m.formation_id.as_str()),
            member: p
                .membership
                .as_ref()
                .and_then(|m| m.first.as_ref())
                .map(|f| (f.member.as_str(), &callees[..])),
            deadline: p.deadline.zip(deadline_at.as_deref()).map(|(d, at)| journal::Deadline {
                at,
                secs: secs_until(started_at, d),
            }),
        };
        let session_start = journal.session_start(&start).map_err(|e| {
            staging("trace.jsonl cannot be written", e).with_hint(format!(
                "the session's records go to {}; free space on its file system, or make it writable, and run it again",
                records.dir().display()
            ))
        })?;

        // W-RUN-008 (docs/reference/capsules.md#what-the-host-grants): stderr and
        // logs/bootstrap.log, both through the console.
        if let Some(first) = p.membership.as_ref().and_then(|m| m.first.as_ref())
            && let Some(w) =
                startup::unreachable_callees_warning(&first.member, &callees, &p.capsule.manifest.network_allow)
        {
            console.diag(&w);
        }
        if let Some(t) = &p.task
            && let Err(e) = records.write_task(t)
        {
            console.note(&format!("task.md cannot be written: {e}"));
        }
        Ok((
            Session {
                id,
                started: Instant::now(),
                started_at,
                records,
                journal,
                session_start,
                console: console.clone(),
                home,
                capsule: p.capsule.name.to_string(),
            },
            p,
        ))
    }

    /// A peer's door socket, when its launcher made the formation's owner-only socket directory
    /// (docs/architecture.md, `peer_door`): callers then reach this door only there.
    fn door_socket(&self, p: &Prepared) -> Option<std::path::PathBuf> {
        let first = p.membership.as_ref().and_then(|m| m.first.as_ref())?;
        if first.entry {
            return None;
        }
        let dir = self.home.door_sockets(&first.formation_id);
        crate::peer_door::usable_dir(&dir).then(|| self.home.door_socket(&first.formation_id, &first.member))
    }

    /// A formation's peer keeps its door's tasks in its task store and, when the launcher
    /// restarted it, takes back what the process before it kept
    /// (docs/reference/formation.md#tasks-across-a-restart). The entry is never restarted, and a
    /// session alone has nothing to come back to: neither keeps a store.
    fn take_back_tasks(&self, p: &Prepared, board: &Board) -> Result<(), Diagnostic> {
        let peer = p
            .membership
            .as_ref()
            .and_then(|m| m.first.as_ref())
            .is_some_and(|f| !f.entry);
        if !peer {
            return Ok(());
        }
        let path = self.home.task_store(&p.workdir);
        let (store, kept) =
            crate::tasks::store::TaskStore::open(&path).map_err(|why| Diagnostic::new(diag::E_RST_003, why))?;
        let r = board.restore(store, kept, p.capsule.manifest.lifecycle.repeatable_tasks);
        if r != crate::tasks::board::Restored::default() {
            self.console.note(&format!(
                "took back {} task(s) from the task store: {} ended, {} queued again, {} failed as they ran when the member restarted (E-RST-002)",
                r.ended + r.queued + r.failed,
                r.ended,
                r.queued,
                r.failed
            ));
        }
        Ok(())
    }

    /// docs/reference/formation.md#member-intake steps 7–8 and the life of the session, on one
    /// actix system.
    fn serve(self, args: &SessionOptions, p: Prepared) -> u8 {
        actix_rt::System::new().block_on(self.serve_async(args, p))
    }

    async fn serve_async(self, args: &SessionOptions, mut p: Prepared) -> u8 {
        let (cause_tx, causes) = mpsc::unbounded_channel();
        let lifeline = p.membership.as_mut().and_then(|m| m.lifeline.take());
        let lifeline_probe = lifeline.as_ref().and_then(winddown::LifelineProbe::of);
        let listening = winddown::listen(
            &cause_tx,
            lifeline,
            p.deadline,
            &self.console,
            self.home.clone(),
            &self.id,
        );
        if let Err(d) = listening {
            return self.fail_early(d);
        }

        // 7. The door.
        let config = self.door_config(&p);
        let bind = args.bind.as_deref().unwrap_or("127.0.0.1");
        let board = Board::new(p.policy.acceptance, p.policy.queue_depth);
        if let Err(d) = self.take_back_tasks(&p, &board) {
            return self.fail_early(d);
        }
        let (news_tx, news) = mpsc::unbounded_channel();
        let questions = questions::Questions::new(self.console.clone(), p.capsule.name.to_string());
        questions.set_board(&board);
        let recorder = Recorder::new(
            self.journal.clone(),
            self.records.clone(),
            self.console.clone(),
            args.json,
            news_tx,
            Arc::clone(&questions),
        );
        recorder.observe(&board);
        let door = match Door::start_with_board(config, bind, Arc::clone(&board)) {
            Ok(d) => d,
            Err(d) => return self.fail_early(d),
        };
        self.write_running_record(&p, &door);
        questions.set_door(door.url(), &self.home.running_record(&self.id).display().to_string());
        self.say_ready(args, &p, &door);

        // 8. The --task task, then the executor and the idle wait.
        if let Some(t) = &p.task {
            board.submit_local(t);
        }
        let member_calls = self.member_calls(&mut p);
        let (exec, arbiter) = self.start_executor(&p, &board, member_calls.clone(), lifeline_probe);
        // Unarmed, the sender stays here until the session ends: the controller must not see the
        // idle wait close.
        let (idle_tx, idle) = mpsc::unbounded_channel();
        if p.policy.idle_timeout() {
            let wait = Timing::get().idle_first_task;
            actix_rt::spawn(async move {
                actix_rt::time::sleep(wait).await;
                let _ = idle_tx.send(());
            });
        }

        let inbox = Inbox {
            causes,
            exec,
            news,
            idle,
        };
        let controller = Controller {
            session: &self,
            board: &board,
            recorder: &recorder,
            policy: p.policy,
            deadline: p.deadline,
            formation_id: p.membership.as_ref().map(|m| m.formation_id.clone()),
            retain: p.capsule.manifest.retain.clone(),
            calls: member_calls,
        };
        let code = controller.run(inbox).await;
        door.stop().await;
        arbiter.stop();
        running::remove(&self.home, &self.id);
        drop(cause_tx);
        code
    }

    /// Step 7's door, as the manifest, the lifecycle policy and the formation's channel set it.
    fn door_config(&self, p: &Prepared) -> DoorConfig {
        let manifest = &p.capsule.manifest;
        let formation = p.membership.as_ref().and_then(|m| {
            let first = m.first.as_ref()?;
            Some(FormationTrust {
                formation_id: first.formation_id.clone(),
                member: first.member.clone(),
                verify_key: first.key()?,
                grant_key: m.grant_key.clone(),
            })
        });
        DoorConfig {
            capsule_name: p.capsule.name.to_string(),
            capsule_version: p.capsule.version.clone(),
            description: format!("{}@{}", p.capsule.name, p.capsule.version),
            session_id: self.id.clone(),
            authenticate: manifest.authentication,
            peer_tasks_accept: manifest.peer_tasks_accept,
            acceptance: p.policy.acceptance,
            queue_depth: p.policy.queue_depth,
            formation,
            network_allow: manifest.network_allow.clone(),
            tools: p.host.tools_declared(),
            skills: manifest.skills.clone(),
            input_modes: manifest.input_modes.clone(),
            socket: self.door_socket(p),
        }
    }

    /// The running record `mur ps` and `mur stop` read; a session that cannot write it serves on.
    fn write_running_record(&self, p: &Prepared, door: &Door) {
        let record = self.running_record(p, door);
        if let Err(e) = record.write(&self.home) {
            self.console.note(&format!(
                "the running record cannot be written ({e}); `mur ps` will not list this session"
            ));
        }
    }

    /// The readiness line on stdout with `--json`, else a notice on the console. Said once, after
    /// the running record, so whoever reads it finds the session listed.
    fn say_ready(&self, args: &SessionOptions, p: &Prepared, door: &Door) {
        let records_dir = self.records.dir().display().to_string();
        let workdir = p.workdir.display().to_string();
        let name = p.capsule.name.to_string();
        if args.json {
            let line = crate::readiness::Line {
                auth: p.capsule.manifest.authentication,
                formation_id: p.membership.as_ref().map(|m| m.formation_id.as_str()),
                name: &name,
                pid: std::process::id(),
                records_dir: &records_dir,
                session_id: &self.id,
                operator_token: if args.readiness_tokens {
                    door.operator_token().map(crate::secret::Secret::reveal)
                } else {
                    None
                },
                url: door.url(),
                version: &p.capsule.version,
                workdir: &workdir,
            }
            .line();
            self.console.out_line(&line);
        } else {
            // Said once, so a session that serves on is never a silent terminal.
            let mut notice = format!(
                "session {} of {name}@{} serves its door at http://{}",
                self.id,
                p.capsule.version,
                door.url()
            );
            if p.policy.serves_for_ever() {
                let stop = p
                    .membership
                    .as_ref()
                    .map_or(self.id.as_str(), |m| m.formation_id.as_str());
                notice.push_str(&format!(" until it is stopped: `mur stop {stop}` or Ctrl-C"));
            } else if p.policy.idle_timeout() {
                notice.push_str(&format!(
                    "; it ends after its first task, or after {} s without one",
                    Timing::get().idle_first_task.as_secs()
                ));
            }
            self.console.note(&notice);
        }
    }

    /// The member calls, when the channel names callees; they take the channel's reader, which
    /// then feeds them address lines.
    fn member_calls(&self, p: &mut Prepared) -> Option<crate::calls::Calls> {
        p.membership.as_mut().and_then(|m| {
            let first = m.first.as_ref()?;
            executor::member_calls(
                first,
                m.intake.take(),
                &p.capsule.manifest,
                self.journal.writer(),
                &self.console,
            )
            .map(|c| c.with_authority(m.authority.as_ref().map(|(a, _)| std::sync::Arc::clone(a))))
        })
    }

    /// The executor, on an arbiter of its own, draining `board`; its events come on the returned
    /// receiver (`Gone` at once when it cannot start).
    fn start_executor(
        &self,
        p: &Prepared,
        board: &Arc<Board>,
        member_calls: Option<crate::calls::Calls>,
        lifeline_probe: Option<winddown::LifelineProbe>,
    ) -> (mpsc::UnboundedReceiver<ExecEvent>, actix_rt::Arbiter) {
        let (exec_tx, exec) = mpsc::unbounded_channel();
        let arbiter = actix_rt::Arbiter::new();
        let setup = Arc::new(
            executor::task_setup(
                p.membership.as_ref().map(|m| m.formation_id.clone()),
                p.membership.as_ref().and_then(|m| m.first.as_ref()),
                &p.capsule.manifest,
                member_calls,
                &self.records.bootstrap_log(),
                self.journal.clone(),
                lifeline_probe,
            )
            .with_authority(
                p.membership
                    .as_ref()
                    .and_then(|m| m.authority.as_ref().map(|(a, _)| Arc::clone(a))),
                p.membership.as_ref().and_then(|m| m.grant_key.clone()),
            ),
        );
        if !executor::spawn(
            &arbiter.handle(),
            Arc::clone(board),
            p.host.clone(),
            setup,
            p.policy.ends_after_task(),
            exec_tx.clone(),
        ) {
            let _ = exec_tx.send(ExecEvent::Gone);
        }
        (exec, arbiter)
    }

    /// A failure after `session_start` and before the door serves: `session_end failed`, exit 1.
    fn fail_early(&self, d: Diagnostic) -> u8 {
        self.console.diag(&d);
        self.journal.session_end(self.duration_ms(), "failed");
        1
    }

    fn duration_ms(&self) -> u64 {
        crate::timing::millis(self.started.elapsed())
    }

    fn running_record(&self, p: &Prepared, door: &Door) -> RunningRecord {
        let first = p.membership.as_ref().and_then(|m| m.first.as_ref());
        let lifeline = p.membership.as_ref().is_some_and(|m| m.has_lifeline);
        RunningRecord {
            capsule_name: p.capsule.name.to_string(),
            capsule_version: p.capsule.version.clone(),
            door_token: door.operator_token().cloned(),
            formation_entry: first.is_some_and(|f| f.entry),
            formation_id: p.membership.as_ref().map(|m| m.formation_id.clone()),
            formation_launcher: first.and_then(|f| f.launcher.as_ref()).map(|l| LauncherRef {
                pid: l.pid,
                process_start: l.process_start.clone(),
            }),
            formation_lifeline: lifeline,
            formation_member: first.map(|f| f.member.clone()),
            outlives_launcher: !lifeline,
            pid: std::process::id(),
            process_start: crate::procinfo::own_start().unwrap_or_default(),
            records_dir: self.records.dir().display().to_string(),
            session_id: self.id.clone(),
            started_at: rfc3339_ms(self.started_at),
            url: door.url().to_string(),
            workdir: p.workdir.display().to_string(),
        }
    }
}

/// Seconds from `from` to the deadline, rounded up, never negative.
fn secs_until(from: DateTime<Utc>, deadline: DateTime<Utc>) -> u64 {
    let ms = (deadline - from).num_milliseconds().max(0) as u64;
    ms.div_ceil(1000)
}
