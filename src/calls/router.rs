//! The VirtualPeerRouter (docs/reference/formation.md#the-formation-channel,
//! docs/reference/capsules.md#calls-by-address, docs/architecture.md): the member's address book of
//! callees, as an actix actor.
//!
//! It holds the token of each edge this member may call (from the channel's first line) and the
//! door URLs the channel's address lines deliver. `Resolve{name}` answers a route (URL and token)
//! or a denial: a name that is not a callee is denied at once; a callee whose URL has not arrived
//! is waited for up to the address wait (10 s); after the channel's end of file an unknown URL is
//! denied at once, while known ones keep resolving. Tokens never leave except inside a
//! [`PeerRoute`], whose `Debug` hides them.
//!
//! A callee's address may carry the key its door signs its card with, as the launcher's probe
//! learned it. Before the first route to that door is handed out, the router reads the door's
//! public card and checks its signature under that key (docs/reference/door.md#agent-card): a
//! door whose card does not verify is never called (E-RUN-054), whatever the call path (a model's
//! or component's `call-member`, a virtual peer address). The check runs once per address.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::channel::{self, ChannelEvent};
use crate::secret::Secret;

use super::client::PeerRoute;

/// A callee's door as its address line named it, and where the check of its card stands.
#[derive(Debug, Clone)]
struct Known {
    url: String,
    door: Option<channel::DoorIdentity>,
    card: CardCheck,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum CardCheck {
    /// The launcher handed no key for this door: nothing to check (a key-less launcher).
    NoKey,
    /// The key, not checked yet.
    Unchecked(String),
    /// Being read.
    Pending,
    Verified,
    Refused,
}

/// How long reading a callee's card may take before its door is refused.
const CARD_READ: Duration = Duration::from_secs(5);

/// The largest card read: a card is a few KiB.
const MAX_CARD: usize = 64 << 10;

/// Why a name did not resolve. Every denial looks the same to a component
/// (docs/reference/capsules.md#calls-by-address); the reason is for the caller's own diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Not a member this member may call (or no member at all).
    NotCallee,
    /// The channel ended without this callee's URL.
    Closed,
    /// The URL did not arrive within the address wait.
    TimedOut,
    /// The router is gone (the session is ending).
    Gone,
    /// The launcher withdrew the callee: its process ended while the formation goes on.
    Withdrawn,
    /// Its door's agent card did not verify under the key the launcher handed for it.
    CardRefused,
}

impl Denial {
    /// A short reason, for a call's output.
    pub fn reason(self) -> &'static str {
        match self {
            Denial::NotCallee => "it is not a member this capsule may call",
            Denial::Closed => "the formation channel closed without its door address",
            Denial::TimedOut => "its door address did not arrive in time",
            Denial::Gone => "the session is ending",
            Denial::Withdrawn => "its process has ended, and the launcher withdrew its door",
            Denial::CardRefused => {
                "its door's agent card does not verify under the key its launcher handed (error[E-RUN-054])"
            }
        }
    }
}

/// The answer to [`Resolve`].
#[derive(Debug, Clone)]
pub enum Resolution {
    Route(PeerRoute),
    Denied(Denial),
}

/// Resolves a callee's roster name to its route, waiting for its URL as
/// docs/reference/capsules.md#calls-by-address says.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Resolution")]
pub struct Resolve {
    pub name: String,
}

/// One event of the formation channel's reader, forwarded as it comes.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Channel(pub ChannelEvent);

/// Resolves a callee once its door is another than the one a call followed its task at (the
/// launcher restarted it: docs/reference/formation.md#calls-across-a-restart), or it is denied;
/// waits at most `wait`, then denies with [`Denial::TimedOut`].
#[derive(Debug, Clone, Message)]
#[rtype(result = "Resolution")]
pub struct ResolveMoved {
    pub name: String,
    /// The door the call lost: its URL and its identity.
    pub from: (String, Option<channel::DoorIdentity>),
    pub wait: Duration,
}

struct Waiter {
    name: String,
    /// For a [`ResolveMoved`]: the door that does not count.
    moved_from: Option<(String, Option<channel::DoorIdentity>)>,
    tx: oneshot::Sender<Resolution>,
}

/// Logs a line behind the member runtime's prefix (the session's console).
type Notes = Box<dyn Fn(&str)>;

/// The address book actor. Start it on the session's actix system, feed it every
/// [`ChannelEvent`] as [`Channel`], and ask it [`Resolve`].
pub struct VirtualPeerRouter {
    /// Each callee's token: a secret the member holds, so what its servers echo is scrubbed of it.
    tokens: HashMap<String, Secret>,
    urls: HashMap<String, Known>,
    /// Callees the launcher withdrew; never resolved again (a withdrawn door is not re-issued).
    withdrawn: std::collections::HashSet<String>,
    closed: bool,
    wait: Duration,
    waiters: Vec<Waiter>,
    notes: Option<Notes>,
}

