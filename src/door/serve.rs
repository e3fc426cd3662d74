//! The door's HTTP/1.1 server: one thread that both accepts connections and serves them. `mur ui`
//! is served by it too, so every listener of the project keeps the same bounds.
//!
//! actix-web's `HttpServer` accepts on a thread of its own and hands each connection to its
//! worker: two thread wakeups per connection, which is most of what a connection per request
//! (`Connection: close`) costs beyond the kernel's work (docs/performance.md §2). A door has one
//! worker anyway, so here the worker accepts for itself, with the same HTTP service actix-web
//! would build (same timeouts, Nagle off, half-closed connections allowed).
//!
//! It accepts on the door's TCP listener and, for a peer of a formation, on its Unix socket too
//! (`socket`); every accepted stream is served as a [`Conn`], which bounds each request head
//! and each stalled reply in time (`conn`).
//!
//! Invariants:
//! - at most [`Limits::max_connections`] connections are open; past it the door stops accepting
//!   until one closes (the kernel's backlog holds the rest), so a flood of connections is bounded;
//! - an accept error that is not about one connection (out of descriptors) pauses accepting for
//!   [`ACCEPT_PAUSE`] instead of spinning;
//! - stopping closes the listening socket first, then asks every connection to end after its
//!   current request, waits at most the grace for them, and ends the thread, which drops what is
//!   left.

use std::cell::Cell;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::rc::Rc;
use std::time::Duration;

use actix_http::{HttpService, KeepAlive, Protocol, Request, Response};
use actix_service::{IntoServiceFactory, Service as _, ServiceFactory, ServiceFactoryExt as _, map_config};
use actix_web::body::MessageBody;
use actix_web::dev::AppConfig;
use tokio::sync::{Notify, watch};

use super::conn::{Conn, Stream};

/// Connections a door holds open at once at most (actix-server's default for one worker); the
/// descriptor limit lowers it (`limits::door_connections`).
pub const MAX_CONNECTIONS: usize = 25_600;

/// The soft open-file limit now (unlimited when it cannot be read).
pub fn soft_nofile() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}

/// What a serving thread allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a stop waits for open requests.
    pub grace: Duration,
}

/// How long accepting pauses after an error that is not about one connection.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// actix-web's defaults, which the door has always served with.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A serving thread. Dropping it stops the thread without waiting for it.
#[derive(Debug)]
pub struct Serving {
    stop: watch::Sender<bool>,
    ended: watch::Receiver<bool>,
}

