//! The part of a request's body its handler did not read, and what becomes of the connection.
//!
//! hyper keeps a connection alive after a request only if the request's body was read to its
//! end. When a handler answers without reading it (a 401, 404, 405 or 429 is decided from the
//! head; a GET ignores a body) hyper drains only what already sits in its buffer, and
//! otherwise closes the connection after the answer, without `Connection: close`: a pooled
//! client (Python's `http.client`, Go's `net/http` for a PUT) then meets a broken pipe on its
//! next request and reports an error instead of retrying.
//!
//! So every handler gets its body as a [`RequestBody`], which hands the unread rest back when
//! the handler drops it, and `App::serve` (`routes.rs`) settles the connection with
//! [`drained`] once the answer is known:
//!
//! | the body | the connection |
//! |---|---|
//! | read to its end (or empty) | kept |
//! | left unread, its rest within the route's body limit, arriving within `body_timeout_ms` | the rest is read and discarded, then kept |
//! | declared or found over the limit (`413`), too slow (`408`), or broken (bad chunking) | the answer says `Connection: close`, and hyper closes after it |
//!
//! The drain's budget is the route's own limit (`max_body_bytes`, `max_batch_body_bytes` for
//! a batch), so a refused request costs the server no more reading than an accepted one.
//!
//! Cost: one `Rc` cell per request, and the request's parts moved once into the new body
//! type: about 1,300 instructions of the 42,000 a keep-alive PUT takes on its connection
//! (callgrind, `perf/load/put.lua`'s request). A request whose body was read pays nothing
//! else; one whose body was left unread pays for reading it.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

/// What a handler left of its request's body.
#[derive(Default)]
pub enum Unread {
    /// Nothing: read to its end, or empty.
    #[default]
    Nothing,
    /// The rest, not yet read, and how many bytes the handler read before it stopped.
    Rest(Incoming, u64),
    /// Reading it failed (a malformed chunk, a reset): the connection cannot go on.
    Broken,
}

/// Where a [`RequestBody`] leaves what was not read of it.
pub type Left = Rc<Cell<Unread>>;

/// Where a request's body comes from: the connection, or memory (a forwarded request, read
/// whole to verify its signature: `forward_sign.rs`).
pub enum Source {
    Wire(Incoming),
    Read(Bytes),
}

/// The frames a body already read is handed out in, so a reader looks at its slice between.
const READ_FRAME: usize = 64 * 1024;

/// A request's body as its handler sees it: hyper's body, which hands what was not read of it
/// to [`Left`] when dropped.
pub struct RequestBody {
    inner: Option<Incoming>,
    /// What is left of a body read already (handed out before `inner`, which is then none).
    read_whole: Bytes,
    read: u64,
    broken: bool,
    left: Left,
}

impl RequestBody {
    /// `body`, and where its unread rest will be left.
    pub fn new(body: Source) -> (RequestBody, Left) {
        let left = Left::default();
        let (inner, read_whole) = match body {
            Source::Wire(b) => (Some(b), Bytes::new()),
            Source::Read(b) => (None, b),
        };
        let body = RequestBody {
            inner,
            read_whole,
            read: 0,
            broken: false,
            left: left.clone(),
        };
        (body, left)
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if !self.read_whole.is_empty() {
            let n = self.read_whole.len().min(READ_FRAME);
            let frame = self.read_whole.split_to(n);
            self.read += n as u64;
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.read += n;
            }
            Poll::Ready(Some(Err(_))) => self.broken = true,
            Poll::Ready(None) => self.inner = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.read_whole.is_empty() && self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        // A body read already has no `inner`.
        self.inner.as_ref().map_or_else(
            || SizeHint::with_exact(self.read_whole.len() as u64),
            Incoming::size_hint,
        )
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let unread = if self.broken {
            Unread::Broken
        } else {
            match self.inner.take() {
                Some(rest) if !rest.is_end_stream() => Unread::Rest(rest, self.read),
                _ => Unread::Nothing,
            }
        };
        self.left.set(unread);
    }
}

/// Whether the connection can go on after an answer whose handler left `unread`: reads and
/// discards the rest when it fits in `limit` bytes (counting what the handler read) and
/// arrives within `timeout`. `give_up` (a `408`, a `413` for a body over its limit) skips
/// the wait: such a body is not read again.
pub async fn drained(unread: Unread, limit: usize, timeout: Duration, give_up: bool) -> bool {
    let (mut rest, read) = match unread {
        Unread::Nothing => return true,
        Unread::Broken => return false,
        Unread::Rest(rest, read) => (rest, read),
    };
    let mut budget = (limit as u64).saturating_sub(read);
    if give_up || rest.size_hint().lower() > budget {
        return false;
    }
    let discard = async {
        while let Some(frame) = rest.frame().await {
            let Ok(frame) = frame else { return false };
            let n = frame.data_ref().map_or(0, |d| d.len() as u64);
            match budget.checked_sub(n) {
                Some(b) => budget = b,
                None => return false,
            }
        }
        true
    };
    let late = async {
        glommio::timer::sleep(timeout).await;
        false
    };
    futures_lite::future::or(discard, late).await
}