impl fmt::Debug for VirtualPeerRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut callees: Vec<&String> = self.tokens.keys().collect();
        callees.sort();
        f.debug_struct("VirtualPeerRouter")
            .field("callees", &callees)
            .field("known", &self.urls.len())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl VirtualPeerRouter {
    /// The router of a member whose first line lists `calls` (one token per callee); `wait`
    /// bounds the wait for a URL not yet known (`Timing::address_wait`, 10 s).
    pub fn new(calls: &[channel::Call], wait: Duration) -> VirtualPeerRouter {
        VirtualPeerRouter {
            tokens: calls.iter().map(|c| (c.name.clone(), c.token.clone())).collect(),
            urls: HashMap::new(),
            withdrawn: Default::default(),
            closed: false,
            wait,
            waiters: Vec::new(),
            notes: None,
        }
    }

    /// Where the notice about an unreadable address line goes
    /// (docs/reference/formation.md#the-formation-channel), e.g. the session's console behind
    /// `[capsule-runtime] `. Without it the notice is dropped.
    pub fn with_notes(mut self, notes: impl Fn(&str) + 'static) -> VirtualPeerRouter {
        self.notes = Some(Box::new(notes));
        self
    }

    /// The answer available now, if any.
    fn lookup(&self, name: &str) -> Option<Resolution> {
        let Some(token) = self.tokens.get(name) else {
            return Some(Resolution::Denied(Denial::NotCallee));
        };
        if self.withdrawn.contains(name) {
            return Some(Resolution::Denied(Denial::Withdrawn));
        }
        if let Some(known) = self.urls.get(name) {
            return match known.card {
                CardCheck::NoKey | CardCheck::Verified => Some(Resolution::Route(PeerRoute::new(
                    known.url.clone(),
                    known.door.clone(),
                    token.clone(),
                ))),
                CardCheck::Refused => Some(Resolution::Denied(Denial::CardRefused)),
                CardCheck::Unchecked(_) | CardCheck::Pending => None,
            };
        }
        self.closed.then_some(Resolution::Denied(Denial::Closed))
    }

    /// As [`VirtualPeerRouter::lookup`], except that the door `from` is not an answer yet: a
    /// newer address is awaited, unless none can come any more.
    fn lookup_moved(&self, name: &str, from: &(String, Option<channel::DoorIdentity>)) -> Option<Resolution> {
        let same = self.urls.get(name).is_some_and(|k| k.url == from.0 && k.door == from.1);
        if same && !self.withdrawn.contains(name) {
            return self.closed.then_some(Resolution::Denied(Denial::Closed));
        }
        self.lookup(name)
    }

    /// The answer for `name` now, if any: a door other than `moved_from`, when given.
    fn answer(&self, name: &str, moved_from: Option<&(String, Option<channel::DoorIdentity>)>) -> Option<Resolution> {
        match moved_from {
            Some(from) => self.lookup_moved(name, from),
            None => self.lookup(name),
        }
    }

    /// Answers every waiter whose answer is now known.
    fn wake(&mut self) {
        let waiters = std::mem::take(&mut self.waiters);
        for w in waiters {
            match self.answer(&w.name, w.moved_from.as_ref()) {
                Some(r) => {
                    let _ = w.tx.send(r);
                }
                None if w.tx.is_closed() => {}
                None => self.waiters.push(w),
            }
        }
    }
}

impl Actor for VirtualPeerRouter {
    type Context = Context<Self>;
}

impl Handler<Channel> for VirtualPeerRouter {
    type Result = ();

    fn handle(&mut self, msg: Channel, ctx: &mut Context<Self>) {
        match msg.0 {
            ChannelEvent::Addresses(line) => {
                for a in line.addresses {
                    // Names that are not callees are ignored
                    // (docs/reference/formation.md#the-formation-channel).
                    if self.tokens.contains_key(&a.name) && !self.withdrawn.contains(&a.name) {
                        let card = a.card_key.map_or(CardCheck::NoKey, CardCheck::Unchecked);
                        self.urls.insert(
                            a.name,
                            Known {
                                url: a.url,
                                door: a.door,
                                card,
                            },
                        );
                    }
                }
                for name in line.withdrawn {
                    if self.tokens.contains_key(&name) {
                        self.urls.remove(&name);
                        self.withdrawn.insert(name);
                    }
                }
            }
            ChannelEvent::Unreadable(why) => {
                if let Some(notes) = &self.notes {
                    notes(&channel::intake::unreadable_notice(&why));
                }
            }
            ChannelEvent::Closed => self.closed = true,
        }
        // An address that arrived while a call waited for it has its card read now.
        let waited: Vec<String> = self.waiters.iter().map(|w| w.name.clone()).collect();
        for name in waited {
            self.check_card(&name, ctx);
        }
        self.wake();
    }
}

