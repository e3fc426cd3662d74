//! The `wasi:http/outgoing-handler` hook of a task's store (docs/reference/capsules.md#calls-by-address):
//! every request a component or a tool sends reaches [`PolicyHooks::send_request`] before any
//! connection is made, and goes as the task's [`HttpPolicy`] decides (`crate::runner`): as
//! written, routed to a member's door with the route's headers, or refused with
//! `HttpRequestDenied`. A routed request is dialled at the door's socket, 127.0.0.1, never at a
//! resolved name, or through the door's Unix socket when the launcher vouched for it.

use std::future::Future;
use std::sync::Arc;

use ::http::header::{HeaderName, HeaderValue};
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};
use zeroize::Zeroizing;

use crate::channel;
use crate::runner::{HttpDecision, HttpPolicy, OutgoingTarget, Route, RouteValue};

/// The `WasiHttpHooks` of one task's store: every request goes through the policy.
pub(crate) struct PolicyHooks {
    pub(crate) policy: Arc<dyn HttpPolicy>,
}

type IoFuture = Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>;
type SendResult = Result<(http::Response<WasiBody>, IoFuture), wasmtime_wasi_http::Error>;

impl WasiHttpHooks for PolicyHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let policy = self.policy.clone();
        Box::new(async move {
            use wasmtime_wasi_http::Error;
            let Some(target) = OutgoingTarget::from_uri(request.uri()) else {
                return Err(Error::HttpRequestDenied);
            };
            let request = match policy.decide(&target).await {
                HttpDecision::Deny => return Err(Error::HttpRequestDenied),
                HttpDecision::PassThrough => request,
                HttpDecision::Route(route) => {
                    let request = rewrite(request, &route).ok_or(Error::HttpRequestDenied)?;
                    if let Some(door) = &route.door {
                        return send_to_door(request, door, options).await;
                    }
                    request
                }
            };
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((response.map(WasiBody::new), Box::new(io) as IoFuture))
        })
    }
}

/// Sends a routed request through the door's Unix socket, once [`crate::peer_door::dial`]
/// has checked that the vouched process serves it; the connection is driven by the returned
/// I/O future, as `default_send_request`'s is.
async fn send_to_door(
    mut request: http::Request<WasiBody>,
    door: &channel::DoorIdentity,
    options: Option<RequestOptions>,
) -> SendResult {
    use http_body_util::BodyExt as _;
    use std::task::Poll;
    use wasmtime_wasi_http::Error;
    let connect = options
        .and_then(|o| o.connect_timeout)
        .unwrap_or(std::time::Duration::from_secs(10));
    let first_byte = options
        .and_then(|o| o.first_byte_timeout)
        .unwrap_or(std::time::Duration::from_secs(600));
    let stream = match tokio::time::timeout(connect, crate::peer_door::dial(door)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Error::Connect(e)),
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(wasmtime_wasi_http::io::TokioIo::new(stream))
        .await
        .map_err(Error::from)?;
    // Origin form on the wire: the door's authority is in `Host` already.
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let mut conn = Some(Box::pin(conn));
    let mut send = std::pin::pin!(tokio::time::timeout(first_byte, sender.send_request(request)));
    // The response, while the connection's I/O is driven.
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = send.as_mut().poll(cx) {
            return Poll::Ready(match r {
                Ok(r) => r.map_err(Error::from),
                Err(_) => Err(Error::ConnectionReadTimeout),
            });
        }
        if let Some(c) = conn.as_mut()
            && let Poll::Ready(r) = c.as_mut().poll(cx)
        {
            conn = None;
            if let Err(e) = r {
                return Poll::Ready(Err(Error::from(e)));
            }
        }
        Poll::Pending
    })
    .await?;
    let io: IoFuture = Box::new(async move {
        match conn {
            Some(c) => c.await.map_err(Error::from),
            None => Ok(()),
        }
    });
    Ok((response.map(|b| WasiBody::new(b.map_err(Error::from))), io))
}

/// The headers a component may not choose when its request is routed to a door
/// (docs/reference/capsules.md#calls-by-address).
const ROUTE_DROPPED: [&str; 4] = [
    "authorization",
    "x-murmur-task-origin",
    "x-murmur-task-trust",
    crate::grant::HEADER,
];

