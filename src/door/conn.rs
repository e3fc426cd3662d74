//! One door connection's transport, and the bounds actix-http does not keep for it.
//!
//! actix-http arms its request-head timer only for a connection's first request, and drops no
//! reply that makes no write progress. So each accepted stream (TCP, or the peer door's Unix
//! socket) is wrapped in a [`Conn`] that keeps two deadlines, and the [`InFlight`] middleware
//! tells it when a request is being served:
//! - **head**: while no request of the connection is being served, the next request head must
//!   arrive whole within [`Timing::door_head`] of the connection's accept or its last reply's
//!   end; past it reads fail and the connection closes (an idle keep-alive connection, or a head
//!   sent a byte at a time, holds nothing for long);
//! - **write stall**: a write that cannot make progress for [`Timing::door_write_stall`] (its
//!   reader stopped reading) fails and the connection closes, which drops the reply and what
//!   it pins on the board.
//!
//! [`InFlight`] also bounds the requests a door serves at once ([`MAX_IN_FLIGHT`]): past it a
//! request gets `503` with `retry-after` before anything else is done for it. Once FormationAuth
//! has named the caller, [`Shares`] bounds what one credential other than the operator holds of
//! them, so a peer's streams cannot leave the operator without room (`limits::DoorShares`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::{Future, Ready, ready};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::body::{BodySize, EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::web::Bytes;
use actix_web::{HttpMessage as _, HttpResponse, http::header};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::limits::DoorShares;
use crate::timing::Timing;

use super::auth::Caller;

/// Requests one door serves at once; past it, `503` [ours]. Each may hold a body of up to 8 MiB
/// while it is read, and a blocked SendMessage or a stream holds its connection.
pub const MAX_IN_FLIGHT: usize = 256;

/// How [`Shares`] divides [`MAX_IN_FLIGHT`].
pub const SHARES: DoorShares = DoorShares::of(MAX_IN_FLIGHT);

/// An accepted stream.
pub enum Stream {
    Tcp(actix_rt::net::TcpStream),
    Unix(actix_rt::net::UnixStream),
}

/// What a connection's transport and the requests served on it share.
#[derive(Debug)]
pub struct Activity {
    /// Requests of this connection being served (their replies not yet fully handed over).
    serving: Cell<u32>,
    /// When the connection last had no request being served.
    idle_since: Cell<Instant>,
}

impl Activity {
    fn new() -> Rc<Activity> {
        Rc::new(Activity {
            serving: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
        })
    }

    fn started(&self) {
        self.serving.set(self.serving.get() + 1);
    }

    fn ended(&self) {
        let n = self.serving.get().saturating_sub(1);
        self.serving.set(n);
        if n == 0 {
            self.idle_since.set(Instant::now());
        }
    }
}

/// A door connection: its stream, and the head and write-stall deadlines.
pub struct Conn {
    stream: Stream,
    activity: Rc<Activity>,
    head: Duration,
    stall: Duration,
    head_timer: Pin<Box<Sleep>>,
    head_deadline: Option<Instant>,
    stall_timer: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    pub fn new(stream: Stream) -> Conn {
        let t = Timing::get();
        Conn::with_bounds(stream, t.door_head, t.door_write_stall)
    }

    fn with_bounds(stream: Stream, head: Duration, stall: Duration) -> Conn {
        Conn {
            stream,
            activity: Activity::new(),
            head,
            stall,
            head_timer: Box::pin(tokio::time::sleep(head)),
            head_deadline: None,
            stall_timer: None,
        }
    }

    /// The connection's activity, for [`InFlight`] (put into the connection's extensions).
    pub fn activity(&self) -> Rc<Activity> {
        Rc::clone(&self.activity)
    }

