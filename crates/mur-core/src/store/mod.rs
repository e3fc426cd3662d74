//! Artifact stores (docs/reference/roster.md#stores-and-murmurlock): where installed `.mur.zip`
//! files live and how they are found.
//!
//! A store root holds `<scope>/<name>/<version>/<name>-<version>.mur.zip` and its `.sha256`
//! sidecar. Lookup tries the project store, then the global one, and falls through only when the
//! zip or the sidecar is absent: a damaged copy in the project store is reported, never skipped.

pub mod archive;
pub mod lock;
mod streamed;

use std::fmt;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::digest::sha256_hex;

use crate::names::{self, ArtifactName};
use crate::paths;

/// Largest `.mur.zip` read from a store or installed (entries are capped separately).
pub const MAX_ZIP_BYTES: u64 = 256 << 20;

/// Which store an artifact was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Project,
    Global,
}

impl StoreKind {
    /// `project` / `global`, as `mur list` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Project => "project",
            StoreKind::Global => "global",
        }
    }
}

/// The stores a lookup reads, in order: the project store (if any), then the global one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stores {
    project: Option<PathBuf>,
    global: PathBuf,
}

/// An installed artifact whose bytes hash to its sidecar, opened: its manifest is read, its
/// component only located (see [`Resolved::read_component`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub zip_path: PathBuf,
    /// sha256 of the whole zip, lowercase hex (equal to the sidecar).
    pub sha256: String,
    pub store: StoreKind,
    pub archive: archive::Index,
}

impl Resolved {
    /// The component's bytes, inflated from the archive read again and checked again against
    /// [`Resolved::sha256`]: only what was resolved is ever returned, even if the store changed
    /// since. Only a compiled-component cache miss needs them, and a miss then compiles for
    /// seconds, so the second read costs little; keeping the zip instead would keep its bytes
    /// resident in every member.
    pub fn read_component(&self) -> Result<Vec<u8>, ResolveError> {
        read_component_checked(&self.zip_path, &self.sha256)
    }
}

/// The component of the archive at `zip_path`, read under [`MAX_ZIP_BYTES`] and returned only if
/// the whole zip hashes to `sha256` (one admission or resolution checked).
pub fn read_component_checked(zip_path: &Path, sha256: &str) -> Result<Vec<u8>, ResolveError> {
    let bytes = read_zip_checked(zip_path, sha256)?;
    archive::read_component(&bytes)
        .map_err(ResolveError::Archive)?
        .ok_or_else(|| ResolveError::Archive(format!("it holds no {}", archive::COMPONENT_ENTRY)))
}

/// The entry at `path` of the archive at `zip_path` (a model capsule's tool), under the same
/// checks as [`read_component_checked`]: only the resolved bytes are ever read.
pub fn read_entry_checked(zip_path: &Path, sha256: &str, path: &str) -> Result<Vec<u8>, ResolveError> {
    let bytes = read_zip_checked(zip_path, sha256)?;
    archive::read_named(&bytes, path).map_err(ResolveError::Archive)
}

/// The archive at `zip_path`, read under [`MAX_ZIP_BYTES`], only if it hashes to `sha256`.
fn read_zip_checked(zip_path: &Path, sha256: &str) -> Result<Vec<u8>, ResolveError> {
    let bytes = read_zip(zip_path).map_err(|e| ResolveError::Io(format!("cannot read {}: {e}", zip_path.display())))?;
    let actual = sha256_hex(&bytes);
    if actual != sha256 {
        return Err(ResolveError::HashMismatch {
            actual,
            recorded: sha256.to_string(),
        });
    }
    Ok(bytes)
}

/// Why an artifact cannot be resolved. `Display` gives the E-ROS-007 reason texts
/// (docs/reference/roster.md#refusals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    NotInstalled,
    HashMismatch { actual: String, recorded: String },
    Archive(String),
    Io(String),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::NotInstalled => f.write_str("not installed in the project or global store"),
            ResolveError::HashMismatch { actual, recorded } => {
                write!(f, "the stored bytes hash to {actual}, but the store records {recorded}")
            }
            ResolveError::Archive(why) => write!(f, "the stored archive is damaged: {why}"),
            ResolveError::Io(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ResolveError {}

/// One installed artifact as `mur list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: ArtifactName,
    pub version: String,
    pub store: StoreKind,
    /// The sidecar's hash (not recomputed: listing stays cheap).
    pub sha256: String,
}

