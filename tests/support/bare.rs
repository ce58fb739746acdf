//! `punctual serve` with exactly the flags a test gives (none of `api_support`'s defaults),
//! optionally under a wrapper command (`unshare …`), ready once `/healthz` answers 200.
#![allow(dead_code)]

use crate::api_support::{free_port, try_request, Server};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `[wrapper…] punctual serve --listen ADDR args…` and waits until it is healthy.
pub fn serve(wrapper: &[OsString], args: &[OsString]) -> Server {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let bin = env!("CARGO_BIN_EXE_punctual");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(["serve", "--listen", &addr.to_string()])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for k in [
        "PUNCTUAL_LISTEN",
        "PUNCTUAL_SHARDS",
        "PUNCTUAL_CONFIG",
        "PUNCTUAL_STORE",
        "PUNCTUAL_DATA_DIR",
        "PUNCTUAL_REDIS",
        "PUNCTUAL_SHARD_CAPACITY",
    ] {
        cmd.env_remove(k);
    }
    let child = cmd.spawn().expect("spawn punctual");
    let mut s = Server { child, addr };
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = s.child.try_wait() {
            panic!("punctual exited during start-up: {status}");
        }
        if try_request(addr, "GET", "/healthz", &[], b"").is_ok_and(|r| r.status == 200) {
            return s;
        }
        assert!(Instant::now() < give_up, "punctual never became healthy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `OsString`s of `args`.
pub fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}
