//! The one way out to the network: every HTTP request the runtime sends (to a provider, an MCP
//! tool server, a remote agent, a push webhook, a peer's door, a collector, a running door for
//! `mur send`) leaves through this module.
//!
//! Invariants:
//! - **A key goes only to a verified listener.** Every connection is either TLS with the web PKI
//!   roots ([`tls`]), a peer's door socket served by the process the launcher vouched for
//!   (`peer_door::dial`), or a loopback TCP connection whose server the kernel says is this
//!   user's ([`owner`]); the stream is handed to the client only after that check.
//! - **No redirect is followed**: one could carry a credential to another host. awc's clients are
//!   built here only, with redirects off.
//! - **A `localhost` is never resolved**: it is dialled at 127.0.0.1 (`channel::door_socket`,
//!   `manifest::endpoint::localhost_socket`).
//! - **What a foreign server sends over plain `http://` is read as HTTP/1.1 says** ([`framing`]):
//!   a body delimited by the close is read to it, a counted one never past its length.
//! - Clients of foreign servers are made once per thread and route ([`Client::new`]); a door's
//!   for each caller ([`Client::door`]). awc's futures are not `Send`, so a client never crosses
//!   threads. A caller states only what differs: the route and the
//!   [`Bounds`].
//!
//! The blocking clients (the OTLP exporter's, the operator's) dial through [`blocking`], which
//! applies the same owner check and reads replies with the same framing rules (`wire::http1`).

pub mod blocking;
mod connect;
pub mod framing;
pub mod owner;
pub mod reach;

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use awc::http::header::HeaderMap;

use crate::channel::DoorIdentity;

/// Where a client's connections go.
#[derive(Debug, Clone)]
pub enum Route<'a> {
    /// The origin of `url`: TLS for `https://`; for plain `http://`, which only a loopback URL may
    /// use (`manifest::endpoint::plain_http_allowed`), this user's listener.
    Origin(&'a str),
    /// The one address a request may go to, judged already (a push webhook's): TLS to it when
    /// `https` (the URL's host names the certificate), else this user's loopback listener there.
    Pinned { https: bool, addr: SocketAddr },
}

/// What one caller's requests are bounded by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Opening a connection (the TLS handshake included).
    pub connect: Duration,
    /// awc's bound on each request, when the client sets one; `None`: the caller bounds each
    /// request itself.
    pub request: Option<Duration>,
    /// How long an idle connection is kept. `None`: a plain-`http://` request asks for one
    /// response per connection (`Connection: close`; on loopback a new connection costs next to
    /// nothing), a TLS connection is kept awc's default time.
    pub keep_alive: Option<Duration>,
}

impl Bounds {
    /// Connections bounded by `connect`, requests by the caller.
    pub fn connect(connect: Duration) -> Bounds {
        Bounds {
            connect,
            request: None,
            keep_alive: None,
        }
    }
}

/// A client of one route. Cheap to make: the awc client under it is the thread's for that route
/// and bounds.
#[derive(Clone)]
pub struct Client {
    http: awc::Client,
    /// Where a `localhost` (or door) URL is dialled: 127.0.0.1, never a resolved name.
    address: Option<SocketAddr>,
    /// Plain `http://` without keep-alive: each request asks to close.
    close_each: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// What a thread's clients are told apart by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Tls,
    Loopback(Option<SocketAddr>),
    PinnedTls(SocketAddr),
}

/// More clients than any member makes; past it the thread's set is begun again.
const MAX_CLIENTS: usize = 64;

/// A thread's clients by route and bounds, and the id of the actix system they were made under.
type Clients = (usize, HashMap<(Key, Bounds), awc::Client>);

thread_local! {
    /// The thread's clients, and the actix system they were made under: a new system on the
    /// same thread (a test, start-up's own) begins the set again, since connections belong to
    /// the runtime that opened them.
    static CLIENTS: RefCell<Clients> = RefCell::new((0, HashMap::new()));
}

impl Client {
    /// The client for `route`, bounded by `bounds`. `Err` for a URL that is neither `https://`
    /// nor plain `http://` to loopback, or when TLS cannot be set up.
    pub fn new(route: Route<'_>, bounds: Bounds) -> Result<Client, String> {
        match route {
            Route::Origin(url) if url.starts_with("https://") => Client::tls(Key::Tls, bounds),
            Route::Origin(url) if crate::manifest::endpoint::plain_http_allowed(url) => Ok(Client::plain(
                Key::Loopback(crate::manifest::endpoint::localhost_socket(url)),
                bounds,
            )),
            Route::Origin(_) => {
                Err("its url must be https://, or plain http:// to loopback (localhost, 127.0.0.1, [::1])".into())
            }
            Route::Pinned { https: true, addr } => Client::tls(Key::PinnedTls(addr), bounds),
            Route::Pinned { https: false, addr } => Ok(Client::plain(Key::Loopback(Some(addr)), bounds)),
        }
    }

