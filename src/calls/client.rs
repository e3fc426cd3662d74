//! A small A2A JSON-RPC client for one callee's door, over awc
//! (docs/reference/capsules.md#calls-between-members).
//!
//! It only moves bytes: every request is a `POST /` with the edge's bearer token and the
//! provenance headers; `wire` reads what comes back. awc futures are not `Send`, so a
//! [`DoorClient`] lives on one actix thread (the session's arbiter) and never crosses threads.
//!
//! An `Err` from these functions is a *transport* failure (no connection, a reset, a timeout):
//! the watcher counts those. The error text never contains the token; it may contain the door's
//! address, which callers redact before anyone sees it.

use std::time::Duration;

use actix_web::web::Bytes;
use futures_util::StreamExt;

use crate::outbound;
use crate::secret::Secret;
use crate::tasks::Trust;

/// Where a callee's door is and the credential for it.
#[derive(Clone, Debug)]
pub struct PeerRoute {
    /// The door's real URL, `http://host:port`. Never shown to a component, a model or the trace.
    pub url: String,
    /// The door as the launcher vouched for it: when present, the only way the door is reached
    /// (its Unix socket, served by that process; see `peer_door`).
    pub door: Option<crate::channel::DoorIdentity>,
    token: Secret,
}

impl PeerRoute {
    /// The route the router hands out for a callee.
    pub(super) fn new(url: String, door: Option<crate::channel::DoorIdentity>, token: Secret) -> PeerRoute {
        PeerRoute { url, door, token }
    }

    /// The `mft1` of the edge: only ever the `Authorization` header of a request to `url`.
    pub fn token(&self) -> &Secret {
        &self.token
    }
}

/// Largest reply body read (a callee's answer is cut to 64 KiB later; this only bounds memory).
const MAX_BODY: usize = 32 << 20;

/// An HTTP reply: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

/// The answer to SubscribeToTask: a stream of events, or a plain reply instead (a JSON-RPC error
/// such as `-32004` for a task already over, or an HTTP refusal), whose body is not read: GetTask
/// tells the rest.
pub enum Subscription {
    Stream(EventStream),
    NotAStream,
}

/// The body of an open `text/event-stream` response.
pub struct EventStream {
    body: awc::ClientResponse,
}

impl EventStream {
    /// The next chunk: `Ok(None)` at a clean end of the stream, `Err` on a read error.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        match self.body.next().await {
            None => Ok(None),
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) => Err(e.to_string()),
        }
    }
}

/// One callee's door, as a caller talks to it.
pub struct DoorClient {
    /// Dials the door at 127.0.0.1, never a resolved name (see `channel::door_socket`); no
    /// address for a URL that is not a door's: every request fails.
    client: outbound::Client,
    route: PeerRoute,
    trust: Trust,
    /// The call span's W3C `traceparent`, sent on every request when spans are exported.
    traceparent: Option<String>,
    /// The call's grant, sent on every request as `x-murmur-grant`.
    grant: Option<String>,
}

impl std::fmt::Debug for DoorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoorClient")
            .field("route", &self.route)
            .field("trust", &self.trust)
            .finish_non_exhaustive()
    }
}

impl DoorClient {
    /// A client for the door `route` names; requests carry `trust` as `x-murmur-task-trust`.
    /// `connect` bounds opening a connection.
    pub fn new(route: PeerRoute, trust: Trust, connect: Duration) -> DoorClient {
        // Vouched for by the launcher: reached through its socket, served by that process
        // alone, never through a port that anyone may bind once the member is gone; else its
        // loopback port, served by this user. A door never redirects (`outbound` follows none).
        let client = outbound::Client::door(route.door.as_ref(), &route.url, outbound::Bounds::connect(connect));
        DoorClient {
            client,
            route,
            trust,
            traceparent: None,
            grant: None,
        }
    }

