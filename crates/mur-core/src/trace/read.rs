//! Reads `trace.jsonl` back (docs/reference/formation.md#trace-records). Readers ignore unknown
//! record types and must not depend on key order (docs/reference/cli.md#conventions); a line that
//! does not parse (e.g. one cut short by a crash) is skipped rather than failing the whole trace.

use std::path::Path;

use serde_json::Value;

/// Every record of the trace at `path`, in file order: the lines that parse as JSON objects.
pub fn read_records(path: &Path) -> std::io::Result<Vec<Value>> {
    Ok(parse_records(&std::fs::read(path)?))
}

/// The records in `bytes`, one JSON object per `\n`-terminated line; other lines are skipped.
pub fn parse_records(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(Value::is_object)
        .collect()
}

/// The most bytes read of a trace to find its first record: `session_start` names ids, the
/// capsule and a member's callees, far below this even in a formation of hundreds.
pub const FIRST_RECORD_BYTES: usize = 256 * 1024;

/// The `capsule_name` of the `session_start` the trace starting with `head` opens with; `None`
/// when its first line is not a whole `session_start` naming one.
pub fn session_capsule(head: &[u8]) -> Option<String> {
    let line = &head[..head.iter().position(|&b| b == b'\n')?];
    let v: Value = serde_json::from_slice(line).ok()?;
    if v.get("event_type")?.as_str()? != "session_start" {
        return None;
    }
    Some(v.get("capsule_name")?.as_str()?.to_string())
}

/// [`session_capsule`] of the trace at `path`, reading at most [`FIRST_RECORD_BYTES`].
pub fn read_session_capsule(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(FIRST_RECORD_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    session_capsule(&head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capsule_is_read_from_a_whole_first_session_start() {
        // (head of a trace, capsule)
        let table: &[(&[u8], Option<&str>)] = &[
            (
                b"{\"event_type\":\"session_start\",\"capsule_name\":\"local/a\"}\n{}\n",
                Some("local/a"),
            ),
            (b"{\"event_type\":\"session_start\",\"capsule_name\":\"local/a\"}", None),
            (b"{\"event_type\":\"task_start\",\"capsule_name\":\"local/a\"}\n", None),
            (b"{\"event_type\":\"session_start\"}\n", None),
            (b"{\"event_type\":\"session_start\",\"capsule_name\":7}\n", None),
            (b"not json\n", None),
            (b"", None),
        ];
        for (head, want) in table {
            assert_eq!(
                session_capsule(head).as_deref(),
                *want,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn skips_what_does_not_parse() {
        let text = b"{\"event_type\":\"session_start\"}\n\nnot json\n[1]\n\xff\xfe\n{\"event_type\":\"x\",\"a\":1}\r\n{\"event_type\":\"session_e";
        let recs = parse_records(text);
        let types: Vec<&str> = recs.iter().filter_map(|r| r["event_type"].as_str()).collect();
        assert_eq!(types, ["session_start", "x"]);
    }

    #[test]
    fn missing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_records(&dir.path().join("none.jsonl")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
