//! FormationAuth (docs/reference/door.md#authentication): the actix-web middleware that checks
//! `Authorization` on an authenticating door and attaches the caller's [`Caller`] to the request,
//! plus the refusal bodies every door step answers with (401/403, `www-authenticate`).
//!
//! Each distinct token is verified once: verdicts are remembered in a `VerifyCache` keyed by the
//! token's hash. No token is ever logged or copied into a response.

use std::cell::RefCell;
use std::future::{Ready, ready};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::{Method as HttpMethod, StatusCode, header};
use actix_web::{Error, HttpMessage, HttpRequest, HttpResponse};
use futures_util::StreamExt as _;
use futures_util::future::LocalBoxFuture;
use serde_json::json;
use zeroize::Zeroizing;

use super::jsonrpc;
use crate::token::{self, DoorCredential, DoorKey, FORMATION_SCOPES, Verdict, VerifyCache, VerifyKey};

pub use crate::card_sig::CARD_PATH;

/// Who is calling, as FormationAuth established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A public door: no credential, every scope, sees every task.
    Public,
    /// A credential: `operator`, or `member:<x>` from a formation token.
    Credential { name: String, scopes: Vec<String> },
}

impl Caller {
    pub fn member(name: &str) -> Caller {
        Caller::Credential {
            name: format!("member:{name}"),
            scopes: FORMATION_SCOPES.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The owner recorded on a task this caller creates (docs/reference/door.md#methods).
    pub fn owner(&self) -> Option<String> {
        match self {
            Caller::Public => None,
            Caller::Credential { name, .. } => Some(name.clone()),
        }
    }

    /// The calling member, when a formation token let the request in.
    pub fn member_name(&self) -> Option<&str> {
        match self {
            Caller::Public => None,
            Caller::Credential { name, .. } => name.strip_prefix("member:"),
        }
    }

    /// The door's operator credential: it sees every task and is bound by no share of the
    /// door (`conn::Shares`).
    pub fn is_operator(&self) -> bool {
        matches!(self, Caller::Credential { name, .. } if name == "operator")
    }

    pub fn reaches(&self, scope: &str) -> bool {
        match self {
            Caller::Public => true,
            Caller::Credential { scopes, .. } => scopes.iter().any(|s| s == scope),
        }
    }

    /// docs/reference/door.md#methods: a public door and the operator see every task; any other
    /// credential only its own.
    pub fn sees(&self, owner: Option<&str>) -> bool {
        match self {
            Caller::Public => true,
            Caller::Credential { name, .. } => self.is_operator() || owner == Some(name.as_str()),
        }
    }

    /// The credential's name for refusals.
    pub fn name(&self) -> &str {
        match self {
            Caller::Public => "public",
            Caller::Credential { name, .. } => name,
        }
    }
}

/// A refusal answered before or instead of JSON-RPC (docs/reference/door.md#authentication).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unauthenticated,
    InvalidToken,
    NotPermitted {
        from: String,
    },
    InsufficientScope {
        credential: String,
        scope: String,
    },
    PeerNotAccepted,
    /// A calling member's `x-murmur-grant` that this door does not accept
    /// (docs/reference/formation.md#grants).
    InvalidGrant(crate::grant::Refusal),
}

impl Refusal {
    pub fn response(&self, realm: &str) -> HttpResponse {
        let (status, error, message, challenge) = match self {
            Refusal::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this door takes a token this capsule's runtime minted, as Authorization: Bearer <token>".to_string(),
                Some(format!("Bearer realm=\"{realm}\"")),
            ),
            Refusal::InvalidToken => (
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                "the Authorization header does not present a token this session minted".to_string(),
                Some(format!("Bearer realm=\"{realm}\", error=\"invalid_token\"")),
            ),
            Refusal::NotPermitted { from } => (
                StatusCode::FORBIDDEN,
                "not_permitted",
                format!("member '{from}' may not call this capsule"),
                Some(format!("Bearer realm=\"{realm}\", error=\"insufficient_scope\"")),
            ),
            Refusal::InsufficientScope { credential, scope } => (
                StatusCode::FORBIDDEN,
                "insufficient_scope",
                format!("credential '{credential}' does not reach {scope}"),
                Some(format!(
                    "Bearer realm=\"{realm}\", error=\"insufficient_scope\", scope=\"{scope}\""
                )),
            ),
            Refusal::PeerNotAccepted => (
                StatusCode::FORBIDDEN,
                "peer_not_accepted",
                "this capsule does not accept tasks from peers".to_string(),
                None,
            ),
            Refusal::InvalidGrant(why) => (
                StatusCode::FORBIDDEN,
                "invalid_grant",
                crate::diag::Diagnostic::new(
                    crate::diag::E_GRT_001,
                    format!("the call's grant (x-murmur-grant) is refused: {why}"),
                )
                .to_string(),
                None,
            ),
        };
        let body = jsonrpc::to_bytes(&json!({"error": error, "message": message}));
        let mut r = HttpResponse::build(status);
        r.insert_header((header::CONTENT_TYPE, "application/json"));
        if let Some(c) = challenge {
            r.insert_header((header::WWW_AUTHENTICATE, c));
        }
        r.body(body)
    }
}

/// The formation a door belongs to, for `mft1` verification.
#[derive(Debug, Clone)]
pub struct FormationTrust {
    pub formation_id: String,
    /// This member's roster name.
    pub member: String,
    pub verify_key: VerifyKey,
    /// This member's grant key (docs/reference/formation.md#grants); without one every grant is
    /// refused.
    pub grant_key: Option<crate::token::GrantKey>,
}

/// What one token verified to, cached per token. The caller is shared, so answering a
/// remembered token clones a pointer rather than the credential's name and scopes.
#[derive(Debug, Clone, PartialEq)]
enum TokenVerdict {
    Invalid,
    NotPermitted(String),
    Caller(Arc<Caller>),
}

/// The verification state of an authenticating door.
pub struct DoorAuthenticator {
    realm: String,
    door_key: DoorKey,
    formation: Option<FormationTrust>,
    cache: VerifyCache<TokenVerdict>,
    /// Each distinct grant's verdict before its caller is compared (a call's requests repeat it).
    grants: VerifyCache<Result<Arc<crate::grant::Grant>, crate::grant::Refusal>>,
}

impl std::fmt::Debug for DoorAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoorAuthenticator")
            .field("realm", &self.realm)
            .field("formation", &self.formation.as_ref().map(|t| &t.formation_id))
            .finish_non_exhaustive()
    }
}