impl Stores {
    pub fn new(project_store: Option<PathBuf>, global_store: PathBuf) -> Stores {
        Stores {
            project: project_store,
            global: global_store,
        }
    }

    pub fn project(&self) -> Option<&Path> {
        self.project.as_deref()
    }

    pub fn global(&self) -> &Path {
        &self.global
    }

    fn roots(&self) -> impl Iterator<Item = (&Path, StoreKind)> {
        self.project
            .as_deref()
            .map(|p| (p, StoreKind::Project))
            .into_iter()
            .chain(std::iter::once((self.global.as_path(), StoreKind::Global)))
    }

    /// Finds `name@version`: the project store, then the global store. Falls through only when
    /// the zip or sidecar is absent (docs/reference/roster.md#stores-and-murmurlock); the zip is
    /// hashed and compared with its sidecar, then opened. A version that cannot name a store
    /// directory is never installed.
    pub fn resolve(&self, name: &ArtifactName, version: &str) -> Result<Resolved, ResolveError> {
        if crate::manifest::check_version(version).is_err() {
            return Err(ResolveError::NotInstalled);
        }
        for (root, kind) in self.roots() {
            let zip_path = paths::artifact_zip(root, &name.scope, &name.name, version);
            let sidecar = paths::artifact_sidecar(root, &name.scope, &name.name, version);
            let recorded = match read_sidecar(&sidecar) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(ResolveError::Io(format!("cannot read {}: {e}", sidecar.display())));
                }
            };
            let read = match streamed::hash_and_index(&zip_path) {
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(ResolveError::Io(format!("cannot read {}: {e}", zip_path.display())));
                }
            };
            let recorded = recorded.trim().to_ascii_lowercase();
            if recorded.len() != 64 || !recorded.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ResolveError::Io(format!(
                    "the sidecar {} does not hold a sha256 (64 hex digits)",
                    sidecar.display()
                )));
            }
            tracing::trace!(zip = %zip_path.display(), bytes_kept = read.kept, "archive hashed and indexed");
            let actual = read.sha256;
            if actual != recorded {
                return Err(ResolveError::HashMismatch { actual, recorded });
            }
            let archive = read.index.map_err(ResolveError::Archive)?;
            return Ok(Resolved {
                zip_path,
                sha256: actual,
                store: kind,
                archive,
            });
        }
        Err(ResolveError::NotInstalled)
    }

    /// Every artifact with both its zip and sidecar: the project store's, then the global
    /// store's, each sorted by name, then version (numeric parts compared as numbers).
    pub fn list(&self) -> Vec<Listed> {
        let mut out = Vec::new();
        for (root, kind) in self.roots() {
            let mut found = list_store(root, kind);
            found.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| version_order(&a.version, &b.version)));
            out.extend(found);
        }
        out
    }
}

/// Reads a zip under [`MAX_ZIP_BYTES`].
fn read_zip(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    // Sized up front (a capsule of a language runtime is tens of MB): one allocation, no copies.
    let hint = file.metadata().map_or(0, |m| m.len()).min(MAX_ZIP_BYTES + 1);
    let mut buf = Vec::with_capacity(hint as usize + 1);
    file.take(MAX_ZIP_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_ZIP_BYTES {
        return Err(too_large());
    }
    Ok(buf)
}

fn too_large() -> std::io::Error {
    std::io::Error::other(format!("the file is larger than {MAX_ZIP_BYTES} bytes"))
}

/// Reads a sidecar: 64 hex digits and a newline, so anything past a few hundred bytes is junk
/// that need not be read (nor printed) whole.
fn read_sidecar(path: &Path) -> std::io::Result<String> {
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(256).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Reads a `.mur.zip` to install, under [`MAX_ZIP_BYTES`].
pub fn read_archive_file(path: &Path) -> std::io::Result<Vec<u8>> {
    if std::fs::metadata(path)?.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"));
    }
    read_zip(path)
}

fn dir_names(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

fn list_store(root: &Path, kind: StoreKind) -> Vec<Listed> {
    let mut out = Vec::new();
    for scope in dir_names(root).into_iter().filter(|s| names::check_part(s).is_ok()) {
        for name in dir_names(&root.join(&scope))
            .into_iter()
            .filter(|n| names::check_part(n).is_ok())
        {
            for version in dir_names(&root.join(&scope).join(&name)) {
                if crate::manifest::check_version(&version).is_err() {
                    continue;
                }
                let zip = paths::artifact_zip(root, &scope, &name, &version);
                let sidecar = paths::artifact_sidecar(root, &scope, &name, &version);
                let Ok(sha) = read_sidecar(&sidecar) else {
                    continue;
                };
                if !zip.is_file() {
                    continue;
                }
                out.push(Listed {
                    name: ArtifactName {
                        scope: scope.clone(),
                        name: name.clone(),
                    },
                    version,
                    store: kind,
                    sha256: sha.trim().to_ascii_lowercase(),
                });
            }
        }
    }
    out
}

/// Orders versions by their dot-separated parts, numbers as numbers (`1.9` < `1.10`), then text.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    let mut pa = a.split('.');
    let mut pb = b.split('.');
    loop {
        match (pa.next(), pb.next()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => {
                let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(nx), Ok(ny)) => nx.cmp(&ny),
                    _ => x.cmp(y),
                };
                if ord.is_ne() {
                    return ord;
                }
            }
        }
    }
}