    /// The client of a member's door at `url` (`http://localhost:<port>`): through the socket
    /// the launcher vouched for when there is one, else its loopback port, this user's. A `url`
    /// that is not a door's has no address: every request fails.
    pub fn door(door: Option<&DoorIdentity>, url: &str, bounds: Bounds) -> Client {
        let address = crate::channel::door_socket(url);
        // Made for each caller, not kept for the thread: a call's first request dials the door
        // and checks who serves it then, so a door replaced since its last call is found
        // unreachable before anything is sent, never midway through the call.
        Client {
            http: build_plain(door.cloned(), address, bounds),
            address,
            close_each: false,
        }
    }

    fn tls(key: Key, bounds: Bounds) -> Result<Client, String> {
        let http = cached(key.clone(), bounds, || build_tls(&key, bounds))?;
        Ok(Client {
            http,
            address: None,
            close_each: false,
        })
    }

    fn plain(key: Key, bounds: Bounds) -> Client {
        let address = match &key {
            Key::Loopback(a) => *a,
            Key::Tls | Key::PinnedTls(_) => None,
        };
        let close_each = matches!(key, Key::Loopback(_)) && bounds.keep_alive.is_none();
        let Ok(http) = cached(key.clone(), bounds, || {
            Ok::<_, std::convert::Infallible>(build_plain(None, address, bounds))
        });
        Client {
            http,
            address,
            close_each,
        }
    }

    /// Where the route's `localhost` is dialled, when it has one.
    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// A request with what every request of this route carries: its address, and the ask to
    /// close where connections are not kept.
    pub fn request(&self, method: awc::http::Method, url: &str) -> awc::ClientRequest {
        let mut req = self.http.request(method, url);
        if let Some(a) = self.address {
            req = req.address(a);
        }
        if self.close_each {
            // Not a `Connection` header: actix-http's encoder drops any the caller sets and writes
            // its own from the head's connection type, so such a header never went out and awc
            // kept the connection in its pool for its default 15 s. A server that closed it sooner
            // (uvicorn's 5 s keep-alive) left the next request a dead connection: "connector has
            // been disconnected".
            req = req.force_close();
        }
        req
    }

    pub fn get(&self, url: &str) -> awc::ClientRequest {
        self.request(awc::http::Method::GET, url)
    }

    pub fn post(&self, url: &str) -> awc::ClientRequest {
        self.request(awc::http::Method::POST, url)
    }
}

fn cached<E>(key: Key, bounds: Bounds, make: impl FnOnce() -> Result<awc::Client, E>) -> Result<awc::Client, E> {
    // Outside an actix system (a unit test's runtime) nothing is kept.
    let Some(system) = actix_rt::System::try_current().map(|s| s.id()) else {
        return make();
    };
    CLIENTS.with(|c| {
        let mut c = c.borrow_mut();
        let (made_under, clients) = &mut *c;
        if *made_under != system || clients.len() >= MAX_CLIENTS {
            *made_under = system;
            clients.clear();
        }
        if let Some(http) = clients.get(&(key.clone(), bounds)) {
            return Ok(http.clone());
        }
        let http = make()?;
        clients.insert((key, bounds), http.clone());
        Ok(http)
    })
}

/// Every connector: no limit of its own on connections at once (the thread's client is shared
/// by all its tasks; their own bounds hold), kept as long as the caller says.
macro_rules! tuned {
    ($c:expr, $bounds:expr) => {{
        let c = $c.limit(0).timeout($bounds.connect);
        match $bounds.keep_alive {
            Some(k) => c.conn_keep_alive(k),
            None => c,
        }
    }};
}

/// A client over `connector`, following no redirect, bounded as `bounds` says.
macro_rules! client {
    ($connector:expr, $bounds:expr) => {{
        let builder = awc::Client::builder().disable_redirects().connector($connector);
        match $bounds.request {
            Some(t) => builder.timeout(t).finish(),
            None => builder.disable_timeout().finish(),
        }
    }};
}

fn build_tls(key: &Key, bounds: Bounds) -> Result<awc::Client, String> {
    let tls = tls(Alpn::Any)?;
    Ok(match key {
        Key::PinnedTls(addr) => client!(
            tuned!(awc::Connector::new().connector(connect::pinned(*addr)), bounds)
                .handshake_timeout(bounds.connect)
                .rustls_0_23(tls),
            bounds
        ),
        _ => client!(
            tuned!(awc::Connector::new(), bounds)
                .handshake_timeout(bounds.connect)
                .rustls_0_23(tls),
            bounds
        ),
    })
}

/// A client of `door`'s socket when there is one, else of this user's loopback listener at
/// `addr` (or the request's own address).
fn build_plain(door: Option<DoorIdentity>, addr: Option<SocketAddr>, bounds: Bounds) -> awc::Client {
    match door {
        Some(door) => client!(
            tuned!(
                awc::Connector::new().connector(connect::door(door, bounds.connect)),
                bounds
            ),
            bounds
        ),
        None => client!(
            tuned!(
                awc::Connector::new().connector(connect::loopback(addr, bounds.connect)),
                bounds
            ),
            bounds
        ),
    }
}