    /// The door this client reaches: its URL and the identity the launcher vouched for.
    pub fn door(&self) -> (String, Option<crate::channel::DoorIdentity>) {
        (self.route.url.clone(), self.route.door.clone())
    }

    /// A client like this one (trust, traceparent, grant) for another door of the same callee:
    /// a restarted process's (docs/reference/formation.md#calls-across-a-restart).
    pub fn moved(&self, route: PeerRoute, connect: Duration) -> DoorClient {
        DoorClient::new(route, self.trust, connect)
            .with_traceparent(self.traceparent.clone())
            .with_grant(self.grant.clone())
    }

    /// Requests carry `grant` (the call's, from the launcher), when there is one.
    pub fn with_grant(mut self, grant: Option<String>) -> DoorClient {
        self.grant = grant;
        self
    }

    /// Requests carry `traceparent` (the call span's), when there is one.
    pub fn with_traceparent(mut self, traceparent: Option<String>) -> DoorClient {
        self.traceparent = traceparent;
        self
    }

    /// A request to the door, or the transport error of a route that names no door (its URL is
    /// not quoted: callers redact door URLs, and this one is not a door's).
    fn request(&self, timeout: Duration) -> Result<awc::ClientRequest, String> {
        if self.client.address().is_none() {
            return Err("the callee's door address is not http://localhost:<port>".to_string());
        }
        let auth = outbound::credential(&format!("Bearer {}", self.route.token().reveal()))
            .unwrap_or_else(|| awc::http::header::HeaderValue::from_static(""));
        let req = self
            .client
            .post(&format!("{}/", self.route.url))
            .timeout(timeout)
            .insert_header((awc::http::header::AUTHORIZATION, auth))
            .insert_header(("a2a-version", "1.0"))
            .insert_header(("content-type", "application/json"))
            .insert_header(("x-murmur-task-origin", "peer"))
            .insert_header(("x-murmur-task-trust", self.trust.as_str()));
        let req = match &self.grant {
            Some(g) => req.insert_header((crate::grant::HEADER, g.as_str())),
            None => req,
        };
        Ok(match &self.traceparent {
            Some(tp) => req.insert_header(("traceparent", tp.as_str())),
            None => req,
        })
    }

    /// POSTs a JSON-RPC body and reads the whole reply, all within `timeout`.
    pub async fn post(&self, body: String, timeout: Duration) -> Result<Reply, String> {
        let read = async {
            let mut resp = self
                .request(timeout)?
                .send_body(body)
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp.body().limit(MAX_BODY).await.map_err(|e| e.to_string())?;
            Ok(Reply { status, body })
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(format!("no reply within {} ms", timeout.as_millis())),
        }
    }

    /// The door's public agent card (`GET /.well-known/agent-card.json`, no credential: the card
    /// is public), at most `max` bytes, all within `timeout`.
    pub async fn card(&self, timeout: Duration, max: usize) -> Result<Bytes, String> {
        if self.client.address().is_none() {
            return Err("the callee's door address is not http://localhost:<port>".to_string());
        }
        let read = async {
            let mut resp = self
                .client
                .get(&format!("{}{}", self.route.url, crate::card_sig::CARD_PATH))
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if resp.status().as_u16() != 200 {
                return Err(format!("the card was answered {}", resp.status().as_u16()));
            }
            resp.body().limit(max).await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(format!("no card within {} ms", timeout.as_millis())),
        }
    }

    /// POSTs a SubscribeToTask body; `head` bounds the wait for the response head (the stream
    /// itself has no time limit: the watcher bounds it).
    pub async fn subscribe(&self, body: String, head: Duration) -> Result<Subscription, String> {
        let resp = self
            .request(head)?
            .insert_header(("accept", "text/event-stream"))
            .send_body(body)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let is_stream = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if status == 200 && is_stream {
            return Ok(Subscription::Stream(EventStream { body: resp }));
        }
        Ok(Subscription::NotAStream)
    }
}
