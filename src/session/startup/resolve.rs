//! Step 5 of docs/reference/formation.md#member-intake: the stores a session reads, the capsule
//! resolved from them (E-RUN-002, E-RUN-047, the lock's E-RUN-003 and E-REG-005), and what runs
//! its tasks, a model capsule's agent or its compiled component, loaded now when the launcher's
//! hand-off (`handoff`) did not already.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::Membership;
use crate::capsule::{self as host, CapsuleEngine};
use crate::diag::{self, Diagnostic};
use crate::manifest::{self, Kind, Manifest};
use crate::names::ArtifactName;
use crate::session::executor::Runner;
use crate::session::records::Console;
use crate::store::lock::Lock;
use crate::store::{Resolved, Stores};
use crate::timing::Timing;

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
    let manifest = manifest::parse_packed(&resolved.archive.manifest)
        .map_err(|why| unresolvable(full, version, why))?
        .manifest;
    match (&manifest.kind, resolved.archive.component.is_some()) {
        // What a model capsule needs to run is checked by `load_runner`.
        (Kind::Model | Kind::Remote, _) => Ok(ResolvedCapsule { name, version: version.to_string(), resolved, manifest }),
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

/// What runs the tasks: a model capsule's agent (its inference settings and key checked now, the
/// key read once), or the compiled component. A refusal is E-RUN-002, before the session is staged.
pub(super) fn load_runner(
    c: &ResolvedCapsule,
    membership: Option<&Membership>,
    deadline_ms: Option<u64>,
    (max_tokens, max_turns): (crate::guard::Limit, crate::guard::Limit),
    handed: Option<&host::Handed>,
    console: &Console,
) -> Result<Runner, Diagnostic> {
    if c.manifest.kind == Kind::Remote {
        // Readiness: the remote agent's card is checked before the member reports ready.
        let member = membership.and_then(|m| m.first.as_ref()).map(|f| f.member.clone());
        let within = Timing::get().peer_readiness / 2;
        let capsule = format!("{}@{}", c.name, c.version);
        return crate::remote::prepare(&capsule, &c.manifest, member, within)
            .map(|a| Runner::Remote(std::sync::Arc::new(a)));
    }
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
    let callees = crate::channel::line::FirstLine::callees_of(first);
    // Provider retries never wait past the inherited deadline (a bad value is refused later).
    let deadline = deadline_ms
        .and_then(|ms| i64::try_from(ms).ok())
        .and_then(DateTime::from_timestamp_millis)
        .and_then(|d| std::time::Instant::now().checked_add((d - Utc::now()).to_std().unwrap_or_default()));
    let retry = crate::model::Retry::from_timing(Timing::get(), deadline);
    // The formation's budget when it keeps one; the authority channel in any case, for a task
    // whose grant has a budget.
    let formation = budget_link(membership)?;
    // A formation member's default token guard is the formation's, kept by the launcher.
    let max_tokens = match (max_tokens, membership) {
        (crate::guard::Limit::Default, Some(_)) => crate::guard::Limit::Unlimited,
        (flag, _) => flag,
    };
    let (limit, source) = session_budget(config.max_session_tokens, max_tokens);
    let turns = crate::guard::turns(max_turns, config.max_turns);
    if membership.is_none() {
        console.note(&crate::guard::describe(
            turns,
            crate::guard::tokens(max_tokens, config.max_session_tokens),
            "session",
        ));
    }
    let kept = formation.is_some();
    let link = formation.or_else(|| {
        membership
            .and_then(|m| m.authority.as_ref())
            .map(|(a, _)| std::sync::Arc::clone(a))
    });
    let spending = crate::model::budget::Spending::new(limit, link)
        .with_formation_budget(kept)
        .session_named(source);
    let mut agent = crate::model::Agent::new(config, identity, callees.clone(), retry)
        .with_spending(spending)
        .with_turns(turns);
    let mut tools = if c.manifest.tools.is_empty() {
        crate::tools::Toolbox::runtime(&callees)
    } else {
        load_tools(c, &callees, console)?
    };
    if c.manifest.lifecycle.input_timeout_secs.is_some() {
        tools = tools.asking();
    }
    agent = agent.with_tools(tools);
    Ok(Runner::Model(std::sync::Arc::new(agent)))
}

/// The session's token budget and what set it: the smaller of the manifest's
/// `inference.max_session_tokens` and `mur run --capsule --max-tokens`, the default guard when
/// neither is given (crate::guard).
fn session_budget(manifest: Option<u64>, flag: crate::guard::Limit) -> (Option<u64>, &'static str) {
    use crate::guard::Source;
    match crate::guard::tokens(flag, manifest) {
        (n, Source::Manifest) => (n, crate::model::budget::SESSION_SOURCE),
        (n, Source::Flag) => (n, "--max-tokens"),
        (n, Source::Default) => (n, "the default guard"),
    }
}

/// The formation's budget channel (`MURMUR_FORMATION_BUDGET`), a formation member's only: set
/// by the launcher when it keeps a budget. One that cannot be used refuses the start (E-RUN-046):
/// the member would otherwise spend without the formation's limit.
fn budget_link(
    membership: Option<&Membership>,
) -> Result<Option<std::sync::Arc<crate::runner::authority::Authority>>, Diagnostic> {
    let Some(raw) = std::env::var_os("MURMUR_FORMATION_BUDGET") else {
        return Ok(None);
    };
    let refuse = |why: String| {
        Diagnostic::new(
            crate::diag::E_RUN_046,
            format!("MURMUR_FORMATION_BUDGET does not name this member's budget channel: {why}, so the launch is refused"),
        )
        .with_hint("MURMUR_FORMATION_BUDGET is set by `mur run --roster --max-tokens` for its members; unset it to run a capsule on its own")
    };
    let Some(m) = membership else {
        return Err(refuse("it is set, but MURMUR_FORMATION_ID is not".into()));
    };
    // The launcher names the authority channel, which carries the budget's lines too.
    if let Some((authority, fd)) = &m.authority
        && raw.to_str() == Some(fd.to_string().as_str())
    {
        return Ok(Some(std::sync::Arc::clone(authority)));
    }
    crate::runner::authority::take_link(&raw, &m.descriptors)
        .map(|s| Some(std::sync::Arc::new(crate::runner::authority::Authority::new(s))))
        .map_err(refuse)
}

/// A model capsule's tools, each loaded and checked now (docs/reference/capsules.md#tools): a
/// tool that cannot be used is E-RUN-002, and the member never reports ready. The check runs on
/// an actix system of its own, ended before the session's starts: MCP sessions opened here end
/// with it, and the thread that runs the tasks opens its own. An MCP tool whose definition is not
/// the approved one is left out, each with its E-RUN-055 on the console.
fn load_tools(c: &ResolvedCapsule, callees: &[String], console: &Console) -> Result<crate::tools::Toolbox, Diagnostic> {
    let archive = crate::tools::ArchiveRef {
        zip_path: &c.resolved.zip_path,
        sha256: &c.resolved.sha256,
    };
    let pins = crate::tools::PinCheck {
        capsule: format!("{}@{}", c.name, c.version),
        approve: false,
    };
    let prepared = actix_rt::System::new().block_on(crate::tools::prepare(
        &c.manifest.tools,
        callees,
        &archive,
        |v| std::env::var(v).ok(),
        &pins,
    ));
    prepared
        .map(|p| {
            for n in &p.notices {
                console.diag(n);
            }
            p.toolbox
        })
        .map_err(|why| {
        Diagnostic::new(
            diag::E_RUN_002,
            format!("capsule '{}@{}' cannot be run: {why}", c.name, c.version),
        )
        .with_hint("check the tool's entry under tools: in its murmur.yaml (docs/reference/capsules.md#tools), then rebuild and reinstall it")
    })
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
            c.resolved.read_component().map_err(host::component_unreadable)
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
    use crate::session::startup::fixtures::install;

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
