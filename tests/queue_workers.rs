//! The pull workers of `examples/` (Python and Rust) run as they are against the real binary on
//! the journal: every unpaid order whose timer fires is closed, a paid one is left alone, a
//! worker killed with SIGKILL in the middle of its batches loses nothing and handles no
//! (key, version) twice after a second worker takes over, the queue ends empty, and SIGTERM
//! stops a worker cleanly.

mod api_support;

use api_support::{eventually, Configured};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const TOKEN: &str = "shop-token-0123456789abcdef0123456";
const ORDERS: usize = 120;

fn serve(data: &Path) -> Configured {
    let toml = format!("[tenants.shop]\ntoken = \"{TOKEN}\"\nqueue = true\n");
    Configured::journal(data, &toml, &["--shards", "2"])
}

/// A timer per order, due over 3 s; every tenth order is paid before it fires.
fn put_orders(c: &Configured) {
    for i in 0..ORDERS {
        let body = json!({"delay_ms": 300 + (i as u64 * 25), "payload": {"order": format!("{i}")}});
        let (status, b) =
            c.s.call(TOKEN, "PUT", &format!("/v1/timers/shop/order-{i}"), &body);
        assert_eq!(status, 201, "PUT order-{i}: {b}");
    }
}

fn paid(i: usize) -> bool {
    i % 10 == 0
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// Waits for a worker stopped by SIGTERM: it must exit 0 and say so.
fn stopped_cleanly(mut w: Worker) {
    let child = &mut w.0;
    signal(child, libc::SIGTERM);
    // A long poll in flight answers within its wait_ms (20 s) first.
    let status = eventually("the worker exits after SIGTERM", || {
        child.try_wait().ok()?
    });
    assert!(status.success(), "worker exited with {status}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out).ok();
    assert!(
        out.trim_end().ends_with("stopped"),
        "worker's last line: {out}"
    );
}

/// The queue ends empty: nothing ready, delayed or leased (every message was acknowledged).
fn queue_empty(c: &Configured) {
    eventually("the queue is empty", || {
        let (status, q) = c.s.call(TOKEN, "GET", "/v1/queues/shop", &json!(null));
        assert_eq!(status, 200, "{q}");
        (q["depth"] == 0 && q["in_flight"] == 0).then_some(())
    });
}

/// A worker process, killed when dropped (a failed assertion must not leave it running).
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(program: &Path, args: &[&str], c: &Configured) -> Worker {
    let child = Command::new(program)
        .args(args)
        .env("PUNCTUAL_URL", format!("http://{}", c.s.addr))
        .env("PUNCTUAL_TOKEN", TOKEN)
        // What the killed worker leased comes back within the test's patience.
        .env("PUNCTUAL_VISIBILITY_MS", "3000")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the worker starts");
    Worker(child)
}

fn python_db(db: &Path, sql: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3,sys\ndb=sqlite3.connect(sys.argv[1])\n{sql}"
        ))
        .arg(db)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_python_pull_worker_closes_every_unpaid_order_once_across_a_sigkill() {
    let data = tempfile::tempdir().expect("data dir");
    let db = data.path().join("orders.sqlite3");
    let c = serve(&data.path().join("journal"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pull_worker.py");
    let args = ["shop", db.to_str().expect("utf-8 path")];

    // The worker creates the tables; the shop's orders go in before any timer fires.
    let first = worker(
        Path::new("python3"),
        &[script.to_str().unwrap(), args[0], args[1]],
        &c,
    );
    eventually("the worker made its tables", || {
        let n = python_db(&db, "print(db.execute(\"select count(*) from sqlite_master where name='handled'\").fetchone()[0])");
        (n.trim() == "1").then_some(())
    });
    python_db(
        &db,
        &format!(
            "db.executemany('insert into orders values (?, ?)', [(str(i), 'paid' if i % 10 == 0 else 'unpaid') for i in range({ORDERS})])\ndb.commit()"
        ),
    );
    put_orders(&c);
    // Killed once it has handled some: what it leased and did not ack comes back.
    eventually("the first worker handled some", || {
        let n: usize = python_db(
            &db,
            "print(db.execute('select count(*) from handled').fetchone()[0])",
        )
        .trim()
        .parse()
        .ok()?;
        (n >= 20).then_some(())
    });
    drop(first); // SIGKILL
    let second = worker(
        Path::new("python3"),
        &[script.to_str().unwrap(), args[0], args[1]],
        &c,
    );
    let handled = || -> Option<usize> {
        python_db(
            &db,
            "print(db.execute('select count(*) from handled').fetchone()[0])",
        )
        .trim()
        .parse()
        .ok()
    };
    eventually("every order's timer handled", || {
        (handled()? == ORDERS).then_some(())
    });
    queue_empty(&c);
    let rows = python_db(
        &db,
        "print(db.execute('select count(*), count(distinct key) from handled').fetchone())\n\
         for r in db.execute('select id, status from orders order by cast(id as integer)'): print(r[0], r[1])",
    );
    let mut lines = rows.lines();
    // Every order's timer handled, none under two versions.
    assert_eq!(lines.next(), Some(format!("({ORDERS}, {ORDERS})").as_str()));
    for (i, line) in lines.enumerate() {
        let want = if paid(i) { "paid" } else { "closed" };
        assert_eq!(line, format!("{i} {want}"));
    }
    stopped_cleanly(second);
}

/// Builds the Rust example (a no-op when `cargo test` built it already) and gives its path.
fn rust_worker() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--locked",
            "--example",
            "pull_worker",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the example builds");
    // The test binary lives in target/<profile>/deps; the example in target/<profile>/examples.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    profile_dir.join("examples/pull_worker")
}

#[test]
fn the_rust_pull_worker_closes_every_unpaid_order_once_across_a_sigkill() {
    let program = rust_worker();
    let data = tempfile::tempdir().expect("data dir");
    let orders = data.path().join("orders");
    std::fs::create_dir_all(&orders).expect("orders dir");
    for i in 0..ORDERS {
        let status = if paid(i) { "paid\n" } else { "unpaid\n" };
        std::fs::write(orders.join(i.to_string()), status).expect("an order");
    }
    let c = serve(&data.path().join("journal"));
    let args = ["shop", orders.to_str().expect("utf-8 path")];
    let first = worker(&program, &args, &c);
    put_orders(&c);
    let handled = || {
        std::fs::read_dir(orders.join(".handled"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    eventually("the first worker handled some", || {
        (handled() >= 20).then_some(())
    });
    drop(first); // SIGKILL
    let second = worker(&program, &args, &c);
    eventually("every order's timer handled", || {
        (handled() == ORDERS).then_some(())
    });
    queue_empty(&c);
    // One mark per (key, version): every order's timer was handled, none under two versions.
    assert_eq!(handled(), ORDERS);
    for i in 0..ORDERS {
        let status = std::fs::read_to_string(orders.join(i.to_string())).expect("order");
        let want = if paid(i) { "paid" } else { "closed" };
        assert_eq!(status.trim(), want, "order {i}");
    }
    stopped_cleanly(second);
}
