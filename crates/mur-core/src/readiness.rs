//! The readiness line (docs/reference/formation.md#readiness-line), both ends: a member prints one
//! compact JSON line on stdout with `--json`, keys in ascending byte order, once its door is up and
//! its running record is written ([`Line`]); the launcher reads a peer's first stdout line as that
//! report ([`parse`], docs/reference/formation.md#how-the-launcher-waits). Pure: no process or HTTP
//! here.

use serde_json::{Map, Value};

use crate::secret::Secret;

/// What a member's readiness line reports, as the member writes it.
#[derive(Clone, Copy)]
pub struct Line<'a> {
    /// The door authenticates (`auth: "bearer"`).
    pub auth: bool,
    pub formation_id: Option<&'a str>,
    pub name: &'a str,
    pub pid: u32,
    pub records_dir: &'a str,
    pub session_id: &'a str,
    /// The operator token, only with `--readiness-tokens` on an authenticating door: this line
    /// is the one place it is written for the launcher (revealed by the caller).
    pub operator_token: Option<&'a str>,
    /// `localhost:<port>`, no scheme.
    pub url: &'a str,
    pub version: &'a str,
    pub workdir: &'a str,
}

impl std::fmt::Debug for Line<'_> {
    // The line may carry a token: Debug never shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("readiness::Line")
            .field("session_id", &self.session_id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Line<'_> {
    pub fn line(&self) -> String {
        // serde_json's map is ordered by key, which is the order docs/reference/cli.md#conventions
        // asks for.
        let mut m = Map::new();
        if self.auth {
            m.insert("auth".into(), "bearer".into());
        }
        if let Some(f) = self.formation_id {
            m.insert("formation_id".into(), f.into());
        }
        m.insert("name".into(), self.name.into());
        m.insert("pid".into(), self.pid.into());
        m.insert("records_dir".into(), self.records_dir.into());
        m.insert("session_id".into(), self.session_id.into());
        if self.auth
            && let Some(t) = self.operator_token
        {
            let mut tokens = Map::new();
            tokens.insert("operator".into(), t.into());
            m.insert("tokens".into(), Value::Object(tokens));
        }
        m.insert("url".into(), self.url.into());
        m.insert("version".into(), self.version.into());
        m.insert("workdir".into(), self.workdir.into());
        Value::Object(m).to_string()
    }
}

/// What a peer's readiness line reported, as the launcher read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Reported {
    pub session_id: String,
    /// `http://localhost:P`.
    pub url: String,
    pub pid: Option<u32>,
    pub workdir: Option<String>,
    /// The operator door token (with `--readiness-tokens` on an authenticating door).
    pub operator_token: Option<Secret>,
}

impl std::fmt::Debug for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("readiness::Reported")
            .field("session_id", &self.session_id)
            .field("url", &self.url)
            .field("operator_token", &self.operator_token)
            .finish()
    }
}

