//! The HTTP server on each shard: a listener on the shared address (its socket options are
//! `listen`'s), an accept loop, and one `spawn_local`ed hyper HTTP/1.1 connection per client.
//!
//! Limits enforced here: the connection cap and the cap per client address (`clients.rs`;
//! over either, a 503 is written and the connection closed), the request-head size (hyper's buffer: 431 past it), the idle / slow-header
//! timeout (hyper's header-read timeout), and the write-stall timeout (in `io`). Body size
//! and body timeout are checked per request in `routes`; a request marked forwarded is read
//! whole, its signature checked and its nonce remembered before it is served ([`admit`],
//! `forward_sign.rs`, `forward_replay.rs`), and its answer signed (`forward_answer.rs`).
//!
//! Draining: when [`Servers::drain`] is called, every acceptor stops and drops its listener,
//! and every connection is told to shut down gracefully: hyper finishes the request in
//! flight, answers it, and closes.

use super::accept::Acceptor;
use super::clients::{Admit, Client};
use super::drain::LocalDrain;
use super::forward::Peers;
use super::forward_answer;
use super::forward_sign;
use super::metrics::Metrics;
use super::respond::{self, Resp};
use super::state::{App, Servers};
use super::unread::Source;
use crate::engine::Handle;
use crate::runtime::hyperio::{Io, LocalTimer};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use hyper::body::Incoming;
use hyper::Request;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long a connection closed after an answer that left its request's body unread reads and
/// discards what its client still sends, so that the close does not turn into a reset that
/// loses that answer (`hyperio::Io::lingering`).
const LINGER: Duration = Duration::from_millis(250);

/// Counts a connection for as long as it lives, and its client's when it was counted.
struct ConnSlot {
    shared: Arc<Servers>,
    client: Option<Client>,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.shared.connections.fetch_sub(1, Ordering::AcqRel);
        if let Some(c) = self.client {
            self.shared.clients.release(c);
        }
    }
}

/// Why a new connection is refused.
enum Full {
    /// The server holds `max_connections`.
    Server,
    /// Its client address holds `max_connections_per_address`.
    Client(usize),
}

/// Takes this shard's listening socket (bound before the engine started, see
/// `listen::bind_shards`) and spawns its acceptor. Runs on the shard's thread, inside its
/// executor (from the engine's `on_shard_start` hook).
pub fn start_shard(
    shard: usize,
    handle: Handle,
    shared: Arc<Servers>,
    socket: socket2::Socket,
) -> std::io::Result<()> {
    let store = handle.store_kind();
    shared.metrics.get_or_init(|| {
        let forwards = shared.forwards.clone();
        let bulk = [
            shared.actions.started.clone(),
            shared.actions.cancelled.clone(),
        ];
        Metrics::new(handle.clone(), store, shared.node.clone(), forwards, bulk)
    });
    let mut listener = Acceptor::new(shard, socket)?;
    shared.listeners.fetch_add(1, Ordering::AcqRel);
    let drain = Rc::new(LocalDrain::default());
    let watcher = (shared.clone(), drain.clone());
    glommio::spawn_local(async move {
        watcher.0.drained().await;
        watcher.1.raise();
    })
    .detach();
    let me = shared.config.advertise.as_deref().unwrap_or_default();
    let secret = shared.config.cluster_secret.as_deref().map(str::as_bytes);
    let peers = Rc::new(Peers::new(me, secret, shared.forwards.clone()));
    let app = Rc::new(App {
        shard,
        handle,
        shared,
        peers,
    });
    glommio::spawn_local(async move {
        accept_loop(&mut listener, app.clone(), drain).await;
        // Leave the LISTEN state now, and end the acceptor's waiter.
        listener.shutdown();
        drop(listener);
        app.shared.listeners.fetch_sub(1, Ordering::AcqRel);
    })
    .detach();
    Ok(())
}

async fn accept_loop(listener: &mut Acceptor, app: Rc<App>, drain: Rc<LocalDrain>) {
    let shared = app.shared.clone();
    let mut drained = drain.wait();
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            (&mut drained).await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                // The accept thread ended: the listener was shut down.
                tracing::debug!(shard = app.shard, "acceptor ended: {e}");
                break;
            }
        };
        let n = shared.connections.fetch_add(1, Ordering::AcqRel);
        let mut slot = ConnSlot {
            shared: shared.clone(),
            client: None,
        };
        let full = if n >= shared.config.max_connections {
            Some(Full::Server)
        } else {
            // A peer already gone has no address: hyper meets the closed socket.
            match stream.peer_addr().map(|a| shared.clients.admit(a.ip())) {
                Ok(Admit::Full) => Some(Full::Client(shared.clients.cap())),
                Ok(Admit::Counted(c)) => {
                    slot.client = Some(c);
                    None
                }
                Ok(Admit::Exempt) | Err(_) => None,
            }
        };
        match full {
            Some(full) => {
                glommio::spawn_local(refuse(stream, slot, full)).detach();
            }
            None => {
                let conn = serve_connection(stream, app.clone(), drain.wait(), slot);
                glommio::spawn_local(conn).detach();
            }
        }
    }
    tracing::debug!(shard = app.shard, "acceptor stopped");
}

