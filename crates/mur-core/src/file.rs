//! The one atomic file write: every file the runtime replaces while others may read it (a
//! running record, budget figures, a store's archive and sidecar, the lock file, a built
//! archive, a compiled component and its integrity record) is written here.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Writes `bytes` to a fresh temporary file beside `path`, made with `mode` (less the umask),
/// flushes it to disk and renames it over `path`, so readers see the old file or the new one,
/// never a partial one. The temporary file is created new (never through a link left in its
/// place), its name starts with `.` and does not end in the target's extension, so a directory
/// scan by extension never reads it; a failed write removes it, so nothing half-written stays.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_atomic_via(
        path,
        &format!(".{file_name}.tmp-{}", uuid::Uuid::new_v4().simple()),
        bytes,
        mode,
    )
}

/// [`write_atomic`] with the temporary file named `temp` (beside `path`): for a directory whose
/// scans know the names of the files being written in it (the compiled cache's,
/// `compiled::temp_name`). `temp` must start with `.` and be new for each write.
pub fn write_atomic_via(path: &Path, temp: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = parent.join(temp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