/// Parses the first stdout line of a peer launched for `formation`. The error is the E-RUN-045
/// reason text.
pub fn parse(line: &str, formation: &str) -> Result<Reported, String> {
    let v: Value = serde_json::from_str(line.trim_end_matches(['\r', '\n']))
        .map_err(|e| format!("its first line is not a readiness line: it does not parse as JSON ({e})"))?;
    let Some(obj) = v.as_object() else {
        return Err("its first line is not a readiness line: it does not parse as JSON (not an object)".into());
    };
    match obj.get("formation_id").and_then(Value::as_str) {
        Some(f) if f == formation => {}
        Some(f) => return Err(format!("it reported formation {f} instead of {formation}")),
        None => return Err(format!("it reported no formation instead of {formation}")),
    }
    let session_id = obj.get("session_id").and_then(Value::as_str).unwrap_or_default();
    if session_id.is_empty() {
        return Err("its first line is not a readiness line: it names no session_id".into());
    }
    let url = obj.get("url").and_then(Value::as_str).unwrap_or_default();
    if url.is_empty() {
        return Err("it reported no door".into());
    }
    Ok(Reported {
        session_id: session_id.to_string(),
        url: format!("http://{url}"),
        pid: obj
            .get("pid")
            .and_then(Value::as_u64)
            .and_then(|p| u32::try_from(p).ok()),
        workdir: obj.get("workdir").and_then(Value::as_str).map(str::to_owned),
        operator_token: obj
            .get("tokens")
            .and_then(|t| t.get("operator"))
            .and_then(Value::as_str)
            .map(|t| Secret::new(t.to_owned())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";

    fn base() -> Line<'static> {
        Line {
            auth: false,
            formation_id: None,
            name: "local/echo",
            pid: 42,
            records_dir: "/h/.murmur/records/w/ses_1",
            session_id: "ses_1",
            operator_token: None,
            url: "localhost:4000",
            version: "0.1.0",
            workdir: "/w",
        }
    }

    #[test]
    fn public_door_alone() {
        assert_eq!(
            base().line(),
            r#"{"name":"local/echo","pid":42,"records_dir":"/h/.murmur/records/w/ses_1","session_id":"ses_1","url":"localhost:4000","version":"0.1.0","workdir":"/w"}"#
        );
        // A token is never shown for a public door.
        assert!(
            !Line {
                operator_token: Some("mdt1.x.y"),
                ..base()
            }
            .line()
            .contains("tokens")
        );
    }

    #[test]
    fn authenticating_member_with_tokens() {
        let r = Line {
            auth: true,
            formation_id: Some("frm_1"),
            operator_token: Some("mdt1.x.y"),
            ..base()
        };
        assert_eq!(
            r.line(),
            r#"{"auth":"bearer","formation_id":"frm_1","name":"local/echo","pid":42,"records_dir":"/h/.murmur/records/w/ses_1","session_id":"ses_1","tokens":{"operator":"mdt1.x.y"},"url":"localhost:4000","version":"0.1.0","workdir":"/w"}"#
        );
        assert!(!format!("{r:?}").contains("mdt1"));
    }

    #[test]
    fn readiness_line_reasons_in_spec_order() {
        let table: &[(&str, &str)] = &[
            (
                "hello",
                "its first line is not a readiness line: it does not parse as JSON (expected value at line 1 column 1)",
            ),
            (
                r#"{"session_id":"ses_1","url":"localhost:1"}"#,
                "it reported no formation instead of frm_0199c4e2f1b7712a9d3e4f5061728394",
            ),
            (
                r#"{"formation_id":"frm_x","session_id":"","url":""}"#,
                "it reported formation frm_x instead of frm_0199c4e2f1b7712a9d3e4f5061728394",
            ),
            (
                &format!(r#"{{"formation_id":"{F}","session_id":"","url":"localhost:1"}}"#),
                "its first line is not a readiness line: it names no session_id",
            ),
            (
                &format!(r#"{{"formation_id":"{F}","session_id":"ses_1","url":""}}"#),
                "it reported no door",
            ),
        ];
        for (line, want) in table {
            assert_eq!(parse(line, F).unwrap_err(), *want, "{line}");
        }
        let ok = parse(
            &format!(r#"{{"formation_id":"{F}","pid":7,"session_id":"ses_1","tokens":{{"operator":"mdt1.a.b"}},"url":"localhost:9"}}"#),
            F,
        )
        .unwrap();
        assert_eq!(ok.url, "http://localhost:9");
        assert_eq!(ok.operator_token.as_ref().map(Secret::reveal), Some("mdt1.a.b"));
        assert!(!format!("{ok:?}").contains("mdt1"), "Debug never shows a token");
    }

    #[test]
    fn what_a_member_writes_the_launcher_reads() {
        let cases = [
            Line {
                formation_id: Some(F),
                ..base()
            },
            Line {
                formation_id: Some(F),
                auth: true,
                operator_token: Some("mdt1.x.y"),
                ..base()
            },
            Line {
                formation_id: Some(F),
                auth: true,
                operator_token: None,
                ..base()
            },
        ];
        for line in cases {
            let read = parse(&format!("{}\n", line.line()), F).expect("a member's own line parses");
            assert_eq!(read.session_id, line.session_id);
            assert_eq!(read.url, format!("http://{}", line.url));
            assert_eq!(read.pid, Some(line.pid));
            assert_eq!(read.workdir.as_deref(), Some(line.workdir));
            let token = if line.auth { line.operator_token } else { None };
            assert_eq!(read.operator_token.as_ref().map(Secret::reveal), token);
        }
        // A member launched outside the formation reports none, which the launcher refuses.
        assert!(parse(&base().line(), F).is_err());
    }
}
