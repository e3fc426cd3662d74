//! The compiled-component cache: a component is compiled once per (archive sha256, component
//! path, engine configuration, runtime version) and every later load memory-maps the stored
//! native code, so members running the same component share its pages and a launch compiles
//! nothing. A hit neither inflates nor hashes the component: the archive's sha256, which the
//! store's sidecar check computes anyway, names it.
//!
//! Invariants:
//! - Only the user's own `~/.murmur/compiled` is ever read (never a project's store: a compiled
//!   artifact is native code), and only while it is a real directory owned by this user that
//!   nobody else may write; otherwise W-CMP-001, and components are compiled in memory.
//! - The archive sha256 a key is made of is one the reader computed from the bytes and checked
//!   against the store's sidecar, never one merely recorded; a miss reads the component from
//!   the archive again and checks that sha256 again before compiling it.
//! - An entry is used only after its bytes hash (BLAKE3) to the integrity record beside it and that
//!   record names this key ([`mur_core::compiled`]); anything else (absent, truncated, foreign,
//!   damaged, a record of an older format, refused by wasmtime) is compiled again and replaced. A
//!   bad entry is never an error.
//! - An entry is stored only for a component the host accepted ([`Check`]): a stored entry is
//!   always of a component that can run here.
//! - Entries are written to a temporary file (0600) and renamed into place, so a reader sees a
//!   whole file or none; two members missing at once compile twice at worst.
//! - The file hashed is the file mapped: it is opened once and handed to wasmtime through
//!   `/proc/self/fd`, so a rename between the check and the mapping cannot slip other bytes in.
//! - Writing an entry (`mur install`, a miss) scans the directory once per process and removes
//!   what [`mur_core::compiled::prune`] names: entries this runtime can never load, stale
//!   temporary files and unpaired halves, and the least recently used over the size budget. It
//!   acts through the checked directory's descriptor, never follows a symlink, removes only
//!   regular files with cache names, and never fails the launch or install (debug log). A use
//!   refreshes its record's mtime (one `futimens`), which is what "recently used" reads.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use mur_core::compiled::{self, Integrity, Key, Kind, Listed, Mismatch, Stat};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::diag::{self, Diagnostic};
use crate::paths::MurHome;

/// The version that keys entries: another `mur` never loads this one's native code.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// W-CMP-001 is printed once per process, not once per component.
static WARNED: AtomicBool = AtomicBool::new(false);

/// The cache is scanned at most once per process: a launcher writing several entries, or an
/// install that both writes and finds, scans once.
static PRUNED: AtomicBool = AtomicBool::new(false);

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub struct CompiledCache {
    dir: PathBuf,
}

/// What loading an entry cost: its integrity check, then wasmtime's deserialization.
struct LoadCost {
    bytes: u64,
    hashed: Duration,
    mapped: Duration,
}

/// Why a stored entry was not used.
enum Miss {
    Absent,
    Unusable(String),
}

impl From<Mismatch> for Miss {
    fn from(m: Mismatch) -> Miss {
        Miss::Unusable(m.to_string())
    }
}

impl CompiledCache {
    /// The user's own cache, `~/.murmur/compiled`.
    pub fn user() -> CompiledCache {
        CompiledCache {
            dir: MurHome::from_env().compiled(),
        }
    }

    /// The cache in `dir`: for tools and tests that plant entries; runs use [`CompiledCache::user`].
    pub fn at(dir: PathBuf) -> CompiledCache {
        CompiledCache { dir }
    }

    /// The key of `source` compiled by `engine`.
    pub(super) fn key(engine: &Engine, source: &Source<'_>) -> Key {
        Key::new(
            source.archive_sha256,
            source.entry,
            engine.precompile_compatibility_hash(),
            VERSION,
        )
    }

