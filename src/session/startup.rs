//! Start-up checks of `mur run --capsule`, docs/reference/formation.md#member-intake steps 1–5, in
//! that order: `MURMUR_FORMATION_ID` (E-RUN-044), `MURMUR_FORMATION_PEERS` (E-RUN-046), the channel
//! and the lifeline (E-RUN-046), W-RUN-007, then the capsule (E-RUN-002, E-RUN-047).
//!
//! Everything here runs before the session is staged: a refusal leaves no records directory.
//! [`prepare`] is the sequence; the functions above it are its steps, each testable alone.

use std::ffi::OsStr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};

use chrono::{DateTime, Utc};

use crate::capsule::{self as host, CapsuleEngine};
use crate::channel;
use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::manifest::{self, Kind, Manifest};
use crate::names::ArtifactName;
use crate::paths::MurHome;
use crate::store::lock::Lock;
use crate::store::{Resolved, Stores};
use crate::timing::Timing;

use super::SessionOptions;
use super::executor::Runner;
use super::lifecycle::Policy;
use super::records::Console;

/// Step 1: a blank `MURMUR_FORMATION_ID` is none; anything else must be a formation id.
pub fn formation_id(raw: Option<&OsStr>) -> Result<Option<String>, Diagnostic> {
    let Some(raw) = raw else { return Ok(None) };
    let Some(text) = raw.to_str() else {
        return Err(Diagnostic::new(
            diag::E_RUN_044,
            "MURMUR_FORMATION_ID is set to a value that is not UTF-8 text, so it is not a formation id",
        ));
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    ids::check(IdKind::Formation, text).map_err(|why| {
        Diagnostic::new(
            diag::E_RUN_044,
            format!("MURMUR_FORMATION_ID is set to '{text}', which is not a formation id: {why}"),
        )
    })?;
    Ok(Some(text.to_string()))
}

/// Step 2: `MURMUR_FORMATION_PEERS` belongs to the runtime; set in its own environment, the
/// launch is refused.
pub fn refuse_peers_env(present: bool) -> Result<(), Diagnostic> {
    if !present {
        return Ok(());
    }
    Err(Diagnostic::new(
        diag::E_RUN_046,
        "MURMUR_FORMATION_PEERS is set in this process's environment, but only the runtime sets it, and only inside a member's components, so the launch is refused",
    )
    .with_hint("unset MURMUR_FORMATION_PEERS; the members a capsule may call come from its formation channel"))
}

/// A descriptor number handed over in the environment: decimal digits, at least 3.
pub fn parse_fd(raw: &OsStr) -> Result<RawFd, String> {
    let text = raw.to_str().unwrap_or("");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{}' is not a descriptor number", raw.to_string_lossy()));
    }
    let fd: RawFd = text.parse().map_err(|_| format!("descriptor {text} is out of range"))?;
    if fd <= 2 {
        return Err(format!("descriptor {fd} is a standard stream"));
    }
    Ok(fd)
}

fn lifeline_refusal(reason: &str) -> Diagnostic {
    Diagnostic::new(
        diag::E_RUN_046,
        format!("MURMUR_FORMATION_LIFELINE does not name this member's lifeline: {reason}, so the launch is refused"),
    )
    .with_hint(
        "MURMUR_FORMATION_LIFELINE is set by `mur run --roster` for its members; unset it to run a capsule on its own",
    )
}

/// Step 3, the lifeline (docs/reference/formation.md#lifelines): a decimal descriptor ≥ 3 that is
/// open and a FIFO, in a process that belongs to a formation, and not the channel's descriptor
/// (which is read already). It is made close-on-exec at once and owned from then on.
pub fn take_lifeline(
    raw: &OsStr,
    formation_id: Option<&str>,
    channel_fd: Option<RawFd>,
) -> Result<OwnedFd, Diagnostic> {
    if formation_id.is_none() {
        return Err(lifeline_refusal("it is set, but MURMUR_FORMATION_ID is not"));
    }
    let fd = parse_fd(raw).map_err(|r| lifeline_refusal(&r))?;
    if channel_fd == Some(fd) {
        return Err(lifeline_refusal(&format!(
            "descriptor {fd} is the formation channel, which is read already"
        )));
    }
    let st = fstat(fd).map_err(|_| lifeline_refusal(&format!("descriptor {fd} is not open")))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFIFO {
        return Err(lifeline_refusal(&format!("descriptor {fd} is not a pipe")));
    }
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| lifeline_refusal(&format!("descriptor {fd} cannot be made close-on-exec ({e})")))?;
    // SAFETY: `fd` is open (fstat succeeded), is not a standard stream or the channel's
    // descriptor, and nothing else in this process claims it: the launcher handed it to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Step 4: W-RUN-007, a formation member with no lifeline.
