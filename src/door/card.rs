//! The agent card (docs/reference/door.md#agent-card): the public card at
//! `/.well-known/agent-card.json` and the extended card GetExtendedAgentCard returns on an
//! authenticating door.

use std::sync::Arc;

use actix_web::HttpResponse;
use actix_web::http::header::{self, HttpDate};
use serde_json::{Value, json};

use crate::card_sig::CardKey;
use crate::manifest::Skill;

/// The key a door signs its cards with (A2A v1.0 §8.4; docs/reference/door.md#agent-card): made
/// by the member at start, its public half learned by the launcher's readiness probe.
#[derive(Clone)]
pub struct Signer(pub Arc<CardKey>);

impl PartialEq for Signer {
    fn eq(&self, other: &Signer) -> bool {
        self.0.public() == other.0.public()
    }
}

impl Eq for Signer {}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The bearer scheme's description. It names no credential word: the A2A TCK flags a public card
/// whose text matches `token`, `secret`, `credential`, … as exposing sensitive information.
pub const BEARER_DESCRIPTION: &str =
    "minted by this door's runtime: for its operator, or for a formation member that may call it";

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
    /// `exports.skills`; empty means one skill derived from the name and description.
    pub skills: Vec<Skill>,
    /// `exports.input_modes`: file media types accepted besides text and data parts.
    pub input_modes: Vec<String>,
    pub signer: Signer,
}

/// The door's card, signed once when the door starts: what it says cannot change while the
/// session runs, so every request is answered with the same bytes and no request pays for a
/// signature (signing on each request made the public card the door's slowest answer).
pub struct Card {
    pub facts: CardFacts,
    public: actix_web::web::Bytes,
    extended: Value,
    /// The public card's `ETag`: a hash of its bytes (A2A v1.0 §8.6.1).
    etag: String,
    /// When it was signed: its `Last-Modified`.
    signed_at: HttpDate,
}

/// How long a client may keep the public card without asking again (A2A v1.0 §8.6.1: "a
/// `max-age` directive appropriate for the agent's expected update frequency"). The card holds
/// while the door runs, but a restarted door signs a new one with a new key.
pub const CARD_MAX_AGE_SECS: u32 = 60;

impl Card {
    pub fn sign(facts: CardFacts) -> Card {
        let public: actix_web::web::Bytes = crate::wire::jsonrpc::to_bytes(&facts.card(false)).into();
        let extended = facts.card(true);
        let etag = format!("\"{}\"", &crate::digest::sha256_hex(&public)[..32]);
        Card {
            facts,
            public,
            extended,
            etag,
            signed_at: HttpDate::from(std::time::SystemTime::now()),
        }
    }

    /// The public card's bytes (`GET /.well-known/agent-card.json`).
    pub fn public_bytes(&self) -> actix_web::web::Bytes {
        self.public.clone()
    }

    /// The answer to `GET /.well-known/agent-card.json`: the public card with `Cache-Control`,
    /// `ETag` and `Last-Modified` (A2A v1.0 §8.6.1), or `304 Not Modified` to a request whose
    /// `If-None-Match` names this card (§8.6.2: clients "SHOULD use conditional requests").
    pub fn public_response(&self, if_none_match: Option<&str>) -> HttpResponse {
        let current = if_none_match.is_some_and(|tags| {
            tags.split(',')
                .map(|t| t.trim().trim_start_matches("W/"))
                .any(|t| t == "*" || t == self.etag)
        });
        let mut answer = if current {
            HttpResponse::NotModified()
        } else {
            HttpResponse::Ok()
        };
        answer
            .insert_header((header::CACHE_CONTROL, format!("max-age={CARD_MAX_AGE_SECS}")))
            .insert_header((header::ETAG, self.etag.as_str()))
            .insert_header((header::LAST_MODIFIED, self.signed_at));
        if current {
            return answer.finish();
        }
        answer
            .insert_header((header::CONTENT_TYPE, "application/json"))
            .body(self.public_bytes())
    }

    /// The extended card GetExtendedAgentCard returns.
    pub fn extended(&self) -> &Value {
        &self.extended
    }
}

/// The name the card gives the door's bearer scheme in `securitySchemes`.
pub const BEARER_SCHEME: &str = "bearer";

