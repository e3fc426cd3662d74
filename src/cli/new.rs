//! `mur new --roster NAME [--inference openai|anthropic | --lang LANG]`: scaffolds a two-member
//! formation in `./NAME` (docs/reference/cli.md). `mur new --capsule NAME [--lang LANG]`: one
//! component capsule's sources in `./NAME`, which `mur build` turns into its component. `mur new
//! --tool NAME [--lang LANG]`, in a model capsule's directory: a WebAssembly tool's sources in
//! `./tools/NAME`, and its entry in `./murmur.yaml`.
//!
//! The files are written into a staging directory `./.NAME.tmp-<uuidv4>`, read back and checked
//! by our own parsers, then the directory is renamed to `./NAME` without replacing anything, so
//! `./NAME` either appears complete or not at all.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{NewArgs, Outcome};
use crate::diag::{self, Diagnostic};
use crate::manifest::Language;
use crate::paths::MurHome;
use crate::scaffold::{self, ConfigDefaults, Members, ModelSettings};

pub fn run(a: &NewArgs) -> Outcome {
    let lang = a.lang.as_deref().and_then(Language::from_word);
    if let Some(name) = a.tool.as_deref() {
        return new_tool(name, lang.unwrap_or(Language::Python));
    }
    if let (Some(name), Some(url)) = (a.capsule.as_deref(), a.remote.as_deref()) {
        scaffold::check_capsule_name(name)?;
        let files = scaffold::remote_capsule(name, url)?;
        write(name, &files)?;
        println!("Scaffolded remote capsule '{name}' in ./{name}");
        return finish(name, &files, scaffold::remote_next_steps(name));
    }
    if let Some(name) = a.capsule.as_deref() {
        scaffold::check_capsule_name(name)?;
        let lang = lang.unwrap_or(Language::Rust);
        let files = scaffold::capsule(name, lang);
        write(name, &files)?;
        println!("Scaffolded {} capsule '{name}' in ./{name}", lang.as_str());
        return finish(name, &files, scaffold::capsule_next_steps(name, lang));
    }
    let name = a.roster.as_deref().unwrap_or_default();
    scaffold::check_name(name)?;
    let provider = a.inference.as_deref().map(scaffold::provider).transpose()?;
    let members = match (provider, lang) {
        (Some(p), _) => Members::Models(ModelSettings::new(p, &read_config(p))),
        (None, Some(l)) => Members::Sources(l),
        (None, None) => Members::Components,
    };
    let files = scaffold::render(name, &members);
    write(name, &files)?;
    println!("Scaffolded formation '{name}' in ./{name}");
    finish(name, &files, scaffold::next_steps(name, &members))
}

/// `mur new --tool`: the manifest's new text is made and checked first; then the sources are
/// staged and renamed to `./tools/NAME` (never over an existing path); the manifest is replaced
/// last, atomically, and should that fail the sources are taken back.
fn new_tool(name: &str, lang: Language) -> Outcome {
    scaffold::tool::check_name(name)?;
    let manifest_path = PathBuf::from("murmur.yaml");
    let text = match crate::yaml::read_capped(&manifest_path, crate::manifest::MAX_MANIFEST_BYTES) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            return Err(Diagnostic::new(
                diag::E_NEW_005,
                format!("mur new --tool: there is no readable murmur.yaml here ({e})"),
            )
            .with_hint("run mur new --tool inside a model capsule's source directory")
            .into());
        }
    };
    let updated = scaffold::tool::add_entry(&text, name, lang)?;
    let dir = scaffold::tool::dir(name);
    let files: Vec<scaffold::File> = scaffold::tool::files(name, lang)
        .into_iter()
        .map(|f| scaffold::File {
            path: f.path.strip_prefix(&format!("{dir}/")).unwrap_or(&f.path).to_string(),
            bytes: f.bytes,
        })
        .collect();
    std::fs::create_dir_all("tools").map_err(|e| write_failed(Path::new("tools"), &e))?;
    let target = PathBuf::from(&dir);
    refuse_existing(&target, &dir)?;
    let staging = PathBuf::from(format!("tools/.{name}.tmp-{}", uuid::Uuid::new_v4()));
    let staged = stage(&staging, &files).and_then(|()| publish(&staging, &target, &dir));
    if staged.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    staged?;
    if let Err(e) = crate::file::write_atomic(&manifest_path, updated.as_bytes(), 0o666) {
        let _ = std::fs::remove_dir_all(&target);
        return Err(write_failed(&manifest_path, &e).into());
    }
    println!(
        "Scaffolded {} tool '{name}' in ./{dir} and added it to murmur.yaml",
        lang.as_str()
    );
    let shown: Vec<scaffold::File> = files
        .into_iter()
        .map(|f| scaffold::File {
            path: format!("{dir}/{}", f.path),
            bytes: f.bytes,
        })
        .collect();
    println!("  murmur.yaml");
    finish(".", &shown, scaffold::tool::next_steps(name, lang))
}