pub fn no_lifeline_warning(formation_id: &str) -> Diagnostic {
    Diagnostic::new(
        diag::W_RUN_007,
        format!(
            "this session is a member of formation {formation_id} but was handed no lifeline, so it will not wind down when that formation ends; end it with `mur stop` (`mur explain W-RUN-007`)"
        ),
    )
}

/// docs/reference/capsules.md#what-the-host-grants: W-RUN-008, a member with callees whose network
/// grant reaches no loopback door.
pub fn unreachable_callees_warning(member: &str, callees: &[String], network_allow: &[String]) -> Option<Diagnostic> {
    if callees.is_empty() || crate::capsule::AllowList::parse(network_allow).reaches_loopback_door() {
        return None;
    }
    let names: Vec<String> = callees.iter().map(|c| format!("'{c}'")).collect();
    Some(Diagnostic::new(
        diag::W_RUN_008,
        format!(
            "roster.yaml lets '{member}' call {}, but its capabilities.network.allow reaches no loopback http door at an unpinned port, so every call-member call will be refused; declare \"localhost\" (`mur explain W-RUN-008`)",
            names.join(", ")
        ),
    ))
}

fn staging(msg: String) -> Diagnostic {
    Diagnostic::new(diag::E_RUN_012, msg)
}

/// `--workdir` (default: the current directory), made canonical: it names the records group.
pub fn workdir(arg: Option<&Path>) -> Result<PathBuf, Diagnostic> {
    let raw = match arg {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| staging(format!("the current directory cannot be read: {e}")))?,
    };
    let canon = raw
        .canonicalize()
        .map_err(|e| staging(format!("the work folder {} cannot be used: {e}", raw.display())))?;
    if !canon.is_dir() {
        return Err(staging(format!("the work folder {} is not a directory", raw.display())));
    }
    Ok(canon)
}

/// `--task T`: the contents of `T` when it names an existing file relative to `cwd`, else `T`.
pub fn task_text(arg: &str, cwd: &Path) -> Result<String, Diagnostic> {
    let path = cwd.join(arg);
    if !arg.is_empty() && path.is_file() {
        return std::fs::read_to_string(&path).map_err(|e| {
            staging(format!(
                "the --task file {} cannot be read as text: {e}",
                path.display()
            ))
        });
    }
    Ok(arg.to_string())
}

/// The stores a session reads (docs/reference/cli.md): `--store-root DIR` → `DIR/.murmur/artifacts`
/// then global with the lock `DIR/murmur.lock`; otherwise the work folder is the project.
pub fn stores(home: &crate::paths::MurHome, workdir: &Path, store_root: Option<&Path>) -> (Stores, PathBuf) {
    let project = crate::paths::Project::at(store_root.unwrap_or(workdir));
    (Stores::new(Some(project.artifacts()), home.artifacts()), project.lock())
}

/// A capsule resolved and ready to run.
#[derive(Debug, Clone)]
pub struct ResolvedCapsule {
    pub name: ArtifactName,
    pub version: String,
    pub resolved: Resolved,
    pub manifest: Manifest,
}

fn unresolvable(full: &str, version: &str, why: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(
        diag::E_RUN_002,
        format!("capsule '{full}@{version}' cannot be run: {why}"),
    )
}

