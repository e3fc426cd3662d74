//! The `.mur.zip` archive (docs/reference/capsules.md#writing-building-and-installing-one): root
//! `murmur.yaml`, plus root `capsule.wasm` for a component capsule, plus a model capsule's
//! WebAssembly tools at the paths its `tools:` names. Other entries are tolerated and never read.

use std::io::{Cursor, Read, Seek, Write};
use std::ops::Range;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipArchive, ZipWriter};

/// Root entry holding the manifest's source bytes.
pub const MANIFEST_ENTRY: &str = "murmur.yaml";
/// Root entry holding a component capsule's component.
pub const COMPONENT_ENTRY: &str = "capsule.wasm";

/// Largest uncompressed entry read (either entry).
pub const MAX_ENTRY_BYTES: u64 = 64 << 20;
/// Largest packed `murmur.yaml` read: the manifest parser's own cap.
pub const MAX_MANIFEST_BYTES: u64 = crate::manifest::MAX_MANIFEST_BYTES as u64;
/// More entries than this is not a capsule archive (and bounds central-directory work).
pub const MAX_ENTRIES: usize = 1024;

/// The two entries the runtime uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    pub manifest: Vec<u8>,
    pub component: Option<Vec<u8>>,
}

/// Packs a deterministic archive: entries in name order (`capsule.wasm` before `murmur.yaml`),
/// fixed 1980-01-01 timestamps and permissions, deflate. Unchanged inputs give identical bytes.
///
/// # Panics
/// Only if the in-memory ZIP writer fails, which it cannot for entries under 4 GiB; callers
/// handling untrusted sizes use [`try_pack`].
pub fn pack(manifest: &[u8], component: Option<&[u8]>) -> Vec<u8> {
    match try_pack(manifest, component) {
        Ok(bytes) => bytes,
        Err(e) => panic!("packing an in-memory archive failed: {e}"),
    }
}

/// [`pack`], reporting a writer failure instead of panicking.
pub fn try_pack(manifest: &[u8], component: Option<&[u8]>) -> Result<Vec<u8>, String> {
    try_pack_with(manifest, component, &[])
}

/// [`try_pack`] with further entries (a model capsule's tools), each at its own path. A path
/// given twice, or one of the two root entries, is refused.
pub fn try_pack_with(manifest: &[u8], component: Option<&[u8]>, extra: &[(&str, &[u8])]) -> Result<Vec<u8>, String> {
    // A further entry at a root entry's path would be read as that entry (a component the
    // capsule does not have), whether or not the capsule has one.
    if let Some((name, _)) = extra
        .iter()
        .find(|(n, _)| [MANIFEST_ENTRY, COMPONENT_ENTRY].contains(n))
    {
        return Err(format!(
            "{name} is a root entry of the archive; nothing else may be packed there"
        ));
    }
    let mut entries: Vec<(&str, &[u8])> = vec![(MANIFEST_ENTRY, manifest)];
    if let Some(c) = component {
        entries.push((COMPONENT_ENTRY, c));
    }
    entries.extend_from_slice(extra);
    entries.sort_by(|a, b| a.0.cmp(b.0));
    if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("{} would be packed twice", w[0].0));
    }
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .last_modified_time(DateTime::default())
            .unix_permissions(0o644)
            .large_file(data.len() as u64 >= u32::MAX as u64);
        zip.start_file(name, options).map_err(|e| e.to_string())?;
        zip.write_all(data).map_err(|e| e.to_string())?;
    }
    Ok(zip.finish().map_err(|e| e.to_string())?.into_inner())
}

/// An archive's manifest, and where its component is: what a reader needs before it knows
/// whether the component's bytes are needed at all (a compiled-component cache hit needs none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub manifest: Vec<u8>,
    /// The component's entry path ([`COMPONENT_ENTRY`]), if the archive holds one; not inflated.
    pub component: Option<String>,
}

/// Opens an archive's two entries, in bounded memory: each entry is read through a cap (the
/// declared size is not trusted), so a zip bomb stops at the cap.
pub fn open(zip_bytes: &[u8]) -> Result<Archive, String> {
    let (mut zip, manifest, component_at) = index(Cursor::new(zip_bytes))?;
    let component = match component_at {
        Some(c) => Some(read_entry(&mut zip, c, COMPONENT_ENTRY, MAX_ENTRY_BYTES)?),
        None => None,
    };
    Ok(Archive { manifest, component })
}

/// [`open`] without inflating the component: the same checks of the archive and the manifest.
pub fn open_index(zip_bytes: &[u8]) -> Result<Index, String> {
    open_index_from(Cursor::new(zip_bytes))
}