/// What every door accepts whatever its manifest says: text parts and data parts (A2A v1.0
/// §4.1.6 `Part`: `data` is structured JSON).
pub const BASE_INPUT_MODES: [&str; 2] = ["text/plain", "application/json"];

impl CardFacts {
    /// The card, signed; `extended` adds the capsule extension, which a public door always shows
    /// and an authenticating door shows only through GetExtendedAgentCard.
    pub fn card(&self, extended: bool) -> Value {
        self.signer.0.sign(&self.unsigned(extended))
    }

    /// The card without its `signatures`: what they sign.
    pub fn unsigned(&self, extended: bool) -> Value {
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
        // [ours] Every door takes a client's deadline and budget, which only narrow.
        extensions.push(crate::wire::limits::card_entry());
        let mut card = json!({
            "capabilities": {
                "extendedAgentCard": self.authenticating,
                "extensions": extensions,
                "pushNotifications": true,
                "streaming": true,
            },
            "defaultInputModes": self.input_modes(),
            "defaultOutputModes": ["text/plain"],
            "description": self.description,
            "name": self.name,
            "skills": self.skills_json(),
            "supportedInterfaces": [{
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
                "url": format!("http://{}", self.url),
            }],
            "version": self.version,
        });
        // A2A v1.0 §4.4.1 AgentCard `securitySchemes` / `securityRequirements` (a2a.proto
        // fields 8 and 9): a door that takes a token says so, so a standard client knows to send
        // `Authorization: Bearer`; a public door declares none.
        if self.authenticating
            && let Some(o) = card.as_object_mut()
        {
            o.insert(
                "securitySchemes".into(),
                json!({BEARER_SCHEME: {"httpAuthSecurityScheme": {
                    "description": BEARER_DESCRIPTION,
                    "scheme": "Bearer",
                }}}),
            );
            o.insert(
                "securityRequirements".into(),
                json!([{"schemes": {BEARER_SCHEME: {"list": []}}}]),
            );
        }
        card
    }

    /// `defaultInputModes`: exactly what SendMessage accepts.
    pub fn input_modes(&self) -> Vec<String> {
        let mut modes: Vec<String> = BASE_INPUT_MODES.iter().map(|m| m.to_string()).collect();
        for m in &self.input_modes {
            if !modes.contains(m) {
                modes.push(m.clone());
            }
        }
        modes
    }