/// Genuine credentials are few (one per edge plus the operator); a few hundred entries hold them.
const CACHE_CAPACITY: usize = 256;

impl DoorAuthenticator {
    pub fn new(realm: &str, door_key: DoorKey, formation: Option<FormationTrust>) -> DoorAuthenticator {
        DoorAuthenticator {
            realm: realm.to_string(),
            door_key,
            formation,
            cache: VerifyCache::with_lasting(CACHE_CAPACITY, |v| !matches!(v, TokenVerdict::Invalid)),
            grants: VerifyCache::new(CACHE_CAPACITY),
        }
    }

    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// docs/reference/door.md#authentication verification of one request's headers.
    pub fn check(&self, req: &HttpRequest) -> Result<Arc<Caller>, Refusal> {
        self.check_on(req, None)
    }

    /// [`check`](Self::check), first asking the connection's memo whether this is the token it
    /// last verified; a genuine token's caller is remembered there for the next request.
    pub fn check_on(&self, req: &HttpRequest, memo: Option<&ConnectionMemo>) -> Result<Arc<Caller>, Refusal> {
        let token = self.presented(req)?;
        if let Some(caller) = memo.and_then(|m| m.recall(token)) {
            return Ok(caller);
        }
        let checked = match self.cache.get_or_insert_with(token, || self.verify(token)) {
            TokenVerdict::Invalid => Err(Refusal::InvalidToken),
            TokenVerdict::NotPermitted(from) => Err(Refusal::NotPermitted { from }),
            TokenVerdict::Caller(c) => Ok(c),
        };
        if let (Ok(caller), Some(m)) = (&checked, memo) {
            m.remember(token, caller);
        }
        checked
    }