/// Step 5: resolve `--capsule`/`--capsule-version` (E-RUN-002), check the admitted hash
/// (E-RUN-047) and the lock (E-RUN-003 unreadable, E-REG-005 conflict), and refuse what this
/// build cannot run.
pub fn resolve_capsule(
    full: &str,
    version: &str,
    stores: &Stores,
    lock_path: &Path,
    admitted_sha256: Option<&str>,
) -> Result<ResolvedCapsule, Diagnostic> {
    let name = ArtifactName::parse(full).map_err(|why| {
        Diagnostic::new(diag::E_RUN_002, format!("'{full}' is not a full artifact name: {why}"))
            .with_hint("name the capsule as <scope>/<name>, e.g. local/<name> for one installed from a .mur.zip file")
    })?;
    let resolved = stores
        .resolve(&name, version)
        .map_err(|why| unresolvable(full, version, why))?;
    if let Some(want) = admitted_sha256
        && !want.eq_ignore_ascii_case(&resolved.sha256)
    {
        return Err(Diagnostic::new(
            diag::E_RUN_047,
            format!(
                "capsule '{full}@{version}' resolved to bytes with sha256 {}, but it was admitted with sha256 {want}",
                resolved.sha256
            ),
        ));
    }
    // The same rule admission applies, so a lock admission refuses refuses this run too.
    if let Some(lock) = Lock::read(lock_path)?
        && let Some(pin) = lock.pin(full)
    {
        pin.check(
            &format!("capsule '{full}@{version}' cannot be run: "),
            full,
            version,
            &resolved.sha256,
            "with --capsule-version",
        )?;
    }
    let manifest = manifest::parse(&resolved.archive.manifest)
        .map_err(|d| {
            unresolvable(
                full,
                version,
                format!("its packed murmur.yaml does not parse: {}", d.message),
            )
        })?
        .manifest;
    match (&manifest.kind, resolved.archive.component.is_some()) {
        // What a model capsule needs to run is checked by `load_runner`.
        (Kind::Model, _) => Ok(ResolvedCapsule { name, version: version.to_string(), resolved, manifest }),
        (_, true) => Ok(ResolvedCapsule { name, version: version.to_string(), resolved, manifest }),
        (Kind::Component { .. }, false) => Err(unresolvable(
            full,
            version,
            "its archive holds no capsule.wasm, though its murmur.yaml names a component",
        )
        .with_hint("rebuild it with `mur build` and install it again")),
        (Kind::ManifestOnly, false) => Err(unresolvable(
            full,
            version,
            "it is a manifest-only capsule: its murmur.yaml declares neither component nor inference, so there is nothing to run",
        )
        .with_hint("add `component:` (a WebAssembly component) to its murmur.yaml, then rebuild and reinstall it")),
    }
}

// The start-up sequence, step by step.

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

/// The compiled entry the launcher handed over (`MURMUR_COMPILED_FD`, `MURMUR_COMPILED_KEY`),
/// duplicated into a descriptor of this process's own; the inherited one is made close-on-exec
/// and left open, since an arbitrary number might name a descriptor of this process's. `Err`
/// (logged, never a refusal) when the variables or the descriptor are unusable: the member then
/// checks the cache itself, as without a launcher.
pub fn take_compiled(fd: &OsStr, key: Option<&OsStr>, taken: &[Option<RawFd>]) -> Result<host::Handed, String> {
    let fd = parse_fd(fd)?;
    if taken.contains(&Some(fd)) {
        return Err(format!("descriptor {fd} is the formation channel or lifeline"));
    }
    let key_id = key
        .and_then(OsStr::to_str)
        .filter(|k| !k.is_empty() && k.len() <= 128 && k.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or("MURMUR_COMPILED_KEY is missing or not a key")?
        .to_string();
    let st = fstat(fd).map_err(|_| format!("descriptor {fd} is not open"))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(format!("descriptor {fd} is not a regular file"));
    }
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("descriptor {fd} cannot be made close-on-exec ({e})"))?;
    let own =
        fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(3)).map_err(|e| format!("descriptor {fd} cannot be duplicated ({e})"))?;
    // SAFETY: `own` is the descriptor F_DUPFD_CLOEXEC just created, owned by nothing else.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(own) });
    Ok(host::Handed { file, key_id })
}