    fn read_inner(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.activity.serving.get() > 0 {
            return me.read_inner(cx, buf);
        }
        let deadline = me.activity.idle_since.get() + me.head;
        if Instant::now() >= deadline {
            return Poll::Ready(Err(timed_out("no whole request head within the door's head bound")));
        }
        if let Poll::Ready(r) = me.read_inner(cx, buf) {
            return Poll::Ready(r);
        }
        if me.head_deadline != Some(deadline) {
            me.head_timer.as_mut().reset(deadline.into());
            me.head_deadline = Some(deadline);
        }
        match me.head_timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(timed_out("no whole request head within the door's head bound"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let polled = match &mut me.stream {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        };
        match polled {
            Poll::Pending => {
                let stall = me.stall;
                let timer = me
                    .stall_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Err(timed_out("the reply made no progress: its reader stopped reading")))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
            done => {
                me.stall_timer = None;
                done
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Counts a request as served from its head until its reply is handed over whole (or dropped),
/// on its connection and door-wide; refuses past [`MAX_IN_FLIGHT`].
#[derive(Clone, Default)]
pub struct InFlight {
    door: Rc<Cell<usize>>,
}

/// Held while a request is served; dropping it ends the request for both counts.
pub struct Serving {
    door: Rc<Cell<usize>>,
    conn: Option<Rc<Activity>>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.door.set(self.door.get().saturating_sub(1));
        if let Some(c) = &self.conn {
            c.ended();
        }
    }
}

impl<S, B> Transform<S, ServiceRequest> for InFlight
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Held<B, Serving>>>;
    type Error = actix_web::Error;
    type Transform = InFlightService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(InFlightService {
            service: Rc::new(service),
            door: Rc::clone(&self.door),
        }))
    }
}

pub struct InFlightService<S> {
    service: Rc<S>,
    door: Rc<Cell<usize>>,
}

impl<S, B> Service<ServiceRequest> for InFlightService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Held<B, Serving>>>;
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>>>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let conn = req.conn_data::<Rc<Activity>>().cloned();
        if let Some(c) = &conn {
            c.started();
        }
        self.door.set(self.door.get() + 1);
        let serving = Serving {
            door: Rc::clone(&self.door),
            conn,
        };
        if self.door.get() > MAX_IN_FLIGHT {
            drop(serving);
            let res = HttpResponse::ServiceUnavailable()
                .insert_header((header::RETRY_AFTER, "1"))
                .finish();
            return Box::pin(ready(Ok(req.into_response(res).map_into_right_body())));
        }
        held_until_replied(self.service.call(req), serving)
    }
}

/// A reply whose body holds a guard, or a refusal; as the middlewares here answer.
type Guarded<B, G> = Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<Held<B, G>>>, actix_web::Error>>>>;

/// The reply of `fut`, its body holding `guard` until it is dropped.
fn held_until_replied<B, G, F>(fut: F, guard: G) -> Guarded<B, G>
where
    B: MessageBody + Unpin + 'static,
    G: Unpin + 'static,
    F: Future<Output = Result<ServiceResponse<B>, actix_web::Error>> + 'static,
{
    Box::pin(async move {
        let res = fut.await?;
        Ok(res
            .map_body(|_, body| Held { body, _guard: guard })
            .map_into_left_body())
    })
}

/// Counts the requests in flight of each credential other than the operator, from the moment
/// FormationAuth named it until its reply is handed over whole (or dropped), and refuses one
/// past [`SHARES`] with `503` and `retry-after`. The operator, and every caller of a public door
/// (no credential, nobody to keep room for), are bound by [`InFlight`] only. Inside
/// FormationAuth: an unauthenticated request never reaches it.
#[derive(Clone, Default)]
pub struct Shares {
    held: Rc<RefCell<Holders>>,
}

#[derive(Default)]
struct Holders {
    /// Requests in flight by credential name; an entry goes when its count reaches 0, so the
    /// map holds only credentials with a request in flight.
    by_credential: HashMap<Rc<str>, usize>,
    all_but_operator: usize,
}

impl Shares {
    /// One more request of `credential`, or `None` when it already holds its share.
    fn take(&self, credential: &str) -> Option<Holding> {
        let mut held = self.held.borrow_mut();
        let (name, its_own) = match held.by_credential.get_key_value(credential) {
            Some((name, n)) => (Rc::clone(name), *n),
            None => (Rc::from(credential), 0),
        };
        if !SHARES.admits(false, its_own, held.all_but_operator) {
            return None;
        }
        held.all_but_operator += 1;
        held.by_credential.insert(Rc::clone(&name), its_own + 1);
        Some(Holding {
            held: Rc::clone(&self.held),
            credential: name,
        })
    }
}

