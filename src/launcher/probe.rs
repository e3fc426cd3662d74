//! A peer's readiness: its readiness line (read by [`crate::readiness::parse`]), then its door
//! answering as that session (docs/reference/formation.md#how-the-launcher-waits).

use std::time::Duration;

use serde_json::Value;

use crate::readiness::Reported;
use crate::wire::jsonrpc::Method;

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

/// What a probe that got a card found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// The door answers as the reported session; its card is signed by this key (base64url),
    /// when it is signed and verifies under the key it names (docs/reference/door.md#agent-card).
    Ready(Option<String>),
    /// The door answers as another session.
    Other,
}

/// The key a card is signed with, when the card names one and verifies under it. Whom it belongs
/// to is the probe's to know: the card came from the vouched process, over its own socket.
pub fn card_key(card: &Value) -> Option<String> {
    let key = crate::card_sig::named_key(card)?;
    crate::card_sig::verify(card, &key).ok()?;
    Some(key.to_b64())
}

/// One probe of a door: whether it answers as `session_id` (and with which card key), `Err`
/// with what went wrong otherwise.
/// The door is dialled at 127.0.0.1, never at a resolved `localhost` (see
/// `channel::door_socket`): the operator token must reach exactly the socket the door bound.
pub async fn probe_once(
    client: &crate::outbound::Client,
    ready: &Reported,
    read_timeout: Duration,
) -> Result<Probed, String> {
    if client.address().is_none() {
        return Err(format!(
            "it reported the door address {}, which is not http://localhost:<port>",
            crate::diag::shown(&ready.url)
        ));
    };
    let card: Value = match &ready.operator_token {
        Some(token) => {
            let auth = crate::outbound::credential(&format!("Bearer {}", token.reveal()))
                .ok_or("the operator token it reported cannot be a header")?;
            let mut resp = client
                .post(&format!("{}/", ready.url))
                .timeout(read_timeout)
                .insert_header(("authorization", auth))
                .insert_header(("a2a-version", "1.0"))
                .insert_header(("content-type", "application/json"))
                .send_body(
                    serde_json::json!({"id": 1, "jsonrpc": "2.0", "method": Method::GetExtendedAgentCard.name(), "params": {}})
                        .to_string(),
                )
                .await
                .map_err(|e| e.to_string())?;
            let body: Value = resp.json().limit(1 << 20).await.map_err(|e| e.to_string())?;
            body.get("result")
                .cloned()
                .ok_or_else(|| format!("the door answered {body}"))?
        }
        None => {
            let mut resp = client
                .get(&format!("{}/.well-known/agent-card.json", ready.url))
                .timeout(read_timeout)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            resp.json().limit(1 << 20).await.map_err(|e| e.to_string())?
        }
    };
    if card_session_id(&card) != Some(ready.session_id.as_str()) {
        return Ok(Probed::Other);
    }
    Ok(Probed::Ready(card_key(&card)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_session_is_found_by_uri_suffix() {
        let card: Value = serde_json::json!({"capabilities":{"extensions":[
            {"uri":"https://x/#murmur-door-v1","params":{}},
            {"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1","params":{"sessionId":"ses_9"}}]}});
        assert_eq!(card_session_id(&card), Some("ses_9"));
        assert_eq!(card_session_id(&serde_json::json!({})), None);
    }
}
