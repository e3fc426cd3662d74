//! The launcher: `mur run --roster` (docs/reference/formation.md#launch-sequence,
//! docs/reference/formation.md#how-a-formation-ends, docs/reference/formation.md#retention).
//!
//! The front end admits the roster through `roster::front` (pure, the same for `mur doctor` and
//! `mur deploy`; nothing started on refusal), builds a
//! [`LaunchPlan`], and runs a [`formation::FormationActor`] on an actix system until it reports
//! the exit code. The actors: `FormationActor` (the launch state machine), one `PeerActor` per
//! non-entry member (process, lifeline, channel, readiness probe), and `TokenAuthority` (the only
//! holder of the signing key).

pub mod authority;
pub mod budget;
pub mod formation;
pub mod news;
pub mod peer;
pub mod probe;
pub mod registry;
pub mod report;
pub mod retention;
pub mod spawn;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;

use crate::capsule::{CapsuleEngine, CompiledCache, Handed};
use crate::channel::line::LauncherId;
use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::outcome::{Failure, Outcome};
use crate::paths::MurHome;
use crate::roster::Admitted;
use crate::roster::front::{self, Admission};
use spawn::{MemberCommand, MemberPipes};

/// One member as the launcher starts it.
#[derive(Debug, Clone)]
pub struct PlanMember {
    pub name: String,
    /// Full artifact name, `<scope>/<name>`.
    pub capsule: String,
    pub version: String,
    pub sha256: String,
    /// The variables its manifest declares (`inference.api_key: ${VAR}`): all it inherits beyond
    /// the fixed list of [`spawn::member_env`].
    pub env: Vec<String>,
    /// A model capsule: it makes provider requests, so it is handed the budget channel when the
    /// formation keeps a budget.
    pub model: bool,
}

/// The formation's `--deadline`: one instant for every member.
#[derive(Debug, Clone)]
pub struct Deadline {
    pub instant: Instant,
    pub unix_ms: u64,
    pub secs: u64,
    /// RFC 3339, UTC, whole seconds.
    pub at: String,
}

/// Everything fixed before the first member starts.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub formation_id: String,
    pub home: MurHome,
    /// The roster's directory, symlinks resolved.
    pub project_dir: PathBuf,
    pub members: Vec<PlanMember>,
    pub entry: usize,
    pub edges: Vec<(usize, usize)>,
    callees: Vec<Vec<usize>>,
    pub launcher: Option<LauncherId>,
    pub deadline: Option<Deadline>,
    pub task: Option<String>,
    pub json: bool,
    /// Progress lines per peer while the formation starts (terminals only).
    pub progress: report::Progress,
    pub mur_binary: PathBuf,
    /// The entry member's `trace.retain`, which bounds this project's formation directories.
    pub retention: Option<crate::manifest::Retain>,
    /// The formation span's `traceparent`, handed to the entry (spans exported only).
    pub traceparent: Option<String>,
    /// Per member, in roster order: the compiled entry of its component, checked once here and
    /// handed to it open (`MURMUR_COMPILED_FD`); `None` for a model capsule, or when the launcher
    /// could not provide one (the member then checks the cache itself).
    pub compiled: Vec<Option<Arc<Handed>>>,
    /// `--max-tokens`: the formation's token budget (docs/reference/formation.md#budgets); the
    /// default guard's for a formation with a model member unless `unlimited`.
    pub max_tokens: Option<u64>,
    /// `--restart`: how often a peer whose process ended is started again
    /// (docs/reference/formation.md#restarts); `None`: it is withdrawn at once.
    pub restart: Option<crate::restart::Policy>,
    /// `--max-turns`, handed to every member as written (crate::guard).
    pub max_turns: crate::guard::Limit,
}