/// Stores `zip_bytes` as `name@version` under `store_root`, replacing any copy: the zip first,
/// then its sidecar, each written atomically. The store is the runtime's own: the directories it
/// makes are 0700 and its files 0600. Returns the zip's path and sha256.
pub fn install(
    store_root: &Path,
    name: &ArtifactName,
    version: &str,
    zip_bytes: &[u8],
) -> std::io::Result<(PathBuf, String)> {
    crate::manifest::check_version(version)
        .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("version {why}")))?;
    let dir = paths::artifact_dir(store_root, &name.scope, &name.name, version);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    let sha = sha256_hex(zip_bytes);
    let zip_path = paths::artifact_zip(store_root, &name.scope, &name.name, version);
    crate::file::write_atomic(&zip_path, zip_bytes, 0o600)?;
    crate::file::write_atomic(
        &paths::artifact_sidecar(store_root, &name.scope, &name.name, version),
        format!("{sha}\n").as_bytes(),
        0o600,
    )?;
    Ok((zip_path, sha))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> ArtifactName {
        ArtifactName::local(n)
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn resolve_order_and_fall_through() {
        let dir = tempfile::tempdir().unwrap();
        let (project, global) = (dir.path().join("p"), dir.path().join("g"));
        let stores = Stores::new(Some(project.clone()), global.clone());
        let zip_g = archive::pack(b"name: a\nversion: 1.0.0\n", None);
        let zip_p = archive::pack(b"name: a\nversion: 1.0.0\n# project\n", None);

        assert_eq!(stores.resolve(&name("a"), "1.0.0"), Err(ResolveError::NotInstalled));
        install(&global, &name("a"), "1.0.0", &zip_g).unwrap();
        let r = stores.resolve(&name("a"), "1.0.0").unwrap();
        assert_eq!((r.store, r.sha256.clone()), (StoreKind::Global, sha256_hex(&zip_g)));
        assert_eq!(r.zip_path, global.join("local/a/1.0.0/a-1.0.0.mur.zip"));
        assert_eq!(r.archive.manifest, b"name: a\nversion: 1.0.0\n");

        // A project copy missing its sidecar falls through to the global one.
        let (pz, _) = install(&project, &name("a"), "1.0.0", &zip_p).unwrap();
        let side = paths::artifact_sidecar(&project, "local", "a", "1.0.0");
        std::fs::remove_file(&side).unwrap();
        assert_eq!(stores.resolve(&name("a"), "1.0.0").unwrap().store, StoreKind::Global);
        // With both files, the project store wins.
        install(&project, &name("a"), "1.0.0", &zip_p).unwrap();
        assert_eq!(stores.resolve(&name("a"), "1.0.0").unwrap().store, StoreKind::Project);

        // A mismatch never falls through.
        std::fs::write(&pz, b"tampered").unwrap();
        let e = stores.resolve(&name("a"), "1.0.0").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the stored bytes hash to {}, but the store records {}",
                sha256_hex(b"tampered"),
                sha256_hex(&zip_p)
            )
        );
        // Nor does a bad archive whose sidecar matches.
        std::fs::write(&side, format!("{}\n", sha256_hex(b"tampered"))).unwrap();
        let e = stores.resolve(&name("a"), "1.0.0").unwrap_err().to_string();
        assert!(
            e.starts_with("the stored archive is damaged: not a ZIP archive: "),
            "{e}"
        );
        std::fs::write(&side, "junk").unwrap();
        assert!(matches!(stores.resolve(&name("a"), "1.0.0"), Err(ResolveError::Io(_))));

        // Versions that would leave the store are never found.
        assert_eq!(stores.resolve(&name("a"), "../1.0.0"), Err(ResolveError::NotInstalled));
        assert_eq!(stores.resolve(&name("a"), ".."), Err(ResolveError::NotInstalled));
        assert!(install(&global, &name("a"), "../x", &zip_g).is_err());
        assert_eq!(
            ResolveError::NotInstalled.to_string(),
            "not installed in the project or global store"
        );
    }

    #[test]
    fn a_store_is_made_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join(".murmur");
        let store = home.join("artifacts");
        let (zip, _) = install(
            &store,
            &name("a"),
            "1.0.0",
            &archive::pack(b"name: a\nversion: 1.0.0\n", None),
        )
        .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for d in [
            &home,
            &store,
            &store.join("local"),
            &store.join("local/a"),
            &store.join("local/a/1.0.0"),
        ] {
            assert_eq!(mode(d), 0o700, "{}", d.display());
        }
        assert_eq!(mode(&zip), 0o600);
        assert_eq!(mode(&paths::artifact_sidecar(&store, "local", "a", "1.0.0")), 0o600);
    }

    #[test]
    fn a_component_is_read_only_on_demand_and_only_as_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let stores = Stores::new(None, dir.path().to_path_buf());
        let zip = archive::pack(b"name: a\nversion: 1.0.0\n", Some(b"(component)"));
        let (path, _) = install(dir.path(), &name("a"), "1.0.0", &zip).unwrap();
        let r = stores.resolve(&name("a"), "1.0.0").unwrap();
        assert_eq!(r.archive.component.as_deref(), Some(archive::COMPONENT_ENTRY));
        assert_eq!(r.read_component().unwrap(), b"(component)");
        // Bytes that changed since they were resolved are not read as the component.
        let other = archive::pack(b"name: a\nversion: 1.0.0\n", Some(b"(other)"));
        std::fs::write(&path, &other).unwrap();
        assert_eq!(
            r.read_component(),
            Err(ResolveError::HashMismatch {
                actual: sha256_hex(&other),
                recorded: sha256_hex(&zip)
            })
        );
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(r.read_component(), Err(ResolveError::Io(_))));
        // An archive without a component has none to read.
        install(dir.path(), &name("b"), "1.0.0", &archive::pack(b"x", None)).unwrap();
        let b = stores.resolve(&name("b"), "1.0.0").unwrap();
        assert_eq!(b.archive.component, None);
        assert!(matches!(b.read_component(), Err(ResolveError::Archive(_))));
    }

    #[test]
    fn list_orders_project_then_global() {
        let dir = tempfile::tempdir().unwrap();
        let (project, global) = (dir.path().join("p"), dir.path().join("g"));
        for (root, n, v) in [
            (&global, "b", "1.10"),
            (&global, "b", "1.9"),
            (&global, "a", "2"),
            (&project, "z", "0.1.0"),
        ] {
            install(root, &name(n), v, b"zip").unwrap();
        }
        std::fs::create_dir_all(global.join("local/c/1.0.0")).unwrap(); // no files: not listed
        let got: Vec<String> = Stores::new(Some(project), global)
            .list()
            .iter()
            .map(|l| format!("{} {} {} {}", l.name, l.version, l.store.as_str(), &l.sha256[..12]))
            .collect();
        let h = &sha256_hex(b"zip")[..12];
        assert_eq!(
            got,
            [
                format!("local/z 0.1.0 project {h}"),
                format!("local/a 2 global {h}"),
                format!("local/b 1.9 global {h}"),
                format!("local/b 1.10 global {h}"),
            ]
        );
        assert!(Stores::new(None, dir.path().join("none")).list().is_empty());
    }

    #[test]
    fn version_ordering() {
        use std::cmp::Ordering::*;
        let table = [
            ("1.9", "1.10", Less),
            ("1.10", "1.10", Equal),
            ("1.0", "1.0.1", Less),
            ("1.a", "1.b", Less),
            ("2", "10", Less),
        ];
        for (a, b, want) in table {
            assert_eq!(version_order(a, b), want, "{a} vs {b}");
        }
    }
}
