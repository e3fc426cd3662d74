//! The outgoing-HTTP policy of a component (docs/reference/capsules.md#calls-by-address,
//! docs/reference/capsules.md#component-capsules).
//!
//! Every request a component sends through `wasi:http/outgoing-handler` reaches
//! [`PolicyHooks::send_request`] before any connection is made. The hook asks an [`HttpPolicy`]
//! what to do with it: send it as written, send it to another base URL with extra headers (a
//! virtual peer address resolved to a member's door), or refuse it with `HttpRequestDenied`.
//!
//! [`NetworkPolicy`] is the policy the session uses: `*.formation.invalid` is never sent as
//! written (docs/reference/capsules.md#calls-by-address) — it is routed through a [`PeerResolver`]
//! when one is given and the member may be called, else refused — and every other host must pass
//! `capabilities.network.allow`. The bare `localhost` a caller declares lets the runtime's routes
//! reach doors; a request sent as written to a loopback host needs a rule that names its port
//! ([`AllowList::allows_direct`]). A routed request is dialled at the door's socket, 127.0.0.1,
//! never at a resolved name.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use ::http::header::{HeaderName, HeaderValue};
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use super::BoxFuture;
use crate::address::allow::AllowList;
use crate::address::virtual_peer;
use crate::channel;

/// Where a component's request is going, as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingTarget {
    /// Lowercase scheme (`http`, `https`).
    pub scheme: String,
    /// The authority exactly as written, port and any userinfo included.
    pub authority: String,
    /// The host, without port (IPv6 keeps its brackets).
    pub host: String,
    /// The port as written, if any.
    pub port: Option<u16>,
    /// Path and query (`/` when empty).
    pub path_and_query: String,
}

impl OutgoingTarget {
    /// Reads an absolute URL such as `http://coder.formation.invalid/a?b`.
    pub fn from_url(url: &str) -> Option<OutgoingTarget> {
        let uri: http::Uri = url.parse().ok()?;
        OutgoingTarget::from_uri(&uri)
    }

    fn from_uri(uri: &http::Uri) -> Option<OutgoingTarget> {
        let authority = uri.authority()?;
        Some(OutgoingTarget {
            scheme: uri.scheme_str()?.to_ascii_lowercase(),
            authority: authority.as_str().to_string(),
            host: authority.host().to_string(),
            port: authority.port_u16(),
            path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }

    /// The member name of a virtual peer address, when this target is one that may be routed:
    /// scheme `http`, authority exactly `<member>.formation.invalid` (no port, no userinfo).
    pub fn virtual_member(&self) -> Option<&str> {
        virtual_peer::member(&self.scheme, &self.authority)
    }

    /// Whether the host is `formation.invalid` or under it (case-insensitive): such a request is
    /// never sent as written.
    pub fn is_formation_address(&self) -> bool {
        virtual_peer::is_formation_host(&self.host)
    }
}

/// Where to send a request instead of its written address.
#[derive(Clone, PartialEq, Eq)]
pub struct Route {
    /// The door URL of the destination, `http://localhost:P` (the request keeps its own path
    /// and query). Anything that is not a door URL is refused when the request is sent.
    pub base_url: String,
    /// Headers to set, replacing any the component set under the same name.
    pub headers: Vec<RouteHeader>,
    /// The door as the launcher vouched for it: when present the request goes through its Unix
    /// socket, to that process alone (`peer_door`), never to the port in `base_url`.
    pub door: Option<channel::DoorIdentity>,
}

/// One header a [`Route`] sets.
#[derive(Clone, PartialEq, Eq)]
pub struct RouteHeader {
    pub name: String,
    pub value: String,
    /// Marked sensitive on the wire (never logged, not HPACK-indexed).
    pub sensitive: bool,
}

impl Route {
    /// The route to a member's door for a virtual peer address
    /// (docs/reference/capsules.md#calls-by-address): the bearer token of the edge, origin `peer`,
    /// and the trust class of the task in scope (`trusted`/`untrusted`).
    pub fn peer_door(door_url: &str, token: &str, trust: &str) -> Route {
        Route {
            base_url: door_url.to_string(),
            door: None,
            headers: vec![
                RouteHeader {
                    name: "authorization".into(),
                    value: format!("Bearer {token}"),
                    sensitive: true,
                },
                RouteHeader {
                    name: "x-murmur-task-origin".into(),
                    value: "peer".into(),
                    sensitive: false,
                },
                RouteHeader {
                    name: "x-murmur-task-trust".into(),
                    value: trust.into(),
                    sensitive: false,
                },
            ],
        }
    }
}

// Tokens ride in route headers, so Debug never prints a sensitive value.
impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("base_url", &self.base_url)
            .field("headers", &self.headers)
            .finish()
    }
}