impl LaunchPlan {
    pub fn callees(&self, i: usize) -> &[usize] {
        self.callees.get(i).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The command line of member `i` (docs/reference/formation.md#member-command-lines). No
    /// credential is ever put on it.
    pub fn command(&self, i: usize, pipes: &MemberPipes) -> MemberCommand {
        let m = &self.members[i];
        let peer = i != self.entry;
        let workdir = if peer {
            self.home.member_dir(&self.formation_id, &m.name)
        } else {
            self.project_dir.clone()
        };
        let mut args: Vec<OsString> = vec![
            "run".into(),
            "--capsule".into(),
            m.capsule.clone().into(),
            "--capsule-version".into(),
            m.version.clone().into(),
            "--capsule-sha256".into(),
            m.sha256.clone().into(),
            "--workdir".into(),
            workdir.into_os_string(),
        ];
        if peer {
            args.extend(
                ["--store-root".into(), self.project_dir.clone().into_os_string()]
                    .into_iter()
                    .chain(["--json", "--readiness-tokens", "--bind", "127.0.0.1"].map(OsString::from)),
            );
        } else {
            match &self.task {
                Some(task) => {
                    args.extend(
                        [
                            "--lifecycle-task-acceptance",
                            "single",
                            "--lifecycle-after-task",
                            "exit",
                            "--task",
                        ]
                        .map(OsString::from),
                    );
                    args.push(task.into());
                }
                None => args.extend(
                    [
                        "--lifecycle-task-acceptance",
                        "queue",
                        "--lifecycle-after-task",
                        "sleep",
                    ]
                    .map(OsString::from),
                ),
            }
            if self.json {
                args.push("--json".into());
            }
        }
        if let Some(turns) = self.max_turns.arg() {
            args.push("--max-turns".into());
            args.push(turns.into());
        }
        if let Some(d) = &self.deadline {
            args.push("--inherited-deadline".into());
            args.push(d.unix_ms.to_string().into());
        }
        MemberCommand {
            program: self.mur_binary.clone(),
            args,
            formation_id: self.formation_id.clone(),
            channel_fd: pipes.channel_read.as_raw_fd(),
            lifeline_fd: pipes.lifeline_read.as_raw_fd(),
            peer,
            declared_env: m.env.clone(),
            traceparent: if peer { None } else { self.traceparent.clone() },
            compiled: self
                .compiled
                .get(i)
                .and_then(Option::as_ref)
                .map(|h| (h.file.as_raw_fd(), h.key_id.clone())),
            budget_fd: pipes.budget.as_ref().map(|(member, _, _)| member.as_raw_fd()),
            budget_kept: m.model && self.max_tokens.is_some(),
            terminal_stdin: !peer && std::io::IsTerminal::is_terminal(&std::io::stdin()),
        }
    }

    fn from_admitted(admitted: &Admitted, formation_id: String, home: MurHome, project_dir: PathBuf) -> LaunchPlan {
        let members = admitted
            .members
            .iter()
            .map(|m| PlanMember {
                name: m.name.clone(),
                capsule: m.capsule.to_string(),
                version: m.version.clone(),
                sha256: m.sha256.clone(),
                env: m.manifest.key_vars(),
                model: m.manifest.kind == crate::manifest::Kind::Model,
            })
            .collect();
        let entry = admitted.entry();
        let callees = crate::roster::edges::callees_of_each(&admitted.edges, admitted.members.len());
        let retention = admitted.members[entry].manifest.retain.clone();
        LaunchPlan {
            formation_id,
            home,
            project_dir,
            members,
            entry,
            edges: admitted.edges.clone(),
            callees,
            launcher: crate::procinfo::own_start().map(|process_start| LauncherId {
                pid: std::process::id(),
                process_start,
            }),
            deadline: None,
            task: None,
            json: false,
            progress: report::Progress::for_stderr(),
            mur_binary: PathBuf::new(),
            retention,
            traceparent: None,
            compiled: Vec::new(),
            max_tokens: None,
            restart: None,
            max_turns: crate::guard::Limit::Default,
        }
    }
}

/// The furthest `--deadline` accepted: far inside what an `Instant` and a member's
/// `--inherited-deadline` (a date) can hold.
pub const MAX_DEADLINE_SECS: u64 = 100 * 31_557_600;

fn refuse(diag: Diagnostic) -> Failure {
    Failure { prefix: "", diag }
}

/// What `mur run --roster` was asked.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The roster: a `roster.yaml`, or its project directory.
    pub roster: PathBuf,
    /// The entry member's one task; without it the formation serves until stopped.
    pub task: Option<String>,
    /// The formation line and the outcome as JSON on stdout.
    pub json: bool,
    /// End every member this many seconds after the launcher started.
    pub deadline: Option<u64>,
    /// `--max-tokens` as written: the formation's token budget (docs/reference/formation.md#budgets).
    pub max_tokens: Option<String>,
    /// `--restart N/SECS` as written: the peers' restart policy (docs/reference/formation.md#restarts).
    pub restart: Option<String>,
    /// `--max-turns` as written: model turns per task of every model member (crate::guard).
    pub max_turns: Option<String>,
}

/// `mur run --roster`: the front end, then the launch (docs/reference/formation.md#launch-sequence).
pub fn run_roster(args: &LaunchOptions) -> Outcome {
    let roster_arg = args.roster.as_path();
    // 1. The deadline's origin is the launcher's start.
    let started = Instant::now();
    let started_unix_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
    // 2. A formation member cannot launch a formation.
    if std::env::var("MURMUR_FORMATION_ID").is_ok_and(|v| !v.trim().is_empty()) {
        return Err(refuse(Diagnostic::new(
            diag::E_RUN_046,
            "MURMUR_FORMATION_ID is set, so this process is already a member of a formation, and a formation member cannot launch a formation",
        ).with_hint("launch the formation from a shell that is not itself a formation member")));
    }
    // A policy that cannot be read is refused before the roster is read.
    let restart = match &args.restart {
        None => None,
        Some(text) => {
            Some(crate::restart::Policy::parse(text).map_err(|why| refuse(Diagnostic::new(diag::E_RST_001, why)))?)
        }
    };
    // Nothing the launcher's own parent left open reaches a member.
    spawn::keep_inherited_descriptors_from_members();
    // 3–6. The project directory, stores, lock, admission. A refusal starts nothing.
    let home = MurHome::from_env();
    let Admission { project_dir, admitted } = front::admit_arg(roster_arg, &home).map_err(refuse)?;
    // 7. Warnings still admit.
    for w in &admitted.warnings {
        w.eprint("[mur run] ");
    }

    // Every member's pipes exist at once: a large formation needs more descriptors than the
    // usual soft limit. Refused here, before anything starts.
    descriptors_for(admitted.members.len()).map_err(refuse)?;

    let limit = |text: &Option<String>, flag: &str, parse: fn(&str) -> Result<crate::guard::Limit, String>| {
        text.as_deref().map_or(Ok(crate::guard::Limit::Default), |t| {
            parse(t).map_err(|why| refuse(Diagnostic::new(diag::E_BUD_003, format!("{flag} {why}"))))
        })
    };
    let max_tokens = limit(&args.max_tokens, "--max-tokens", crate::guard::parse_tokens)?;
    let max_turns = limit(&args.max_turns, "--max-turns", crate::guard::parse_turns)?;
    let mut plan = LaunchPlan::from_admitted(&admitted, ids::mint(IdKind::Formation), home, project_dir);
    plan.restart = restart;
    // A formation with a model member keeps the default guard's budget unless told otherwise.
    if plan.members.iter().any(|m| m.model) {
        let tokens = crate::guard::tokens(max_tokens, None);
        plan.max_tokens = tokens.0;
        eprintln!(
            "[mur run] {}",
            crate::guard::describe(crate::guard::turns(max_turns, None), tokens, "formation")
        );
    } else if let crate::guard::Limit::Set(n) = max_tokens {
        plan.max_tokens = Some(n);
    }
    plan.max_turns = max_turns;
    plan.compiled = hand_out_compiled(&admitted);
    plan.task = args.task.clone();
    plan.json = args.json;
    plan.mur_binary = match std::env::var_os("MURMUR_MUR_BINARY").filter(|v| !v.is_empty()) {
        Some(p) => {
            // A test switch (docs/reference/formation.md#launch-sequence step 3): members run
            // another program, so say so.
            Diagnostic::new(
                diag::W_ENV_001,
                format!(
                    "MURMUR_MUR_BINARY is set, so members run {} instead of this mur binary",
                    diag::shown(&p.to_string_lossy())
                ),
            )
            .with_hint("unset MURMUR_MUR_BINARY unless you are testing the launcher")
            .eprint("[mur run] ");
            PathBuf::from(p)
        }
        None => std::env::current_exe().map_err(|e| {
            refuse(Diagnostic::new(diag::E_RUN_045, format!("the mur binary could not be located: {e}")).without_hint())
        })?,
    };
    if let Some(secs) = args.deadline {
        // Checked: a huge --deadline must be a refusal, not an overflow in the launcher or an
        // --inherited-deadline every member refuses.
        let fits = (secs <= MAX_DEADLINE_SECS)
            .then(|| {
                Some((
                    started.checked_add(Duration::from_secs(secs))?,
                    started_unix_ms.checked_add(secs.checked_mul(1000)?)?,
                ))
            })
            .flatten();
        let Some((instant, at_ms)) = fits else {
            return Err(refuse(
                Diagnostic::new(
                    diag::E_RUN_045,
                    format!("the formation could not be launched: --deadline {secs} is more than {MAX_DEADLINE_SECS} seconds (100 years) away"),
                )
                .with_hint("give --deadline in seconds from now, or leave it out for no deadline"),
            ));
        };
        let at = chrono::DateTime::from_timestamp_millis(at_ms as i64)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        plan.deadline = Some(Deadline {
            instant,
            unix_ms: at_ms,
            secs,
            at,
        });
    }
    launch(plan)
}

/// Each distinct component of the roster compiled at most once, here, and its entry checked once
/// (docs/performance.md §6): the entry of every member's component, held open for
/// [`LaunchPlan::command`] to hand over. Members of one component share one descriptor. Nothing
/// here refuses a launch: a component that cannot be compiled or a cache that cannot be trusted is
/// left to each member, which reports it as it would alone.
fn hand_out_compiled(admitted: &Admitted) -> Vec<Option<Arc<Handed>>> {
    let components = admitted
        .members
        .iter()
        .filter(|m| matches!(m.manifest.kind, crate::manifest::Kind::Component { .. }));
    if components.clone().next().is_none() {
        return vec![None; admitted.members.len()];
    }
    // The members' own engine configuration: one place, CapsuleEngine::new.
    let engine = match CapsuleEngine::new() {
        Ok(engine) => engine,
        Err(why) => {
            tracing::debug!("no compiled entries are handed to members: {why}");
            return vec![None; admitted.members.len()];
        }
    };
    let cache = CompiledCache::user();
    let mut by_archive: HashMap<&str, Option<Arc<Handed>>> = HashMap::new();
    for m in components {
        by_archive.entry(m.sha256.as_str()).or_insert_with(|| {
            let what = format!("{}@{}", m.capsule, m.version);
            // `read` runs only on a miss, before the compilation a cold launch waits on.
            let mut spinner = None;
            let handed = {
                let mut read = || {
                    spinner = Some(crate::progress::Spinner::start(
                        "[mur run] ",
                        format!("compiling {what} for its members (once; later launches use the compiled cache)"),
                    ));
                    crate::store::read_component_checked(&m.zip_path, &m.sha256)
                        .map_err(crate::capsule::component_unreadable)
                };
                cache.hand_out(&engine, &m.sha256, &mut read)
            };
            if let Some(s) = spinner {
                s.finish(&format!("compiled {what}"));
            }
            handed
                .map(Arc::new)
                .map_err(|why| tracing::debug!("no compiled entry of {} is handed to members: {why}", m.capsule))
                .ok()
        });
    }
    admitted
        .members
        .iter()
        .map(|m| match m.manifest.kind {
            crate::manifest::Kind::Component { .. } => by_archive.get(m.sha256.as_str()).cloned().flatten(),
            _ => None,
        })
        .collect()
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit when a formation of `members` needs it
/// (`limits::nofile`); refuses when even the hard limit is too low.
fn descriptors_for(members: usize) -> Result<(), Diagnostic> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let cannot = |why: String| Diagnostic::new(diag::E_RUN_045, format!("the formation could not be launched: {why}"));
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| cannot(format!("the open-file limit cannot be read: {e}")).without_hint())?;
    match crate::limits::nofile(members, soft, hard) {
        crate::limits::Nofile::Enough => Ok(()),
        crate::limits::Nofile::Raise(to) => setrlimit(Resource::RLIMIT_NOFILE, to, hard).map_err(|e| {
            cannot(format!("its {members} members need more open files than the soft limit of {soft}, and raising it to {to} failed: {e}"))
                .without_hint()
        }),
        crate::limits::Nofile::TooLow { needed, hard } => Err(cannot(format!(
            "its {members} members need {needed} open file descriptors in the launcher, and the hard limit (RLIMIT_NOFILE) is {hard}"
        ))
        .with_hint(format!(
            "raise the hard open-file limit to at least {needed} (`ulimit -Hn` in a root shell, `nofile` in /etc/security/limits.conf, or LimitNOFILE= for a systemd unit), or launch fewer members"
        ))),
    }
}