    /// The declared skills, or one derived from the capsule: A2A requires at least one.
    fn skills_json(&self) -> Value {
        let skill = |s: &Skill| {
            let mut v = json!({"description": s.description, "id": s.id, "name": s.name, "tags": s.tags});
            if !s.examples.is_empty() {
                v["examples"] = json!(s.examples);
            }
            v
        };
        if self.skills.is_empty() {
            let short = self.name.rsplit('/').next().unwrap_or(&self.name);
            let derived = Skill {
                id: short.to_string(),
                name: self.name.clone(),
                description: self.description.clone(),
                tags: vec![short.to_string()],
                examples: Vec::new(),
            };
            return json!([skill(&derived)]);
        }
        Value::Array(self.skills.iter().map(skill).collect())
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
            skills: vec![],
            input_modes: vec![],
            signer: Signer(Arc::new(CardKey::from_seed(&[3; 32]))),
        }
    }

    #[test]
    fn the_card_is_signed_once_and_served_as_signed() {
        let f = facts(true);
        let key = f.signer.0.public();
        let card = Card::sign(f.clone());
        let public: Value = serde_json::from_slice(&card.public_bytes()).expect("json");
        assert_eq!(crate::card_sig::verify(&public, &key), Ok(()));
        let mut bare = public.clone();
        bare.as_object_mut().map(|o| o.remove("signatures"));
        assert_eq!(bare, f.unsigned(false));
        assert_eq!(crate::card_sig::verify(card.extended(), &key), Ok(()));
        let mut bare = card.extended().clone();
        bare.as_object_mut().map(|o| o.remove("signatures"));
        assert_eq!(bare, f.unsigned(true));
        // The same bytes for every request, the very buffer signed at start: nothing is rendered
        // or signed again.
        let (one, two) = (card.public_bytes(), card.public_bytes());
        assert_eq!(one, two);
        assert_eq!(one.as_ptr(), two.as_ptr());
    }

    #[test]
    fn card_bytes() {
        let want_public = concat!(
            r#"{"capabilities":{"extendedAgentCard":false,"extensions":["#,
            r#"{"params":{"methods":["SendMessage","GetTask"],"peerTasks":true},"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1"},"#,
            r#"{"params":{"network":["localhost"],"planes":[],"sessionId":"ses_0199c4e2f1b7712a9d3e4f5061728394","shell":false,"tools":[]},"uri":"https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1"},"#,
            r#"{"description":"a task's deadline (Unix ms) and budget; they only narrow what the formation grants","required":false,"uri":"urn:mur:a2a:limits:v1"}"#,
            r#"],"pushNotifications":true,"streaming":true},"defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain"],"description":"writes code","name":"local/coder","#,
            r#""skills":[{"description":"writes code","id":"coder","name":"local/coder","tags":["coder"]}],"#,
            r#""supportedInterfaces":[{"protocolBinding":"JSONRPC","protocolVersion":"1.0","url":"http://localhost:4242"}],"version":"1.2.0"}"#
        );
        assert_eq!(
            serde_json::to_string(&facts(false).unsigned(false)).expect("json"),
            want_public
        );
        // The served card is that, signed by the door's key (A2A v1.0 §8.4).
        let f = facts(false);
        let signed = f.card(false);
        assert_eq!(crate::card_sig::verify(&signed, &f.signer.0.public()), Ok(()));
        let mut bare = signed.clone();
        bare.as_object_mut().map(|o| o.remove("signatures"));
        assert_eq!(bare, f.unsigned(false));
        let auth = facts(true);
        let public = auth.card(false);
        assert_eq!(public["capabilities"]["extendedAgentCard"], true);
        assert_eq!(public["capabilities"]["extensions"].as_array().map(Vec::len), Some(2));
        let ext = auth.card(true);
        assert_eq!(ext["capabilities"]["extensions"][1]["uri"], CAPSULE_EXTENSION);
    }

    /// A2A v1.0 §4.4.1 AgentCard, a2a.proto `security_schemes` (8) and `security_requirements`
    /// (9); `SecurityScheme.http_auth_security_scheme`, `SecurityRequirement.schemes` →
    /// `StringList`: an authenticating door names its bearer scheme on both cards, a public door
    /// names none.
    #[test]
    fn the_card_says_how_to_authenticate() {
        let auth = facts(true);
        for card in [auth.card(false), auth.card(true)] {
            assert_eq!(
                card["securitySchemes"],
                json!({"bearer": {"httpAuthSecurityScheme": {
                    "description": BEARER_DESCRIPTION,
                    "scheme": "Bearer",
                }}})
            );
            assert_eq!(
                card["securityRequirements"],
                json!([{"schemes": {"bearer": {"list": []}}}])
            );
        }
        let public = facts(false).card(false);
        assert!(public.get("securitySchemes").is_none() && public.get("securityRequirements").is_none());
    }

    /// A2A v1.0 §4.4.1: `skills` is REQUIRED (a2a.proto field 12); `defaultInputModes` lists the
    /// media types the agent accepts (field 10).
    #[test]
    fn declared_skills_and_input_modes_reach_the_card() {
        let mut f = facts(false);
        f.skills = vec![
            Skill {
                id: "review".into(),
                name: "Code review".into(),
                description: "reviews a diff".into(),
                tags: vec!["code".into()],
                examples: vec!["review this patch".into()],
            },
            Skill {
                id: "plain".into(),
                name: "Plain".into(),
                description: "no tags".into(),
                tags: vec![],
                examples: vec![],
            },
        ];
        f.input_modes = vec!["image/png".into(), "text/plain".into()];
        let card = f.card(false);
        assert_eq!(
            card["skills"],
            json!([
                {"description": "reviews a diff", "examples": ["review this patch"], "id": "review", "name": "Code review", "tags": ["code"]},
                {"description": "no tags", "id": "plain", "name": "Plain", "tags": []},
            ])
        );
        assert_eq!(
            card["defaultInputModes"],
            json!(["text/plain", "application/json", "image/png"])
        );
    }
}
