//! The compiled-component cache's pure part: what names an entry, the integrity record written
//! beside it, which directories and files may be trusted to hold native code, and which files a
//! scan of the cache removes.
//!
//! An entry is `<id>.cwasm` (wasmtime's serialized component, memory-mapped when loaded) and
//! `<id>.sum` (its [`Integrity`] record) in `~/.murmur/compiled/` (`MurHome::compiled`). The id is
//! a sha256 over the [`Key`]: the archive's sha256 and the component's path inside it, the engine
//! configuration and the runtime version, so another component, another engine or another `mur`
//! never finds the entry. The archive's sha256 is the one every reader already computes and
//! compares with the store's sidecar, and it fixes every byte of the component, so a hit needs
//! neither the component inflated nor hashed. wasmtime
//! checks its own version and engine compatibility when it deserializes, but not that the bytes
//! are intact or were compiled from this component: the record says both, and a reader hashes the
//! entry (BLAKE3, see [`digest_hex`]) and compares before wasmtime sees a byte of it. The record
//! names every part of its key, so a scan ([`prune`]) judges an entry without knowing its key.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::digest::hex;

/// First line of every integrity record; a new layout or meaning gets a new number. Format 3 is
/// format 2's layout, written only for a component the host accepted (so a member handed an
/// entry may map it later without losing the start-up's refusal of a capsule that cannot run).
/// Earlier formats are read as damaged records: their entries are compiled again.
pub const FORMAT: &str = "mur-compiled 3";

/// An integrity record is a few short lines; a larger file is not one.
pub const MAX_RECORD_BYTES: u64 = 1024;

/// Bounds of the two free-text parts of a record, so that any record fits [`MAX_RECORD_BYTES`].
const MAX_VERSION_BYTES: usize = 64;
const MAX_COMPONENT_BYTES: usize = 256;

/// Above this many bytes of usable entries (compiled code and records), a scan removes the least
/// recently used until under it: a few dozen language runtimes' worth.
pub const BUDGET: u64 = 4 << 30;

/// Test-only: a smaller budget in bytes (clamped to [`BUDGET`], so it can only shrink it), so a
/// test can evict with small components. Announced (W-ENV-001) where it takes effect.
pub const BUDGET_ENV: &str = "MURMUR_TEST_COMPILED_BUDGET";

/// How old an unpaired entry or record, or a temporary file, must be before a scan removes it: a
/// writer renames its entry, then its record, right after writing them, so a younger one may be
/// half of a pair being written.
pub const GRACE: Duration = Duration::from_secs(5 * 60);

/// How long an entry this runtime cannot load (another `mur` version or engine, or a record of
/// another format) is kept after its last use: two versions used side by side (an installed
/// `mur` and a newer one being tried) keep each other's entries instead of compiling each
/// time the other ran; after an upgrade, the old version's entries go within a week.
pub const FOREIGN_IDLE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// What one entry is compiled from and for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// sha256 (lowercase hex) of the whole archive holding the component, as checked against
    /// the store's sidecar.
    pub archive_sha256: String,
    /// The component's entry path inside that archive.
    pub component: String,
    /// [`engine_digest`] of the engine's precompile compatibility hash.
    pub engine: String,
    /// The runtime's version.
    pub version: String,
}

impl Key {
    pub fn new(archive_sha256: &str, component: &str, engine: impl Hash, version: &str) -> Key {
        Key {
            archive_sha256: archive_sha256.to_ascii_lowercase(),
            component: component.to_string(),
            engine: engine_digest(engine),
            version: version.to_string(),
        }
    }

    /// The entry's id: sha256 over the parts, each length-prefixed so no two keys collide by
    /// moving a boundary.
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        for part in [&self.archive_sha256, &self.component, &self.engine, &self.version] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        hex(&h.finalize())
    }

    /// First 12 hex digits of the archive's sha256: how logs name the component.
    pub fn short(&self) -> &str {
        self.archive_sha256.get(..12).unwrap_or(&self.archive_sha256)
    }

    /// File name of the compiled bytes.
    pub fn entry_name(&self) -> String {
        format!("{}.cwasm", self.id())
    }

    /// File name of the integrity record.
    pub fn record_name(&self) -> String {
        format!("{}.sum", self.id())
    }
}

