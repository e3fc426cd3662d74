//! The readiness line (runtime.md §6.3): one compact JSON line on stdout with `--json`, keys in
//! ascending byte order, printed once the door is up and the running record is written.

use serde_json::{Map, Value};

/// What the readiness line reports.
#[derive(Clone, Copy)]
pub struct Readiness<'a> {
    /// The door authenticates (`auth: "bearer"`).
    pub auth: bool,
    pub formation_id: Option<&'a str>,
    pub name: &'a str,
    pub pid: u32,
    pub records_dir: &'a str,
    pub session_id: &'a str,
    /// The operator token, only with `--readiness-tokens` on an authenticating door.
    pub operator_token: Option<&'a str>,
    /// `localhost:<port>`, no scheme.
    pub url: &'a str,
    pub version: &'a str,
    pub workdir: &'a str,
}

impl std::fmt::Debug for Readiness<'_> {
    // The line may carry a token: Debug never shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("session_id", &self.session_id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Readiness<'_> {
    pub fn line(&self) -> String {
        // serde_json's map is ordered by key, which is the order §1.2 asks for.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Readiness<'static> {
        Readiness {
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
            !Readiness {
                operator_token: Some("mdt1.x.y"),
                ..base()
            }
            .line()
            .contains("tokens")
        );
    }

    #[test]
    fn authenticating_member_with_tokens() {
        let r = Readiness {
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
}
