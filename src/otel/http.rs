//! The OTLP exporter's HTTP client: one blocking HTTP/1.1 POST per export, on the batch
//! processor's own thread (never a task's, never the door's).
//!
//! Ours rather than a client crate's for the project's loopback rule: a `localhost` collector is
//! dialled at 127.0.0.1, never at whatever the name resolves to. Other hosts are resolved as
//! usual. It dials, checks and reads through `outbound::blocking`: a plain-`http://` collector
//! only once this user serves it, `https://` under the one TLS configuration. Every wait is bounded (connect, write, read) and the reply is read to at most
//! [`MAX_REPLY`] bytes. Header values (which may hold a collector key) are sent, never quoted:
//! the error texts name the collector's host and port and the I/O error, nothing else.

use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

use crate::outbound::blocking::{self, Check};

/// Largest reply read: OTLP answers with a small (partial success) message or nothing.
pub const MAX_REPLY: usize = 64 << 10;

/// Bounds of one export request.
const CONNECT: Duration = Duration::from_secs(5);
const IO: Duration = Duration::from_secs(10);

/// Where a URL's requests go: scheme, host as written, port, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Target {
    /// `host:port` as a warning may name it.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Reads an `http://` or `https://` URL (the exporter's endpoint). `None` for anything else.
pub fn target(uri: &http::Uri) -> Option<Target> {
    let https = match uri.scheme_str()? {
        "http" => false,
        "https" => true,
        _ => return None,
    };
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    Some(Target {
        https,
        host,
        port,
        path,
    })
}

/// The addresses dialled for `t`: 127.0.0.1 for `localhost` (the loopback rule), else the
/// host resolved.
pub fn addresses(t: &Target) -> std::io::Result<Vec<SocketAddr>> {
    if t.host.eq_ignore_ascii_case("localhost") {
        return Ok(vec![SocketAddr::from(([127, 0, 0, 1], t.port))]);
    }
    Ok((t.host.as_str(), t.port).to_socket_addrs()?.collect())
}

/// The blocking client the exporter is given.
#[derive(Debug, Clone, Default)]
pub struct OtlpHttp {
    /// The last transport failure, for the warning: the exporter's own error text says only
    /// "network error".
    last_failure: Arc<Mutex<Option<String>>>,
}

impl OtlpHttp {
    pub fn new() -> OtlpHttp {
        OtlpHttp::default()
    }

    /// Where the last transport failure is kept (taken by whoever reports it).
    pub fn failures(&self) -> Arc<Mutex<Option<String>>> {
        Arc::clone(&self.last_failure)
    }

    /// One request, answered or failed. `Err` names the collector and the failure only.
    pub fn post(&self, request: &Request<Bytes>) -> Result<(u16, Vec<u8>), String> {
        let t = target(request.uri()).ok_or("the collector endpoint is not an http:// or https:// URL")?;
        let at = t.authority();
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{at}: {what}: {e}");
        let addrs = addresses(&t).map_err(|e| fail("the name does not resolve", &e))?;
        // The exporter's headers may hold the collector's key: over plain http, only to a
        // listener of this user's.
        let check = if t.https { Check::Tls } else { Check::Owner };
        let stream = blocking::dial(addrs, CONNECT, check).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{at}: the name resolves to no address"),
            std::io::ErrorKind::PermissionDenied => fail("refused", &e),
            _ => fail("no connection", &e),
        })?;
        stream
            .set_read_timeout(Some(IO))
            .and_then(|()| stream.set_write_timeout(Some(IO)))
            .map_err(|e| fail("the connection cannot be set up", &e))?;
        let head = request_head(request, &t);
        let reply = if t.https {
            exchange(
                blocking::tls(&t.host, stream).map_err(|e| format!("{at}: {e}"))?,
                &head,
                request.body(),
            )
        } else {
            exchange(stream, &head, request.body())
        };
        let bytes = reply.map_err(|e| fail("the request failed", &e))?;
        blocking::whole_reply(&bytes).ok_or_else(|| format!("{at}: the reply is not HTTP"))
    }
}

/// Writes the request and reads the reply to its end (the request asks to close), at most
/// [`MAX_REPLY`] bytes of it.
fn exchange<S: Read + Write>(mut s: S, head: &[u8], body: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(head)?;
    s.write_all(body)?;
    s.flush()?;
    let mut out = Vec::new();
    s.take(MAX_REPLY as u64).read_to_end(&mut out)?;
    Ok(out)
}

/// `POST <path> HTTP/1.1`, `Host`, `Content-Length`, `Connection: close`, then the exporter's
/// headers (content type, the configured `OTEL_EXPORTER_OTLP_HEADERS`).
pub fn request_head(request: &Request<Bytes>, t: &Target) -> Vec<u8> {
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        t.path,
        t.authority(),
        request.body().len()
    )
    .into_bytes();
    for (k, v) in request.headers() {
        let name = k.as_str();
        if matches!(name, "host" | "content-length" | "connection" | "transfer-encoding") {
            continue;
        }
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        // Blocking is right here: the batch processor runs exports on its own thread.
        let (status, body) = self.post(&request).map_err(|why| {
            *crate::sync::lock(&self.last_failure) = Some(why.clone());
            HttpError::from(why)
        })?;
        if !(200..300).contains(&status) {
            *crate::sync::lock(&self.last_failure) = Some(format!(
                "{}: the collector answered {status}",
                target(request.uri()).map(|t| t.authority()).unwrap_or_default()
            ));
        }
        Response::builder()
            .status(status)
            .body(Bytes::from(body))
            .map_err(|e| HttpError::from(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_where_they_are_dialled() {
        let cases = [
            (
                "http://localhost:4318/v1/traces",
                Some(("localhost", 4318, false, "/v1/traces")),
                Some("127.0.0.1:4318"),
            ),
            (
                "http://LocalHost/v1/traces",
                Some(("LocalHost", 80, false, "/v1/traces")),
                Some("127.0.0.1:80"),
            ),
            (
                "http://127.0.0.1:9/x?y=1",
                Some(("127.0.0.1", 9, false, "/x?y=1")),
                Some("127.0.0.1:9"),
            ),
            (
                "https://[::1]:4318/v1/traces",
                Some(("::1", 4318, true, "/v1/traces")),
                Some("[::1]:4318"),
            ),
            ("ftp://localhost/x", None, None),
        ];
        for (url, want, dialled) in cases {
            let uri: http::Uri = url.parse().expect("uri");
            let t = target(&uri);
            assert_eq!(
                t.as_ref().map(|t| (t.host.as_str(), t.port, t.https, t.path.as_str())),
                want,
                "{url}"
            );
            if let (Some(t), Some(d)) = (t, dialled) {
                assert_eq!(addresses(&t).expect("addresses")[0].to_string(), d, "{url}");
            }
        }
    }

    #[test]
    fn the_head_carries_the_exporters_headers_once() {
        let request = Request::builder()
            .method("POST")
            .uri("http://localhost:4318/v1/traces")
            .header("content-type", "application/x-protobuf")
            .header("x-api-key", "k")
            .header("content-length", "999")
            .body(Bytes::from_static(b"abc"))
            .expect("request");
        let t = target(request.uri()).expect("target");
        let head = String::from_utf8(request_head(&request, &t)).expect("utf8");
        assert_eq!(
            head,
            "POST /v1/traces HTTP/1.1\r\nHost: localhost:4318\r\nContent-Length: 3\r\nConnection: close\r\n\
             content-type: application/x-protobuf\r\nx-api-key: k\r\n\r\n"
        );
    }
}