/// [`open_index`] of an archive read through `reader`.
pub fn open_index_from(reader: impl Read + Seek) -> Result<Index, String> {
    let (_, manifest, component_at) = index(reader)?;
    Ok(Index {
        manifest,
        component: component_at.map(|_| COMPONENT_ENTRY.to_string()),
    })
}

/// Where the component's compressed bytes lie in the archive `reader` reads, if it holds one
/// and its directory can be read; nothing is inflated.
pub fn component_data(reader: impl Read + Seek) -> Option<Range<u64>> {
    let mut zip = ZipArchive::new(reader).ok()?;
    let at = zip.index_for_name(COMPONENT_ENTRY)?;
    let entry = zip.by_index_raw(at).ok()?;
    let start = entry.data_start();
    Some(start..start.checked_add(entry.compressed_size())?)
}

/// The component of an archive, inflated under [`MAX_ENTRY_BYTES`]; `None` when it holds none.
pub fn read_component(zip_bytes: &[u8]) -> Result<Option<Vec<u8>>, String> {
    open(zip_bytes).map(|a| a.component)
}

/// The entry at `path` (a tool's component), inflated under [`MAX_ENTRY_BYTES`]; `Err` when the
/// archive holds none, or holds it twice.
pub fn read_named(zip_bytes: &[u8], path: &str) -> Result<Vec<u8>, String> {
    let mut zip = ZipArchive::new(Cursor::new(zip_bytes)).map_err(|e| format!("not a ZIP archive: {e}"))?;
    if zip.len() > MAX_ENTRIES {
        return Err(format!(
            "the archive holds more than the {MAX_ENTRIES} entries a capsule archive may"
        ));
    }
    let mut found = None;
    for i in 0..zip.len() {
        if zip.name_for_index(i) == Some(path) && found.replace(i).is_some() {
            return Err(format!("the archive holds {path} more than once"));
        }
    }
    let Some(at) = found else {
        return Err(format!("the archive holds no {path}"));
    };
    read_entry(&mut zip, at, path, MAX_ENTRY_BYTES)
}

type Indexed<R> = (ZipArchive<R>, Vec<u8>, Option<usize>);

/// The central directory checked (entry count, no duplicate), the manifest read, and the
/// component's index.
fn index<R: Read + Seek>(reader: R) -> Result<Indexed<R>, String> {
    let mut zip = ZipArchive::new(reader).map_err(|e| format!("not a ZIP archive: {e}"))?;
    if zip.len() > MAX_ENTRIES {
        return Err(format!(
            "the archive holds {} entries, more than the {MAX_ENTRIES} a capsule archive may",
            zip.len()
        ));
    }
    let mut manifest_at = None;
    let mut component_at = None;
    for i in 0..zip.len() {
        let name = zip.name_for_index(i).unwrap_or_default();
        let slot = match name {
            MANIFEST_ENTRY => &mut manifest_at,
            COMPONENT_ENTRY => &mut component_at,
            _ => continue,
        };
        if slot.replace(i).is_some() {
            return Err(format!("the archive holds {name} more than once"));
        }
    }
    let Some(m) = manifest_at else {
        return Err(format!("the archive has no {MANIFEST_ENTRY} at its root"));
    };
    let manifest = read_entry(&mut zip, m, MANIFEST_ENTRY, MAX_MANIFEST_BYTES)?;
    Ok((zip, manifest, component_at))
}

