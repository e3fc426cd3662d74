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

#[cfg(test)]
mod tests {
    use super::*;

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