    /// The component `source` names: loaded from the cache, or read with `read` (only then),
    /// compiled, and stored when the cache can be trusted. `Err` when the component cannot be
    /// read or does not compile.
    pub(super) fn component(
        &self,
        engine: &Engine,
        source: &Source<'_>,
        read: &mut dyn FnMut() -> Result<Vec<u8>, String>,
        check: &Check<'_>,
        handed: Option<&Handed>,
    ) -> Result<Component, String> {
        let key = Self::key(engine, source);
        if let Some(handed) = handed {
            match load_handed(engine, &key, handed) {
                Ok(component) => {
                    tracing::debug!(
                        "loaded compiled {} from the launcher's descriptor (checked there, not hashed again; {} not read)",
                        key.short(),
                        source.entry
                    );
                    return Ok(component);
                }
                Err(why) => tracing::debug!("the launcher's compiled entry is not used, checking the cache: {why}"),
            }
        }
        let trusted = match self.open_dir() {
            Ok(()) => true,
            Err(why) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    Diagnostic::new(
                        diag::W_CMP_001,
                        format!(
                            "{} is not used: {why}; components are compiled on every launch",
                            self.dir.display()
                        ),
                    )
                    .eprint("");
                }
                false
            }
        };
        if trusted {
            match self.load(engine, &key) {
                Ok((component, cost)) => {
                    tracing::debug!(
                        "loaded compiled {} ({} bytes hashed in {} ms, mapped in {} ms; {} not read)",
                        key.short(),
                        cost.bytes,
                        cost.hashed.as_millis(),
                        cost.mapped.as_millis(),
                        source.entry
                    );
                    return Ok(component);
                }
                Err(Miss::Absent) => {}
                Err(Miss::Unusable(why)) => {
                    tracing::debug!("compiled entry of {} not used, compiling again: {why}", key.short());
                }
            }
        }
        self.compile_and_store(engine, &key, source, read, check, trusted)
    }

    /// Reads the component with `read`, compiles it, checks it against the host with `check`
    /// and, when the cache can be trusted, stores it: the one compile path of members and
    /// launchers alike. A component the host refuses is never stored, so every entry is of a
    /// component that can run here.
    fn compile_and_store(
        &self,
        engine: &Engine,
        key: &Key,
        source: &Source<'_>,
        read: &mut dyn FnMut() -> Result<Vec<u8>, String>,
        check: &Check<'_>,
        trusted: bool,
    ) -> Result<Component, String> {
        let started = Instant::now();
        let bytes = read()?;
        tracing::debug!(
            "read {} of {} ({} bytes) in {} ms",
            source.entry,
            key.short(),
            bytes.len(),
            started.elapsed().as_millis()
        );
        let component = compile(engine, &bytes)?;
        drop(bytes);
        tracing::debug!("compiled component {}", key.short());
        check(&component)?;
        if trusted {
            match component.serialize() {
                Ok(native) => match self.store(key, &native) {
                    Ok(()) => self.prune(key),
                    Err(e) => tracing::debug!("compiled component {} not stored: {e}", key.short()),
                },
                Err(e) => tracing::debug!("compiled component {} not serialized: {e:#}", key.short()),
            }
        }
        Ok(component)
    }

    /// Whether a whole-looking entry of `source` for `engine` is stored: its record names this
    /// key and the entry has the record's length. Its bytes are hashed only when it is loaded.
    pub(super) fn holds(&self, engine: &Engine, source: &Source<'_>) -> bool {
        let key = Self::key(engine, source);
        let check = || -> Result<(), Miss> {
            self.check_dir()?;
            let (record, _) = self.record(&key)?;
            let (_, len) = open_trusted(&self.dir.join(key.entry_name()))?;
            record.check(&key, len, &record.blake3)?;
            Ok(())
        };
        check().is_ok()
    }

    /// Creates the directory (0700) when absent, and checks that it can be trusted.
    fn open_dir(&self) -> Result<(), String> {
        if let Some(parent) = self.dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("it cannot be created: {e}")),
        }
        self.check_dir().map_err(|m| match m {
            Miss::Absent => "it does not exist".into(),
            Miss::Unusable(why) => why,
        })
    }

    fn check_dir(&self) -> Result<(), Miss> {
        let meta = std::fs::symlink_metadata(&self.dir).map_err(|e| not_found_or(e, "it cannot be read"))?;
        compiled::trusted(stat_of(&meta), Kind::Dir, me()).map_err(Miss::Unusable)
    }

    /// The entry's integrity record, if it reads and names this key, and the record's file.
    fn record(&self, key: &Key) -> Result<(Integrity, File), Miss> {
        let (file, len) = open_trusted(&self.dir.join(key.record_name()))?;
        let record = read_record(&file, len)?;
        if record.key != *key {
            return Err(Mismatch::Foreign.into());
        }
        Ok((record, file))
    }

    /// The entry of `key`, checked: its record names the key, and its bytes, read through the
    /// descriptor returned, hash to the record. Returns the file, its length and the hashing time.
    /// A checked entry is a used one: its record's mtime, the cache's recency, is set to now.
    fn checked_entry(&self, key: &Key) -> Result<(File, u64, Duration), Miss> {
        let (record, record_file) = self.record(key)?;
        let (file, len) = open_trusted(&self.dir.join(key.entry_name()))?;
        // A truncated entry is refused before anything is hashed.
        record.check(key, len, &record.blake3)?;
        let started = Instant::now();
        let digest = digest_mapped(&file, len).map_err(|e| Miss::Unusable(format!("it cannot be read: {e}")))?;
        // An entry grown or cut since the stat differs in length from the record: refused.
        let now = file
            .metadata()
            .map_err(|e| Miss::Unusable(format!("it cannot be read: {e}")))?
            .len();
        record.check(key, now, &digest)?;
        let hashed = started.elapsed();
        touch(&record_file);
        Ok((file, len, hashed))
    }

    fn load(&self, engine: &Engine, key: &Key) -> Result<(Component, LoadCost), Miss> {
        let (file, len, hashed) = self.checked_entry(key)?;
        let started = Instant::now();
        // Without /proc the path is mapped: only this user can rename another entry over it in
        // the meantime, and only by running mur, which writes the same bytes.
        let same_file = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let same_file = if same_file.exists() {
            same_file
        } else {
            self.dir.join(key.entry_name())
        };
        // SAFETY: the file is the one just hashed (held open and reopened through its
        // descriptor), its bytes are those this user's runtime wrote for this component and
        // engine (record and hash checked above), and it lives in a directory only this user can
        // write; wasmtime checks its own version and engine compatibility on top.
        let component = unsafe { Component::deserialize_file(engine, &same_file) }
            .map_err(|e| Miss::Unusable(format!("wasmtime refused it: {e:#}")))?;
        drop(file);
        let cost = LoadCost {
            bytes: len,
            hashed,
            mapped: started.elapsed(),
        };
        Ok((component, cost))
    }

    /// Writes the entry, then its record, each with the one atomic write, through a temporary
    /// file named as the cache's scans know it ([`compiled::temp_name`]).
    fn store(&self, key: &Key, native: &[u8]) -> std::io::Result<()> {
        let write = |name: &str, bytes: &[u8]| {
            let temp = compiled::temp_name(name, &uuid::Uuid::new_v4().simple().to_string());
            crate::file::write_atomic_via(&self.dir.join(name), &temp, bytes, 0o600)
        };
        write(&key.entry_name(), native)?;
        write(&key.record_name(), Integrity::of(key, native).render().as_bytes())
    }

    /// Scans the directory once per process and removes what [`compiled::prune`] names, keeping
    /// `kept` (the entry just written or found). Never an error: a failure is a debug line.
    fn prune(&self, kept: &Key) {
        if PRUNED.swap(true, Ordering::Relaxed) {
            return;
        }
        let started = Instant::now();
        match self.try_prune(kept) {
            Ok(removed) => tracing::debug!(
                "pruned the compiled cache: {removed} files removed in {} ms",
                started.elapsed().as_millis()
            ),
            Err(why) => tracing::debug!("the compiled cache was not pruned: {why}"),
        }
    }

    /// Lists the directory through a descriptor of it (opened without following a symlink and
    /// checked as trusted), reads each record, and unlinks the names the pure decision returns
    /// relative to that descriptor. Unlinking an entry another process has mapped (or holds open,
    /// as a launcher's handed descriptor) is safe: the mapping keeps the inode and its pages until
    /// unmapped; only the name goes, and the next reader misses and compiles.
    fn try_prune(&self, kept: &Key) -> Result<usize, String> {
        use nix::fcntl::{OFlag, openat};
        use nix::sys::stat::{Mode, fstat};
        use std::os::fd::{FromRawFd, OwnedFd};
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let raw = openat(None, &self.dir, flags, Mode::empty()).map_err(|e| format!("it cannot be opened: {e}"))?;
        // SAFETY: `raw` was just opened and is owned by nothing else.
        let dir = unsafe { OwnedFd::from_raw_fd(raw) };
        let st = fstat(dir.as_raw_fd()).map_err(|e| format!("it cannot be read: {e}"))?;
        compiled::trusted(file_stat(&st), Kind::Dir, me())?;
        let names = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .or_else(|_| std::fs::read_dir(&self.dir))
            .map_err(|e| format!("it cannot be listed: {e}"))?;
        let mut listing = Vec::new();
        for name in names.filter_map(|e| e.ok()).map(|e| e.file_name()) {
            // Not valid UTF-8: no name the cache writes.
            let Some(name) = name.to_str().map(str::to_string) else {
                continue;
            };
            if compiled::cache_file(&name).is_none() {
                continue;
            }
            if let Some(listed) = list_one(&dir, name) {
                listing.push(listed);
            }
        }
        let budget = budget();
        let decided = compiled::prune(
            &listing,
            &compiled::Prune {
                now: SystemTime::now(),
                version: &kept.version,
                engine: &kept.engine,
                budget,
                keep: Some(&kept.id()),
            },
        );
        let mut removed = 0;
        for (name, why) in decided {
            match nix::unistd::unlinkat(
                Some(dir.as_raw_fd()),
                name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            ) {
                Ok(()) => {
                    removed += 1;
                    tracing::debug!("removed {name} from the compiled cache: {why}");
                }
                // Another process pruned it first.
                Err(nix::errno::Errno::ENOENT) => {}
                Err(e) => tracing::debug!("could not remove {name} from the compiled cache ({why}): {e}"),
            }
        }
        Ok(removed)
    }
}

