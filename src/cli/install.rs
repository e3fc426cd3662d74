//! `mur install [-g] FILE`: stores a `.mur.zip` as `local/<name>@<version>`.
//!
//! Without `-g` the project is the nearest directory at or above the current one holding
//! `murmur.yaml`; its store receives the archive and its `murmur.lock` pins the new bytes. A
//! component capsule's component, and each WebAssembly tool of a model capsule, is then compiled
//! into the user's own compiled-component cache (whichever store received the archive), so the
//! first launch loads native code.

use super::{InstallArgs, Outcome};
use crate::capsule::{CapsuleEngine, CompiledCache, Source};
use crate::diag::{self, Diagnostic};
use crate::manifest::{self, ToolSource};
use crate::names::ArtifactName;
use crate::paths::{self, MurHome};
use crate::store::{self, archive, lock::Lock};

fn refuse(msg: String) -> Diagnostic {
    Diagnostic::new(diag::E_INS_001, msg)
}

pub fn run(a: &InstallArgs) -> Outcome {
    let file = a.file.display();
    let bytes = store::read_archive_file(&a.file).map_err(|e| {
        refuse(format!("cannot read {file}: {e}")).with_hint("name a .mur.zip file that `mur build` wrote")
    })?;
    let packed = archive::open(&bytes).map_err(|e| {
        refuse(format!("{file} is not a capsule archive: {e}"))
            .with_hint("rebuild it with `mur build <source dir>` and install the .mur.zip it writes")
    })?;
    let m = manifest::parse_packed(&packed.manifest)
        .map_err(|why| {
            refuse(format!("{file}: {why}"))
                .with_hint("fix murmur.yaml in its source directory, then rebuild with `mur build`")
        })?
        .manifest;
    let name = ArtifactName::local(&m.name);

    let (store_root, project) = if a.global {
        (MurHome::from_env().artifacts(), None)
    } else {
        let cwd = std::env::current_dir().map_err(|e| refuse(format!("cannot read the current directory: {e}")))?;
        let project = paths::find_project_root(&cwd, &["murmur.yaml"]).ok_or_else(|| {
            let refusal = refuse(format!(
                "no project root found: no murmur.yaml in {} or any parent directory",
                cwd.display()
            ));
            // A formation directory needs no murmur.yaml (docs/reference/roster.md): its members
            // resolve from the global store unless a project holds them.
            match paths::find_project_root(&cwd, &["roster.yaml"]) {
                Some(f) => refusal.with_hint(format!(
                    "{} is a formation directory (roster.yaml, no murmur.yaml): install its members into the \
                     global store with `mur install -g {}`, where every formation finds them",
                    f.root().display(),
                    a.file.display()
                )),
                None => refusal.with_hint(
                    "run it inside a project (a directory holding murmur.yaml, whose store is its .murmur/artifacts), \
                     or install into the global store (~/.murmur/artifacts) with `mur install -g`",
                ),
            }
        })?;
        // A lock that does not read is reported before anything is stored, and never rewritten.
        Lock::read(&project.lock())?;
        (project.artifacts(), Some(project))
    };

    // What the store held at this name and version before, to say when other bytes replace it.
    let before = std::fs::read_to_string(paths::artifact_sidecar(
        &store_root,
        &name.scope,
        &name.name,
        &m.version,
    ))
    .ok()
    .map(|s| s.trim().to_string());
    let (_, sha) = store::install(&store_root, &name, &m.version, &bytes).map_err(|e| {
        refuse(format!(
            "cannot store {name}@{} in {}: {e}",
            m.version,
            store_root.display()
        ))
    })?;
    if let Some(project) = project {
        let lock_path = project.lock();
        store::lock::upsert(&lock_path, &name.to_string(), &m.version, &sha).map_err(|e| {
            refuse(format!(
                "stored {name}@{}, but cannot update {}: {e}",
                m.version,
                lock_path.display()
            ))
        })?;
    }
    match before {
        Some(old) if old != sha => println!(
            "Replaced {name}@{} from {file} (sha256 {} \u{2192} {}; sessions already running keep the old bytes)",
            m.version,
            &old[..old.len().min(12)],
            &sha[..12]
        ),
        Some(_) => println!("Installed {name}@{} from {file} (the same bytes as before)", m.version),
        None => println!("Installed {name}@{} from {file}", m.version),
    }
    precompile(
        &format!("{name}@{}", m.version),
        &sha,
        &bytes,
        packed.component.as_deref(),
        &m,
    );
    Ok(0)
}

/// Compiles the capsule's component and each of its WebAssembly tools into the user's
/// compiled-component cache now, so that no launch waits for them (with a spinner on a terminal:
/// a Python runtime takes seconds). The archive is installed either way: a component that does
/// not compile is refused, with its reason, when a session starts.
fn precompile(what: &str, archive_sha256: &str, zip: &[u8], component: Option<&[u8]>, m: &manifest::Manifest) {
    let tools: Vec<(&str, &str)> = m
        .tools
        .iter()
        .filter_map(|t| match &t.source {
            ToolSource::Wasm { component, .. } => Some((t.name.as_str(), component.as_str())),
            ToolSource::Mcp { .. } => None,
        })
        .collect();
    if component.is_none() && tools.is_empty() {
        return;
    }
    let engine = match CapsuleEngine::new() {
        Ok(e) => e,
        Err(why) => {
            tracing::debug!("the installed components were not compiled: {why}");
            return;
        }
    };
    let cache = CompiledCache::user();
    if let Some(component) = component {
        let source = Source::capsule(archive_sha256);
        compile_one(&cache, &engine, &source, what.to_string(), component, |c| {
            cache.precompile(&engine, archive_sha256, c)
        });
    }
    for (tool, entry) in tools {
        let bytes = match archive::read_named(zip, entry) {
            Ok(b) => b,
            Err(why) => {
                tracing::debug!("the tool {tool} ({entry}) was not compiled: {why}");
                continue;
            }
        };
        let source = Source { archive_sha256, entry };
        compile_one(&cache, &engine, &source, format!("{what} tool {tool}"), &bytes, |c| {
            cache.precompile_tool(&engine, &source, c)
        });
    }
}

/// Compiles one component with `compile`, with a spinner when it is not in the cache yet.
fn compile_one(
    cache: &CompiledCache,
    engine: &CapsuleEngine,
    source: &Source<'_>,
    what: String,
    component: &[u8],
    compile: impl FnOnce(&[u8]) -> Result<(), String>,
) {
    let done = if cache.is_compiled_at(engine, source) {
        compile(component)
    } else {
        let size = component.len() as f64 / (1024.0 * 1024.0);
        let spinner = crate::progress::Spinner::start("", format!("compiling {what} ({size:.1} MiB component)"));
        let done = compile(component);
        if done.is_ok() {
            spinner.finish(&format!("compiled {what}"));
        }
        done
    };
    if let Err(why) = done {
        tracing::debug!("{what} was not compiled: {why}");
    }
}
