//! Fuzzes the reading of a `.mur.zip` capsule archive (`store::archive`;
//! docs/reference/capsules.md#writing-building-and-installing-one): whoever made the archive
//! controls every byte, its directory and its declared sizes included.
//!
//! Input: the bytes are read as an archive as they are; they are also cut at `0xFF` bytes into a
//! manifest, a component (when the first byte is odd), a further entry's path (not a
//! directory's) and its bytes, which are packed and read back. Properties:
//! - no panic, memory bounded by the caps rather than the declared sizes;
//! - what opens holds a manifest within `MAX_MANIFEST_BYTES` and a component within
//!   `MAX_ENTRY_BYTES`;
//! - the index agrees with the full read: the same manifest, a component exactly when the read
//!   has one, the same refusal, and a success where only the component's reading fails;
//!   `read_component` and `read_named` read the same bytes as `open`;
//! - where the component's compressed bytes lie is a range, inside the archive when packed here;
//! - packing is deterministic and what is packed reads back: manifest, component, the further
//!   entry by its path; a further entry at a root entry's path is refused.

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use mur_core::store::archive::{self, COMPONENT_ENTRY, MANIFEST_ENTRY, MAX_ENTRY_BYTES, MAX_MANIFEST_BYTES};

fuzz_target!(|data: &[u8]| {
    read_as_is(data);

    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(4, |&b| b == 0xFF);
    let manifest = parts.next().unwrap_or_default();
    let component = parts.next().filter(|_| mode & 1 == 1);
    let extra = match (parts.next().map(std::str::from_utf8), parts.next()) {
        // A path naming a directory holds no file to read back.
        (Some(Ok(path)), Some(bytes)) if !path.is_empty() && !path.ends_with('/') => Some((path, bytes)),
        _ => None,
    };
    packed(manifest, component, extra);
});

fn read_as_is(bytes: &[u8]) {
    let opened = archive::open(bytes);
    let index = archive::open_index(bytes);
    match (&opened, &index) {
        (Ok(a), Ok(i)) => {
            assert!(a.manifest.len() as u64 <= MAX_MANIFEST_BYTES);
            assert!(a.component.as_ref().is_none_or(|c| c.len() as u64 <= MAX_ENTRY_BYTES));
            assert_eq!(i.manifest, a.manifest);
            assert_eq!(i.component.as_deref(), a.component.as_ref().map(|_| COMPONENT_ENTRY));
            assert_eq!(archive::read_named(bytes, MANIFEST_ENTRY).as_ref(), Ok(&a.manifest));
            if let Some(c) = &a.component {
                assert_eq!(archive::read_named(bytes, COMPONENT_ENTRY).as_ref(), Ok(c));
            }
        }
        (Err(e), Ok(i)) => {
            assert!(i.component.is_some(), "only the component's reading may fail: {e}");
            assert!(
                e.starts_with(&format!("{COMPONENT_ENTRY} "))
                    || e.starts_with(&format!("cannot read {COMPONENT_ENTRY}:")),
                "{e}"
            );
        }
        (Ok(_), Err(e)) => panic!("the index refused what opens: {e}"),
        (Err(e), Err(f)) => assert_eq!(e, f),
    }
    assert_eq!(archive::read_component(bytes), opened.map(|a| a.component));
    // A lying directory may place the component past the archive's end (resolution clamps the
    // range, store/streamed.rs); a range it is all the same.
    if let Some(at) = archive::component_data(Cursor::new(bytes)) {
        assert!(at.start <= at.end, "{at:?}");
    }
}

fn packed(manifest: &[u8], component: Option<&[u8]>, extra: Option<(&str, &[u8])>) {
    let extras: Vec<(&str, &[u8])> = extra.into_iter().collect();
    let zip = archive::try_pack_with(manifest, component, &extras);
    assert_eq!(
        archive::try_pack_with(manifest, component, &extras),
        zip,
        "deterministic"
    );
    let zip = match zip {
        Ok(zip) => zip,
        Err(e) => {
            let (path, _) = extra.expect("only a further entry can be refused");
            assert!(path == MANIFEST_ENTRY || path == COMPONENT_ENTRY, "{path}: {e}");
            return;
        }
    };
    if let Some((path, _)) = extra {
        assert!(path != MANIFEST_ENTRY && path != COMPONENT_ENTRY, "packed {path}");
    }
    let opened = archive::open(&zip).expect("a packed archive opens");
    assert_eq!(opened.manifest, manifest);
    assert_eq!(opened.component.as_deref(), component);
    let index = archive::open_index(&zip).expect("a packed archive is indexed");
    assert_eq!(index.manifest, manifest);
    assert_eq!(index.component.is_some(), component.is_some());
    if let Some((path, bytes)) = extra {
        assert_eq!(archive::read_named(&zip, path).as_deref(), Ok(bytes));
    }
    let at = archive::component_data(Cursor::new(&zip[..]));
    assert_eq!(at.is_some(), component.is_some());
    if let Some(at) = at {
        assert!(
            at.start <= at.end && at.end <= zip.len() as u64,
            "{at:?} of {}",
            zip.len()
        );
    }
    read_as_is(&zip);
}
