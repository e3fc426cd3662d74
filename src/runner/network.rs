//! The outgoing-HTTP decision of a task (docs/reference/capsules.md#calls-by-address,
//! docs/reference/capsules.md#component-capsules).
//!
//! Every request a component or a WebAssembly tool sends through
//! `wasi:http/outgoing-handler` is put to an [`HttpPolicy`] before any connection is made
//! (`capsule`'s hook): send it as written, send it to another base URL with extra headers (a
//! virtual peer address resolved to a member's door), or refuse it with `HttpRequestDenied`.
//!
//! [`NetworkPolicy`] is the policy the session uses: `*.formation.invalid` is never sent as
//! written (docs/reference/capsules.md#calls-by-address) — it is routed through a [`PeerResolver`]
//! when one is given and the member may be called, else refused — and every other host must pass
//! `capabilities.network.allow`. The bare `localhost` a caller declares lets the runtime's routes
//! reach doors; a request sent as written to a loopback host needs a rule that names its port
//! ([`AllowList::allows_direct`]). A routed request is dialled at the door's socket, 127.0.0.1,
//! never at a resolved name.

use std::sync::Arc;

use super::BoxFuture;
pub use crate::address::allow::{AllowList, AllowRule};
use crate::address::virtual_peer;
use crate::channel;
use crate::secret::Secret;

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

    /// Reads a request's URI (what the `wasi:http` hook is handed); `None` when it is not
    /// absolute.
    pub fn from_uri(uri: &http::Uri) -> Option<OutgoingTarget> {
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteHeader {
    pub name: String,
    pub value: RouteValue,
}

/// A [`RouteHeader`]'s value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteValue {
    /// Sent as written.
    Plain(String),
    /// `Bearer <token>`: the token is revealed only where the header is written, and the header
    /// is marked sensitive there (never logged, not HPACK-indexed).
    Bearer(Secret),
}

impl Route {
    /// The route to a member's door for a virtual peer address
    /// (docs/reference/capsules.md#calls-by-address): the bearer token of the edge, origin `peer`,
    /// and the trust class of the task in scope (`trusted`/`untrusted`).
    pub fn peer_door(door_url: &str, token: &Secret, trust: &str) -> Route {
        Route {
            base_url: door_url.to_string(),
            door: None,
            headers: vec![
                RouteHeader {
                    name: "authorization".into(),
                    value: RouteValue::Bearer(token.clone()),
                },
                RouteHeader {
                    name: "x-murmur-task-origin".into(),
                    value: RouteValue::Plain("peer".into()),
                },
                RouteHeader {
                    name: "x-murmur-task-trust".into(),
                    value: RouteValue::Plain(trust.into()),
                },
            ],
        }
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
#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
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
            let route = (member == "coder")
                .then(|| Route::peer_door("http://localhost:4242", &Secret::new("mft1.x.y".into()), "untrusted"));
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
        let route = Route::peer_door("http://localhost:4242", &Secret::new("mft1.x.y".into()), "untrusted");
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
}
