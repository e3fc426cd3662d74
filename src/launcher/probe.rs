//! A peer's readiness: its readiness line, then its door answering as that session (§9.5).

use std::time::Duration;

use serde_json::Value;

use crate::channel;

/// What a peer's readiness line reported.
#[derive(Clone, PartialEq, Eq)]
pub struct Readiness {
    pub session_id: String,
    /// `http://localhost:P`.
    pub url: String,
    pub pid: Option<u32>,
    pub workdir: Option<String>,
    /// The operator door token (with `--readiness-tokens` on an authenticating door).
    pub operator_token: Option<String>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("session_id", &self.session_id)
            .field("url", &self.url)
            .field("operator_token", &self.operator_token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Parses the first stdout line of a peer launched for `formation`. The error is the E-RUN-045
/// reason text.
pub fn parse_readiness(line: &str, formation: &str) -> Result<Readiness, String> {
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
    Ok(Readiness {
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
            .map(str::to_owned),
    })
}

/// The capsule extension's `sessionId` in an agent card, matched by URI suffix.
pub fn card_session_id(card: &Value) -> Option<&str> {
    card.get("capabilities")?
        .get("extensions")?
        .as_array()?
        .iter()
        .find(|e| {
            e.get("uri")
                .and_then(Value::as_str)
                .is_some_and(|u| u.ends_with("#murmur-capsule-v1"))
        })?
        .get("params")?
        .get("sessionId")?
        .as_str()
}

/// One probe of a door: `Ok(true)` when it answers as `session_id`, `Ok(false)` when it answers
/// as someone else, `Err` with what went wrong otherwise.
/// The door is dialled at 127.0.0.1, never at a resolved `localhost` (see
/// [`channel::door_socket`]): the operator token must reach exactly the socket the door bound.
pub async fn probe_once(client: &awc::Client, ready: &Readiness, read_timeout: Duration) -> Result<bool, String> {
    let Some(addr) = channel::door_socket(&ready.url) else {
        return Err(format!(
            "it reported the door address {}, which is not http://localhost:<port>",
            crate::diag::shown(&ready.url)
        ));
    };
    let card: Value = match &ready.operator_token {
        Some(token) => {
            let mut resp = client
                .post(format!("{}/", ready.url))
                .address(addr)
                .timeout(read_timeout)
                .insert_header(("authorization", format!("Bearer {token}")))
                .insert_header(("a2a-version", "1.0"))
                .insert_header(("content-type", "application/json"))
                .send_body(r#"{"id":1,"jsonrpc":"2.0","method":"GetExtendedAgentCard","params":{}}"#)
                .await
                .map_err(|e| e.to_string())?;
            let body: Value = resp.json().limit(1 << 20).await.map_err(|e| e.to_string())?;
            body.get("result")
                .cloned()
                .ok_or_else(|| format!("the door answered {body}"))?
        }
        None => {
            let mut resp = client
                .get(format!("{}/.well-known/agent-card.json", ready.url))
                .address(addr)
                .timeout(read_timeout)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            resp.json().limit(1 << 20).await.map_err(|e| e.to_string())?
        }
    };
    Ok(card_session_id(&card) == Some(ready.session_id.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";

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
            assert_eq!(parse_readiness(line, F).unwrap_err(), *want, "{line}");
        }
        let ok = parse_readiness(
            &format!(r#"{{"formation_id":"{F}","pid":7,"session_id":"ses_1","tokens":{{"operator":"mdt1.a.b"}},"url":"localhost:9"}}"#),
            F,
        )
        .unwrap();
        assert_eq!(ok.url, "http://localhost:9");
        assert_eq!(ok.operator_token.as_deref(), Some("mdt1.a.b"));
        assert!(!format!("{ok:?}").contains("mdt1"), "Debug never shows a token");
    }

    #[test]
    fn card_session_is_found_by_uri_suffix() {
        let card: Value = serde_json::json!({"capabilities":{"extensions":[
            {"uri":"https://x/#murmur-door-v1","params":{}},
            {"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1","params":{"sessionId":"ses_9"}}]}});
        assert_eq!(card_session_id(&card), Some("ses_9"));
        assert_eq!(card_session_id(&serde_json::json!({})), None);
    }
}