/// The host's check of a freshly compiled component (its imports and its `run` export), run
/// before it is stored: the engine's (`engine.rs` gives it, with the public entry points that
/// take the engine, so this file never names the engine).
pub(super) type Check<'a> = dyn Fn(&Component) -> Result<(), String> + 'a;

/// A compiled entry a launcher checked once and hands, open, to every member running its
/// component (`MURMUR_COMPILED_FD`), with the id of the key it was checked for
/// (`MURMUR_COMPILED_KEY`, docs/reference/formation.md#member-environment).
#[derive(Debug)]
pub struct Handed {
    pub file: File,
    pub key_id: String,
}

/// The handed entry as `key`'s component, when it was checked for `key` (the member's own: its
/// archive sha256, checked by the member, is in it) and is still a file of this user's that
/// nobody else may write. Its bytes are not hashed again: the launcher, this user's own process,
/// did that. wasmtime checks its version and engine compatibility on top.
fn load_handed(engine: &Engine, key: &Key, handed: &Handed) -> Result<Component, String> {
    if handed.key_id != key.id() {
        return Err("it was checked for another archive, engine or runtime version".into());
    }
    let meta = handed.file.metadata().map_err(|e| format!("it cannot be read: {e}"))?;
    compiled::trusted(stat_of(&meta), Kind::File, me())?;
    let same_file = PathBuf::from(format!("/proc/self/fd/{}", handed.file.as_raw_fd()));
    if !same_file.exists() {
        return Err("/proc is not mounted, so the descriptor cannot be mapped".into());
    }
    // SAFETY: the file is the launcher's checked entry (record and hash, for this very key), a
    // regular file of this user's that nobody else may write, mapped through its descriptor.
    unsafe { Component::deserialize_file(engine, &same_file) }.map_err(|e| format!("wasmtime refused it: {e:#}"))
}