fn read_entry<R: Read + Seek>(zip: &mut ZipArchive<R>, index: usize, name: &str, cap: u64) -> Result<Vec<u8>, String> {
    let too_big = || format!("{name} is larger than {cap} bytes uncompressed");
    let entry = zip.by_index(index).map_err(|e| format!("cannot read {name}: {e}"))?;
    if entry.is_dir() {
        return Err(format!("{name} is a directory, not a file"));
    }
    if entry.size() > cap {
        return Err(too_big());
    }
    let mut buf = Vec::with_capacity(entry.size() as usize);
    entry
        .take(cap + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if buf.len() as u64 > cap {
        return Err(too_big());
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_is_deterministic_and_round_trips() {
        let a = pack(b"name: a\nversion: 1.0.0\n", Some(b"(component)"));
        let b = pack(b"name: a\nversion: 1.0.0\n", Some(b"(component)"));
        assert_eq!(a, b, "unchanged inputs keep their bytes");
        let opened = open(&a).unwrap();
        assert_eq!(opened.manifest, b"name: a\nversion: 1.0.0\n");
        assert_eq!(opened.component.as_deref(), Some(&b"(component)"[..]));
        let names: Vec<String> = ZipArchive::new(Cursor::new(&a[..]))
            .unwrap()
            .file_names()
            .map(String::from)
            .collect();
        assert_eq!(names, ["capsule.wasm", "murmur.yaml"], "entries are sorted");
        let only = open(&pack(b"x", None)).unwrap();
        assert_eq!(only.component, None);
        // The index names the component without inflating it; its bytes are read on demand.
        let index = open_index(&a).unwrap();
        assert_eq!(index.manifest, opened.manifest);
        assert_eq!(index.component.as_deref(), Some(COMPONENT_ENTRY));
        assert_eq!(read_component(&a).unwrap(), opened.component);
        assert_eq!(open_index(&pack(b"x", None)).unwrap().component, None);
        assert_eq!(read_component(&pack(b"x", None)).unwrap(), None);
        assert_ne!(pack(b"x", None), pack(b"y", None));
    }

    #[test]
    fn tools_are_packed_at_their_paths_and_read_by_name() {
        let zip = try_pack_with(b"m", None, &[("tools/b/tool.wasm", b"B"), ("tools/a/tool.wasm", b"A")]).unwrap();
        assert_eq!(read_named(&zip, "tools/a/tool.wasm").unwrap(), b"A");
        assert_eq!(read_named(&zip, "tools/b/tool.wasm").unwrap(), b"B");
        assert!(
            read_named(&zip, "tools/c/tool.wasm")
                .unwrap_err()
                .contains("holds no tools/c/tool.wasm")
        );
        assert_eq!(
            open(&zip).unwrap().component,
            None,
            "a tool is not the capsule's component"
        );
        assert_eq!(
            zip,
            try_pack_with(b"m", None, &[("tools/a/tool.wasm", b"A"), ("tools/b/tool.wasm", b"B")]).unwrap(),
            "entries are sorted, so the order given does not matter"
        );
        assert!(
            try_pack_with(b"m", None, &[("t.wasm", b"1"), ("t.wasm", b"2")])
                .unwrap_err()
                .contains("packed twice")
        );
        // A root entry's path is refused even where the capsule has no such entry.
        for (component, root) in [
            (None, MANIFEST_ENTRY),
            (Some(&b"c"[..]), COMPONENT_ENTRY),
            (None, COMPONENT_ENTRY),
        ] {
            let e = try_pack_with(b"m", component, &[(root, b"x")]).unwrap_err();
            assert!(e.contains("is a root entry of the archive"), "{root}: {e}");
        }
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        for (name, data) in entries {
            zip.start_file(*name, SimpleFileOptions::default()).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    #[test]
    fn refusals() {
        let big_manifest = vec![b'#'; MAX_MANIFEST_BYTES as usize + 1];
        let bomb = vec![0u8; MAX_ENTRY_BYTES as usize + 1];
        let table: Vec<(Vec<u8>, &str)> = vec![
            (b"not a zip".to_vec(), "not a ZIP archive: "),
            (Vec::new(), "not a ZIP archive: "),
            (
                zip_of(&[("capsule.wasm", b"x")]),
                "the archive has no murmur.yaml at its root",
            ),
            (
                zip_of(&[("dir/murmur.yaml", b"x")]),
                "the archive has no murmur.yaml at its root",
            ),
            (
                zip_of(&[("murmur.yaml", &big_manifest)]),
                "murmur.yaml is larger than 1048576 bytes uncompressed",
            ),
            // Highly compressible: 64 MiB of zeros deflates to a few KiB, and is still refused.
            (
                pack(b"x", Some(&bomb)),
                "capsule.wasm is larger than 67108864 bytes uncompressed",
            ),
        ];
        for (bytes, want) in table {
            let got = open(&bytes).unwrap_err();
            assert!(got.starts_with(want), "{got:?} does not start with {want:?}");
            // The index refuses the same archives, but for a component it never inflates.
            match open_index(&bytes) {
                Err(got) => assert!(got.starts_with(want), "{got:?} does not start with {want:?}"),
                Ok(index) => assert!(want.starts_with(COMPONENT_ENTRY), "{want}: {index:?}"),
            }
        }
        let ok = open(&zip_of(&[("README", b"r"), ("murmur.yaml", b"m")])).unwrap();
        assert_eq!(
            ok,
            Archive {
                manifest: b"m".to_vec(),
                component: None
            }
        );
    }

    #[test]
    fn declared_sizes_are_not_trusted() {
        // Rewrite the sizes recorded for the entry to claim 1 byte; reading still stops at the cap.
        let bomb = vec![0u8; MAX_MANIFEST_BYTES as usize + 10];
        let mut bytes = zip_of(&[("murmur.yaml", &bomb)]);
        let len = bomb.len() as u32;
        let le = len.to_le_bytes();
        let mut patched = 0;
        for i in 0..bytes.len().saturating_sub(4) {
            if bytes[i..i + 4] == le {
                bytes[i..i + 4].copy_from_slice(&1u32.to_le_bytes());
                patched += 1;
            }
        }
        assert!(patched >= 1);
        assert!(open(&bytes).is_err());
    }
}