    /// The grant a calling member's request carries (docs/reference/formation.md#grants): `None`
    /// when it carries none, or when the caller is not a member (only a member's call is
    /// narrowed); genuine, of this formation, for this member and made for that caller, or the
    /// refusal.
    pub fn grant(&self, req: &HttpRequest, caller: &Caller) -> Result<Option<Arc<crate::grant::Grant>>, Refusal> {
        use crate::grant::{Grant, Refusal as Why};
        let (Some(from), Some(f)) = (caller.member_name(), &self.formation) else {
            return Ok(None);
        };
        let mut values = req.headers().get_all(crate::grant::HEADER);
        let Some(first) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(Refusal::InvalidGrant(Why::Invalid));
        }
        let wire = first.to_str().map_err(|_| Refusal::InvalidGrant(Why::Invalid))?;
        if wire.len() > crate::grant::MAX_GRANT_BYTES {
            return Err(Refusal::InvalidGrant(Why::Oversize));
        }
        let opened = self.grants.get_or_insert_with(wire, || {
            let g = Grant::open(f.grant_key.as_ref().ok_or(Why::Invalid)?, wire)?;
            if g.formation != f.formation_id {
                return Err(Why::OtherFormation);
            }
            if g.callee != f.member {
                return Err(Why::NotForThisMember);
            }
            Ok(Arc::new(g))
        });
        let g = opened.map_err(Refusal::InvalidGrant)?;
        if g.caller().map(|h| h.member.as_str()) != Some(from) {
            return Err(Refusal::InvalidGrant(Why::NotTheCaller));
        }
        Ok(Some(g))
    }

    /// The one bearer token of the request, or the refusal docs/reference/door.md#authentication
    /// gives for its headers.
    fn presented<'r>(&self, req: &'r HttpRequest) -> Result<&'r str, Refusal> {
        let mut values = req.headers().get_all(header::AUTHORIZATION);
        let Some(first) = values.next() else {
            return Err(Refusal::Unauthenticated);
        };
        if values.next().is_some() {
            return Err(Refusal::InvalidToken);
        }
        bearer_token(first.as_bytes()).ok_or(Refusal::InvalidToken)
    }

    fn verify(&self, token: &str) -> TokenVerdict {
        if token.starts_with("mft1.") {
            let Some(f) = &self.formation else {
                return TokenVerdict::Invalid;
            };
            return match token::verify(&f.verify_key, token, &f.formation_id, &f.member) {
                Verdict::Invalid => TokenVerdict::Invalid,
                Verdict::NotPermitted { from } => TokenVerdict::NotPermitted(from),
                Verdict::Member { from } => TokenVerdict::Caller(Arc::new(Caller::member(&from))),
            };
        }
        match self.door_key.verify(token) {
            Some(DoorCredential { credential, scopes }) => TokenVerdict::Caller(Arc::new(Caller::Credential {
                name: credential,
                scopes,
            })),
            None => TokenVerdict::Invalid,
        }
    }
}

/// The last token one connection presented and the caller it verified to [ours: performance].
/// A client sends the same token on every request of a keep-alive connection; comparing it with
/// the last one skips the SHA-256 of the shared cache's key and the cache itself. Only genuine
/// tokens are remembered; the memo belongs to one connection and is wiped when it closes. The
/// comparison takes the same time wherever the bytes differ, in case a proxy ever carries
/// several clients' requests over one connection.
#[derive(Default)]
pub struct ConnectionMemo {
    last: RefCell<Option<(Zeroizing<String>, Arc<Caller>)>>,
}

impl ConnectionMemo {
    fn recall(&self, token: &str) -> Option<Arc<Caller>> {
        let last = self.last.borrow();
        let (known, caller) = last.as_ref()?;
        same_bytes(known.as_bytes(), token.as_bytes()).then(|| Arc::clone(caller))
    }

    fn remember(&self, token: &str, caller: &Arc<Caller>) {
        *self.last.borrow_mut() = Some((Zeroizing::new(token.to_string()), Arc::clone(caller)));
    }
}

/// Equality whose time depends on the lengths only.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `Bearer <token>`, scheme case-insensitive, exactly one token with no inner whitespace, in a
/// header value of visible ASCII (tabs allowed at the ends). Read in passes over bytes that the
/// compiler can widen, since every authenticated request pays for it: the token is ~250 bytes.
fn bearer_token(value: &[u8]) -> Option<&str> {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !blank(b))?;
    let end = value.iter().rposition(|b| !blank(b))? + 1;
    let value = &value[start..end];
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    let skip = rest.iter().position(|b| *b != b' ')?;
    let token = &rest[skip..];
    // Visible ASCII other than space: no whitespace inside, nothing a header may not carry.
    let visible = token.iter().fold(true, |ok, b| ok & (0x21..=0x7e).contains(b));
    if !scheme.eq_ignore_ascii_case(b"bearer") || !visible {
        return None;
    }
    std::str::from_utf8(token).ok()
}