/// The integrity digest ([`compiled::digest_hex`]) of the first `len` bytes of `file`, hashed
/// through a private read-only mapping: no copy into a buffer (a third faster than 1 MiB reads
/// on a 35 MB entry here), and the pages are the page-cache pages wasmtime maps next.
fn digest_mapped(file: &File, len: u64) -> std::io::Result<String> {
    use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
    let Some(n) = usize::try_from(len).ok().and_then(std::num::NonZeroUsize::new) else {
        return Ok(compiled::digest_hex(&[]));
    };
    // SAFETY: a read-only private mapping of a regular file of this user's (checked by the
    // caller), read only below and unmapped before returning. Were the file cut short meanwhile,
    // reading would fault as wasmtime's own mapping of it would for the process's lifetime; mur
    // never cuts an entry, it replaces entries by rename.
    let ptr = unsafe {
        mmap(
            None,
            n,
            ProtFlags::PROT_READ,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_POPULATE,
            file,
            0,
        )
    }?;
    // SAFETY: `ptr` maps `n` readable bytes until the munmap below.
    let digest = compiled::digest_hex(unsafe { std::slice::from_raw_parts(ptr.as_ptr().cast::<u8>(), n.get()) });
    // SAFETY: unmaps exactly the mapping made above; the slice is no longer used.
    let _ = unsafe { munmap(ptr, n.get()) };
    Ok(digest)
}

