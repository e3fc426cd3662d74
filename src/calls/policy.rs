//! The wasi:http glue (docs/reference/capsules.md#calls-by-address): a component's request to
//! `http://<member>.formation.invalid` is resolved by the VirtualPeerRouter, checked against the
//! component's `capabilities.network.allow`, and sent to the real door with the edge's token and
//! the task's trust class stamped over whatever the component set.
//!
//! The decision is `crate::runner`'s ([`NetworkPolicy`], [`Route::peer_door`]) and the
//! interception and header rewrite the capsule host's; this module supplies the policy's
//! [`PeerResolver`], backed by the router.

use std::sync::Arc;

use actix::Addr;

use super::router::{self, Resolution, VirtualPeerRouter};
use crate::runner::authority::{Authority, Undelegated};
use crate::runner::{AllowList, BoxFuture, NetworkPolicy, PeerResolver, Route, RouteHeader, RouteValue};
use crate::tasks::Trust;

/// Resolves virtual peer addresses for one task through the router, stamping the task's trust
/// (and, when spans are exported, the task span's `traceparent`, over any the component set).
#[derive(Debug, Clone)]
pub struct PeerRoutes {
    router: Addr<VirtualPeerRouter>,
    trust: Trust,
    task_id: String,
    /// The launcher's authority and the grant the task's requests are narrowed from: each routed
    /// request carries a grant of its own (docs/reference/formation.md#grants).
    granting: Option<Granting>,
}

/// The authority, the grant a task's requests are narrowed from, and the grants prepared for
/// them.
pub(crate) type Granting = (Arc<Authority>, super::Parent, Option<Arc<super::prepared::TaskGrants>>);

impl PeerRoutes {
    pub fn new(router: Addr<VirtualPeerRouter>, trust: Trust, task_id: &str) -> PeerRoutes {
        PeerRoutes {
            router,
            trust,
            task_id: task_id.to_string(),
            granting: None,
        }
    }
}

impl PeerResolver for PeerRoutes {
    fn resolve<'a>(&'a self, member: &'a str) -> BoxFuture<'a, Option<Route>> {
        Box::pin(async move {
            match router::resolve(&self.router, member).await {
                Resolution::Route(r) => {
                    let mut route = Route::peer_door(&r.url, r.token(), self.trust.as_str());
                    route.door = r.door.clone();
                    // The runtime writes the grant; the component's own is dropped by the host
                    // (`ROUTE_DROPPED`). A refused grant refuses the route.
                    if let Some((authority, parent, prepared)) = &self.granting {
                        let ready = prepared.as_ref().and_then(|p| p.take(member)).map(Ok);
                        let got = ready
                            .unwrap_or_else(|| authority.delegate(parent.clone(), &self.task_id, member, None, None));
                        if let Some(p) = prepared {
                            p.replenish(member);
                        }
                        match got {
                            Ok(grant) => route.headers.push(RouteHeader {
                                name: crate::grant::HEADER.into(),
                                value: RouteValue::Plain(grant),
                            }),
                            Err(Undelegated::Refused(_)) => return None,
                            Err(Undelegated::Unreachable(_)) => {}
                        }
                    }
                    if let Some(tp) = crate::otel::task_traceparent(&self.task_id) {
                        route.headers.push(RouteHeader {
                            name: "traceparent".into(),
                            value: RouteValue::Plain(tp),
                        });
                    }
                    Some(route)
                }
                // One refusal for every reason (docs/reference/capsules.md#calls-by-address).
                Resolution::Denied(_) => None,
            }
        })
    }
}

/// The outgoing-HTTP policy of one task: `allow` for ordinary hosts, and virtual peer addresses
/// through `router`, checked against `allow` too (the roster grants a name, never network
/// access).
pub fn task_policy(allow: &AllowList, router: &Addr<VirtualPeerRouter>, trust: Trust, task_id: &str) -> NetworkPolicy {
    granted_task_policy(allow, router, trust, task_id, None)
}

/// [`task_policy`], each routed request granted by `granting`'s authority.
pub(crate) fn granted_task_policy(
    allow: &AllowList,
    router: &Addr<VirtualPeerRouter>,
    trust: Trust,
    task_id: &str,
    granting: Option<Granting>,
) -> NetworkPolicy {
    let mut routes = PeerRoutes::new(router.clone(), trust, task_id);
    routes.granting = granting;
    NetworkPolicy::new(allow.clone()).with_peers(Arc::new(routes))
}