/// Refused request bodies up to this size are read and dropped so the connection stays open
/// [ours: performance]; actix closes a connection whose request body was left unread. Larger or
/// unsized bodies stay unread, so an unauthenticated caller never makes the door read much.
const DRAIN_LIMIT: u64 = 64 * 1024;

/// How long a refusal waits for a small body before answering anyway (and closing).
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// A declared `content-length` within [`DRAIN_LIMIT`] (0 and absent need no draining).
fn small_body(req: &ServiceRequest) -> bool {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > 0 && n <= DRAIN_LIMIT)
}

/// Reads and drops a refused request's body, within the size and time bounds.
async fn drain_payload(mut payload: Payload) {
    let read = async {
        let mut seen = 0u64;
        while let Some(Ok(chunk)) = payload.next().await {
            seen += chunk.len() as u64;
            if seen > DRAIN_LIMIT {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_WAIT, read).await;
}

/// The middleware. It attaches an `Arc<Caller>` to every request it lets through; on a public
/// door that is `Caller::Public`, and `Authorization` is ignored.
#[derive(Clone)]
pub struct FormationAuth {
    authority: Option<Arc<DoorAuthenticator>>,
}

impl FormationAuth {
    pub fn public() -> FormationAuth {
        FormationAuth { authority: None }
    }

    pub fn authenticating(authority: Arc<DoorAuthenticator>) -> FormationAuth {
        FormationAuth {
            authority: Some(authority),
        }
    }
}

impl<S, B> Transform<S, ServiceRequest> for FormationAuth
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = FormationAuthService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(FormationAuthService {
            service: Rc::new(service),
            authority: self.authority.clone(),
            public: Arc::new(Caller::Public),
        }))
    }
}

pub struct FormationAuthService<S> {
    service: Rc<S>,
    authority: Option<Arc<DoorAuthenticator>>,
    public: Arc<Caller>,
}

