//! The compiled-component cache's pure part: what names an entry, the integrity record written
//! beside it, and which directories and files may be trusted to hold native code.
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
//! entry and compares before wasmtime sees a byte of it.

use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};

/// First line of every integrity record; a new layout gets a new number.
pub const FORMAT: &str = "mur-compiled 1";

/// An integrity record is a few short lines; a larger file is not one.
pub const MAX_RECORD_BYTES: u64 = 512;

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

/// The record beside an entry: which key it was compiled for, and the length and sha256 of the
/// compiled bytes as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrity {
    pub id: String,
    pub len: u64,
    pub sha256: String,
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
            Mismatch::Digest => f.write_str("its bytes do not hash to its record's sha256"),
        }
    }
}

impl Integrity {
    /// The record of `compiled`, written for `key`.
    pub fn of(key: &Key, compiled: &[u8]) -> Integrity {
        Integrity {
            id: key.id(),
            len: compiled.len() as u64,
            sha256: hex(&Sha256::digest(compiled)),
        }
    }

    pub fn render(&self) -> String {
        format!("{FORMAT}\nid {}\nlen {}\nsha256 {}\n", self.id, self.len, self.sha256)
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
        let (id, len, sha256) = (field("id")?, field("len")?, field("sha256")?);
        if lines.next().is_some() {
            return Err(bad("it has lines after `sha256`"));
        }
        for (name, v) in [("id", &id), ("sha256", &sha256)] {
            if !is_sha256_hex(v) {
                return Err(bad(&format!("its `{name}` is not 64 lowercase hex digits")));
            }
        }
        let len = len.parse().map_err(|_| bad("its `len` is not a number"))?;
        Ok(Integrity { id, len, sha256 })
    }

    /// Whether compiled bytes of `found_len` hashing to `found_sha256` are this record's, for
    /// `key`. Length is checked by the caller before hashing too, so a truncated entry costs no
    /// hash; checking it here again keeps this the one place that decides.
    pub fn check(&self, key: &Key, found_len: u64, found_sha256: &str) -> Result<(), Mismatch> {
        if self.id != key.id() {
            return Err(Mismatch::Foreign);
        }
        if self.len != found_len {
            return Err(Mismatch::Length {
                want: self.len,
                found: found_len,
            });
        }
        if self.sha256 != found_sha256 {
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

/// Read size when hashing a file: large reads keep the hash, not the syscalls, the cost.
pub const HASH_READ_BYTES: usize = 1 << 20;

/// sha256 hex of everything `reader` yields, and how many bytes that was.
pub fn sha256_reader(mut reader: impl std::io::Read) -> std::io::Result<(u64, String)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; HASH_READ_BYTES];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok((total, hex(&h.finalize()))),
            Ok(n) => {
                h.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// sha256 hex of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let sha = sha256_hex(compiled);
        let n = compiled.len() as u64;
        let other = key(b"another component", 7, "0.1.0");
        let table: [(&Key, u64, &str, Result<(), Mismatch>); 5] = [
            (&k, n, &sha, Ok(())),
            (&other, n, &sha, Err(Mismatch::Foreign)),
            (&k, n - 1, &sha, Err(Mismatch::Length { want: n, found: n - 1 })),
            (&k, n, &sha256_hex(b"native codf"), Err(Mismatch::Digest)),
            // A foreign record is named as such even when the lengths differ too.
            (&other, 0, &sha, Err(Mismatch::Foreign)),
        ];
        for (i, (key, len, sha, want)) in table.into_iter().enumerate() {
            assert_eq!(rec.check(key, len, sha), want, "row {i}");
        }
    }

    #[test]
    fn damaged_records_do_not_parse() {
        let good = Integrity::of(&key(b"c", 1, "v"), b"x").render();
        let table = [
            String::new(),
            "random bytes\n".to_string(),
            good.replacen("mur-compiled 1", "mur-compiled 2", 1),
            good.lines().take(3).collect::<Vec<_>>().join("\n"),
            format!("{good}extra\n"),
            good.replacen("len 1", "len one", 1),
            good.replacen("len 1", "len -1", 1),
            good.replacen("id ", "id  ", 1),
            good.replacen("sha256 ", "sha256 A", 1),
            good.replacen("id ", "key ", 1),
        ];
        for text in table {
            assert!(matches!(Integrity::parse(&text), Err(Mismatch::Record(_))), "{text:?}");
        }
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
            let got = sha256_reader(&bytes[..]).unwrap();
            assert_eq!(got, (len as u64, sha256_hex(&bytes)), "{len} bytes");
        }
    }

    #[test]
    fn engine_digest_is_a_stable_sha256() {
        assert_eq!(engine_digest(42u64), engine_digest(42u64));
        assert_ne!(engine_digest(42u64), engine_digest(43u64));
        assert_eq!(engine_digest(("a", 1u32)).len(), 64);
    }
}