impl fmt::Debug for RouteHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = if self.sensitive {
            "<redacted>"
        } else {
            self.value.as_str()
        };
        write!(f, "{}: {}", self.name, value)
    }
}

/// What to do with one outgoing request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpDecision {
    /// Send it as written.
    PassThrough,
    /// Send it to another base URL. Any `Authorization`, `x-murmur-task-origin` and
    /// `x-murmur-task-trust` the component set are dropped first
    /// (docs/reference/capsules.md#calls-by-address), then the route's headers are set, and `Host`
    /// becomes the destination's.
    Route(Route),
    /// Refuse it before any connection: the component sees `HttpRequestDenied`.
    Deny,
}

/// Decides, per request, how a component's outgoing HTTP is sent.
pub trait HttpPolicy: Send + Sync {
    fn decide<'a>(&'a self, target: &'a OutgoingTarget) -> BoxFuture<'a, HttpDecision>;
}

/// Resolves a callee's roster name to the route to its door
/// (docs/reference/capsules.md#calls-by-address): `None` refuses. The session's implementation
/// waits up to 10 s for the address line and knows the task's trust.
pub trait PeerResolver: Send + Sync {
    fn resolve<'a>(&'a self, member: &'a str) -> BoxFuture<'a, Option<Route>>;
}

/// The session's policy: virtual peer addresses through `peers`, everything else by the allow
/// list. Without `peers`, every `*.formation.invalid` request is refused.
pub struct NetworkPolicy {
    allow: AllowList,
    peers: Option<Arc<dyn PeerResolver>>,
}

impl NetworkPolicy {
    /// A policy that lets through what `allow` allows and refuses every formation address.
    pub fn new(allow: AllowList) -> NetworkPolicy {
        NetworkPolicy { allow, peers: None }
    }

    /// Routes virtual peer addresses through `peers`.
    pub fn with_peers(mut self, peers: Arc<dyn PeerResolver>) -> NetworkPolicy {
        self.peers = Some(peers);
        self
    }

    /// Refuses every request.
    pub fn deny_all() -> NetworkPolicy {
        NetworkPolicy::new(AllowList::default())
    }

    async fn decide_async(&self, target: &OutgoingTarget) -> HttpDecision {
        if target.is_formation_address() {
            // One refusal for every failure, whether the name is a member or not
            // (docs/reference/capsules.md#calls-by-address).
            let (Some(member), Some(peers)) = (target.virtual_member(), &self.peers) else {
                return HttpDecision::Deny;
            };
            return match peers.resolve(member).await {
                Some(route) if self.allow.allows_url(&route.base_url) => HttpDecision::Route(route),
                _ => HttpDecision::Deny,
            };
        }
        // Sent as written: a loopback host only at a port the list names (see `allow`).
        if self.allow.allows_direct(&target.scheme, &target.host, target.port) {
            HttpDecision::PassThrough
        } else {
            HttpDecision::Deny
        }
    }
}