/// sha256 (hex) of whatever a [`Hash`] value feeds its hasher: a stable name for wasmtime's
/// opaque engine compatibility hash. Native-endian, which suits a cache that never leaves the
/// machine.
pub fn engine_digest(value: impl Hash) -> String {
    let mut h = Sha256Hasher(Sha256::new());
    value.hash(&mut h);
    hex(&h.0.finalize())
}

struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Unused: the digest is read from the inner state.
    fn finish(&self) -> u64 {
        0
    }
}

/// The record beside an entry: the key it was compiled for (every part, so a scan can judge the
/// entry without the key), and the length and BLAKE3 digest of the compiled bytes as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrity {
    pub key: Key,
    pub len: u64,
    pub blake3: String,
}

/// Why an entry is not used as it is; it is compiled again and replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The record does not parse (damaged, truncated, another format).
    Record(String),
    /// The record is for another key: a file copied from another component's entry.
    Foreign,
    /// The entry's length differs from the record's (truncated or appended to).
    Length { want: u64, found: u64 },
    /// Same length, other bytes.
    Digest,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Record(why) => write!(f, "its integrity record is unreadable: {why}"),
            Mismatch::Foreign => f.write_str("its integrity record is for another component or engine"),
            Mismatch::Length { want, found } => write!(f, "it holds {found} bytes, its record says {want}"),
            Mismatch::Digest => f.write_str("its bytes do not hash to its record's blake3"),
        }
    }
}

impl Integrity {
    /// The record of `compiled`, written for `key`.
    pub fn of(key: &Key, compiled: &[u8]) -> Integrity {
        Integrity {
            key: key.clone(),
            len: compiled.len() as u64,
            blake3: digest_hex(compiled),
        }
    }

    /// The id of the key this record is for.
    pub fn id(&self) -> String {
        self.key.id()
    }

    pub fn render(&self) -> String {
        let k = &self.key;
        format!(
            "{FORMAT}\nid {}\nversion {}\nengine {}\narchive {}\ncomponent {}\nlen {}\nblake3 {}\n",
            k.id(),
            k.version,
            k.engine,
            k.archive_sha256,
            k.component,
            self.len,
            self.blake3
        )
    }

    pub fn parse(text: &str) -> Result<Integrity, Mismatch> {
        let bad = |why: &str| Mismatch::Record(why.to_string());
        let mut lines = text.lines();
        if lines.next() != Some(FORMAT) {
            return Err(bad("it does not start with the format line"));
        }
        let mut field = |name: &str| -> Result<String, Mismatch> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| bad(&format!("its `{name}` line is missing")))
        };
        let id = field("id")?;
        let version = field("version")?;
        let engine = field("engine")?;
        let archive_sha256 = field("archive")?;
        let component = field("component")?;
        let len = field("len")?;
        let blake3 = field("blake3")?;
        if lines.next().is_some() {
            return Err(bad("it has lines after `blake3`"));
        }
        for (name, v) in [
            ("id", &id),
            ("engine", &engine),
            ("archive", &archive_sha256),
            ("blake3", &blake3),
        ] {
            if !is_sha256_hex(v) {
                return Err(bad(&format!("its `{name}` is not 64 lowercase hex digits")));
            }
        }
        if version.is_empty() || version.len() > MAX_VERSION_BYTES || !version.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("its `version` is not a version"));
        }
        if component.is_empty() || component.len() > MAX_COMPONENT_BYTES || component.chars().any(char::is_control) {
            return Err(bad("its `component` is not an archive path"));
        }
        let len = len.parse().map_err(|_| bad("its `len` is not a number"))?;
        let key = Key {
            archive_sha256,
            component,
            engine,
            version,
        };
        // The id is derived from the parts: one that is not theirs was edited, not written.
        if key.id() != id {
            return Err(bad("its `id` is not the id of the key it names"));
        }
        Ok(Integrity { key, len, blake3 })
    }

    /// Whether compiled bytes of `found_len` hashing to `found_blake3` are this record's, for
    /// `key`. Length is checked by the caller before hashing too, so a truncated entry costs no
    /// hash; checking it here again keeps this the one place that decides.
    pub fn check(&self, key: &Key, found_len: u64, found_blake3: &str) -> Result<(), Mismatch> {
        if self.key != *key {
            return Err(Mismatch::Foreign);
        }
        if self.len != found_len {
            return Err(Mismatch::Length {
                want: self.len,
                found: found_len,
            });
        }
        if self.blake3 != found_blake3 {
            return Err(Mismatch::Digest);
        }
        Ok(())
    }
}