/// Runs the actors until the formation has ended; returns the launcher's exit code.
fn launch(mut plan: LaunchPlan) -> Outcome {
    registry::install_panic_hook();
    // The formation's span, the root of its trace, when the OTEL_* variables ask for spans. The
    // launcher is the one process of the formation that warns on stderr about export; members
    // note it in their logs only, so a formation prints each warning once.
    crate::otel::init(
        crate::otel::Identity {
            formation_id: Some(plan.formation_id.clone()),
            ..crate::otel::Identity::default()
        },
        std::sync::Arc::new(|note| match note {
            crate::otel::Note::Warn(d) => d.eprint("[mur run] "),
            crate::otel::Note::Log(line) => tracing::debug!("{line}"),
        }),
    );
    let span = crate::otel::formation_span(&plan.formation_id, &plan.members[plan.entry].name);
    plan.traceparent = span.as_ref().map(|s| s.traceparent().to_string());
    let code = run_actors(plan);
    if let Some(span) = span {
        span.end(if matches!(code, Ok(0)) { "ok" } else { "failed" });
    }
    crate::otel::shutdown(crate::otel::FLUSH_BOUND);
    code
}

fn run_actors(plan: LaunchPlan) -> Outcome {
    let system = actix::System::new();
    let code = system.block_on(async move {
        // docs/reference/formation.md#launch-sequence step 2: signal handling before anything
        // starts.
        let signals = match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                Diagnostic::new(diag::E_IO_003, format!("signal handling could not be set up: {e}"))
                    .without_hint()
                    .eprint("");
                return 1;
            }
        };
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let authority = authority::TokenAuthority::default().start();
        let formation = formation::FormationActor::new(plan, authority, done_tx).start();
        let forward = formation.clone();
        actix::spawn(async move {
            let mut signals = signals;
            while let Some(n) = signals.next().await {
                if n == libc_sig::SIGHUP {
                    silence_a_hung_up_terminal();
                }
                forward.do_send(formation::Signal(n));
            }
        });
        done_rx.await.unwrap_or(1)
    });
    Ok(code)
}

