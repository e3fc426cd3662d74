//! The dials under awc's connectors: each hands a stream over only once it is known whom it
//! reaches (see the module's invariants).

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use actix_tls::connect::{ConnectError, ConnectInfo, Connection};
use awc::http::Uri;

use super::framing::Framed;
use crate::channel::DoorIdentity;

/// Dials a plain-`http://` loopback server: `addr` (a `localhost` is never resolved) or the
/// request's own host when that is an address. The stream comes back only once
/// [`super::owner::verify_owner`] passed, with `TCP_NODELAY` set (a request's head and body are
/// separate writes), read through the framing adapter.
pub(super) fn loopback(
    addr: Option<SocketAddr>,
    connect: Duration,
) -> impl actix_service::Service<ConnectInfo<Uri>, Response = Connection<Uri, Framed>, Error = ConnectError> + Clone {
    actix_service::fn_service(move |info: ConnectInfo<Uri>| async move {
        let target = match addr {
            Some(a) => a,
            None => {
                let uri = info.request();
                let host = uri
                    .host()
                    .unwrap_or_default()
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let ip: std::net::IpAddr = host.parse().map_err(|_| ConnectError::Unresolved)?;
                SocketAddr::new(ip, uri.port_u16().unwrap_or(80))
            }
        };
        let stream = within(connect, tokio::net::TcpStream::connect(target)).await?;
        super::owner::verify_owner(stream.local_addr().map_err(ConnectError::Io)?, target).map_err(ConnectError::Io)?;
        let _ = stream.set_nodelay(true);
        Ok(Connection::new(info.request().clone(), Framed::new(stream)))
    })
}

/// Dials `addr` and nowhere else, whatever the request's host resolves to; TLS is layered on by
/// the connector (the host names the certificate).
pub(super) fn pinned(
    addr: SocketAddr,
) -> impl actix_service::Service<ConnectInfo<Uri>, Response = Connection<Uri, tokio::net::TcpStream>, Error = ConnectError>
+ Clone {
    actix_service::fn_service(move |info: ConnectInfo<Uri>| async move {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
        let _ = stream.set_nodelay(true);
        Ok(Connection::new(info.request().clone(), stream))
    })
}

/// Dials `door`'s socket, whatever the request URL says: the URL keeps naming
/// `http://localhost:<port>` (the `Host` header), the socket is the door's, served by the
/// process the launcher vouched for (`peer_door::dial`).
pub(super) fn door(
    door: DoorIdentity,
    connect: Duration,
) -> impl actix_service::Service<ConnectInfo<Uri>, Response = Connection<Uri, tokio::net::UnixStream>, Error = ConnectError>
+ Clone {
    let door = Rc::new(door);
    actix_service::fn_service(move |info: ConnectInfo<Uri>| {
        let door = Rc::clone(&door);
        async move {
            let stream = within(connect, crate::peer_door::dial(&door)).await?;
            Ok(Connection::new(info.request().clone(), stream))
        }
    })
}

async fn within<T>(bound: Duration, dial: impl Future<Output = io::Result<T>>) -> Result<T, ConnectError> {
    match tokio::time::timeout(bound, dial).await {
        Ok(r) => r.map_err(ConnectError::Io),
        Err(_) => Err(ConnectError::Io(io::Error::from(io::ErrorKind::TimedOut))),
    }
}
