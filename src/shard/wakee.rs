//! How a parked shard is woken: the socket the ring's producers write one byte to when the
//! shard is parked ([`Wakee`]), through glommio's reactor or a plain `ppoll`, and the thread's
//! timer slack that would otherwise delay every park ([`set_timer_slack_ns`]). How long a
//! shard parks, and what it does with the time before, is `park.rs`.
//!
//! Cost: a park is a glommio timer raced against a read of the wake socket (`Reactor`) or one
//! `ppoll` (`Direct`).

use std::time::Duration;

/// How a parked shard waits for its ring.
///
/// - `Reactor`: through glommio (a read of the wake socket raced against a glommio timer), so
///   the shard's other tasks (HTTP connections, the store's Redis I/O) keep running while it
///   parks. glommio's sleep path (ring linking, a `membarrier` that interrupts the process's
///   other cores) costs about 50 µs more per wake-up than the kernel's own on a VM.
/// - `Direct`: the shard thread blocks in `ppoll` on the wake socket with the park's timeout.
///   Used when the shard runs nothing but its loop (the library engine without a store or
///   hook): wake-ups and timeouts cost what the kernel's do, no other core is disturbed, and
///   the thread never enters glommio's scheduler after start-up.
pub(crate) enum Wakee {
    Reactor(glommio::net::UnixStream),
    Direct(std::os::unix::net::UnixStream),
}

impl Wakee {
    /// Whether the shard shares its executor with other tasks, and so must yield to them.
    pub fn cooperative(&self) -> bool {
        matches!(self, Wakee::Reactor(_))
    }

    /// Waits until a producer writes to the wake socket or `nap` has passed.
    pub async fn park(&mut self, nap: Duration, buf: &mut [u8]) {
        match self {
            Wakee::Reactor(stream) => {
                use futures_lite::AsyncReadExt;
                futures_lite::future::or(
                    async {
                        let _ = stream.read(buf).await;
                    },
                    glommio::timer::sleep(nap),
                )
                .await
            }
            Wakee::Direct(stream) => park_direct(stream, nap, buf),
        }
    }
}

/// Blocks until the wake socket is readable or `nap` has passed.
fn park_direct(stream: &std::os::unix::net::UnixStream, nap: Duration, buf: &mut [u8]) {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: nap.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: nap.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` is one valid pollfd for a socket this shard owns, `ts` a valid timespec,
    // and a null signal mask keeps the thread's mask; all outlive the call.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if rc > 0 {
        // The socket is non-blocking: drain the wake bytes until it would block.
        let mut reader = stream;
        while matches!(reader.read(buf), Ok(n) if n > 0) {}
    }
}

/// Makes the calling thread's timers exact: the default 50 µs timer slack would delay every
/// park by up to 50 µs.
pub(crate) fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument and touches only the calling
    // thread's scheduling attributes.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        tracing::warn!(
            "could not set timer slack: {}",
            std::io::Error::last_os_error()
        );
    }
}