/// What trust needs to know of a directory or file (from `lstat`, links not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub mode: u32,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    /// A symlink, device, FIFO, socket.
    Other,
}

/// Whether a cache directory or file may hold native code this user runs: it must be what it
/// claims to be (a real directory or regular file, never a symlink), owned by this user, and
/// writable by nobody else. `Err` says why not.
pub fn trusted(stat: Stat, want: Kind, me: u32) -> Result<(), String> {
    if stat.kind != want {
        return Err(match want {
            Kind::Dir => "it is not a directory".into(),
            _ => "it is not a regular file".into(),
        });
    }
    if stat.uid != me {
        return Err(format!("it is owned by uid {}, not by this user (uid {me})", stat.uid));
    }
    if stat.mode & 0o022 != 0 {
        return Err(format!(
            "it is writable by {} (mode {:o})",
            if stat.mode & 0o002 != 0 { "others" } else { "its group" },
            stat.mode & 0o7777
        ));
    }
    Ok(())
}

/// What a cache file's name says it is. Any other name is not the cache's and is never touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFile<'a> {
    /// `<id>.cwasm`: compiled bytes.
    Entry(&'a str),
    /// `<id>.sum`: an integrity record.
    Record(&'a str),
    /// `.<id>.<cwasm|sum>.<32 hex>.tmp`: a file being written ([`temp_name`]).
    Temp,
}

/// What `name` is in the cache directory, if it is a name the cache writes.
pub fn cache_file(name: &str) -> Option<CacheFile<'_>> {
    if let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) {
        let (target, nonce) = inner.rsplit_once('.')?;
        let nonce_ok = nonce.len() == 32 && nonce.bytes().all(is_lower_hex);
        return (nonce_ok && matches!(cache_file(target), Some(CacheFile::Entry(_) | CacheFile::Record(_))))
            .then_some(CacheFile::Temp);
    }
    let (id, ext) = name.split_once('.')?;
    if !is_sha256_hex(id) {
        return None;
    }
    match ext {
        "cwasm" => Some(CacheFile::Entry(id)),
        "sum" => Some(CacheFile::Record(id)),
        _ => None,
    }
}

/// The temporary file `name` (an entry's or record's) is written to before it is renamed into
/// place; `nonce` is 32 lowercase hex digits (a random uuid's).
pub fn temp_name(name: &str, nonce: &str) -> String {
    format!(".{name}.{nonce}.tmp")
}

/// One file of the cache directory, as a scan saw it (`lstat`: links not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub kind: Kind,
    /// Bytes.
    pub size: u64,
    /// For a record, its last use ([`Prune`]); for any file, how old it is.
    pub mtime: SystemTime,
    /// For a record (a regular file named `<id>.sum`): what reading and parsing it gave.
    pub record: Option<Result<Integrity, Mismatch>>,
}

/// A scan's inputs besides the listing.
#[derive(Debug, Clone, Copy)]
pub struct Prune<'a> {
    pub now: SystemTime,
    /// This runtime's version and [`engine_digest`]: entries of others can never be loaded here.
    pub version: &'a str,
    pub engine: &'a str,
    /// [`BUDGET`], or a test's smaller one.
    pub budget: u64,
    /// The id of the entry just written or used: never evicted for the budget.
    pub keep: Option<&'a str>,
}

/// Why a scan removes a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    /// Compiled by another `mur` version, and unused for [`FOREIGN_IDLE`].
    OtherVersion,
    /// Compiled for another engine configuration, and unused for [`FOREIGN_IDLE`].
    OtherEngine,
    /// Its record does not parse (damaged, another format), or is not this user's alone, and it
    /// is unused for [`FOREIGN_IDLE`].
    BadRecord,
    /// Its record is another entry's.
    Misnamed,
    /// An entry without a record or a record without an entry, older than [`GRACE`].
    Unpaired,
    /// A temporary file older than [`GRACE`]: its writer was interrupted.
    StaleTemp,
    /// The least recently used while the cache is over its budget.
    OverBudget,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Why::OtherVersion => "compiled by another mur version, and unused for a week",
            Why::OtherEngine => "compiled for another engine configuration, and unused for a week",
            Why::BadRecord => "its record is unreadable or of another format, and unused for a week",
            Why::Misnamed => "its record is another entry's",
            Why::Unpaired => "half of a pair, and older than a few minutes",
            Why::StaleTemp => "an interrupted write, older than a few minutes",
            Why::OverBudget => "least recently used, and the cache is over its size budget",
        })
    }
}

