//! Start-up of `mur run --capsule`, docs/reference/formation.md#member-intake steps 1–5, in that
//! order: `MURMUR_FORMATION_ID` (E-RUN-044), `MURMUR_FORMATION_PEERS` (E-RUN-046), the channel and
//! the lifeline (E-RUN-046), W-RUN-007, then the capsule (E-RUN-002, E-RUN-047).
//!
//! Everything here runs before the session is staged: a refusal leaves no records directory.
//! [`prepare`] is the sequence, one named step after another; the steps' parts live in:
//! - `checks` — steps 1–4, and the work folder and `--task` text;
//! - `resolve` — step 5: the stores, the capsule, and what runs its tasks;
//! - `handoff` — the compiled entry a launcher hands over, loaded early or kept for the first task.

mod checks;
#[cfg(test)]
mod fixtures;
mod handoff;
mod resolve;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::capsule as host;
use crate::channel;
use crate::diag::Diagnostic;
use crate::manifest::Lifecycle;
use crate::paths::MurHome;
use crate::timing::Timing;

use super::SessionOptions;
use super::executor::Runner;
use super::lifecycle::Policy;
use super::records::Console;

use checks::{formation_id, no_lifeline_warning, parse_fd, refuse_peers_env, take_lifeline, task_text, workdir};
pub use checks::{read_task, unreachable_callees_warning};
use handoff::{EarlyLoad, deferred, handed_from_env};
use resolve::load_runner;
pub use resolve::{ResolvedCapsule, resolve_capsule, stores};

/// Why a session does not start: a usage error (exit 2) or a refusal (exit 1).
pub(super) enum StartupRefusal {
    Usage(String),
    Diag(Diagnostic),
}

impl From<Diagnostic> for StartupRefusal {
    fn from(d: Diagnostic) -> Self {
        StartupRefusal::Diag(d)
    }
}

/// The formation this session belongs to, as its environment and channel say.
pub(super) struct Membership {
    pub(super) formation_id: String,
    /// The channel's first line, when the launcher handed one over.
    pub(super) first: Option<channel::FirstLine>,
    /// The channel's reader of later lines (address lines).
    pub(super) intake: Option<channel::Intake>,
    /// The lifeline, until the wind-down listener takes it.
    pub(super) lifeline: Option<OwnedFd>,
    /// Whether the launcher handed over a lifeline at all.
    pub(super) has_lifeline: bool,
    /// The channel's and the lifeline's descriptors, which no other handed descriptor may name.
    pub(super) descriptors: [Option<std::os::fd::RawFd>; 2],
    /// The launcher's authority (`MURMUR_FORMATION_AUTHORITY`) and its descriptor: the grants of
    /// this member's calls, and its model's formation budget.
    pub(super) authority: Option<(std::sync::Arc<crate::runner::authority::Authority>, RawFd)>,
    /// This member's grant key, from the launcher over the authority channel: what its door opens
    /// its callers' grants with. `None` without one; the door then refuses every grant.
    pub(super) grant_key: Option<crate::token::GrantKey>,
}

/// Everything checked and resolved before the session is staged.
pub(super) struct Prepared {
    pub(super) membership: Option<Membership>,
    pub(super) workdir: PathBuf,
    pub(super) capsule: ResolvedCapsule,
    pub(super) host: Runner,
    pub(super) task: Option<String>,
    pub(super) policy: Policy,
    pub(super) deadline: Option<DateTime<Utc>>,
}

/// docs/reference/formation.md#member-intake steps 1–5, in order.
pub(super) fn prepare(args: &SessionOptions, console: &Console) -> Result<Prepared, StartupRefusal> {
    let (capsule_name, version) = check_usage(args)?;
    let handover = Handover::from_env()?;
    // The launcher's checked compiled entry, if it handed one: used only if it names this
    // member's own key (checked in the cache).
    let handed = handed_from_env(&handover.descriptors());
    // A member without a task of its own (a peer, a serving entry) maps a handed entry at its
    // first task; one with `--task` maps it now, on a second thread while step 5 hashes the
    // archive.
    let defer = args.task.is_none() && handed.is_some();
    let early = match defer {
        true => None,
        false => EarlyLoad::start(handed.as_ref(), args.capsule_sha256.as_deref()),
    };
    let membership = handover.into_membership(console);

    // 5. The capsule.
    let workdir = workdir(args.workdir.as_deref())?;
    let capsule = resolve_from_stores(args, capsule_name, version, &workdir)?;
    let host = runner(
        &capsule,
        membership.as_ref(),
        args,
        handed.as_ref(),
        early,
        defer,
        console,
    )?;

    let task = task(args, &workdir)?;
    let policy = policy(args, &capsule.manifest.lifecycle, task.is_some())?;
    let deadline = deadline(args)?;
    Ok(Prepared {
        membership,
        workdir,
        capsule,
        host,
        task,
        policy,
        deadline,
    })
}