/// One request of a credential in flight; dropping it ends it.
pub struct Holding {
    held: Rc<RefCell<Holders>>,
    credential: Rc<str>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut held = self.held.borrow_mut();
        held.all_but_operator = held.all_but_operator.saturating_sub(1);
        if let Some(n) = held.by_credential.get_mut(&self.credential) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_credential.remove(&self.credential);
            }
        }
    }
}

impl<S, B> Transform<S, ServiceRequest> for Shares
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Held<B, Option<Holding>>>>;
    type Error = actix_web::Error;
    type Transform = SharesService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(SharesService {
            service: Rc::new(service),
            shares: self.clone(),
        }))
    }
}

pub struct SharesService<S> {
    service: Rc<S>,
    shares: Shares,
}

impl<S, B> Service<ServiceRequest> for SharesService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + Unpin + 'static,
{
    type Response = ServiceResponse<EitherBody<Held<B, Option<Holding>>>>;
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>>>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let holding = match req.extensions().get::<std::sync::Arc<Caller>>().map(|c| &**c) {
            Some(c @ Caller::Credential { name, .. }) if !c.is_operator() => match self.shares.take(name) {
                Some(h) => Ok(Some(h)),
                None => Err(()),
            },
            _ => Ok(None),
        };
        let Ok(holding) = holding else {
            let res = HttpResponse::ServiceUnavailable()
                .insert_header((header::RETRY_AFTER, "1"))
                .content_type("application/json")
                .body(r#"{"error":"busy","message":"this credential holds its share of the door's requests in flight; retry once one of them ends"}"#);
            return Box::pin(ready(Ok(req.into_response(res).map_into_right_body())));
        };
        held_until_replied(self.service.call(req), holding)
    }
}

/// A reply body that holds its request's guard (a [`Serving`], a [`Holding`]) until it is
/// dropped: once actix-http has taken its last chunk, or the connection went away.
pub struct Held<B, G> {
    body: B,
    _guard: G,
}

impl<B: MessageBody + Unpin, G: Unpin> MessageBody for Held<B, G> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    async fn pair(head: Duration, stall: Duration) -> (Conn, tokio::net::UnixStream) {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        (Conn::with_bounds(Stream::Unix(a), head, stall), b)
    }

    #[test]
    fn an_idle_connection_fails_its_read_at_the_head_bound_and_a_served_one_does_not() {
        rt().block_on(async {
            let (mut conn, mut client) = pair(Duration::from_millis(100), Duration::from_secs(60)).await;
            // A byte now and then does not extend the bound.
            client.write_all(b"G").await.unwrap();
            let mut buf = [0u8; 8];
            assert_eq!(conn.read(&mut buf).await.unwrap(), 1);
            let t = Instant::now();
            let e = conn.read(&mut buf).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert!(t.elapsed() < Duration::from_secs(2));

            // While a request is served, reads wait as long as they must.
            let (mut conn, mut client) = pair(Duration::from_millis(100), Duration::from_secs(60)).await;
            let activity = conn.activity();
            activity.started();
            let reader = async { conn.read(&mut buf).await };
            let writer = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                client.write_all(b"x").await.unwrap();
            };
            let (r, ()) = tokio::join!(reader, writer);
            assert_eq!(r.unwrap(), 1);
            // Its end starts a new bound.
            activity.ended();
            let e = conn.read(&mut buf).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        });
    }

    #[test]
    fn a_write_that_makes_no_progress_fails_at_the_stall_bound() {
        rt().block_on(async {
            let (mut conn, client) = pair(Duration::from_secs(60), Duration::from_millis(200)).await;
            let chunk = vec![0u8; 64 * 1024];
            let t = Instant::now();
            let e = loop {
                if let Err(e) = conn.write_all(&chunk).await {
                    break e;
                }
                assert!(t.elapsed() < Duration::from_secs(5), "the writes never stalled");
            };
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert!(t.elapsed() < Duration::from_secs(3));
            drop(client);
        });
    }
}
