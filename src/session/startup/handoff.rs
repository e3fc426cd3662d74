//! The compiled entry a launcher hands its member (`MURMUR_COMPILED_FD`, `MURMUR_COMPILED_KEY`):
//! taken into a descriptor of this process's own, then either mapped on a second thread while
//! step 5 hashes the archive ([`EarlyLoad`]) or kept for the first task ([`deferred`]).
//!
//! A hand-off is only ever a shortcut: an entry that is unusable, or not exactly the resolved
//! capsule's, is dropped and the member loads its component as without a launcher, with the same
//! refusals.

use std::ffi::OsStr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};

use super::checks::parse_fd;
use super::resolve::ResolvedCapsule;
use crate::capsule::{self as host, CapsuleEngine};
use crate::manifest::Kind;

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

/// The entry the launcher handed over, if any and usable; why not is logged, never a refusal.
/// `taken` are the channel's and the lifeline's descriptors, which no entry may claim.
pub(super) fn handed_from_env(taken: &[Option<RawFd>]) -> Option<host::Handed> {
    let raw = std::env::var_os("MURMUR_COMPILED_FD")?;
    take_compiled(&raw, std::env::var_os("MURMUR_COMPILED_KEY").as_deref(), taken)
        .map_err(|why| tracing::debug!("the launcher's compiled entry is not used: {why}"))
        .ok()
}

/// The launcher's handed compiled entry, mapped on a second thread (engine, mapping and the
/// host's check of its imports and exports) while this one resolves the capsule and hashes its
/// archive (step 5). The entry's key holds the archive's sha256, which is known only from
/// `--capsule-sha256` until that hash confirms it: the result is used only when the archive
/// resolved to exactly that sha256 and is a component capsule whose entry is the one handed, so
/// nothing runs before both succeed. Anything else (another archive, a model capsule, an entry
/// the thread could not use) is dropped, and the component loads on this thread as without it,
/// with the same refusals.
pub(super) struct EarlyLoad {
    archive_sha256: String,
    thread: std::thread::JoinHandle<Option<Result<host::Capsule, String>>>,
}

impl EarlyLoad {
    pub(super) fn start(handed: Option<&host::Handed>, admitted_sha256: Option<&str>) -> Option<EarlyLoad> {
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
    pub(super) fn finish(self, c: &ResolvedCapsule) -> Option<host::Capsule> {
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
pub(super) fn deferred(c: &ResolvedCapsule, handed: &host::Handed) -> Option<host::Deferred> {
    if c.manifest.kind == Kind::Model && c.manifest.inference.is_some() {
        return None;
    }
    let entry = c.resolved.archive.component.as_deref()?;
    let source = host::Source {
        archive_sha256: &c.resolved.sha256,
        entry,
    };
    let resolved = c.resolved.clone();
    let read = Box::new(move || resolved.read_component().map_err(host::component_unreadable));
    host::Deferred::new(&source, handed, read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::startup::fixtures::install;
    use crate::session::startup::resolve::resolve_capsule;
    use crate::store::Stores;

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
                        include_str!("../../capsule/testdata/shout.wat").as_bytes(),
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
}