/// One cache file as a scan sees it, through the directory's descriptor and without following a
/// symlink; a record is read and parsed too. `None` when it vanished meanwhile.
fn list_one(dir: &impl AsRawFd, name: String) -> Option<Listed> {
    use nix::fcntl::{AtFlags, OFlag, openat};
    use nix::sys::stat::{Mode, fstatat};
    use std::os::fd::FromRawFd;
    let st = fstatat(Some(dir.as_raw_fd()), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    let stat = file_stat(&st);
    let mtime = SystemTime::UNIX_EPOCH
        + Duration::new(
            u64::try_from(st.st_mtime).unwrap_or(0),
            u32::try_from(st.st_mtime_nsec).unwrap_or(0),
        );
    let record = (stat.kind == Kind::File
        && matches!(compiled::cache_file(&name), Some(compiled::CacheFile::Record(_))))
    .then(|| {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let raw = openat(Some(dir.as_raw_fd()), name.as_str(), flags, Mode::empty())
            .map_err(|e| Mismatch::Record(format!("it cannot be opened: {e}")))?;
        // SAFETY: `raw` was just opened and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(raw) };
        let meta = file.metadata().map_err(|e| Mismatch::Record(e.to_string()))?;
        compiled::trusted(stat_of(&meta), Kind::File, me()).map_err(Mismatch::Record)?;
        read_record(&file, meta.len())
    });
    Some(Listed {
        name,
        kind: stat.kind,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime,
        record,
    })
}

/// The size budget: [`compiled::BUDGET`], or the smaller one a test sets
/// ([`compiled::BUDGET_ENV`], announced as W-ENV-001 once per process).
fn budget() -> u64 {
    let env = std::env::var(compiled::BUDGET_ENV).ok();
    match compiled::test_budget(env.as_deref()) {
        Some(b) => {
            Diagnostic::new(
                diag::W_ENV_001,
                format!(
                    "{} is set, so the compiled-component cache is kept under {b} bytes",
                    compiled::BUDGET_ENV
                ),
            )
            .with_hint(format!(
                "unset {}: it shrinks the cache for the runtime's own tests",
                compiled::BUDGET_ENV
            ))
            .eprint("");
            b
        }
        None => compiled::BUDGET,
    }
}

/// An integrity record of `len` bytes read from `file`, parsed.
fn read_record(file: &File, len: u64) -> Result<Integrity, Mismatch> {
    if len > compiled::MAX_RECORD_BYTES {
        return Err(Mismatch::Record(format!("it is {len} bytes long")));
    }
    let mut text = String::new();
    file.take(compiled::MAX_RECORD_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| Mismatch::Record(e.to_string()))?;
    Integrity::parse(&text)
}

/// Marks a record's entry as used now: its mtime, and only that, one syscall. A failure only
/// makes the entry look older to the size budget.
fn touch(record: &File) {
    use nix::sys::time::TimeSpec;
    if let Err(e) = nix::sys::stat::futimens(record.as_raw_fd(), &TimeSpec::UTIME_OMIT, &TimeSpec::UTIME_NOW) {
        tracing::debug!("a compiled entry's use was not recorded: {e}");
    }
}

/// The failure of a miss's `read`, when the component cannot be read from its archive again: one
/// text for the launcher's, a member's and a deferred load alike.
pub fn component_unreadable(e: impl std::fmt::Display) -> String {
    format!("its component cannot be read: {e}")
}

/// Compiles a component, the one compile of `Capsule::load` and of a miss.
pub(super) fn compile(engine: &Engine, bytes: &[u8]) -> Result<Component, String> {
    Component::new(engine, bytes)
        .map_err(|e| format!("the capsule is not a WebAssembly component this runtime can compile: {e:#}"))
}

fn me() -> u32 {
    nix::unistd::getuid().as_raw()
}

fn stat_of(meta: &std::fs::Metadata) -> Stat {
    let t = meta.file_type();
    Stat {
        uid: meta.uid(),
        mode: meta.mode(),
        kind: if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        },
    }
}