impl Serving {
    /// Serves the app `app` builds on `listener` (and `unix`, when given) from a new thread named
    /// `mur-door`; returns once that thread serves, or with why it cannot.
    pub fn start<F, I, S, B>(
        listener: TcpListener,
        unix: Option<UnixListener>,
        limits: Limits,
        app: F,
    ) -> std::io::Result<Serving>
    where
        F: FnOnce() -> I + Send + 'static,
        I: IntoServiceFactory<S, Request>,
        S: ServiceFactory<Request, Config = AppConfig> + 'static,
        S::Error: Into<actix_web::Error> + 'static,
        S::InitError: std::fmt::Debug,
        S::Response: Into<Response<B>> + 'static,
        <S::Service as actix_service::Service<Request>>::Future: 'static,
        S::Service: 'static,
        B: MessageBody + 'static,
    {
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        if let Some(u) = &unix {
            u.set_nonblocking(true)?;
        }
        let (stop, stopped) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(false);
        let (ready_tx, ready) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
        std::thread::Builder::new().name("mur-door".into()).spawn(move || {
            actix_rt::System::new().block_on(async move {
                let listeners = actix_rt::net::TcpListener::from_std(listener).and_then(|tcp| {
                    let unix = unix.map(actix_rt::net::UnixListener::from_std).transpose()?;
                    Ok((tcp, unix))
                });
                let (listener, unix) = match listeners {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let draining = stopped.clone();
                let factory = HttpService::build()
                    .keep_alive(KeepAlive::Timeout(KEEP_ALIVE))
                    .client_request_timeout(CLIENT_REQUEST_TIMEOUT)
                    .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                    .h1_allow_half_closed(true)
                    .local_addr(local)
                    // Each connection's own memo of the token it last presented, and its
                    // activity, which tells its transport when a request is being served.
                    .on_connect_ext(|conn: &Conn, extensions| {
                        extensions.insert(super::auth::ConnectionMemo::default());
                        extensions.insert(conn.activity());
                    })
                    // A stop ends keep-alive connections after their current request.
                    .graceful_shutdown_signal(move || {
                        let mut stop = draining.clone();
                        async move {
                            let _ = stop.wait_for(|s| *s).await;
                        }
                    })
                    .finish(map_config(
                        app().into_factory().map_err(|e| e.into().error_response()),
                        // What actix-web would put here (host, local address) serves URL generation
                        // and `ConnectionInfo`, which the door uses neither of; its card names
                        // its URL itself.
                        |_| AppConfig::default(),
                    ));
                let service = match factory.new_service(()).await {
                    Ok(s) => Rc::new(s),
                    Err(_) => {
                        let _ = ready_tx.send(Err(std::io::Error::other("the door's service could not be built")));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let open = Rc::new(Open::default());
                let listeners = Listeners { tcp: listener, unix };
                accept_until_stopped(&listeners, service, &open, limits.max_connections, stopped).await;
                // Nothing new is accepted from here on; open requests get the grace.
                drop(listeners);
                let _ = tokio::time::timeout(limits.grace, open.all_closed()).await;
            });
            // Connections still open after the grace were dropped with the runtime.
            let _ = ended_tx.send(true);
        })?;
        match ready.recv() {
            Ok(Ok(())) => Ok(Serving { stop, ended }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::other("the door's thread ended before it served")),
        }
    }

    /// Stops accepting, lets open requests finish within the grace, and returns once the thread
    /// has ended.
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The connections open now, and a wakeup each time one closes.
#[derive(Default)]
struct Open {
    count: Cell<usize>,
    closed: Notify,
}

impl Open {
    fn enter(self: &Rc<Self>) -> OpenGuard {
        self.count.set(self.count.get() + 1);
        OpenGuard(Rc::clone(self))
    }

    async fn below(&self, limit: usize) {
        while self.count.get() >= limit {
            self.closed.notified().await;
        }
    }

    async fn all_closed(&self) {
        self.below(1).await;
    }
}

struct OpenGuard(Rc<Open>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.count.set(self.0.count.get() - 1);
        self.0.closed.notify_waiters();
    }
}

/// What a door accepts on.
struct Listeners {
    tcp: actix_rt::net::TcpListener,
    unix: Option<actix_rt::net::UnixListener>,
}

impl Listeners {
    /// The next stream from either listener.
    async fn accept(&self) -> std::io::Result<Stream> {
        let unix = async {
            match &self.unix {
                Some(u) => u.accept().await.map(|(s, _)| Stream::Unix(s)),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            tcp = self.tcp.accept() => tcp.map(|(s, _)| {
                // A stream's events are small writes in quick succession: with Nagle on, the
                // second waits for the client's delayed ACK (40 ms) whenever the first is still
                // unacknowledged.
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            unix = unix => unix,
        }
    }
}

async fn accept_until_stopped<S>(
    listeners: &Listeners,
    service: Rc<S>,
    open: &Rc<Open>,
    max_connections: usize,
    mut stopped: watch::Receiver<bool>,
) where
    S: actix_service::Service<(Conn, Protocol, Option<std::net::SocketAddr>), Response = ()> + 'static,
{
    // The sender gone counts as a stop.
    let stopping =
        |r: Result<(), watch::error::RecvError>, stopped: &watch::Receiver<bool>| r.is_err() || *stopped.borrow();
    loop {
        if *stopped.borrow() {
            return;
        }
        tokio::select! {
            biased;
            r = stopped.changed() => if stopping(r, &stopped) { return } else { continue },
            () = open.below(max_connections) => {}
        }
        tokio::select! {
            biased;
            r = stopped.changed() => if stopping(r, &stopped) { return },
            accepted = listeners.accept() => match accepted {
                Ok(stream) => {
                    let guard = open.enter();
                    let service = Rc::clone(&service);
                    let peer = match &stream {
                        Stream::Tcp(s) => s.peer_addr().ok(),
                        Stream::Unix(_) => None,
                    };
                    actix_rt::spawn(async move {
                        // A connection's errors (a client that went away, a timeout) end only it.
                        let _ = service.call((Conn::new(stream), Protocol::Http1, peer)).await;
                        drop(guard);
                    });
                }
                Err(e) if about_one_connection(&e) => {}
                Err(e) => {
                    tracing::debug!("the door could not accept a connection: {e}; pausing");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
            },
        }
    }
}

/// Errors of one connection that came and went before it was accepted; the next accept may work.
fn about_one_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Instant;

    use actix_web::{App, HttpResponse, web};

    use super::*;

    fn serving(limits: Limits) -> (Serving, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let serving = Serving::start(listener, None, limits, || {
            App::new()
                .route("/", web::get().to(|| async { HttpResponse::Ok().body("ok") }))
                .route(
                    "/slow",
                    web::get().to(|| async {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        HttpResponse::Ok().body("slow")
                    }),
                )
        })
        .expect("serving");
        (serving, addr)
    }

    fn send(addr: SocketAddr, path: &str) -> TcpStream {
        let mut s = TcpStream::connect(addr).expect("connect");
        write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").expect("write");
        s
    }

    /// Reads one whole response of a known body; `None` if nothing came within `wait`.
    fn response(s: &mut TcpStream, body: &str, wait: Duration) -> Option<String> {
        s.set_read_timeout(Some(wait)).expect("timeout");
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&got).ends_with(body) {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        (!got.is_empty()).then(|| String::from_utf8_lossy(&got).into_owned())
    }

    fn stop(serving: &Serving) {
        actix_rt::System::new().block_on(serving.stop());
    }

    #[test]
    fn a_connection_past_the_limit_waits_until_an_open_one_closes() {
        let (serving, addr) = serving(Limits {
            max_connections: 2,
            grace: Duration::from_secs(1),
        });
        // Two connections kept alive after their first request hold both places.
        let mut first = send(addr, "/");
        let mut second = send(addr, "/");
        for s in [&mut first, &mut second] {
            assert!(response(s, "ok", Duration::from_secs(5)).is_some_and(|r| r.starts_with("HTTP/1.1 200")));
        }
        let mut third = send(addr, "/");
        assert_eq!(
            response(&mut third, "ok", Duration::from_millis(300)),
            None,
            "served past the limit"
        );
        drop(first);
        let late = response(&mut third, "ok", Duration::from_secs(5));
        assert!(
            late.is_some_and(|r| r.starts_with("HTTP/1.1 200")),
            "not served once a place was free"
        );
        stop(&serving);
    }

    #[test]
    fn a_stop_lets_a_running_request_finish_ends_idle_connections_and_closes_the_port() {
        let (serving, addr) = serving(Limits {
            max_connections: 16,
            grace: Duration::from_secs(30),
        });
        let mut idle = send(addr, "/");
        assert!(response(&mut idle, "ok", Duration::from_secs(5)).is_some());
        let mut running = send(addr, "/slow");
        // The slow request is being served before the stop begins.
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        stop(&serving);
        let took = started.elapsed();
        let answer = response(&mut running, "slow", Duration::from_secs(5));
        assert!(
            answer.is_some_and(|r| r.starts_with("HTTP/1.1 200")),
            "the running request was cut off"
        );
        // An idle keep-alive connection is closed by the stop, not kept until its keep-alive
        // timeout (5 s) or the grace (30 s).
        assert!(
            took < Duration::from_secs(4),
            "stop waited {took:?} for an idle connection"
        );
        let mut rest = Vec::new();
        idle.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        assert!(
            matches!(idle.read_to_end(&mut rest), Ok(0)),
            "the idle connection is still open"
        );
        assert!(
            TcpStream::connect(addr).is_err(),
            "the port still accepts after the stop"
        );
    }

    #[test]
    fn dropping_it_ends_the_thread_and_closes_the_port() {
        let (serving, addr) = serving(Limits {
            max_connections: 16,
            grace: Duration::from_secs(1),
        });
        assert!(response(&mut send(addr, "/"), "ok", Duration::from_secs(5)).is_some());
        drop(serving);
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(addr).is_ok() {
            assert!(Instant::now() < deadline, "the port still accepts after the drop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
