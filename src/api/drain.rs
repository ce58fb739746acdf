//! The drain signal, as each shard sees it. The process-wide signal (`Servers::drain`, raised by
//! the signal thread) is awaited by one watcher task per shard; the watcher then wakes that
//! shard's acceptor and connections locally. So connections never register with a
//! cross-thread structure, and a request costs one local map update, no shared lock.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct LocalDrain {
    raised: Cell<bool>,
    next_id: Cell<u64>,
    waiters: RefCell<HashMap<u64, Waker>>,
}

impl LocalDrain {
    pub fn raise(&self) {
        self.raised.set(true);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for (_, w) in waiters {
            w.wake();
        }
    }

    /// A future that completes once the drain is raised.
    pub fn wait(self: &Rc<Self>) -> Drained {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        Drained {
            drain: self.clone(),
            id,
        }
    }
}

pub struct Drained {
    drain: Rc<LocalDrain>,
    id: u64,
}

impl Future for Drained {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.drain.raised.get() {
            return Poll::Ready(());
        }
        let mut waiters = self.drain.waiters.borrow_mut();
        match waiters.get_mut(&self.id) {
            Some(w) if w.will_wake(cx.waker()) => {}
            Some(w) => w.clone_from(cx.waker()),
            None => {
                waiters.insert(self.id, cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Drained {
    fn drop(&mut self) {
        if let Ok(mut w) = self.drain.waiters.try_borrow_mut() {
            w.remove(&self.id);
        }
    }
}