/// [`stat_of`] for an `fstat`/`fstatat` result.
fn file_stat(st: &nix::sys::stat::FileStat) -> Stat {
    use nix::libc::{S_IFDIR, S_IFMT, S_IFREG};
    let kind = match st.st_mode & S_IFMT {
        S_IFDIR => Kind::Dir,
        S_IFREG => Kind::File,
        _ => Kind::Other,
    };
    Stat {
        uid: st.st_uid,
        mode: st.st_mode,
        kind,
    }
}

fn not_found_or(e: std::io::Error, what: &str) -> Miss {
    if e.kind() == std::io::ErrorKind::NotFound {
        Miss::Absent
    } else {
        Miss::Unusable(format!("{what}: {e}"))
    }
}

/// Opens a cache file without following a symlink, and checks it is a regular file of this
/// user's that nobody else can write; returns it with its length.
fn open_trusted(path: &Path) -> Result<(File, u64), Miss> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| not_found_or(e, "it cannot be opened"))?;
    let meta = file
        .metadata()
        .map_err(|e| Miss::Unusable(format!("it cannot be read: {e}")))?;
    compiled::trusted(stat_of(&meta), Kind::File, me()).map_err(Miss::Unusable)?;
    Ok((file, meta.len()))
}

/// Which component an entry is compiled from: the archive's sha256, as checked against the
/// store's sidecar, and the component's path inside it.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub archive_sha256: &'a str,
    pub entry: &'a str,
}

impl<'a> Source<'a> {
    /// The root `capsule.wasm` of the archive hashing to `archive_sha256`.
    pub fn capsule(archive_sha256: &'a str) -> Source<'a> {
        Source {
            archive_sha256,
            entry: mur_core::store::archive::COMPONENT_ENTRY,
        }
    }
}

impl CompiledCache {
    /// [`CompiledCache::precompile`], with the engine's wasmtime engine and check.
    pub(super) fn precompile_with(
        &self,
        engine: &Engine,
        check: &Check<'_>,
        source: &Source<'_>,
        component: &[u8],
    ) -> Result<(), String> {
        let mut bytes = Some(component.to_vec());
        let mut read = || bytes.take().ok_or_else(|| "the component was read already".to_string());
        let source = *source;
        let compiled = self.component(engine, &source, &mut read, check, None).map(drop);
        // An install scans the cache even when its entry was there already (once per process).
        if self.check_dir().is_ok() {
            self.prune(&Self::key(engine, &source));
        }
        compiled
    }

    /// [`CompiledCache::hand_out`], with the engine's wasmtime engine and check.
    pub(super) fn hand_out_with(
        &self,
        engine: &Engine,
        check: &Check<'_>,
        archive_sha256: &str,
        read: &mut dyn FnMut() -> Result<Vec<u8>, String>,
    ) -> Result<Handed, String> {
        let source = Source::capsule(archive_sha256);
        let key = Self::key(engine, &source);
        let unusable = |m: Miss| match m {
            Miss::Absent => "it was not stored".to_string(),
            Miss::Unusable(why) => why,
        };
        self.open_dir()?;
        match self.checked_entry(&key) {
            Ok((file, len, hashed)) => {
                tracing::debug!(
                    "checked compiled {} for its members ({len} bytes hashed in {} ms)",
                    key.short(),
                    hashed.as_millis()
                );
                return Ok(Handed { file, key_id: key.id() });
            }
            Err(Miss::Absent) => {}
            Err(Miss::Unusable(why)) => {
                tracing::debug!("compiled entry of {} not used, compiling again: {why}", key.short());
            }
        }
        self.compile_and_store(engine, &key, &source, read, check, true)?;
        let (file, ..) = self.checked_entry(&key).map_err(unusable)?;
        Ok(Handed { file, key_id: key.id() })
    }
}