/// Points `request` at the door `route` names: the URI's authority is the door's socket
/// (127.0.0.1, never a name to resolve: see [`channel::door_socket`]), `Host` is the door URL's
/// authority as advertised; path and query of the request,
/// docs/reference/capsules.md#calls-by-address headers. `None` when the route names no door or a
/// header is malformed.
fn rewrite<B>(mut request: http::Request<B>, route: &Route) -> Option<http::Request<B>> {
    let socket = channel::door_socket(&route.base_url)?;
    let authority = route.base_url.strip_prefix("http://")?;
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(socket.to_string())
        .path_and_query(path)
        .build()
        .ok()?;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    for name in ROUTE_DROPPED {
        headers.remove(name);
    }
    headers.insert(http::header::HOST, HeaderValue::from_str(authority).ok()?);
    for h in &route.headers {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = match &h.value {
            RouteValue::Plain(v) => HeaderValue::from_str(v).ok()?,
            // The one place an edge token of a routed request is revealed.
            RouteValue::Bearer(token) => {
                let mut v = HeaderValue::from_str(&Zeroizing::new(format!("Bearer {}", token.reveal()))).ok()?;
                v.set_sensitive(true);
                v
            }
        };
        headers.insert(name, value);
    }
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{AllowList, BoxFuture, NetworkPolicy, PeerResolver};
    use crate::secret::Secret;

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map(|rt| rt.block_on(f))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn rewrite_points_at_the_door_and_replaces_credentials() {
        let request = http::Request::builder()
            .uri("http://coder.formation.invalid/rpc?x=1")
            .header("host", "coder.formation.invalid")
            .header("Authorization", "Bearer stolen")
            .header("x-murmur-task-origin", "event")
            .header("X-Murmur-Task-Trust", "trusted")
            .header("content-type", "application/json")
            .body(())
            .unwrap_or_else(|e| panic!("{e}"));
        let route = Route::peer_door("http://localhost:4242", &Secret::new("mft1.p.s".into()), "untrusted");
        let out = rewrite(request, &route).unwrap_or_else(|| panic!("rewrites"));
        // Dialled at the socket the door bound; `Host` as the door is advertised.
        assert_eq!(out.uri().to_string(), "http://127.0.0.1:4242/rpc?x=1");
        let h = out.headers();
        assert_eq!(h.get("host").map(|v| v.as_bytes()), Some(&b"localhost:4242"[..]));
        assert_eq!(h.get_all("authorization").iter().count(), 1);
        assert_eq!(
            h.get("authorization").map(|v| v.as_bytes()),
            Some(&b"Bearer mft1.p.s"[..])
        );
        assert!(h.get("authorization").is_some_and(|v| v.is_sensitive()));
        assert_eq!(h.get("x-murmur-task-origin").map(|v| v.as_bytes()), Some(&b"peer"[..]));
        assert_eq!(
            h.get("x-murmur-task-trust").map(|v| v.as_bytes()),
            Some(&b"untrusted"[..])
        );
        assert_eq!(
            h.get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        assert!(
            !format!("{route:?}").contains("mft1.p.s"),
            "Debug must not show the token"
        );
    }

    #[test]
    fn rewrite_refuses_a_route_that_names_no_door() {
        for base in [
            "http://[::1]:4242",
            "http://example.com:4242",
            "https://localhost:4242",
            "http://localhost",
            "http://127.0.0.2:4242",
        ] {
            let request = http::Request::builder()
                .uri("http://coder.formation.invalid/")
                .body(())
                .unwrap_or_else(|e| panic!("{e}"));
            let route = Route::peer_door(base, &Secret::new("mft1.p.s".into()), "untrusted");
            assert!(rewrite(request, &route).is_none(), "{base}");
        }
    }

    #[test]
    fn hook_denies_formation_addresses_before_connecting() {
        // A connection attempt would fail with a DNS or connect error instead: `HttpRequestDenied`
        // shows the policy answered before any socket was opened.
        let mut hooks = PolicyHooks {
            policy: Arc::new(NetworkPolicy::new(AllowList::parse(&["localhost"]))),
        };
        let body = WasiBody::default();
        let request = http::Request::builder()
            .uri("http://x.formation.invalid/")
            .body(body)
            .unwrap_or_else(|e| panic!("{e}"));
        let fut = hooks.send_request(request, None, Box::new(async { Ok(()) }));
        let result = block_on(Box::into_pin(fut));
        assert!(
            matches!(result, Err(wasmtime_wasi_http::Error::HttpRequestDenied)),
            "{:?}",
            result.err()
        );
    }

    /// Resolves every member to one door URL.
    struct Door(String);

    impl PeerResolver for Door {
        fn resolve<'a>(&'a self, _member: &'a str) -> BoxFuture<'a, Option<Route>> {
            let route = Route::peer_door(&self.0, &Secret::new("mft1.p.s".into()), "trusted");
            Box::pin(async move { Some(route) })
        }
    }

    #[test]
    fn hook_sends_a_routed_request_to_the_door() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = listener
            .local_addr()
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("{e}"));
        let door = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
            String::from_utf8_lossy(&head).to_ascii_lowercase()
        });
        let policy = NetworkPolicy::new(AllowList::parse(&["127.0.0.1"]))
            .with_peers(Arc::new(Door(format!("http://127.0.0.1:{port}"))));
        let mut hooks = PolicyHooks {
            policy: Arc::new(policy),
        };
        let request = http::Request::builder()
            .uri("http://coder.formation.invalid/rpc?x=1")
            .header("host", "coder.formation.invalid")
            .header("authorization", "Bearer stolen")
            .header("x-murmur-grant", "mgr2.wider-deadline.forged")
            .body(WasiBody::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let fut = hooks.send_request(request, None, Box::new(async { Ok(()) }));
        let status = rt.block_on(async { Box::into_pin(fut).await.map(|(res, _io)| res.status().as_u16()) });
        assert_eq!(status.ok(), Some(200));
        let head = door.join().unwrap_or_else(|_| panic!("door thread"));
        assert!(head.starts_with("get /rpc?x=1 http/1.1\r\n"), "{head}");
        assert!(head.contains(&format!("host: 127.0.0.1:{port}\r\n")), "{head}");
        assert!(head.contains("authorization: bearer mft1.p.s\r\n"), "{head}");
        assert!(!head.contains("stolen"), "{head}");
        assert!(
            !head.contains("x-murmur-grant"),
            "a component's own grant never reaches the door: {head}"
        );
        assert!(head.contains("x-murmur-task-origin: peer\r\n"), "{head}");
        assert!(head.contains("x-murmur-task-trust: trusted\r\n"), "{head}");
    }
}