/// Which files of `listing` a scan removes, and why: entries (with their records) that this
/// runtime can never load and nobody used for [`FOREIGN_IDLE`], stale temporary files, old halves of pairs, and, while the usable
/// entries exceed the budget, the least recently used (by record mtime, which a use refreshes).
/// Only regular files with cache names are ever named; a record is named before its entry.
pub fn prune(listing: &[Listed], p: &Prune<'_>) -> Vec<(String, Why)> {
    let old = |l: &Listed| p.now.duration_since(l.mtime).is_ok_and(|age| age > GRACE);
    let mut out = Vec::new();
    let mut pairs: BTreeMap<&str, (Option<&Listed>, Option<&Listed>)> = BTreeMap::new();
    for l in listing.iter().filter(|l| l.kind == Kind::File) {
        match cache_file(&l.name) {
            Some(CacheFile::Temp) if old(l) => out.push((l.name.clone(), Why::StaleTemp)),
            None | Some(CacheFile::Temp) => {}
            Some(CacheFile::Entry(id)) => pairs.entry(id).or_default().0 = Some(l),
            Some(CacheFile::Record(id)) => pairs.entry(id).or_default().1 = Some(l),
        }
    }
    // (last use, id, bytes, record, entry) of every entry this runtime may load.
    let mut usable = Vec::new();
    for (id, (entry, record)) in pairs {
        let Some(record) = record else {
            if let Some(entry) = entry.filter(|e| old(e)) {
                out.push((entry.name.clone(), Why::Unpaired));
            }
            continue;
        };
        let unloadable = match &record.record {
            None | Some(Err(_)) => Some(Why::BadRecord),
            Some(Ok(r)) if r.id() != id => Some(Why::Misnamed),
            Some(Ok(r)) if r.key.version != p.version => Some(Why::OtherVersion),
            Some(Ok(r)) if r.key.engine != p.engine => Some(Why::OtherEngine),
            Some(Ok(_)) => None,
        };
        // Another runtime's entries stay while that runtime uses them, and count against the
        // budget like this one's; a misnamed record is nobody's.
        let idle = p.now.duration_since(record.mtime).is_ok_and(|age| age > FOREIGN_IDLE);
        let unloadable = unloadable.filter(|why| *why == Why::Misnamed || idle);
        match (unloadable, entry) {
            (Some(why), _) => {
                out.push((record.name.clone(), why));
                out.extend(entry.map(|e| (e.name.clone(), why)));
            }
            (None, None) => {
                if old(record) {
                    out.push((record.name.clone(), Why::Unpaired));
                }
            }
            (None, Some(entry)) => {
                usable.push((record.mtime, id, entry.size.saturating_add(record.size), record, entry))
            }
        }
    }
    let mut total = usable.iter().fold(0u64, |t, u| t.saturating_add(u.2));
    usable.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
    for (_, id, bytes, record, entry) in usable {
        if total <= p.budget {
            break;
        }
        if p.keep == Some(id) {
            continue;
        }
        out.push((record.name.clone(), Why::OverBudget));
        out.push((entry.name.clone(), Why::OverBudget));
        total = total.saturating_sub(bytes);
    }
    out
}

/// The budget `env` (the value of [`BUDGET_ENV`]) sets: a number of bytes, at most [`BUDGET`];
/// `None` when unset or not a number.
pub fn test_budget(env: Option<&str>) -> Option<u64> {
    env?.trim().parse::<u64>().ok().map(|b| b.min(BUDGET))
}

/// Read size when hashing a file: large reads keep the hash, not the syscalls, the cost.
pub const HASH_READ_BYTES: usize = 1 << 20;

/// From this many bytes on, [`digest_hex`] hashes on every core (rayon's global pool, which
/// wasmtime's parallel compilation starts anyway); below it, splitting costs more than it saves.
pub const PARALLEL_HASH_BYTES: usize = 1 << 20;