/// Which application protocols a TLS connection offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// HTTP/2 or HTTP/1.1, as awc speaks both.
    Any,
    /// None named: a client that speaks HTTP/1.1 only ([`blocking`]).
    Http1,
}

/// The one TLS configuration: rustls with ring and the web PKI roots, safe default versions, no
/// client certificate; built once per process for each [`Alpn`].
pub fn tls(alpn: Alpn) -> Result<Arc<rustls::ClientConfig>, String> {
    static ANY: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    static HTTP1: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    let (cell, protocols): (_, &[&[u8]]) = match alpn {
        Alpn::Any => (&ANY, &[b"h2", b"http/1.1"]),
        Alpn::Http1 => (&HTTP1, &[]),
    };
    cell.get_or_init(|| {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS cannot be set up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    })
    .clone()
}

/// The one reading of a reply's `Retry-After`: `retry-after-ms` (milliseconds) when sent, else
/// `retry-after` (seconds, possibly fractional, or an HTTP date; `wire::model::provider_wait`).
/// `None` when neither is there or readable.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    crate::wire::model::provider_wait(header("retry-after-ms"), header("retry-after"), now)
}

/// A header value that carries a credential: marked sensitive (kept out of awc's and http's
/// `Debug`). `None` when the text cannot be a header value.
pub fn credential(value: &str) -> Option<awc::http::header::HeaderValue> {
    let mut v = awc::http::header::HeaderValue::from_str(value).ok()?;
    v.set_sensitive(true);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_for_loopback_only() {
        let b = Bounds::connect(Duration::from_secs(1));
        let table: &[(&str, bool)] = &[
            ("http://127.0.0.1:8080/mcp", true),
            ("http://localhost:8080/mcp", true),
            ("http://[::1]:8080/mcp", true),
            ("https://tools.example.com/mcp", true),
            ("http://tools.example.com/mcp", false),
            ("http://10.0.0.1/mcp", false),
            ("ftp://127.0.0.1/mcp", false),
        ];
        for (url, ok) in table {
            assert_eq!(Client::new(Route::Origin(url), b).is_ok(), *ok, "{url}");
        }
    }

    #[test]
    fn retry_after_is_read_once_for_every_caller() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        type Row<'a> = (&'a [(&'a str, &'a str)], Option<Duration>);
        let rows: &[Row] = &[
            (&[], None),
            (&[("retry-after", "2")], Some(Duration::from_secs(2))),
            (&[("retry-after", "1.5")], Some(Duration::from_millis(1500))),
            (
                &[("retry-after", "3"), ("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            (&[("retry-after", "soon")], None),
        ];
        for (headers, want) in rows {
            let mut map = HeaderMap::new();
            for (k, v) in *headers {
                map.insert(
                    awc::http::header::HeaderName::from_static(k),
                    awc::http::header::HeaderValue::from_static(v),
                );
            }
            assert_eq!(retry_after(&map, now), *want, "{headers:?}");
        }
    }

    /// Plain `http://` to loopback is one response per connection: each request says
    /// `connection: close` on the wire and the next one dials again, so no request is ever sent
    /// on a kept connection the server may have closed meanwhile.
    #[test]
    fn each_loopback_request_closes_its_connection() {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (heads_tx, heads) = std::sync::mpsc::channel::<String>();
        // A server that keeps every connection open after answering, as a keep-alive one does:
        // a client that reused one would wait on it for an answer that never comes.
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                kept.push(stream);
                if heads_tx.send(String::from_utf8_lossy(&head).to_lowercase()).is_err() {
                    return;
                }
            }
        });
        actix_rt::System::new().block_on(async {
            let url = format!("http://127.0.0.1:{port}/x");
            let c = Client::new(Route::Origin(&url), Bounds::connect(Duration::from_secs(2))).unwrap();
            for i in 0..2 {
                let sent = actix_rt::time::timeout(Duration::from_secs(5), async {
                    let mut resp = c.get(&url).send().await.map_err(|e| e.to_string())?;
                    resp.body().await.map_err(|e| e.to_string())
                })
                .await;
                assert!(matches!(&sent, Ok(Ok(b)) if &b[..] == b"ok"), "request {i}: {sent:?}");
            }
        });
        for i in 0..2 {
            let head = heads
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("connection {i}"));
            assert!(head.contains("\r\nconnection: close\r\n"), "request {i}: {head}");
        }
    }

    #[test]
    fn a_thread_keeps_one_client_per_route_and_bounds() {
        actix_rt::System::new().block_on(async {
            let b = Bounds::connect(Duration::from_secs(1));
            let a = Client::new(Route::Origin("http://127.0.0.1:9/x"), b).unwrap();
            let again = Client::new(Route::Origin("http://127.0.0.1:9/y"), b).unwrap();
            let other = Client::new(Route::Origin("http://localhost:9/x"), b).unwrap();
            assert!(a.close_each && again.close_each);
            assert_eq!(other.address(), Some(SocketAddr::from(([127, 0, 0, 1], 9))));
            CLIENTS.with(|c| assert_eq!(c.borrow().1.len(), 2));
        });
    }
}