/// Usage first, like clap's own checks: a bad override is exit 2 before anything else. Returns
/// the capsule's name and version.
fn check_usage(args: &SessionOptions) -> Result<(&str, &str), StartupRefusal> {
    policy(args, &Lifecycle::default(), false)?;
    if args.resume.is_some() {
        return Err(StartupRefusal::Usage(
            "--resume is not supported by this build of mur".into(),
        ));
    }
    let (Some(capsule_name), Some(version)) = (args.capsule.as_deref(), args.capsule_version.as_deref()) else {
        return Err(StartupRefusal::Usage(
            "the following required arguments were not provided: --capsule --capsule-version".into(),
        ));
    };
    Ok((capsule_name, version))
}

/// What steps 1–3 found in the environment: the formation, its channel and its lifeline.
struct Handover {
    formation_id: Option<String>,
    first: Option<channel::FirstLine>,
    intake: Option<channel::Intake>,
    lifeline: Option<OwnedFd>,
    channel_fd: Option<RawFd>,
    authority: Option<(std::sync::Arc<crate::runner::authority::Authority>, RawFd)>,
    grant_key: Option<crate::token::GrantKey>,
}

impl Handover {
    /// Steps 1–3: `MURMUR_FORMATION_ID`, `MURMUR_FORMATION_PEERS`, then the channel (its first
    /// line read) and the lifeline.
    fn from_env() -> Result<Handover, Diagnostic> {
        // 1. MURMUR_FORMATION_ID.
        let formation_id = formation_id(std::env::var_os("MURMUR_FORMATION_ID").as_deref())?;
        // 2. MURMUR_FORMATION_PEERS.
        refuse_peers_env(std::env::var_os("MURMUR_FORMATION_PEERS").is_some())?;
        // 3. The channel, then the lifeline.
        let channel_var = std::env::var_os("MURMUR_FORMATION_CHANNEL");
        let (first, intake) = match &channel_var {
            None => (None, None),
            Some(raw) => {
                let wait = Timing::get().first_channel_line;
                let (first, intake) = channel::read_first_line(&raw.to_string_lossy(), formation_id.as_deref(), wait)?;
                (Some(first), Some(intake))
            }
        };
        let channel_fd = channel_var.as_deref().and_then(|raw| parse_fd(raw).ok());
        let lifeline = match std::env::var_os("MURMUR_FORMATION_LIFELINE") {
            None => None,
            Some(raw) => Some(take_lifeline(&raw, formation_id.as_deref(), channel_fd)?),
        };
        let taken = [channel_fd, lifeline.as_ref().map(AsRawFd::as_raw_fd)];
        let authority = match std::env::var_os("MURMUR_FORMATION_AUTHORITY") {
            None => None,
            Some(raw) => Some(take_authority(&raw, formation_id.as_deref(), &taken)?),
        };
        let grant_key = authority.as_ref().and_then(|(a, _)| match a.grant_key() {
            Ok(key) => Some(key),
            Err(why) => {
                tracing::debug!("no grant key, so every call's grant is refused: {why}");
                None
            }
        });
        Ok(Handover {
            formation_id,
            first,
            intake,
            lifeline,
            channel_fd,
            authority,
            grant_key,
        })
    }

    /// The descriptors the channel and the lifeline hold, which a handed entry may not name.
    fn descriptors(&self) -> [Option<RawFd>; 2] {
        [self.channel_fd, self.lifeline.as_ref().map(AsRawFd::as_raw_fd)]
    }

    /// Step 4: W-RUN-007 for a formation member handed no lifeline. The membership, when there is
    /// a formation.
    fn into_membership(self, console: &Console) -> Option<Membership> {
        if let Some(frm) = &self.formation_id
            && self.lifeline.is_none()
        {
            console.diag(&no_lifeline_warning(frm));
        }
        let has_lifeline = self.lifeline.is_some();
        let descriptors = self.descriptors();
        let Handover {
            formation_id,
            first,
            intake,
            lifeline,
            authority,
            grant_key,
            ..
        } = self;
        formation_id.map(|formation_id| Membership {
            formation_id,
            first,
            intake,
            lifeline,
            has_lifeline,
            descriptors,
            authority,
            grant_key,
        })
    }
}