impl<S, B> Service<ServiceRequest> for FormationAuthService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, mut req: ServiceRequest) -> Self::Future {
        let is_card = req.method() == HttpMethod::GET && req.path() == CARD_PATH;
        let verdict = match (&self.authority, is_card) {
            // Step 2 comes before authentication: the public card is never authenticated.
            (_, true) | (None, _) => Ok(Arc::clone(&self.public)),
            (Some(a), false) => a
                .check_on(req.request(), req.request().conn_data::<ConnectionMemo>())
                .and_then(|caller| Ok((a.grant(req.request(), &caller)?, caller)))
                .map(|(grant, caller)| {
                    if let Some(g) = grant {
                        req.extensions_mut().insert(g);
                    }
                    caller
                })
                .map_err(|r| r.response(a.realm())),
        };
        match verdict {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                let fut = self.service.call(req);
                Box::pin(async move { Ok(fut.await?.map_into_left_body()) })
            }
            Err(resp) => {
                let drain = small_body(&req).then(|| req.take_payload());
                let (req, _) = req.into_parts();
                Box::pin(async move {
                    if let Some(payload) = drain {
                        drain_payload(payload).await;
                    }
                    Ok(ServiceResponse::new(req, resp).map_into_right_body())
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{GrantKey, SigningKey};
    use actix_web::test::TestRequest;

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
    const OTHER_FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728395";

    fn authority(sk: &SigningKey, formation: bool) -> (DoorAuthenticator, String) {
        authority_with(sk, formation, None)
    }

    /// A door of member `coder`, opening grants with `grant_key`.
    fn authority_with(sk: &SigningKey, formation: bool, grant_key: Option<GrantKey>) -> (DoorAuthenticator, String) {
        let dk = DoorKey::generate().expect("door key");
        let op = dk.mint_operator();
        let trust = formation.then(|| FormationTrust {
            formation_id: FRM.into(),
            member: "coder".into(),
            verify_key: sk.verify_key(),
            grant_key,
        });
        (DoorAuthenticator::new("local/coder", dk, trust), op)
    }

    fn check(a: &DoorAuthenticator, headers: &[String]) -> Result<Caller, Refusal> {
        let mut t = TestRequest::post();
        for h in headers {
            t = t.append_header((header::AUTHORIZATION, h.as_str()));
        }
        a.check(&t.to_http_request()).map(|c| (*c).clone())
    }

    #[test]
    fn a_members_grant_is_accepted_only_when_genuine_for_this_door_and_that_caller() {
        use crate::grant::{self, Grant, Origin, Refusal as Why, Request};
        let sk = SigningKey::generate().expect("key");
        let coders = GrantKey::generate().expect("key");
        let testers = GrantKey::generate().expect("key");
        let (a, op) = authority_with(&sk, true, Some(coders.clone()));
        let root = Grant::root(
            FRM,
            "grt_0199c4e2f1b7712a9d3e4f5061728390".into(),
            "lead",
            Origin::Operator,
            Some(9),
            None,
        );
        let ask = |callee: &str| Request {
            caller: "lead".into(),
            task: "tsk_0199c4e2f1b7712a9d3e4f5061728394".into(),
            callee: callee.into(),
            deadline_ms: None,
            budget: None,
        };
        let mint = |callee: &str| {
            grant::narrow(
                &root,
                None,
                &ask(callee),
                0,
                "grt_0199c4e2f1b7712a9d3e4f5061728391".into(),
            )
            .expect("narrowed")
        };
        let genuine = mint("coder").seal(&coders).expect("sealed");
        let lead = Caller::member("lead");
        let verdict = |caller: &Caller, grants: &[&str]| {
            let mut t = TestRequest::post();
            for g in grants {
                t = t.append_header((crate::grant::HEADER, *g));
            }
            a.grant(&t.to_http_request(), caller).map(|g| g.map(|g| g.id.clone()))
        };
        assert_eq!(
            verdict(&lead, &[&genuine]),
            Ok(Some("grt_0199c4e2f1b7712a9d3e4f5061728391".into()))
        );
        assert_eq!(
            verdict(&lead, &[]),
            Ok(None),
            "a member that sends none is accepted as before"
        );
        // Altered: a later deadline under the same MAC.
        let mut wider = mint("coder");
        wider.deadline_ms = Some(u64::from(u32::MAX));
        let forged_payload = wider.seal(&testers).expect("sealed");
        let altered = format!(
            "mgr2.{}.{}",
            forged_payload.split('.').nth(1).expect("payload"),
            genuine.split('.').nth(2).expect("mac")
        );
        let refused = |why| Err(Refusal::InvalidGrant(why));
        assert_eq!(verdict(&lead, &[&altered]), refused(Why::Invalid));
        assert_eq!(
            verdict(&lead, &[&forged_payload]),
            refused(Why::Invalid),
            "another member's key"
        );
        assert_eq!(
            verdict(&lead, &[&mint("tester").seal(&testers).expect("sealed")]),
            refused(Why::Invalid),
            "another member's grant"
        );
        assert_eq!(
            verdict(&lead, &[&mint("tester").seal(&coders).expect("sealed")]),
            refused(Why::NotForThisMember)
        );
        assert_eq!(
            verdict(&Caller::member("tester"), &[&genuine]),
            refused(Why::NotTheCaller)
        );
        assert_eq!(
            verdict(&lead, &[&genuine, &genuine]),
            refused(Why::Invalid),
            "two grants"
        );
        assert_eq!(verdict(&lead, &[&"A".repeat(5000)]), refused(Why::Oversize));
        // Only a member's call is narrowed: the operator's header means nothing.
        let operator = check(&a, &[format!("Bearer {op}")]).expect("operator");
        assert_eq!(verdict(&operator, &[&altered]), Ok(None));
        // A door that holds no grant key takes no grant.
        let (keyless, _) = authority_with(&sk, true, None);
        let mut t = TestRequest::post();
        t = t.append_header((crate::grant::HEADER, genuine.as_str()));
        assert_eq!(
            keyless
                .grant(&t.to_http_request(), &lead)
                .map(|g| g.map(|g| g.id.clone())),
            refused(Why::Invalid)
        );
        // The refusal is coded.
        let body = Refusal::InvalidGrant(Why::Invalid).response("r");
        assert_eq!(body.status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn verification_order_and_verdicts() {
        let sk = SigningKey::generate().expect("key");
        let other = SigningKey::generate().expect("key");
        let (a, op) = authority(&sk, true);
        let (plain, _) = authority(&sk, false);
        let good = sk.mint(FRM, "planner", "coder");
        let mut altered = good.clone();
        altered.pop();
        altered.push(if good.ends_with('A') { 'B' } else { 'A' });
        let operator = Caller::Credential {
            name: "operator".into(),
            scopes: token::OPERATOR_SCOPES.iter().map(|s| s.to_string()).collect(),
        };
        let table: Vec<(&DoorAuthenticator, Vec<String>, Result<Caller, Refusal>)> = vec![
            (&a, vec![], Err(Refusal::Unauthenticated)),
            (
                &a,
                vec![format!("Bearer {op}"), format!("Bearer {op}")],
                Err(Refusal::InvalidToken),
            ),
            (&a, vec![op.clone()], Err(Refusal::InvalidToken)),
            (&a, vec![format!("Basic {op}")], Err(Refusal::InvalidToken)),
            (&a, vec!["Bearer ".into()], Err(Refusal::InvalidToken)),
            (&a, vec![format!("Bearer {op} x")], Err(Refusal::InvalidToken)),
            (&a, vec![format!("Bearer {op}")], Ok(operator.clone())),
            (&a, vec![format!("bEaReR {op}")], Ok(operator)),
            (&a, vec![format!("Bearer {good}")], Ok(Caller::member("planner"))),
            (&a, vec![format!("Bearer {altered}")], Err(Refusal::InvalidToken)),
            (
                &a,
                vec![format!("Bearer {}", other.mint(FRM, "planner", "coder"))],
                Err(Refusal::InvalidToken),
            ),
            (
                &a,
                vec![format!("Bearer {}", sk.mint(OTHER_FRM, "planner", "coder"))],
                Err(Refusal::InvalidToken),
            ),
            (
                &a,
                vec![format!("Bearer {}", sk.mint(FRM, "planner", "reviewer"))],
                Err(Refusal::NotPermitted { from: "planner".into() }),
            ),
            (&plain, vec![format!("Bearer {good}")], Err(Refusal::InvalidToken)),
            (&a, vec!["Bearer mdt1.e30.AAAA".into()], Err(Refusal::InvalidToken)),
        ];
        for (i, (auth, headers, want)) in table.into_iter().enumerate() {
            assert_eq!(check(auth, &headers), want, "row {i}");
            // The cached verdict answers the same.
            assert_eq!(check(auth, &headers), want, "row {i}, cached");
        }
    }

    #[test]
    fn a_token_of_another_door_is_invalid() {
        let sk = SigningKey::generate().expect("key");
        let (a, _) = authority(&sk, true);
        let (_, other_op) = authority(&sk, true);
        assert_eq!(check(&a, &[format!("Bearer {other_op}")]), Err(Refusal::InvalidToken));
    }

    #[test]
    fn caller_scopes_and_visibility() {
        let m = Caller::member("planner");
        assert!(m.reaches("SendMessage") && !m.reaches("SendStreamingMessage") && !m.reaches("resources/files"));
        assert_eq!(
            (m.owner().as_deref(), m.member_name()),
            (Some("member:planner"), Some("planner"))
        );
        assert!(m.sees(Some("member:planner")) && !m.sees(Some("member:other")) && !m.sees(None));
        let op = Caller::Credential {
            name: "operator".into(),
            scopes: vec![],
        };
        assert!(op.sees(None) && op.sees(Some("member:x")) && op.member_name().is_none());
        assert!(Caller::Public.sees(Some("member:x")) && Caller::Public.reaches("anything"));
    }

    #[actix_rt::test]
    async fn refusal_bodies_are_exact() {
        let table: &[(Refusal, u16, &str, Option<&str>)] = &[
            (
                Refusal::Unauthenticated,
                401,
                r#"{"error":"unauthenticated","message":"this door takes a token this capsule's runtime minted, as Authorization: Bearer <token>"}"#,
                Some(r#"Bearer realm="local/c""#),
            ),
            (
                Refusal::InvalidToken,
                401,
                r#"{"error":"invalid_token","message":"the Authorization header does not present a token this session minted"}"#,
                Some(r#"Bearer realm="local/c", error="invalid_token""#),
            ),
            (
                Refusal::NotPermitted { from: "planner".into() },
                403,
                r#"{"error":"not_permitted","message":"member 'planner' may not call this capsule"}"#,
                Some(r#"Bearer realm="local/c", error="insufficient_scope""#),
            ),
            (
                Refusal::InsufficientScope {
                    credential: "member:planner".into(),
                    scope: "SendStreamingMessage".into(),
                },
                403,
                r#"{"error":"insufficient_scope","message":"credential 'member:planner' does not reach SendStreamingMessage"}"#,
                Some(r#"Bearer realm="local/c", error="insufficient_scope", scope="SendStreamingMessage""#),
            ),
            (
                Refusal::PeerNotAccepted,
                403,
                r#"{"error":"peer_not_accepted","message":"this capsule does not accept tasks from peers"}"#,
                None,
            ),
        ];
        for (r, status, body, challenge) in table {
            let resp = r.response("local/c");
            assert_eq!(resp.status().as_u16(), *status, "{r:?}");
            assert_eq!(
                resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
                Some("application/json")
            );
            assert_eq!(
                resp.headers()
                    .get(header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok()),
                *challenge,
                "{r:?}"
            );
            let got = actix_web::body::to_bytes(resp.into_body())
                .await
                .map_err(|_| ())
                .expect("body");
            assert_eq!(std::str::from_utf8(&got).expect("utf8"), *body);
        }
    }

    #[test]
    fn the_memo_recalls_exactly_the_last_token() {
        let memo = ConnectionMemo::default();
        let caller = Arc::new(Caller::member("planner"));
        assert!(memo.recall("mft1.a.b").is_none());
        memo.remember("mft1.a.b", &caller);
        assert_eq!(memo.recall("mft1.a.b").as_deref(), Some(&*caller));
        for other in ["mft1.a.c", "mft1.a.", "mft1.a.bb", "", "MFT1.a.b"] {
            assert!(memo.recall(other).is_none(), "{other}");
        }
        memo.remember("mdt1.x", &Arc::new(Caller::Public));
        assert!(memo.recall("mft1.a.b").is_none(), "only the last token is remembered");
        assert!(same_bytes(b"", b"") && !same_bytes(b"a", b"") && !same_bytes(b"ab", b"aa"));
    }

    /// The byte reading of `Authorization` accepts exactly what the former reading did:
    /// `HeaderValue::to_str` (visible ASCII or tab), `str::trim`, split at the first space,
    /// leading spaces dropped, scheme `bearer` in any case, a token with no whitespace.
    #[test]
    fn bearer_token_reads_as_before() {
        fn former(value: &[u8]) -> Option<&str> {
            let visible = value.iter().all(|&b| (b' '..=b'~').contains(&b) || b == b'\t');
            let value = std::str::from_utf8(value).ok().filter(|_| visible)?;
            let (scheme, rest) = value.trim().split_once(' ')?;
            let token = rest.trim_start_matches(' ');
            let ok = scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(char::is_whitespace);
            ok.then_some(token)
        }
        let table: &[&[u8]] = &[
            b"Bearer abc",
            b"bearer abc",
            b"BEARER mft1.x.y",
            b"  Bearer   abc  ",
            b"\tBearer abc\t",
            b"Bearer\tabc",
            b"Bearer abc def",
            b"Bearer abc\tdef",
            b"Bearer  \tabc",
            b"Bearer ",
            b"Bearer",
            b"Basic abc",
            b"Bearerx abc",
            b"Bearer ab\x7fc",
            b"Bearer ab\x00c",
            b"Bearer ab\xc3\xa9",
            b"Bearer abc\x0b",
            b"\x0cBearer abc",
            b"Bearer abc\r",
            b"",
            b" ",
            b"Bearer ~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}",
        ];
        for value in table {
            assert_eq!(
                bearer_token(value),
                former(value),
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
        // And on values built from the bytes that matter: blanks, the scheme's letters, token
        // characters, controls and non-ASCII.
        use proptest::prelude::*;
        let alphabet = prop::sample::select(b" \tBbEeAaRrx.-_\x00\x0b\x7f\xc3\xa9~".to_vec());
        proptest!(ProptestConfig::with_cases(5000), |(value in prop::collection::vec(alphabet, 0..16))| {
            prop_assert_eq!(bearer_token(&value), former(&value));
        });
        proptest!(ProptestConfig::with_cases(2000), |(token in "[ -~\t]{0,12}")| {
            let value = format!("Bearer {token}");
            prop_assert_eq!(bearer_token(value.as_bytes()), former(value.as_bytes()));
        });
    }
}