impl Handler<Resolve> for VirtualPeerRouter {
    type Result = ResponseFuture<Resolution>;

    fn handle(&mut self, msg: Resolve, ctx: &mut Context<Self>) -> Self::Result {
        let wait = self.wait;
        self.answer_or_wait(msg.name, None, wait, ctx)
    }
}

impl Handler<ResolveMoved> for VirtualPeerRouter {
    type Result = ResponseFuture<Resolution>;

    fn handle(&mut self, msg: ResolveMoved, ctx: &mut Context<Self>) -> Self::Result {
        self.answer_or_wait(msg.name, Some(msg.from), msg.wait, ctx)
    }
}

impl VirtualPeerRouter {
    /// The answer for `name` (a door other than `moved_from`, when given) now, or once an
    /// address line (or a card check) gives it, waiting at most `wait`.
    fn answer_or_wait(
        &mut self,
        name: String,
        moved_from: Option<(String, Option<channel::DoorIdentity>)>,
        wait: Duration,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Resolution> {
        if let Some(r) = self.answer(&name, moved_from.as_ref()) {
            return Box::pin(std::future::ready(r));
        }
        self.check_card(&name, ctx);
        let (tx, rx) = oneshot::channel();
        self.waiters.retain(|w| !w.tx.is_closed());
        self.waiters.push(Waiter { name, moved_from, tx });
        Box::pin(async move {
            match tokio::time::timeout(wait, rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Resolution::Denied(Denial::Gone),
                Err(_) => Resolution::Denied(Denial::TimedOut),
            }
        })
    }
}

impl VirtualPeerRouter {
    /// Starts reading `name`'s card when its door has a key not checked yet; the waiters wake
    /// when the check ends.
    fn check_card(&mut self, name: &str, ctx: &mut Context<Self>) {
        let (Some(known), Some(token)) = (self.urls.get_mut(name), self.tokens.get(name)) else {
            return;
        };
        let CardCheck::Unchecked(key) = &known.card else {
            return;
        };
        let key = key.clone();
        known.card = CardCheck::Pending;
        let route = PeerRoute::new(known.url.clone(), known.door.clone(), token.clone());
        let (name, url) = (name.to_string(), known.url.clone());
        let check = async move { read_card(route, &key).await };
        ctx.spawn(check.into_actor(self).map(move |outcome, act, _ctx| {
            act.card_checked(&name, &url, outcome);
        }));
    }

    fn card_checked(&mut self, name: &str, url: &str, outcome: Result<(), String>) {
        let Some(known) = self.urls.get_mut(name) else {
            return;
        };
        // A newer address replaced the one read: its own check decides.
        if known.url != url || known.card != CardCheck::Pending {
            return;
        }
        match outcome {
            Ok(()) => known.card = CardCheck::Verified,
            Err(why) => {
                known.card = CardCheck::Refused;
                if let Some(notes) = &self.notes {
                    notes(
                        &crate::diag::Diagnostic::new(
                            crate::diag::E_RUN_054,
                            format!(
                                "the door of '{name}' showed an agent card that does not verify under the key the \
                                 launcher handed for it ({why}), so no call goes to it"
                            ),
                        )
                        .to_string(),
                    );
                }
            }
        }
        self.wake();
    }
}

/// Reads the door's public card and checks its signature under `key` (base64url).
async fn read_card(route: PeerRoute, key: &str) -> Result<(), String> {
    let Some(key) = crate::card_sig::CardVerifyKey::from_b64(key) else {
        return Err("the key is not an Ed25519 public key".into());
    };
    let client = super::client::DoorClient::new(route, crate::tasks::Trust::Untrusted, CARD_READ);
    let body = client.card(CARD_READ, MAX_CARD).await?;
    let card: serde_json::Value = serde_json::from_slice(&body).map_err(|_| "the card is not JSON".to_string())?;
    crate::card_sig::verify(&card, &key).map_err(|e| e.to_string())
}

/// Asks `router` to resolve `name`; a router that is gone denies.
pub async fn resolve(router: &Addr<VirtualPeerRouter>, name: &str) -> Resolution {
    router
        .send(Resolve { name: name.to_string() })
        .await
        .unwrap_or(Resolution::Denied(Denial::Gone))
}

/// Asks `router` for `name`'s door once it is another than `from`, waiting at most `wait`.
pub async fn resolve_moved(
    router: &Addr<VirtualPeerRouter>,
    name: &str,
    from: (String, Option<channel::DoorIdentity>),
    wait: Duration,
) -> Resolution {
    router
        .send(ResolveMoved {
            name: name.to_string(),
            from,
            wait,
        })
        .await
        .unwrap_or(Resolution::Denied(Denial::Gone))
}
