//! Resolution's read of an installed archive: the whole zip hashed, but its component's
//! compressed bytes never kept.
//!
//! Every member resolves its capsule, and resolving needs the archive's sha256 and its manifest,
//! not its component (a compiled-cache hit needs none, a miss reads it again:
//! [`super::Resolved::read_component`]). Reading a language runtime's archive (6 MB for Python)
//! into one buffer cost each member a third more than hashing it, in page faults on the fresh
//! buffer and its unmapping. Here the file is hashed through a small buffer, and only the bytes
//! outside the component's compressed data (the directory, the manifest) are kept.
//!
//! What the index reads is exactly what a whole read would give: every kept byte went through the
//! hash the caller compares with the sidecar, and a read that reaches the bytes not kept fails,
//! after which the file is read whole instead. Where the component lies is taken from a first
//! look at the directory; if the file changed between that look and the hashed pass, the
//! worst outcome is that fallback.

use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{MAX_ZIP_BYTES, archive, read_zip, too_large};
use crate::digest::sha256_hex;

/// The sha256 of the whole file, and its index (or why it has none).
pub(super) struct Hashed {
    pub sha256: String,
    pub index: Result<archive::Index, String>,
    /// How many of the file's bytes were held in memory.
    pub kept: usize,
}

/// Reads the archive at `path` for resolution, under [`MAX_ZIP_BYTES`].
pub(super) fn hash_and_index(path: &Path) -> std::io::Result<Hashed> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > MAX_ZIP_BYTES {
        return Err(too_large());
    }
    // The ZIP reader looks for the directory's end backwards from the end of the file: the
    // file's tail is always kept, even where the component's bytes reach into it.
    let skip = archive::component_data(&mut file)
        .map(|c| c.start..c.end.min(len.saturating_sub(TAIL_KEPT)).max(c.start))
        .unwrap_or(0..0);
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    let mut at = 0u64;
    loop {
        let n = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let end = at + n as u64;
        if end > MAX_ZIP_BYTES {
            return Err(too_large());
        }
        hasher.update(&chunk[..n]);
        for part in outside(at..end, &skip) {
            kept.extend_from_slice(&chunk[(part.start - at) as usize..(part.end - at) as usize]);
        }
        at = end;
    }
    let sha256 = format!("{:x}", hasher.finalize());
    let mut sparse = Sparse {
        kept,
        skip: skip.start.min(at)..skip.end.min(at),
        len: at,
        pos: 0,
        reached_skipped: false,
    };
    let index = archive::open_index_from(&mut sparse);
    if !sparse.reached_skipped {
        let kept = sparse.kept.len();
        return Ok(Hashed { sha256, index, kept });
    }
    // An archive whose other entries reach into the component's bytes: read it whole.
    let bytes = read_zip(path)?;
    Ok(Hashed {
        sha256: sha256_hex(&bytes),
        index: archive::open_index(&bytes),
        kept: bytes.len(),
    })
}

/// The tail of the file always kept: the longest distance of the directory's end record from
/// the end of the file (a 65 535-byte comment after its 22 bytes).
const TAIL_KEPT: u64 = 22 + 65_535;

/// Read size of the hashed pass: large enough for few system calls, small enough to stay in
/// cache between the copy and the hash.
const CHUNK: usize = 256 << 10;

/// The parts of `range` outside `skip`, in order.
fn outside(range: Range<u64>, skip: &Range<u64>) -> impl Iterator<Item = Range<u64>> {
    let before = range.start..range.end.min(skip.start);
    let after = range.start.max(skip.end)..range.end;
    [before, after].into_iter().filter(|r| r.start < r.end)
}

/// The file as the hashed pass saw it, less the skipped range: reads inside it fail.
struct Sparse {
    /// The bytes before `skip`, then those after it.
    kept: Vec<u8>,
    skip: Range<u64>,
    len: u64,
    pos: u64,
    reached_skipped: bool,
}