async fn serve_connection(
    stream: TcpStream,
    app: Rc<App>,
    mut drained: super::drain::Drained,
    _slot: ConnSlot,
) {
    let _ = stream.set_nodelay(true);
    let cfg = &app.shared.config;
    // Set when an answer says `Connection: close` (its request's body left unread): the close
    // then lingers.
    let linger = Rc::new(Cell::new(false));
    let io = Io::new(stream, Duration::from_millis(cfg.body_timeout_ms))
        .lingering(LINGER, linger.clone());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(LocalTimer)
        .header_read_timeout(Duration::from_millis(cfg.idle_timeout_ms))
        .max_buf_size(cfg.max_header_bytes)
        .keep_alive(true);
    let svc_app = app.clone();
    let svc = hyper::service::service_fn(move |req| {
        let app = svc_app.clone();
        let linger = linger.clone();
        async move {
            let secret = app.shared.config.cluster_secret.as_deref();
            let secret = secret.filter(|_| req.headers().contains_key(forward_sign::FORWARDED));
            let bound = secret.map(|_| forward_answer::bound_to(req.headers()));
            let resp = match admit(&app, req).await {
                Ok(req) => app.serve(req).await,
                Err(refused) => refused,
            };
            let resp = match (secret, bound) {
                (Some(secret), Some(bound)) => {
                    forward_answer::sign(secret.as_bytes(), &bound, resp).await
                }
                _ => resp,
            };
            if resp.headers().contains_key(hyper::header::CONNECTION) {
                linger.set(true);
            }
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = builder.serve_connection(io, svc);
    let mut conn = std::pin::pin!(conn);
    let finished = futures_lite::future::or(async { Some(conn.as_mut().await) }, async {
        (&mut drained).await;
        None
    })
    .await;
    let result = match finished {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(shard = app.shard, "connection ended: {e}");
    }
}

/// Over a connection cap: answer 503 and close, reading what the client sent so the close
/// does not turn into a reset that loses the answer.
async fn refuse(mut stream: TcpStream, _slot: ConnSlot, full: Full) {
    let body = match full {
        Full::Server => r#"{"error":{"code":"too_many_connections","message":"the server holds its maximum number of connections; retry shortly"}}"#.to_string(),
        Full::Client(cap) => format!(r#"{{"error":{{"code":"too_many_connections","message":"this client address holds {cap} connections, its maximum (max_connections_per_address); reuse one, or retry once one is closed"}}}}"#),
    };
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.flush().await?;
        stream.shutdown(std::net::Shutdown::Write).await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = futures_lite::future::or(write, async {
        glommio::timer::sleep(Duration::from_millis(500)).await;
        Ok(())
    })
    .await;
}

/// `req` as the handlers get it: an ordinary request as it came; a forwarded one (on a node
/// given the cluster's secret) read whole and verified, or the answer that refuses it.
pub(super) async fn admit(app: &App, req: Request<Incoming>) -> Result<Request<Source>, Resp> {
    let secret = app.shared.config.cluster_secret.as_deref();
    let Some(secret) = secret.filter(|_| req.headers().contains_key(forward_sign::FORWARDED))
    else {
        return Ok(req.map(Source::Wire));
    };
    let refused = &app.shared.forwards.refused;
    let signed = match forward_sign::check_time(req.headers(), forward_sign::now_ms()) {
        Ok(s) => s,
        Err(why) => {
            why.count(refused);
            let mut resp = respond::error(&why.error());
            if !hyper::body::Body::is_end_stream(req.body()) {
                // Not read: the connection cannot go on after it.
                respond::closing(&mut resp);
            }
            return Err(resp);
        }
    };
    let (parts, body) = req.into_parts();
    let cfg = &app.shared.config;
    let limit = cfg.max_body_bytes.max(cfg.max_batch_body_bytes);
    let body =
        match super::gather::read_whole(&parts.headers, body, limit, cfg.body_timeout_ms).await {
            Ok(b) => b,
            Err(e) => {
                let mut resp = respond::error(&e);
                respond::closing(&mut resp);
                return Err(resp);
            }
        };
    let (t_ms, nonce) = (signed.0, signed.1.clone());
    let fresh = match forward_sign::verify(secret.as_bytes(), &parts, signed, &body).await {
        Ok(()) => app.shared.seen.admit(t_ms, &nonce, forward_sign::now_ms()),
        Err(why) => Err(why),
    };
    match fresh {
        Ok(()) => Ok(Request::from_parts(parts, Source::Read(body))),
        Err(why) => {
            why.count(refused);
            Err(respond::error(&why.error()))
        }
    }
}