/// docs/reference/formation.md#member-intake steps 1–5, in order.
pub(super) fn prepare(args: &SessionOptions, console: &Console) -> Result<Prepared, StartupRefusal> {
    // Usage first, like clap's own checks: a bad override is exit 2 before anything else.
    Policy::new(
        &crate::manifest::Lifecycle::default(),
        args.lifecycle_task_acceptance.as_deref(),
        args.lifecycle_after_task.as_deref(),
        false,
    )
    .map_err(|b| StartupRefusal::Usage(b.0))?;
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
    // The launcher's checked compiled entry, if it handed one: used only if it names this
    // member's own key (checked in the cache).
    let lifeline_fd = lifeline.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    let handed = std::env::var_os("MURMUR_COMPILED_FD").and_then(|raw| {
        take_compiled(
            &raw,
            std::env::var_os("MURMUR_COMPILED_KEY").as_deref(),
            &[channel_fd, lifeline_fd],
        )
        .map_err(|why| tracing::debug!("the launcher's compiled entry is not used: {why}"))
        .ok()
    });
    // A member without a task of its own (a peer, a serving entry) maps a handed entry at its
    // first task; one with `--task` maps it now, on a second thread while step 5 hashes the
    // archive.
    let defer = args.task.is_none() && handed.is_some();
    let early = match defer {
        true => None,
        false => EarlyLoad::start(handed.as_ref(), args.capsule_sha256.as_deref()),
    };
    // 4. W-RUN-007.
    if let Some(frm) = &formation_id
        && lifeline.is_none()
    {
        console.diag(&no_lifeline_warning(frm));
    }
    let has_lifeline = lifeline.is_some();
    let membership = formation_id.map(|formation_id| Membership {
        formation_id,
        first,
        intake,
        lifeline,
        has_lifeline,
    });

    // 5. The capsule.
    let workdir = workdir(args.workdir.as_deref())?;
    let home = MurHome::from_env();
    let (stores, lock) = stores(&home, &workdir, args.store_root.as_deref());
    let capsule = resolve_capsule(capsule_name, version, &stores, &lock, args.capsule_sha256.as_deref())?;
    let deferred = defer
        .then(|| handed.as_ref().and_then(|h| deferred(&capsule, h)))
        .flatten();
    let host = match (early.and_then(|e| e.finish(&capsule)), deferred) {
        (Some(loaded), _) => Runner::Component(loaded),
        (None, Some(deferred)) => {
            tracing::debug!("the handed compiled entry is mapped at the first task");
            Runner::Deferred(std::sync::Arc::new(deferred))
        }
        (None, None) => load_runner(&capsule, membership.as_ref(), args.inherited_deadline, handed.as_ref())?,
    };

    let cwd = std::env::current_dir().unwrap_or_else(|_| workdir.clone());
    let task = match args.task.as_deref() {
        Some(t) => Some(task_text(t, &cwd)?),
        None => None,
    };
    let policy = Policy::new(
        &capsule.manifest.lifecycle,
        args.lifecycle_task_acceptance.as_deref(),
        args.lifecycle_after_task.as_deref(),
        task.is_some(),
    )
    .map_err(|b| StartupRefusal::Usage(b.0))?;
    let deadline = match args.inherited_deadline {
        None => None,
        Some(ms) => Some(
            i64::try_from(ms)
                .ok()
                .and_then(DateTime::from_timestamp_millis)
                .ok_or_else(|| {
                    StartupRefusal::Usage(format!("invalid value '{ms}' for '--inherited-deadline <UNIX_MS>'"))
                })?,
        ),
    };
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

/// The launcher's handed compiled entry, mapped on a second thread (engine, mapping and the
/// host's check of its imports and exports) while this one resolves the capsule and hashes its
/// archive (step 5). The entry's key holds the archive's sha256, which is known only from
/// `--capsule-sha256` until that hash confirms it: the result is used only when the archive
/// resolved to exactly that sha256 and is a component capsule whose entry is the one handed, so
/// nothing runs before both succeed. Anything else (another archive, a model capsule, an entry
/// the thread could not use) is dropped, and the component loads on this thread as without it,
/// with the same refusals.
struct EarlyLoad {
    archive_sha256: String,
    thread: std::thread::JoinHandle<Option<Result<host::Capsule, String>>>,
}

impl EarlyLoad {
    fn start(handed: Option<&host::Handed>, admitted_sha256: Option<&str>) -> Option<EarlyLoad> {
        let archive_sha256 = admitted_sha256?.to_ascii_lowercase();
        let handed = handed?;
        let own = host::Handed {
            file: handed.file.try_clone().ok()?,
            key_id: handed.key_id.clone(),
        };
        let sha = archive_sha256.clone();
        let thread = std::thread::Builder::new()
            .name("mur-load".into())
            .spawn(move || {
                let engine = match CapsuleEngine::new() {
                    Ok(engine) => engine,
                    Err(why) => return Some(Err(why)),
                };
                let source = host::Source::capsule(&sha);
                host::Capsule::load_handed(&engine, &source, &own, &host::CompiledCache::user())
            })
            .ok()?;
        Some(EarlyLoad { archive_sha256, thread })
    }

    /// The component loaded early, when it is `c`'s own.
    fn finish(self, c: &ResolvedCapsule) -> Option<host::Capsule> {
        let runs_component = !(c.manifest.kind == Kind::Model && c.manifest.inference.is_some());
        let same = runs_component
            && c.resolved.sha256 == self.archive_sha256
            && c.resolved.archive.component.as_deref() == Some(host::Source::capsule("").entry);
        if !same {
            // Left to finish on its own; its result is dropped.
            return None;
        }
        match self.thread.join() {
            Ok(Some(Ok(loaded))) => Some(loaded),
            Ok(Some(Err(why))) => {
                tracing::debug!("the early load of the handed entry failed, loading again: {why}");
                None
            }
            Ok(None) | Err(_) => None,
        }
    }
}

/// The component of `c` to map at the first task, when `c` is a component capsule and `handed`
/// was checked for exactly its archive and entry. Its entry is one the cache stored only after
/// the host's check, so a capsule that cannot run is not deferred: it has no entry, and is
/// refused now (E-RUN-002).
fn deferred(c: &ResolvedCapsule, handed: &host::Handed) -> Option<host::Deferred> {
    if c.manifest.kind == Kind::Model && c.manifest.inference.is_some() {
        return None;
    }
    let entry = c.resolved.archive.component.as_deref()?;
    let source = host::Source {
        archive_sha256: &c.resolved.sha256,
        entry,
    };
    let resolved = c.resolved.clone();
    let read = Box::new(move || {
        resolved
            .read_component()
            .map_err(|e| format!("its component cannot be read: {e}"))
    });
    host::Deferred::new(&source, handed, read)
}

/// What runs the tasks: a model capsule's agent (its inference settings and key checked now, the
/// key read once), or the compiled component. A refusal is E-RUN-002, before the session is staged.
fn load_runner(
    c: &ResolvedCapsule,
    membership: Option<&Membership>,
    deadline_ms: Option<u64>,
    handed: Option<&host::Handed>,
) -> Result<Runner, Diagnostic> {
    let Some(inference) = c.manifest.inference.as_ref().filter(|_| c.manifest.kind == Kind::Model) else {
        return load_component(c, handed).map(Runner::Component);
    };
    let full = c.name.to_string();
    let config = crate::model::ModelConfig::resolve(&full, &c.version, inference, |v| std::env::var(v).ok())?;
    let first = membership.and_then(|m| m.first.as_ref());
    let identity = crate::model::Identity {
        capsule: full,
        member: first.map(|f| f.member.clone()),
        formation: membership.map(|m| m.formation_id.clone()),
    };
    let callees = first
        .map(|f| f.calls.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    // Provider retries never wait past the inherited deadline (a bad value is refused later).
    let deadline = deadline_ms
        .and_then(|ms| i64::try_from(ms).ok())
        .and_then(DateTime::from_timestamp_millis)
        .and_then(|d| std::time::Instant::now().checked_add((d - Utc::now()).to_std().unwrap_or_default()));
    let retry = crate::model::Retry::from_timing(Timing::get(), deadline);
    let agent = crate::model::Agent::new(config, identity, callees, retry);
    Ok(Runner::Model(std::sync::Arc::new(agent)))
}

/// Loads the capsule's component from the user's compiled-component cache, compiling it on a
/// miss, or maps the entry its launcher checked and handed over: a component that cannot load is
/// E-RUN-002, before the session is staged.
fn load_component(c: &ResolvedCapsule, handed: Option<&host::Handed>) -> Result<host::Capsule, Diagnostic> {
    let refuse = |why: String| {
        Diagnostic::new(
            diag::E_RUN_002,
            format!("capsule '{}@{}' cannot be run: {why}", c.name, c.version),
        )
    };
    let Some(entry) = c.resolved.archive.component.as_deref() else {
        return Err(refuse("its archive holds no capsule.wasm".into()));
    };
    let engine = CapsuleEngine::new().map_err(&refuse)?;
    // The sha256 resolution checked names the component; its bytes are read only on a miss.
    let source = host::Source {
        archive_sha256: &c.resolved.sha256,
        entry,
    };
    // `read` runs only on a miss, right before the component is compiled: the slow step a
    // person waits on, shown on a terminal.
    let what = format!("{}@{}", c.name, c.version);
    let mut spinner = None;
    let loaded = {
        let mut read = || {
            spinner = Some(crate::progress::Spinner::start(
                "[capsule-runtime] ",
                format!("compiling {what} (once; later runs use the compiled cache)"),
            ));
            c.resolved
                .read_component()
                .map_err(|e| format!("its component cannot be read: {e}"))
        };
        host::Capsule::load_cached(&engine, &source, &mut read, &host::CompiledCache::user(), handed)
    };
    if let Some(s) = spinner {
        s.finish(&format!("compiled {what}"));
    }
    loaded.map_err(refuse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn formation_id_from_env() {
        let ok = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        assert_eq!(formation_id(None), Ok(None));
        assert_eq!(formation_id(Some(OsStr::new("  "))), Ok(None));
        assert_eq!(formation_id(Some(OsStr::new(ok))), Ok(Some(ok.to_string())));
        let table = [
            (
                "frm_1",
                "MURMUR_FORMATION_ID is set to 'frm_1', which is not a formation id: it needs exactly 32 hex digits after `frm_`, found 1",
            ),
            (
                "ses_0199c4e2f1b7712a9d3e4f5061728394",
                "MURMUR_FORMATION_ID is set to 'ses_0199c4e2f1b7712a9d3e4f5061728394', which is not a formation id: it does not start with `frm_`",
            ),
        ];
        for (raw, msg) in table {
            let d = formation_id(Some(OsStr::new(raw))).unwrap_err();
            assert_eq!((d.code.id, d.message.as_str()), ("E-RUN-044", msg));
        }
    }

    #[test]
    fn handed_compiled_entries() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.cwasm");
        std::fs::write(&path, b"native").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let fd = file.as_raw_fd();
        let (pipe_r, _pipe_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let key = "ab".repeat(32);
        let n = |fd: RawFd| fd.to_string();
        let table: [(String, Option<&str>, Option<RawFd>, &str); 6] = [
            (
                n(fd),
                Some(&key),
                Some(fd),
                &format!("descriptor {fd} is the formation channel or lifeline"),
            ),
            (n(fd), None, None, "MURMUR_COMPILED_KEY is missing or not a key"),
            (
                n(fd),
                Some("not-hex"),
                None,
                "MURMUR_COMPILED_KEY is missing or not a key",
            ),
            (
                n(pipe_r.as_raw_fd()),
                Some(&key),
                None,
                &format!("descriptor {} is not a regular file", pipe_r.as_raw_fd()),
            ),
            ("999999".into(), Some(&key), None, "descriptor 999999 is not open"),
            ("1".into(), Some(&key), None, "descriptor 1 is a standard stream"),
        ];
        for (raw, k, taken, why) in &table {
            let got = take_compiled(OsStr::new(raw), k.map(OsStr::new), &[*taken]).map(drop);
            assert_eq!(got, Err(why.to_string()), "{raw} {k:?}");
        }
        let handed = take_compiled(OsStr::new(&n(fd)), Some(OsStr::new(&key)), &[None]).unwrap();
        assert_eq!(handed.key_id, key);
        assert_ne!(handed.file.as_raw_fd(), fd, "a duplicate of its own");
        let flags = fcntl(fd, FcntlArg::F_GETFD).unwrap();
        assert!(FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn peers_in_env_is_refused() {
        assert!(refuse_peers_env(false).is_ok());
        assert_eq!(refuse_peers_env(true).unwrap_err().code.id, "E-RUN-046");
    }

    #[test]
    fn descriptor_numbers() {
        assert_eq!(parse_fd(OsStr::new("7")), Ok(7));
        let table = [
            ("", "'' is not a descriptor number"),
            ("-3", "'-3' is not a descriptor number"),
            ("x", "'x' is not a descriptor number"),
            ("2", "descriptor 2 is a standard stream"),
            ("99999999999", "descriptor 99999999999 is out of range"),
        ];
        for (raw, why) in table {
            assert_eq!(parse_fd(OsStr::new(raw)), Err(why.to_string()), "{raw:?}");
        }
    }

    #[test]
    fn lifeline_checks() {
        let frm = Some("frm_0199c4e2f1b7712a9d3e4f5061728394");
        let msg = |raw: OsString, f: Option<&str>, ch: Option<RawFd>| {
            take_lifeline(&raw, f, ch).map(drop).unwrap_err().message
        };
        assert_eq!(
            msg("5".into(), None, None),
            "MURMUR_FORMATION_LIFELINE does not name this member's lifeline: it is set, but MURMUR_FORMATION_ID is not, so the launch is refused"
        );
        // A closed descriptor, a regular file, and the channel's own descriptor are refused.
        assert!(msg("987".into(), frm, None).contains("descriptor 987 is not open"));
        let file = tempfile::tempfile().unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
        assert!(msg(raw.to_string().into(), frm, None).contains(&format!("descriptor {raw} is not a pipe")));
        let (r, _w) = nix::unistd::pipe().unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(r);
        assert!(msg(raw.to_string().into(), frm, Some(raw)).contains("is the formation channel"));
        let owned = take_lifeline(OsStr::new(&raw.to_string()), frm, None).unwrap();
        let flags = fcntl(std::os::fd::AsRawFd::as_raw_fd(&owned), FcntlArg::F_GETFD).unwrap();
        assert!(FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn warnings_007_and_008() {
        let w = no_lifeline_warning("frm_0199c4e2f1b7712a9d3e4f5061728394");
        assert_eq!(
            w.render("[capsule-runtime] "),
            "[capsule-runtime] warning[W-RUN-007]: this session is a member of formation frm_0199c4e2f1b7712a9d3e4f5061728394 but was handed no lifeline, so it will not wind down when that formation ends; end it with `mur stop` (`mur explain W-RUN-007`)"
        );
        let callees = vec!["a".to_string(), "b".to_string()];
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(unreachable_callees_warning("m", &[], &[]).is_none());
        assert!(unreachable_callees_warning("m", &callees, &s(&["localhost"])).is_none());
        assert!(unreachable_callees_warning("m", &callees, &s(&["http://localhost"])).is_none());
        for grant in [
            &[][..],
            &["127.0.0.1"][..],
            &["localhost:8080"][..],
            &["https://localhost"][..],
        ] {
            let d = unreachable_callees_warning("m", &callees, &s(grant)).expect("warns");
            assert_eq!(
                d.render("[capsule-runtime] "),
                "[capsule-runtime] warning[W-RUN-008]: roster.yaml lets 'm' call 'a', 'b', but its capabilities.network.allow reaches no loopback http door at an unpinned port, so every call-member call will be refused; declare \"localhost\" (`mur explain W-RUN-008`)"
            );
        }
    }

    #[test]
    fn task_from_text_or_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.md"), "from a file").unwrap();
        assert_eq!(task_text("t.md", dir.path()).unwrap(), "from a file");
        assert_eq!(task_text("say hi", dir.path()).unwrap(), "say hi");
        assert_eq!(
            task_text(".", dir.path()).unwrap(),
            ".",
            "a directory is not a task file"
        );
    }

    fn install(root: &Path, name: &str, version: &str, manifest: &str, component: Option<&[u8]>) -> String {
        let bytes = crate::store::archive::pack(manifest.as_bytes(), component);
        let zip = crate::paths::artifact_zip(root, "local", name, version);
        std::fs::create_dir_all(zip.parent().unwrap()).unwrap();
        std::fs::write(&zip, &bytes).unwrap();
        let sha = crate::digest::sha256_hex(&bytes);
        std::fs::write(
            crate::paths::artifact_sidecar(root, "local", name, version),
            format!("{sha}\n"),
        )
        .unwrap();
        sha
    }

    #[test]
    fn an_early_load_is_used_only_for_the_admitted_component_archive() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        let stores = Stores::new(Some(project.join(".murmur/artifacts")), dir.path().join("g"));
        let lock = project.join("murmur.lock");
        let store = project.join(".murmur/artifacts");
        let manifest = "name: echo\nversion: 0.1.0\ncomponent: echo.wasm\n";
        let sha = install(&store, "echo", "0.1.0", manifest, Some(b"\0asm"));
        let model_manifest = "name: model\nversion: 1.0.0\ninference:\n  model: m\n";
        install(&store, "model", "1.0.0", model_manifest, None);
        let echo = resolve_capsule("local/echo", "0.1.0", &stores, &lock, None).unwrap();
        let model = resolve_capsule("local/model", "1.0.0", &stores, &lock, None).unwrap();
        // What the second thread made: a loaded component, or why it could not.
        let early = |sha: &str, loaded: bool| EarlyLoad {
            archive_sha256: sha.to_string(),
            thread: std::thread::spawn(move || {
                let engine = CapsuleEngine::new().unwrap();
                match loaded {
                    true => Some(host::Capsule::load(
                        &engine,
                        include_str!("../capsule/testdata/shout.wat").as_bytes(),
                    )),
                    false => Some(Err("wasmtime refused it".into())),
                }
            }),
        };
        let other = "0".repeat(64);
        let table: [(&ResolvedCapsule, &str, bool, bool); 4] = [
            (&echo, &sha, true, true),
            // The archive resolved to other bytes than the admitted ones the key was made from.
            (&echo, &other, true, false),
            // A model capsule runs no component.
            (&model, &sha, true, false),
            // The thread failed: the member loads again on its own.
            (&echo, &sha, false, false),
        ];
        for (i, (c, admitted, loaded, used)) in table.into_iter().enumerate() {
            assert_eq!(early(admitted, loaded).finish(c).is_some(), used, "row {i}");
        }
    }

    #[test]
    fn capsule_resolution_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        let stores = Stores::new(Some(project.join(".murmur/artifacts")), dir.path().join("g"));
        let lock = project.join("murmur.lock");
        let store = project.join(".murmur/artifacts");
        let sha = install(
            &store,
            "echo",
            "0.1.0",
            "name: echo\nversion: 0.1.0\ncomponent: echo.wasm\n",
            Some(b"\0asm"),
        );
        install(&store, "bare", "1.0.0", "name: bare\nversion: 1.0.0\n", None);
        install(
            &store,
            "model",
            "1.0.0",
            "name: model\nversion: 1.0.0\ninference:\n  model: m\n",
            None,
        );

        let c = resolve_capsule("local/echo", "0.1.0", &stores, &lock, Some(&sha)).unwrap();
        assert_eq!(
            (c.name.to_string(), c.version.as_str()),
            ("local/echo".to_string(), "0.1.0")
        );

        let err = |full: &str, v: &str, sha: Option<&str>| {
            let d = resolve_capsule(full, v, &stores, &lock, sha).unwrap_err();
            (d.code.id, d.message)
        };
        assert_eq!(err("echo", "0.1.0", None).0, "E-RUN-002");
        assert_eq!(
            err("local/echo", "9.9.9", None),
            (
                "E-RUN-002",
                "capsule 'local/echo@9.9.9' cannot be run: not installed in the project or global store".into()
            )
        );
        let other = "0".repeat(64);
        assert_eq!(
            err("local/echo", "0.1.0", Some(&other)),
            (
                "E-RUN-047",
                format!(
                    "capsule 'local/echo@0.1.0' resolved to bytes with sha256 {sha}, but it was admitted with sha256 {other}"
                )
            )
        );
        assert!(err("local/bare", "1.0.0", None).1.contains("manifest-only capsule"));
        // A model capsule resolves; what it needs to run is checked when its agent is made.
        assert!(resolve_capsule("local/model", "1.0.0", &stores, &lock, None).is_ok());

        std::fs::write(&lock, "lock_version: 2\n").unwrap();
        assert_eq!(err("local/echo", "0.1.0", None).0, "E-RUN-003");
        std::fs::write(
            &lock,
            "lock_version: 3\nartifacts:\n  - name: local/echo\n    resolved_version: 0.2.0\n",
        )
        .unwrap();
        assert_eq!(
            err("local/echo", "0.1.0", None),
            (
                "E-REG-005",
                "capsule 'local/echo@0.1.0' cannot be run: murmur.lock conflict for 'local/echo': pinned local/echo@0.2.0, but local/echo@0.1.0 was resolved".into()
            )
        );
        std::fs::write(
            &lock,
            format!("lock_version: 3\nartifacts:\n  - name: local/echo\n    resolved_version: 0.1.0\n    sha256: {{any: {}}}\n", "0".repeat(64)),
        )
        .unwrap();
        assert_eq!(err("local/echo", "0.1.0", None).0, "E-REG-005");
        std::fs::write(
            &lock,
            format!("lock_version: 3\nartifacts:\n  - name: local/echo\n    resolved_version: 0.1.0\n    sha256: {{platforms: {{linux: {sha}}}}}\n"),
        )
        .unwrap();
        assert_eq!(
            err("local/echo", "0.1.0", None),
            (
                "E-REG-005",
                "capsule 'local/echo@0.1.0' cannot be run: murmur.lock conflict for 'local/echo': 'local/echo' is pinned only per platform (sha256.platforms without any), which this runtime cannot compare".into()
            )
        );
    }
}