impl Read for Sparse {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        if self.skip.contains(&self.pos) {
            self.reached_skipped = true;
            return Err(std::io::Error::other("the component's bytes were not kept"));
        }
        // Up to the skipped range or the end, whichever comes first.
        let stop = if self.pos < self.skip.start {
            self.skip.start
        } else {
            self.len
        };
        let n = (buf.len() as u64).min(stop - self.pos) as usize;
        let from = if self.pos < self.skip.start {
            self.pos
        } else {
            self.pos - (self.skip.end - self.skip.start)
        } as usize;
        buf[..n].copy_from_slice(&self.kept[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Sparse {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let Some(target) = target else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "seek before the start",
            ));
        };
        self.pos = target;
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.join("a-1.0.0.mur.zip");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn the_hash_and_index_are_those_of_reading_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        // Incompressible, so that its archive spans many chunks.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let big: Vec<u8> = (0..3_000_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let manifest = b"name: a\nversion: 1.0.0\n".as_slice();
        // A component larger than many chunks, a small one, none: the same sha256 and the same
        // index as the whole read, and the component's bytes (but the file's tail) not kept.
        let cases: [(&[u8], Option<&[u8]>); 3] = [
            (manifest, Some(&big)),
            (manifest, Some(b"(component)")),
            (manifest, None),
        ];
        assert!(archive::pack(manifest, Some(&big)).len() > 8 * CHUNK);
        for (m, c) in cases {
            let zip = archive::pack(m, c);
            let path = write(dir.path(), &zip);
            let got = hash_and_index(&path).unwrap();
            assert_eq!(got.sha256, sha256_hex(&zip));
            assert_eq!(got.index, archive::open_index(&zip));
            let len = zip.len() as u64;
            let left_out = archive::component_data(std::io::Cursor::new(&zip))
                .map_or(0, |c| c.end.min(len.saturating_sub(TAIL_KEPT)).saturating_sub(c.start));
            assert_eq!(
                got.kept as u64,
                len - left_out,
                "only the component's bytes are left out"
            );
            if c.is_some_and(|c| c.len() > 1_000_000) {
                assert!(got.kept < 100_000, "{} bytes kept", got.kept);
            }
        }
    }

    #[test]
    fn a_damaged_archive_gives_the_same_refusal_as_a_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let zip = archive::pack(b"name: a\nversion: 1.0.0\n", Some(b"(component)"));
        for damaged in [b"not a zip".to_vec(), zip[..zip.len() / 2].to_vec(), Vec::new()] {
            let path = write(dir.path(), &damaged);
            let got = hash_and_index(&path).unwrap();
            assert_eq!(got.sha256, sha256_hex(&damaged));
            assert_eq!(got.index, archive::open_index(&damaged));
            assert!(got.index.is_err());
        }
    }

    #[test]
    fn a_read_into_the_bytes_not_kept_fails_and_says_so() {
        let mut sparse = Sparse {
            kept: b"abcdef".to_vec(),
            skip: 3..7,
            len: 10,
            pos: 0,
            reached_skipped: false,
        };
        let mut buf = [0u8; 8];
        assert_eq!(
            sparse.read(&mut buf).unwrap(),
            3,
            "a read stops where the skipped bytes start"
        );
        assert_eq!(&buf[..3], b"abc");
        assert!(sparse.read(&mut buf).is_err());
        assert!(sparse.reached_skipped);
        sparse.seek(SeekFrom::End(-3)).unwrap();
        assert_eq!(sparse.read(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"def");
        assert_eq!(sparse.read(&mut buf).unwrap(), 0);
        assert!(sparse.seek(SeekFrom::Current(-11)).is_err());
    }

    #[test]
    fn the_parts_outside_a_skipped_range() {
        // (range, skipped, the parts outside), ranges as (start, end).
        type Case = ((u64, u64), (u64, u64), &'static [(u64, u64)]);
        let table: [Case; 6] = [
            ((0, 10), (20, 30), &[(0, 10)]),
            ((0, 10), (5, 7), &[(0, 5), (7, 10)]),
            ((0, 10), (0, 10), &[]),
            ((10, 20), (5, 15), &[(15, 20)]),
            ((10, 20), (15, 25), &[(10, 15)]),
            ((10, 20), (0, 0), &[(10, 20)]),
        ];
        for ((a, b), (c, d), want) in table {
            let got: Vec<(u64, u64)> = outside(a..b, &(c..d)).map(|r| (r.start, r.end)).collect();
            assert_eq!(got, want, "{a}..{b} less {c}..{d}");
        }
    }
}
