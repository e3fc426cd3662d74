//! One compiled-component cache for the whole run. Every sandbox has a HOME of its own, so each
//! compiled the same Python and JavaScript components again (an 18 MB interpreter is seconds of
//! CPU per sandbox). The runtime's cache is content-addressed (archive sha256, engine, version)
//! and checks every entry against its integrity record before use, so entries can be shared as
//! they are: a sandbox starts with hard links to the run's large entries and hands on the large
//! entries it compiled, by hard link too. Small components (WAT) compile in milliseconds and are
//! never shared, so a test of what a fresh HOME compiles sees what it always saw; the tests of
//! the cache itself and of an empty HOME use [`super::Sandbox::unshared`].
//!
//! The directory is per build of `mur` (`target/test-compiled/<its size and mtime>`), so a
//! rebuilt runtime never meets entries of an earlier one under the same version.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::toolchains::{tag, target_dir};

/// Entries smaller than this are not shared: compiling them costs less than sharing them.
const LARGE: u64 = 4 << 20;

/// The run's shared directory, made once; `None` where it cannot be (then nothing is shared).
pub fn dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let bin = std::fs::metadata(super::mur_bin()).ok()?;
        let build = tag(&[
            &bin.len().to_string(),
            &bin.mtime_nsec().to_string(),
            &bin.mtime().to_string(),
        ]);
        let base = target_dir().join("test-compiled");
        let dir = base.join(&build);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .ok()?;
        // Entries of earlier builds can never be used again.
        for old in std::fs::read_dir(&base).ok()?.flatten() {
            if old.file_name() != build.as_str() {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
        Some(dir)
    })
    .clone()
}

/// Makes `own` (a HOME's `.murmur/compiled`, 0700 as the runtime makes it) and links every
/// shared entry into it.
pub fn seed(shared: &Path, own: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(own)?;
    for (entry, record) in pairs(shared) {
        // The record last, so the runtime never sees a record without its entry.
        for name in [&entry, &record] {
            std::fs::hard_link(shared.join(name), own.join(name))?;
        }
    }
    Ok(())
}

/// Links the large entries `own` has and `shared` lacks into `shared`. A name that appeared
/// meanwhile (another sandbox's link of the same entry) is left as it is.
pub fn harvest(own: &Path, shared: &Path) {
    for (entry, record) in pairs(own) {
        let large = std::fs::metadata(own.join(&entry)).is_ok_and(|m| m.len() >= LARGE);
        if !large || shared.join(&record).exists() {
            continue;
        }
        if std::fs::hard_link(own.join(&entry), shared.join(&entry)).is_ok() {
            let _ = std::fs::hard_link(own.join(&record), shared.join(&record));
        }
    }
}

/// The `<id>.cwasm` entries of `dir` that have their `<id>.sum` record beside them.
fn pairs(dir: &Path) -> Vec<(String, String)> {
    let Ok(names) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let names: Vec<String> = names
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names
        .iter()
        .filter_map(|n| n.strip_suffix(".cwasm"))
        .map(|id| (format!("{id}.cwasm"), format!("{id}.sum")))
        .filter(|(_, record)| names.contains(record))
        .collect()
}
