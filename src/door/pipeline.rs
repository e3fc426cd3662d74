//! The request pipeline (docs/reference/door.md#request-pipeline, first match wins). Step 3
//! (authentication) runs before this handler, in the FormationAuth middleware; every other step is
//! here, in order.

use std::sync::Arc;

use actix_web::http::header::{self, HeaderName};
use actix_web::http::{Method as HttpMethod, StatusCode};
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use futures_util::StreamExt as _;
use serde_json::{Map, Value};

use super::BODY_LIMIT;
use super::auth::{CARD_PATH, Caller, Refusal};
use super::call::{Call, Provenance, Reply};
use super::card::Card;
use super::jsonrpc::{self, A2aError, Method, RpcError};
use super::methods;
use super::sse;
use super::view::TaskObject as _;
use crate::manifest::Acceptance;
use crate::tasks::Board;
use crate::timing::Timing;

/// What every request of one door shares.
pub struct Shared {
    pub board: Arc<Board>,
    pub card: Card,
    pub realm: String,
    pub peer_tasks_accept: bool,
    /// The push-notification configs and their deliveries.
    pub push: super::push::Configs,
}

fn json_response(status: StatusCode, v: &Value) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .body(jsonrpc::to_bytes(v))
}

fn bytes_response(body: impl actix_web::body::MessageBody + 'static) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .body(body)
}

fn rpc_error(id: &Value, e: &RpcError) -> HttpResponse {
    json_response(StatusCode::OK, &jsonrpc::error_value(id, e))
}

// Header names built once: a lookup by `&str` parses the name again on every request.
const TASK_ORIGIN: HeaderName = HeaderName::from_static("x-murmur-task-origin");
const TASK_TRUST: HeaderName = HeaderName::from_static("x-murmur-task-trust");
const A2A_VERSION: HeaderName = HeaderName::from_static("a2a-version");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

fn header_str<'r>(req: &'r HttpRequest, name: &HeaderName) -> Option<&'r str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The body; 413 when it exceeds [`BODY_LIMIT`], 400 when the upload breaks off, 408 (and the
/// connection closed) when it has not all arrived within [`Timing::door_body`]. actix-http bounds
/// the head in time (its client request timeout) but not the body, so a client trickling a byte
/// now and then would otherwise hold its connection and buffer for ever.
async fn read_body(req: &HttpRequest, payload: web::Payload) -> Result<Bytes, HttpResponse> {
    let declared = header_str(req, &header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return Err(HttpResponse::PayloadTooLarge().finish());
    }
    match tokio::time::timeout(Timing::get().door_body, collect_body(payload)).await {
        Ok(r) => r,
        Err(_) => Err(HttpResponse::RequestTimeout().force_close().finish()),
    }
}