/// Writes `files` into `./name` through a staging directory (see the module comment).
fn write(name: &str, files: &[scaffold::File]) -> Result<(), Diagnostic> {
    let target = PathBuf::from(name);
    refuse_existing(&target, name)?;
    let staging = PathBuf::from(format!(".{name}.tmp-{}", uuid::Uuid::new_v4()));
    let staged = stage(&staging, files).and_then(|()| publish(&staging, &target, name));
    if staged.is_err() {
        // Best effort: the staging directory is ours alone and holds nothing of value.
        let _ = std::fs::remove_dir_all(&staging);
    }
    staged
}

fn finish(name: &str, files: &[scaffold::File], steps: Vec<String>) -> Outcome {
    for f in files {
        println!("  {name}/{}", f.path);
    }
    println!();
    println!("Next:");
    for step in steps {
        println!("  {step}");
    }
    Ok(0)
}

/// E-NEW-003 when `./NAME` exists in any form, a dangling symlink included.
fn refuse_existing(target: &Path, name: &str) -> Result<(), Diagnostic> {
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Ok(meta) => {
            let what = if meta.file_type().is_symlink() {
                "a symbolic link"
            } else if meta.is_dir() {
                "a directory"
            } else {
                "a file"
            };
            Err(exists(name, &format!("./{name} already exists ({what})")))
        }
        Err(e) => Err(exists(name, &format!("./{name} cannot be checked: {e}"))),
    }
}

fn exists(name: &str, msg: &str) -> Diagnostic {
    Diagnostic::new(diag::E_NEW_003, msg.to_string()).with_hint(format!(
        "choose another name, or move ./{name} away; mur new never writes into an existing path"
    ))
}

/// Defaults from `~/.murmur/config.yaml`; a file that cannot be used is reported and ignored.
fn read_config(provider: crate::manifest::Provider) -> ConfigDefaults {
    let path = MurHome::from_env().config();
    let bytes = match crate::yaml::read_capped(&path, crate::yaml::Limits::default().max_bytes) {
        Ok(b) => b,
        Err(crate::yaml::ReadError::Io(e)) if e.kind() == ErrorKind::NotFound => return ConfigDefaults::default(),
        Err(e) => {
            eprintln!("mur new: {} is ignored: {e}", path.display());
            return ConfigDefaults::default();
        }
    };
    scaffold::config_defaults(&bytes, provider).unwrap_or_else(|why| {
        eprintln!("mur new: {} is ignored: {why}", path.display());
        ConfigDefaults::default()
    })
}

fn write_failed(path: &Path, e: &std::io::Error) -> Diagnostic {
    Diagnostic::new(
        diag::E_NEW_001,
        format!("the scaffold cannot be written: {}: {e}", path.display()),
    )
    .with_hint("run mur new in a directory you can write to")
}

/// Writes every file under `staging` (made fresh, never reused), then reads each back and checks
/// it with the parser that will read it.
fn stage(staging: &Path, files: &[scaffold::File]) -> Result<(), Diagnostic> {
    std::fs::create_dir(staging).map_err(|e| write_failed(staging, &e))?;
    for f in files {
        let path = staging.join(&f.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| write_failed(dir, &e))?;
        }
        std::fs::write(&path, &f.bytes).map_err(|e| write_failed(&path, &e))?;
    }
    for f in files {
        let path = staging.join(&f.path);
        let bytes = std::fs::read(&path).map_err(|e| write_failed(&path, &e))?;
        scaffold::check(&f.path, &bytes).map_err(|d| {
            // Our own template failed our own parser: a bug in this build, not the user's doing.
            Diagnostic::new(
                diag::E_NEW_001,
                format!(
                    "the scaffold's {} does not pass its own check: {}",
                    f.path,
                    d.render("")
                ),
            )
            .with_hint("this is a bug in mur; please report it")
        })?;
    }
    Ok(())
}

/// Renames `staging` to `target`, refusing (E-NEW-003) if `target` appeared meanwhile.
fn publish(staging: &Path, target: &Path, name: &str) -> Result<(), Diagnostic> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{RenameFlags, renameat2};
        match renameat2(None, staging, None, target, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(Errno::EEXIST) => return Err(exists(name, &format!("./{name} already exists"))),
            // A file system without RENAME_NOREPLACE: the plain rename below.
            Err(Errno::EINVAL | Errno::ENOSYS) => {}
            Err(e) => return Err(write_failed(target, &std::io::Error::from(e))),
        }
    }
    // A plain rename would replace an empty directory, so check once more just before it.
    refuse_existing(target, name)?;
    std::fs::rename(staging, target).map_err(|e| write_failed(target, &e))
}