/// The integrity digest of compiled bytes: BLAKE3 (hex). sha256 was the single largest cost of a
/// warm launch of a large component (24–25 ms for a 35 MB Python entry, even with the CPU's SHA
/// extensions); BLAKE3 is about twice as fast on one core here and splits across cores (≈ 3 GB/s
/// on two, against ≈ 0.85 GB/s, docs/performance.md §6). It guards
/// against damage and mix-ups in this user's own directory, not against the user: anyone who
/// can write there can run code as the user anyway.
pub fn digest_hex(bytes: &[u8]) -> String {
    let mut h = blake3::Hasher::new();
    if bytes.len() >= PARALLEL_HASH_BYTES {
        h.update_rayon(bytes);
    } else {
        h.update(bytes);
    }
    h.finalize().to_hex().to_string()
}

/// [`digest_hex`] of everything `reader` yields (one core), and how many bytes that was.
pub fn digest_reader(mut reader: impl std::io::Read) -> std::io::Result<(u64, String)> {
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; HASH_READ_BYTES];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok((total, h.finalize().to_hex().to_string())),
            Ok(n) => {
                h.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(is_lower_hex)
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256_hex;

    fn key(archive: &[u8], engine: u64, version: &str) -> Key {
        Key::new(&sha256_hex(archive), "capsule.wasm", engine, version)
    }

    #[test]
    fn every_part_of_the_key_changes_the_id() {
        let base = key(b"archive", 1, "0.1.0");
        let others = [
            key(b"archive2", 1, "0.1.0"),
            key(b"archive", 2, "0.1.0"),
            key(b"archive", 1, "0.1.1"),
            Key::new(&sha256_hex(b"archive"), "other.wasm", 1u64, "0.1.0"),
        ];
        for other in &others {
            assert_ne!(base.id(), other.id(), "{other:?}");
        }
        assert_eq!(base.id(), key(b"archive", 1, "0.1.0").id(), "the id is stable");
        assert_eq!(
            base.id(),
            Key::new(&sha256_hex(b"archive").to_uppercase(), "capsule.wasm", 1u64, "0.1.0").id(),
            "a sidecar's hex case does not matter"
        );
        assert_eq!(base.id().len(), 64);
        assert_eq!(base.entry_name(), format!("{}.cwasm", base.id()));
        assert_eq!(base.record_name(), format!("{}.sum", base.id()));
        assert_eq!(base.short(), &sha256_hex(b"archive")[..12]);
        // A boundary moved between parts is another key.
        let k = |a: &str, c: &str, e: &str| Key {
            archive_sha256: a.into(),
            component: c.into(),
            engine: e.into(),
            version: "v".into(),
        };
        assert_ne!(k("ab", "c", "e").id(), k("a", "bc", "e").id());
        assert_ne!(k("a", "bc", "e").id(), k("a", "b", "ce").id());
    }

    #[test]
    fn records_round_trip_and_check() {
        let k = key(b"component", 7, "0.1.0");
        let compiled = b"native code";
        let rec = Integrity::of(&k, compiled);
        assert_eq!(Integrity::parse(&rec.render()), Ok(rec.clone()));
        assert_eq!(rec.id(), k.id());
        assert!(rec.render().starts_with("mur-compiled 3\n"), "{}", rec.render());
        assert!(rec.render().contains(&format!("\nblake3 {}\n", digest_hex(compiled))));
        let digest = digest_hex(compiled);
        let n = compiled.len() as u64;
        let other = key(b"another component", 7, "0.1.0");
        let table: [(&Key, u64, &str, Result<(), Mismatch>); 5] = [
            (&k, n, &digest, Ok(())),
            (&other, n, &digest, Err(Mismatch::Foreign)),
            (&k, n - 1, &digest, Err(Mismatch::Length { want: n, found: n - 1 })),
            (&k, n, &digest_hex(b"native codf"), Err(Mismatch::Digest)),
            // A foreign record is named as such even when the lengths differ too.
            (&other, 0, &digest, Err(Mismatch::Foreign)),
        ];
        for (i, (key, len, digest, want)) in table.into_iter().enumerate() {
            assert_eq!(rec.check(key, len, digest), want, "row {i}");
        }
    }

    #[test]
    fn damaged_records_do_not_parse() {
        let k = key(b"c", 1, "v");
        let good = Integrity::of(&k, b"x").render();
        // The record format 1 wrote (a sha256 of the entry, no key parts).
        let format_1 = format!("mur-compiled 1\nid {}\nlen 1\nsha256 {}\n", k.id(), sha256_hex(b"x"));
        let mut other_id = k.clone();
        other_id.version = "w".into();
        let table = [
            String::new(),
            "random bytes\n".to_string(),
            format_1,
            good.replacen("mur-compiled 3", "mur-compiled 4", 1),
            good.lines().take(7).collect::<Vec<_>>().join("\n"),
            format!("{good}extra\n"),
            good.replacen("len 1", "len one", 1),
            good.replacen("len 1", "len -1", 1),
            good.replacen("id ", "id  ", 1),
            good.replacen("blake3 ", "blake3 A", 1),
            good.replacen("id ", "key ", 1),
            // A part edited: the id is no longer the parts'.
            good.replacen("version v", "version w", 1),
            good.replacen(&k.id(), &other_id.id(), 1),
            good.replacen("version v", "version ", 1),
            good.replacen("version v", "version a b", 1),
            good.replacen("component capsule.wasm", "component ", 1),
            good.replacen("component capsule.wasm", &format!("component {}", "c".repeat(300)), 1),
            good.replacen("engine ", "engine x", 1),
        ];
        for text in table {
            assert!(matches!(Integrity::parse(&text), Err(Mismatch::Record(_))), "{text:?}");
        }
        // The longest record that parses fits the bound readers apply.
        let mut long = k.clone();
        long.version = "v".repeat(MAX_VERSION_BYTES);
        long.component = "c".repeat(MAX_COMPONENT_BYTES);
        let rec = Integrity {
            key: long,
            len: u64::MAX,
            blake3: digest_hex(b""),
        };
        assert_eq!(Integrity::parse(&rec.render()), Ok(rec.clone()));
        assert!(rec.render().len() as u64 <= MAX_RECORD_BYTES, "{}", rec.render().len());
    }

    #[test]
    fn only_own_unshared_real_dirs_and_files_are_trusted() {
        let me = 1000;
        let st = |uid, mode, kind| Stat { uid, mode, kind };
        let table = [
            (st(me, 0o40700, Kind::Dir), Kind::Dir, true),
            (st(me, 0o40755, Kind::Dir), Kind::Dir, true),
            (st(me, 0o100600, Kind::File), Kind::File, true),
            (st(me, 0o100644, Kind::File), Kind::File, true),
            (st(me, 0o40770, Kind::Dir), Kind::Dir, false),
            (st(me, 0o40707, Kind::Dir), Kind::Dir, false),
            (st(me, 0o41777, Kind::Dir), Kind::Dir, false),
            (st(me, 0o100620, Kind::File), Kind::File, false),
            (st(me, 0o100602, Kind::File), Kind::File, false),
            (st(0, 0o40700, Kind::Dir), Kind::Dir, false),
            (st(1001, 0o100600, Kind::File), Kind::File, false),
            (st(me, 0o120777, Kind::Other), Kind::File, false),
            (st(me, 0o120777, Kind::Other), Kind::Dir, false),
            (st(me, 0o100600, Kind::File), Kind::Dir, false),
        ];
        for (stat, want, ok) in table {
            assert_eq!(trusted(stat, want, me).is_ok(), ok, "{stat:?} as {want:?}");
        }
        assert_eq!(
            trusted(st(me, 0o40777, Kind::Dir), Kind::Dir, me),
            Err("it is writable by others (mode 777)".into())
        );
    }

    #[test]
    fn a_reader_hashes_as_its_bytes_do() {
        for len in [0, 1, HASH_READ_BYTES - 1, HASH_READ_BYTES, 2 * HASH_READ_BYTES + 3] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let got = digest_reader(&bytes[..]).unwrap();
            assert_eq!(got, (len as u64, digest_hex(&bytes)), "{len} bytes");
        }
    }

    #[test]
    fn the_digest_is_blake3_on_one_core_or_many() {
        // BLAKE3's published test vector for the empty input.
        assert_eq!(
            digest_hex(b""),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        // Below and above the size that hashes in parallel, the digest is the one-core digest.
        for len in [
            PARALLEL_HASH_BYTES - 1,
            PARALLEL_HASH_BYTES,
            5 * PARALLEL_HASH_BYTES + 7,
        ] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            assert_eq!(
                digest_hex(&bytes),
                blake3::hash(&bytes).to_hex().to_string(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn only_names_the_cache_writes_are_cache_files() {
        let id = sha256_hex(b"k");
        let nonce = "0123456789abcdef0123456789abcdef";
        let table: [(String, Option<CacheFile<'_>>); 14] = [
            (format!("{id}.cwasm"), Some(CacheFile::Entry(&id))),
            (format!("{id}.sum"), Some(CacheFile::Record(&id))),
            (temp_name(&format!("{id}.cwasm"), nonce), Some(CacheFile::Temp)),
            (temp_name(&format!("{id}.sum"), nonce), Some(CacheFile::Temp)),
            (format!("{id}.wasm"), None),
            (format!("{id}.cwasm.bak"), None),
            (format!("{}.cwasm", &id[..63]), None),
            (format!("{}.cwasm", id.to_uppercase()), None),
            ("notes.txt".into(), None),
            (".hidden".into(), None),
            (temp_name("notes.txt", nonce), None),
            (temp_name(&format!("{id}.cwasm"), &nonce[..31]), None),
            (temp_name(&format!("{id}.cwasm"), &nonce.to_uppercase()), None),
            (format!(".{id}.cwasm.{nonce}.tmp.x"), None),
        ];
        for (name, want) in &table {
            assert_eq!(cache_file(name), *want, "{name}");
        }
    }

    #[test]
    fn a_scan_removes_what_this_runtime_cannot_use_and_the_least_recently_used_over_budget() {
        use std::time::UNIX_EPOCH;
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ago = |secs: u64| now - Duration::from_secs(secs);
        let fresh = ago(10);
        let stale = ago(GRACE.as_secs() + 1);
        let idle = ago(FOREIGN_IDLE.as_secs() + 1);
        let k = |archive: &[u8], engine: u64, version: &str| key(archive, engine, version);
        let mine = |archive: &[u8]| k(archive, 1, "0.2.0");
        let this_engine = engine_digest(1u64);
        let file = |name: String, size: u64, mtime: SystemTime| Listed {
            name,
            kind: Kind::File,
            size,
            mtime,
            record: None,
        };
        // An entry of `size` bytes and its record (10 bytes), last used at `used`.
        let pair = |key: &Key, size: u64, used: SystemTime| {
            vec![
                file(key.entry_name(), size, stale),
                Listed {
                    record: Some(Ok(Integrity {
                        key: key.clone(),
                        len: size,
                        blake3: digest_hex(b""),
                    })),
                    ..file(key.record_name(), 10, used)
                },
            ]
        };
        let with_record = |key: &Key, record: Result<Integrity, Mismatch>, used: SystemTime| {
            vec![
                file(key.entry_name(), 100, stale),
                Listed {
                    record: Some(record),
                    ..file(key.record_name(), 10, used)
                },
            ]
        };
        let (a, b, c) = (mine(b"a"), mine(b"b"), mine(b"c"));
        let old_version = k(b"a", 1, "0.1.0");
        let old_engine = k(b"a", 2, "0.2.0");
        let nonce = "0123456789abcdef0123456789abcdef";
        let base = Prune {
            now,
            version: "0.2.0",
            engine: &this_engine,
            budget: BUDGET,
            keep: None,
        };
        let names = |key: &Key, why: Why| vec![(key.record_name(), why), (key.entry_name(), why)];
        let a_id = a.id();
        let mut misnamed = pair(&b, 100, fresh);
        misnamed[1].name = c.record_name();
        misnamed[0].name = c.entry_name();
        let not_a_file = |name: String| Listed {
            kind: Kind::Other,
            ..file(name, 0, stale)
        };
        type Row<'a> = (&'static str, Vec<Listed>, Prune<'a>, Vec<(String, Why)>);
        let table: Vec<Row<'_>> = vec![
            (
                "usable entries stay",
                [pair(&a, 100, fresh), pair(&b, 100, stale)].concat(),
                base,
                vec![],
            ),
            (
                "another version, used within the week: kept",
                pair(&old_version, 100, stale),
                base,
                vec![],
            ),
            (
                "another version, unused for a week",
                pair(&old_version, 100, idle),
                base,
                names(&old_version, Why::OtherVersion),
            ),
            (
                "another engine, used within the week: kept",
                pair(&old_engine, 100, stale),
                base,
                vec![],
            ),
            (
                "another engine, unused for a week",
                pair(&old_engine, 100, idle),
                base,
                names(&old_engine, Why::OtherEngine),
            ),
            (
                "a record of format 1 or damaged, used within the week: kept",
                with_record(&a, Err(Mismatch::Record("format".into())), stale),
                base,
                vec![],
            ),
            (
                "a record of format 1 or damaged, unused for a week",
                with_record(&a, Err(Mismatch::Record("format".into())), idle),
                base,
                names(&a, Why::BadRecord),
            ),
            (
                "a record under another entry's name",
                misnamed,
                base,
                names(&c, Why::Misnamed),
            ),
            (
                "temporary files: stale go, fresh stay",
                vec![
                    file(temp_name(&a.entry_name(), nonce), 5, stale),
                    file(temp_name(&b.record_name(), nonce), 5, fresh),
                ],
                base,
                vec![(temp_name(&a.entry_name(), nonce), Why::StaleTemp)],
            ),
            (
                "unpaired halves: old go, young stay (a writer between its two renames)",
                vec![
                    file(a.entry_name(), 100, stale),
                    file(b.entry_name(), 100, fresh),
                    pair(&c, 100, stale).remove(1),
                    pair(&old_version, 100, fresh).remove(1),
                    pair(&old_engine, 100, idle).remove(1),
                    pair(&k(b"d", 1, "0.2.0"), 100, fresh).remove(1),
                ],
                base,
                vec![
                    (a.entry_name(), Why::Unpaired),
                    (c.record_name(), Why::Unpaired),
                    (old_engine.record_name(), Why::OtherEngine),
                ],
            ),
            (
                "other names, symlinks and directories are never touched",
                vec![
                    file("notes.txt".into(), 1 << 40, stale),
                    file(format!("{}.cwasm.old", a.id()), 1 << 40, stale),
                    not_a_file(old_version.entry_name()),
                    not_a_file(old_version.record_name()),
                    not_a_file(temp_name(&a.entry_name(), nonce)),
                ],
                Prune { budget: 0, ..base },
                vec![],
            ),
            (
                "over budget: least recently used first, until under it",
                [pair(&a, 100, ago(30)), pair(&b, 100, ago(20)), pair(&c, 100, ago(10))].concat(),
                Prune { budget: 120, ..base },
                [names(&a, Why::OverBudget), names(&b, Why::OverBudget)].concat(),
            ),
            (
                "exactly at budget: nothing evicted",
                [pair(&a, 100, ago(30)), pair(&b, 100, ago(20))].concat(),
                Prune { budget: 220, ..base },
                vec![],
            ),
            (
                "the entry just written is kept even when older by its record",
                [pair(&a, 100, ago(30)), pair(&b, 100, ago(20)), pair(&c, 100, ago(10))].concat(),
                Prune {
                    budget: 130,
                    keep: Some(&a_id),
                    ..base
                },
                [names(&b, Why::OverBudget), names(&c, Why::OverBudget)].concat(),
            ),
            (
                "idle unloadable entries go first and do not count against the budget",
                [pair(&old_version, 1000, idle), pair(&a, 100, ago(30))].concat(),
                Prune { budget: 110, ..base },
                names(&old_version, Why::OtherVersion),
            ),
            (
                "recently used unloadable entries count, least recently used first",
                [pair(&old_version, 1000, ago(40)), pair(&a, 100, ago(30))].concat(),
                Prune { budget: 110, ..base },
                names(&old_version, Why::OverBudget),
            ),
        ];
        for (what, listing, prune_with, want) in table {
            let mut got = prune(&listing, &prune_with);
            let mut want = want;
            got.sort();
            want.sort();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_test_budget_only_shrinks() {
        let table = [
            (None, None),
            (Some(""), None),
            (Some("x"), None),
            (Some("-1"), None),
            (Some("0"), Some(0)),
            (Some(" 4096 "), Some(4096)),
            (Some("99999999999999999"), Some(BUDGET)),
        ];
        for (env, want) in table {
            assert_eq!(test_budget(env), want, "{env:?}");
        }
    }

    #[test]
    fn engine_digest_is_a_stable_sha256() {
        assert_eq!(engine_digest(42u64), engine_digest(42u64));
        assert_ne!(engine_digest(42u64), engine_digest(43u64));
        assert_eq!(engine_digest(("a", 1u32)).len(), 64);
    }
}