async fn collect_body(mut payload: web::Payload) -> Result<Bytes, HttpResponse> {
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| HttpResponse::BadRequest().finish())?;
        if body.len() + chunk.len() > BODY_LIMIT {
            return Err(HttpResponse::PayloadTooLarge().finish());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The one handler behind FormationAuth.
pub async fn handle(req: HttpRequest, payload: web::Payload, shared: web::Data<Shared>) -> HttpResponse {
    // Step 1.
    let provenance = Provenance::from_headers(header_str(&req, &TASK_ORIGIN), header_str(&req, &TASK_TRUST));
    // Step 2.
    if req.method() == HttpMethod::GET && req.path() == CARD_PATH {
        return shared.card.public_response(header_str(&req, &header::IF_NONE_MATCH));
    }
    // Step 3 ran in FormationAuth; a request it did not mark is refused, never served as public.
    let Some(caller) = req.extensions().get::<Arc<Caller>>().cloned() else {
        return Refusal::InvalidToken.response(&shared.realm);
    };
    // Step 4.
    if provenance.origin == crate::tasks::Origin::Peer && !shared.peer_tasks_accept {
        return Refusal::PeerNotAccepted.response(&shared.realm);
    }
    // Step 5.
    let path = req.path();
    if path == "/resources" || path.starts_with("/resources/") {
        if let Caller::Credential { name, .. } = &*caller
            && !caller.reaches(crate::token::FILES_SCOPE)
        {
            let r = Refusal::InsufficientScope {
                credential: name.clone(),
                scope: crate::token::FILES_SCOPE.into(),
            };
            return r.response(&shared.realm);
        }
        return HttpResponse::NotFound().finish();
    }
    // Step 6.
    let json_type = header_str(&req, &header::CONTENT_TYPE).is_some_and(|c| {
        c.as_bytes()
            .windows(b"application/json".len())
            .any(|w| w.eq_ignore_ascii_case(b"application/json"))
    });
    if req.method() != HttpMethod::POST || !(path == "/" || path.is_empty()) || !json_type {
        return HttpResponse::NotFound().finish();
    }
    let body = match read_body(&req, payload).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    if body.is_empty() {
        return HttpResponse::NotFound().finish();
    }
    // Steps 7 and 8.
    let request = match jsonrpc::decode(&body) {
        Ok(r) => r,
        Err((id, e)) => return rpc_error(&id, &e),
    };
    let id = request.id;
    // Step 9.
    let versions: Vec<&[u8]> = req.headers().get_all(&A2A_VERSION).map(|v| v.as_bytes()).collect();
    if !jsonrpc::version_ok(&versions) {
        let asked = versions.first().and_then(|v| std::str::from_utf8(v).ok()).unwrap_or("");
        return rpc_error(
            &id,
            &A2aError::VersionNotSupported.with(&[("requested", asked), ("supported", "1.0")]),
        );
    }
    // Step 10.
    let Some(method) = Method::resolve(&request.method) else {
        return rpc_error(&id, &RpcError::plain(jsonrpc::METHOD_NOT_FOUND));
    };
    let unsupported = |m: &str| A2aError::UnsupportedOperation.with(&[("method", m)]);
    match method {
        Method::GetExtendedAgentCard if !shared.card.facts.authenticating => {
            return rpc_error(&id, &unsupported(&request.method));
        }
        Method::SendMessage | Method::SendStreamingMessage | Method::SubscribeToTask
            if shared.board.acceptance() == Acceptance::None =>
        {
            return rpc_error(&id, &unsupported(&request.method));
        }
        _ => {}
    }
    // Step 11.
    if let (Some(scope), Caller::Credential { name, .. }) = (method.scope(), &*caller)
        && !caller.reaches(scope)
    {
        let r = Refusal::InsufficientScope {
            credential: name.clone(),
            scope: scope.into(),
        };
        return r.response(&shared.realm);
    }
    // Step 12. An absent `params` reads as `{}` (JSON-RPC lets a client omit it) [ours].
    let params = match request.params {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return rpc_error(&id, &RpcError::invalid_params()),
    };
    // Read only where it means something: a reconnecting SubscribeToTask.
    let last_event_id = match (method, req.headers().get(&LAST_EVENT_ID)) {
        (Method::SubscribeToTask, Some(v)) => match crate::wire::replay::parse_last_event_id(v.as_bytes()) {
            Ok(n) => n,
            Err(e) => return rpc_error(&id, &RpcError::invalid_param("Last-Event-ID", e.why())),
        },
        _ => None,
    };
    let call = Call {
        board: &shared.board,
        last_event_id,
        caller: &caller,
        provenance,
        // Kept only when well-formed (55 bytes): it is recorded in the trace and handed to the
        // task's span, and a caller's arbitrary header text belongs in neither.
        traceparent: header_str(&req, &TRACEPARENT)
            .filter(|t| crate::trace::otel_env::well_formed_traceparent(t))
            .map(str::to_string),
        grant: req.extensions().get::<Arc<crate::grant::Grant>>().cloned(),
        card: &shared.card,
        push: &shared.push,
    };
    match methods::dispatch(method, &params, &call).await {
        Reply::Result(v) => json_response(StatusCode::OK, &jsonrpc::result_value(&id, v)),
        Reply::Task(t) => bytes_response(jsonrpc::result_bytes(&id, &t.view(true))),
        // A refusal before a stream starts is a plain JSON-RPC error, as for any method, so
        // every SDK maps it to its typed error (docs/a2a.md, "Streaming errors").
        Reply::Error(e) => rpc_error(&id, &e),
        Reply::Stream { task_id, start, pin } => sse::follow(&shared.board, task_id, start, pin, id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<F, Fut>(_handler: F) -> usize
    where
        F: Fn(HttpRequest, web::Payload, web::Data<Shared>) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// actix boxes the handler's future once per request. Past about 1 KiB that allocation takes
    /// glibc's large-chunk path, which consolidates the fast bins every time; SendMessage's
    /// future, held inline, once made every GetTask pay for that.
    #[test]
    fn the_handler_future_stays_small() {
        let size = future_size(handle);
        assert!(size < 768, "the door's handler future grew to {size} bytes");
    }
}