impl HttpPolicy for NetworkPolicy {
    fn decide<'a>(&'a self, target: &'a OutgoingTarget) -> BoxFuture<'a, HttpDecision> {
        Box::pin(self.decide_async(target))
    }
}

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
const ROUTE_DROPPED: [&str; 3] = ["authorization", "x-murmur-task-origin", "x-murmur-task-trust"];

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
        let mut value = HeaderValue::from_str(&h.value).ok()?;
        value.set_sensitive(h.sensitive);
        headers.insert(name, value);
    }
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn target(url: &str) -> OutgoingTarget {
        OutgoingTarget::from_url(url).unwrap_or_else(|| panic!("{url} parses"))
    }

    /// Knows one callee, `coder`, at a loopback door; records what it was asked.
    struct OnePeer {
        asked: Mutex<Vec<String>>,
    }

    impl PeerResolver for OnePeer {
        fn resolve<'a>(&'a self, member: &'a str) -> BoxFuture<'a, Option<Route>> {
            crate::sync::lock(&self.asked).push(member.to_string());
            let route = (member == "coder").then(|| Route::peer_door("http://localhost:4242", "mft1.x.y", "untrusted"));
            Box::pin(async move { route })
        }
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map(|rt| rt.block_on(f))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn virtual_addresses_are_read_strictly() {
        let table: &[(&str, Option<&str>, bool)] = &[
            ("http://coder.formation.invalid/", Some("coder"), true),
            ("http://coder.formation.invalid/a?b=c", Some("coder"), true),
            ("https://coder.formation.invalid/", None, true),
            ("http://coder.formation.invalid:80/", None, true),
            ("http://u@coder.formation.invalid/", None, true),
            ("http://Coder.formation.invalid/", None, true),
            ("http://coder.FORMATION.INVALID/", None, true),
            ("http://a.b.formation.invalid/", None, true),
            ("http://formation.invalid/", None, true),
            ("http://x.formation.invalid/", Some("x"), true),
            ("http://coder.formation.invalid.example.com/", None, false),
            ("http://localhost:4242/", None, false),
        ];
        for (url, member, formation) in table {
            let t = target(url);
            assert_eq!(t.virtual_member(), *member, "{url}");
            assert_eq!(t.is_formation_address(), *formation, "{url}");
        }
    }

    #[test]
    fn default_policy_refuses_formation_addresses_and_applies_the_allow_list() {
        let policy = NetworkPolicy::new(AllowList::parse(&[
            "localhost",
            "localhost:8080",
            "https://api.example.com",
        ]));
        let table: &[(&str, HttpDecision)] = &[
            ("http://x.formation.invalid/", HttpDecision::Deny),
            ("http://coder.formation.invalid/", HttpDecision::Deny),
            // The bare `localhost` is for routed calls; loopback only at a named port.
            ("http://localhost:4242/", HttpDecision::Deny),
            ("http://localhost/", HttpDecision::Deny),
            ("http://localhost:8080/", HttpDecision::PassThrough),
            ("http://LOCALHOST:8080/x", HttpDecision::PassThrough),
            ("https://api.example.com/v1/chat", HttpDecision::PassThrough),
            ("http://api.example.com/", HttpDecision::Deny),
            ("http://127.0.0.1:4242/", HttpDecision::Deny),
            ("https://example.org/", HttpDecision::Deny),
        ];
        for (url, want) in table {
            assert_eq!(block_on(policy.decide(&target(url))), *want, "{url}");
        }
        assert_eq!(
            block_on(NetworkPolicy::deny_all().decide(&target("http://localhost/"))),
            HttpDecision::Deny
        );
    }

    #[test]
    fn peers_are_routed_only_when_resolved_and_allowed() {
        let peers = Arc::new(OnePeer {
            asked: Mutex::new(Vec::new()),
        });
        let with_localhost = NetworkPolicy::new(AllowList::parse(&["localhost"])).with_peers(peers.clone());
        let route = Route::peer_door("http://localhost:4242", "mft1.x.y", "untrusted");
        assert_eq!(
            block_on(with_localhost.decide(&target("http://coder.formation.invalid/"))),
            HttpDecision::Route(route)
        );
        // Not a callee, or not a valid address: refused, the same way.
        assert_eq!(
            block_on(with_localhost.decide(&target("http://reviewer.formation.invalid/"))),
            HttpDecision::Deny
        );
        assert_eq!(
            block_on(with_localhost.decide(&target("http://coder.formation.invalid:81/"))),
            HttpDecision::Deny
        );
        // The roster grants a name, never network access: no loopback rule, no call.
        let without = NetworkPolicy::new(AllowList::parse(&["example.com"])).with_peers(peers.clone());
        assert_eq!(
            block_on(without.decide(&target("http://coder.formation.invalid/"))),
            HttpDecision::Deny
        );
        let asked = crate::sync::lock(&peers.asked).clone();
        assert_eq!(asked, ["coder", "reviewer", "coder"]);
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
        let route = Route::peer_door("http://localhost:4242", "mft1.p.s", "untrusted");
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
            let route = Route::peer_door(base, "mft1.p.s", "untrusted");
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
            let route = Route::peer_door(&self.0, "mft1.p.s", "trusted");
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
        assert!(head.contains("x-murmur-task-origin: peer\r\n"), "{head}");
        assert!(head.contains("x-murmur-task-trust: trusted\r\n"), "{head}");
    }
}