/// The authority channel (`MURMUR_FORMATION_AUTHORITY`), a formation member's only. One that
/// cannot be used refuses the start (E-RUN-046): the member's calls would carry no grant.
fn take_authority(
    raw: &std::ffi::OsStr,
    formation_id: Option<&str>,
    taken: &[Option<RawFd>],
) -> Result<(std::sync::Arc<crate::runner::authority::Authority>, RawFd), Diagnostic> {
    let refuse = |why: String| {
        Diagnostic::new(
            crate::diag::E_RUN_046,
            format!("MURMUR_FORMATION_AUTHORITY does not name this member's authority channel: {why}, so the launch is refused"),
        )
        .with_hint("MURMUR_FORMATION_AUTHORITY is set by `mur run --roster` for its members; unset it to run a capsule on its own")
    };
    if formation_id.is_none() {
        return Err(refuse("it is set, but MURMUR_FORMATION_ID is not".into()));
    }
    let stream = crate::runner::authority::take_link(raw, taken).map_err(refuse)?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    Ok((
        std::sync::Arc::new(crate::runner::authority::Authority::new(stream)),
        fd,
    ))
}

/// Step 5's resolution, from the stores `--store-root` (or else the work folder) names.
fn resolve_from_stores(
    args: &SessionOptions,
    capsule_name: &str,
    version: &str,
    workdir: &Path,
) -> Result<ResolvedCapsule, Diagnostic> {
    let home = MurHome::from_env();
    let (stores, lock) = stores(&home, workdir, args.store_root.as_deref());
    resolve_capsule(capsule_name, version, &stores, &lock, args.capsule_sha256.as_deref())
}

/// What runs the tasks: the component the second thread loaded, when it is this capsule's; else,
/// when `defer`, the handed entry, mapped at the first task; else a runner loaded now.
/// `args` gives the inherited deadline and `--max-tokens`.
fn runner(
    capsule: &ResolvedCapsule,
    membership: Option<&Membership>,
    args: &SessionOptions,
    handed: Option<&host::Handed>,
    early: Option<EarlyLoad>,
    defer: bool,
    console: &Console,
) -> Result<Runner, Diagnostic> {
    let deferred = defer.then(|| handed.and_then(|h| deferred(capsule, h))).flatten();
    match (early.and_then(|e| e.finish(capsule)), deferred) {
        (Some(loaded), _) => Ok(Runner::Component(loaded)),
        (None, Some(deferred)) => {
            tracing::debug!("the handed compiled entry is mapped at the first task");
            Ok(Runner::Deferred(std::sync::Arc::new(deferred)))
        }
        (None, None) => load_runner(
            capsule,
            membership,
            args.inherited_deadline,
            (args.max_tokens, args.max_turns),
            handed,
            console,
        ),
    }
}

/// `--task`: its text, or the file it names relative to the current directory (the work folder
/// when that cannot be read).
fn task(args: &SessionOptions, workdir: &Path) -> Result<Option<String>, Diagnostic> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| workdir.to_path_buf());
    args.task.as_deref().map(|t| task_text(t, &cwd)).transpose()
}

/// The lifecycle policy: `lifecycle` with the launcher's overrides; a bad override is a usage
/// error.
fn policy(args: &SessionOptions, lifecycle: &Lifecycle, has_task: bool) -> Result<Policy, StartupRefusal> {
    Policy::new(
        lifecycle,
        args.lifecycle_task_acceptance.as_deref(),
        args.lifecycle_after_task.as_deref(),
        has_task,
    )
    .map_err(|b| StartupRefusal::Usage(b.0))
}

/// `--inherited-deadline`, in Unix milliseconds; one no timestamp can hold is a usage error.
fn deadline(args: &SessionOptions) -> Result<Option<DateTime<Utc>>, StartupRefusal> {
    let Some(ms) = args.inherited_deadline else {
        return Ok(None);
    };
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .map(Some)
        .ok_or_else(|| StartupRefusal::Usage(format!("invalid value '{ms}' for '--inherited-deadline <UNIX_MS>'")))
}
