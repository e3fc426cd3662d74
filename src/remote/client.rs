//! The HTTP side of a remote capsule: one awc client for the remote agent's origin, TLS for
//! `https://` and an owner-checked loopback connection for plain `http://` (which only a
//! loopback URL may use, `manifest::endpoint`). Redirects are off: one could carry the
//! credential to another origin. awc futures are not `Send`: a [`Client`] lives on the thread
//! that made it (the executor's arbiter, or start-up's own actix system).
//!
//! Connections are kept for the next request (for [`KEEP_ALIVE`]), as a direct client keeps its
//! own: a new connection per forwarded request costs the remote agent its accept and set-up each
//! time (about a millisecond for the Python SDK's server; a TLS handshake over a network). A
//! loopback connection is read through `outbound::framing`, which reads every reply head before
//! the client does.

use std::time::Duration;

use actix_web::web::Bytes;
use awc::http::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use futures_util::StreamExt;

use crate::wire::sse::SseReader;

/// How long an idle connection is kept: under the 5 s after which uvicorn and Node close idle
/// keep-alive connections, so a request rarely meets one the server is closing.
pub const KEEP_ALIVE: Duration = Duration::from_secs(4);

/// One response's head: status, the wait its `retry-after` asks for, and whether its body is an
/// event stream.
pub struct Head {
    pub status: u16,
    /// Read by the one reader of every reply's `Retry-After`, `outbound::retry_after`.
    pub retry_after: Option<Duration>,
    pub stream: bool,
    body: awc::ClientResponse,
}

/// A connection failure, or a body past its bound, or silence past the deadline.
pub type Fault = String;

pub struct Client {
    http: crate::outbound::Client,
}

impl Client {
    /// A client for requests to `url`'s origin; `connect` bounds opening a connection.
    pub fn new(url: &str, connect: Duration) -> Result<Client, String> {
        let bounds = crate::outbound::Bounds {
            connect,
            request: None,
            keep_alive: Some(KEEP_ALIVE),
        };
        if !url.starts_with("https://") && !crate::manifest::endpoint::plain_http_allowed(url) {
            return Err("its URL must be https://, or plain http:// to loopback".to_string());
        }
        let http = crate::outbound::Client::new(crate::outbound::Route::Origin(url), bounds)?;
        Ok(Client { http })
    }

    /// GET `url` (the agent card: never with the credential), its body within `max` bytes, all
    /// within `within`.
    pub async fn get(&self, url: &str, max: usize, within: Duration) -> Result<(u16, Bytes), Fault> {
        let read = async {
            let mut resp = self
                .http
                .get(url)
                .insert_header((ACCEPT, "application/json"))
                .send()
                .await
                .map_err(|e| format!("the request failed: {e}"))?;
            let status = resp.status().as_u16();
            let body = resp.body().limit(max).await.map_err(|e| match e {
                awc::error::PayloadError::Overflow => format!("its body is longer than {max} bytes"),
                e => format!("reading its body failed: {e}"),
            })?;
            Ok((status, body))
        };
        match tokio::time::timeout(within, read).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", within.as_millis())),
        }
    }

    /// POSTs a JSON-RPC `body` to `url` with `headers` (the credential, marked sensitive, and
    /// `traceparent`), and returns the response's head once it arrives, within `within`.
    pub async fn post(
        &self,
        url: &str,
        body: String,
        stream: bool,
        headers: &[(HeaderName, HeaderValue)],
        within: Duration,
    ) -> Result<Head, Fault> {
        let mut req = self
            .http
            .post(url)
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header(("a2a-version", "1.0"))
            .insert_header((
                ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            ));
        for (k, v) in headers {
            req = req.insert_header((k.clone(), v.clone()));
        }
        let resp = match tokio::time::timeout(within, req.send_body(body)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(format!("the request failed: {e}")),
            Err(_) => return Err(format!("no answer within {} ms", within.as_millis())),
        };
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| crate::text::head(s, 64).to_string())
        };
        let is_stream = header("content-type").is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
        Ok(Head {
            status: resp.status().as_u16(),
            retry_after: crate::outbound::retry_after(resp.headers(), std::time::SystemTime::now()),
            stream: is_stream,
            body: resp,
        })
    }
}

impl Head {
    /// The whole body, within `max` bytes and `within`.
    pub async fn body(mut self, max: usize, within: Duration) -> Result<Bytes, Fault> {
        match tokio::time::timeout(within, self.body.body().limit(max)).await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(awc::error::PayloadError::Overflow)) => {
                Err(format!("the remote agent's reply is longer than {max} bytes"))
            }
            Ok(Err(e)) => Err(format!("reading the remote agent's reply failed: {e}")),
            Err(_) => Err(format!(
                "the remote agent's reply did not arrive within {} ms",
                within.as_millis()
            )),
        }
    }

    /// The event stream's reader: its next events, each bounded by `max_event` bytes.
    pub fn events(self, max_event: usize) -> Events {
        Events {
            body: self.body,
            sse: SseReader::new(max_event),
        }
    }
}

/// An open event stream from the remote agent.
pub struct Events {
    body: awc::ClientResponse,
    sse: SseReader,
}

impl Events {
    /// The events of the next chunk (perhaps none); `Ok(None)` at the stream's end.
    pub async fn next(&mut self) -> Result<Option<Vec<serde_json::Value>>, Fault> {
        match self.body.next().await {
            None => Ok(None),
            Some(Err(e)) => Err(format!("the remote agent's stream broke: {e}")),
            Some(Ok(bytes)) => {
                let data = self
                    .sse
                    .push_data(&bytes)
                    .map_err(|_| "the remote agent sent a stream event past its bound".to_string())?;
                // A garbage event is the end of trust in the stream, not a thing to skip.
                data.iter()
                    .map(|d| {
                        serde_json::from_str(d)
                            .map_err(|_| "the remote agent sent a stream event that is not JSON".to_string())
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
        }
    }
}