/// Once a terminal hangs up, every write to it fails with EIO, and a failed print would end the
/// launcher in a panic before it has stopped its members. Output no one can see any more goes to
/// /dev/null instead; a stdout or stderr that is not a hung-up terminal is left alone.
pub(crate) fn silence_a_hung_up_terminal() {
    use std::os::fd::AsRawFd;
    let hung_up =
        |fd: std::os::fd::BorrowedFd<'_>| matches!(nix::sys::termios::tcgetattr(fd), Err(nix::errno::Errno::EIO));
    let targets = [
        (
            hung_up(std::os::fd::AsFd::as_fd(&std::io::stdout())),
            std::io::stdout().as_raw_fd(),
        ),
        (
            hung_up(std::os::fd::AsFd::as_fd(&std::io::stderr())),
            std::io::stderr().as_raw_fd(),
        ),
    ];
    if !targets.iter().any(|(h, _)| *h) {
        return;
    }
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return;
    };
    for (_, fd) in targets.iter().filter(|(h, _)| *h) {
        let _ = nix::unistd::dup2(null.as_raw_fd(), *fd);
    }
}

/// SIGINT, SIGTERM and SIGHUP as one stream of signal numbers.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Option<i32> {
        tokio::select! {
            s = self.int.recv() => s.map(|_| libc_sig::SIGINT),
            s = self.term.recv() => s.map(|_| libc_sig::SIGTERM),
            s = self.hup.recv() => s.map(|_| libc_sig::SIGHUP),
        }
    }
}

mod libc_sig {
    pub const SIGHUP: i32 = nix::sys::signal::Signal::SIGHUP as i32;
    pub const SIGINT: i32 = nix::sys::signal::Signal::SIGINT as i32;
    pub const SIGTERM: i32 = nix::sys::signal::Signal::SIGTERM as i32;
}
