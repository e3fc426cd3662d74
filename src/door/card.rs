//! The agent card (runtime.md §7.8): the public card at `/.well-known/agent-card.json` and the
//! extended card GetExtendedAgentCard returns on an authenticating door.

use serde_json::{Value, json};

pub const DOOR_EXTENSION: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
pub const CAPSULE_EXTENSION: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";

/// What the card says about this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardFacts {
    pub name: String,
    pub version: String,
    pub description: String,
    pub session_id: String,
    /// `localhost:<port>`.
    pub url: String,
    pub authenticating: bool,
    pub peer_tasks: bool,
    /// Methods this door serves (answers other than with an error).
    pub methods: Vec<&'static str>,
    pub tools: Vec<String>,
    pub network: Vec<String>,
}

impl CardFacts {
    /// The card; `extended` adds the capsule extension, which a public door always shows and an
    /// authenticating door shows only through GetExtendedAgentCard.
    pub fn card(&self, extended: bool) -> Value {
        let mut extensions = vec![json!({
            "params": {"methods": self.methods, "peerTasks": self.peer_tasks},
            "uri": DOOR_EXTENSION,
        })];
        if extended || !self.authenticating {
            extensions.push(json!({
                "params": {
                    "network": self.network,
                    "planes": [],
                    "sessionId": self.session_id,
                    "shell": false,
                    "tools": self.tools,
                },
                "uri": CAPSULE_EXTENSION,
            }));
        }
        json!({
            "capabilities": {
                "extendedAgentCard": self.authenticating,
                "extensions": extensions,
                "streaming": true,
            },
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "description": self.description,
            "name": self.name,
            "skills": [],
            "supportedInterfaces": [{
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
                "url": format!("http://{}", self.url),
            }],
            "version": self.version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(authenticating: bool) -> CardFacts {
        CardFacts {
            name: "local/coder".into(),
            version: "1.2.0".into(),
            description: "writes code".into(),
            session_id: "ses_0199c4e2f1b7712a9d3e4f5061728394".into(),
            url: "localhost:4242".into(),
            authenticating,
            peer_tasks: true,
            methods: vec!["SendMessage", "GetTask"],
            tools: vec![],
            network: vec!["localhost".into()],
        }
    }

    #[test]
    fn card_bytes() {
        let want_public = concat!(
            r#"{"capabilities":{"extendedAgentCard":false,"extensions":["#,
            r#"{"params":{"methods":["SendMessage","GetTask"],"peerTasks":true},"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1"},"#,
            r#"{"params":{"network":["localhost"],"planes":[],"sessionId":"ses_0199c4e2f1b7712a9d3e4f5061728394","shell":false,"tools":[]},"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1"}"#,
            r#"],"streaming":true},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"description":"writes code","name":"local/coder","skills":[],"#,
            r#""supportedInterfaces":[{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"http://localhost:4242"}],"version":"1.2.0"}"#
        );
        assert_eq!(
            serde_json::to_string(&facts(false).card(false)).expect("json"),
            want_public
        );
        let auth = facts(true);
        let public = auth.card(false);
        assert_eq!(public["capabilities"]["extendedAgentCard"], true);
        assert_eq!(public["capabilities"]["extensions"].as_array().map(Vec::len), Some(1));
        let ext = auth.card(true);
        assert_eq!(ext["capabilities"]["extensions"][1]["uri"], CAPSULE_EXTENSION);
    }
}
