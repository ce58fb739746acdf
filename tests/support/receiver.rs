//! A webhook receiver for tests: a small HTTP/1.1 server (std `TcpListener`, a thread per
//! connection, keep-alive) on a free port. Every request is recorded with the moment it
//! arrived (CLOCK_REALTIME) and the connection it came on; a script decides each answer
//! (status, headers, a delay before answering, or a close without answering).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// CLOCK_REALTIME when the request's body was read, µs.
    pub at_us: u64,
    /// The connection it came on, numbered from 0 in the order they were accepted.
    pub conn: usize,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// How to answer one request.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Waited before answering (a slow endpoint).
    pub delay: Duration,
    /// Close the connection without answering (as a server does that closed a kept-alive
    /// connection just as a request arrived).
    pub close: bool,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
            close: false,
        }
    }

    /// Closes the connection without answering.
    pub fn close() -> Reply {
        Reply {
            close: true,
            ..Reply::status(0)
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

type Script = dyn Fn(&Received, &[Received]) -> Reply + Send + Sync;

pub struct Receiver {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Arc<Script>>>,
    stop: Arc<AtomicBool>,
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl Receiver {
    /// Starts a receiver that answers as `script` says; `script` sees the request and every
    /// request received before it.
    pub fn start(
        script: impl Fn(&Received, &[Received]) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<Arc<Script>>> = Arc::new(Mutex::new(Arc::new(script)));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (log, script, stop) = (log.clone(), script.clone(), stop.clone());
            std::thread::spawn(move || {
                for (n, conn) in listener.incoming().enumerate() {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let _ = conn.set_nodelay(true);
                    let (log, script, stop) = (log.clone(), script.clone(), stop.clone());
                    std::thread::spawn(move || serve(conn, n, &log, &script, &stop));
                }
            });
        }
        Receiver {
            addr,
            log,
            script,
            stop,
        }
    }

    /// Like `start`, over TLS with `pki`'s certificate for `localhost`.
    pub fn start_tls(
        pki: &TestPki,
        script: impl Fn(&Received, &[Received]) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Mutex<Arc<Script>>> = Arc::new(Mutex::new(Arc::new(script)));
        let stop = Arc::new(AtomicBool::new(false));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![pki.cert_der.clone().into()],
                rustls_pki_types::PrivateKeyDer::Pkcs8(pki.key_der.clone().into()),
            )
            .expect("server certificate");
        let config = Arc::new(config);
        {
            let (log, script, stop) = (log.clone(), script.clone(), stop.clone());
            std::thread::spawn(move || {
                for (n, conn) in listener.incoming().enumerate() {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let Ok(tls) = rustls::ServerConnection::new(config.clone()) else {
                        continue;
                    };
                    let (log, script, stop) = (log.clone(), script.clone(), stop.clone());
                    std::thread::spawn(move || {
                        serve(rustls::StreamOwned::new(tls, conn), n, &log, &script, &stop)
                    });
                }
            });
        }
        Receiver {
            addr,
            log,
            script,
            stop,
        }
    }

    /// A receiver that answers 200 at once.
    pub fn ok() -> Receiver {
        Receiver::start(|_, _| Reply::status(200))
    }

    /// `http://127.0.0.1:<port>/`: the allow-list prefix.
    pub fn base(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.addr, path.trim_start_matches('/'))
    }

    /// Answers from now on as `script` says.
    pub fn set_script(
        &self,
        script: impl Fn(&Received, &[Received]) -> Reply + Send + Sync + 'static,
    ) {
        *self.script.lock().expect("script lock") = Arc::new(script);
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().expect("log lock").clone()
    }

    /// The requests to `path`.
    pub fn to(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Waits until `done` holds for the requests received, or `limit` passes; the requests.
    pub fn wait(&self, limit: Duration, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let give_up = Instant::now() + limit;
        loop {
            let r = self.received();
            if done(&r) || Instant::now() > give_up {
                return r;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect(self.addr);
    }
}

/// A test CA, and a certificate for `localhost` it signed (with its key).
pub struct TestPki {
    pub ca_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

pub fn test_pki() -> TestPki {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("certificate");
    TestPki {
        ca_pem: ca.pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}

fn serve<S: Read + Write>(
    conn: S,
    n: usize,
    log: &Mutex<Vec<Received>>,
    script: &Mutex<Arc<Script>>,
    stop: &AtomicBool,
) {
    let mut reader = BufReader::new(conn);
    while !stop.load(Ordering::Acquire) {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        let len = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let req = Received {
            path,
            headers,
            body,
            at_us: now_us(),
            conn: n,
        };
        let reply = {
            let script = script.lock().expect("script lock").clone();
            let mut log = log.lock().expect("log lock");
            let reply = script(&req, &log);
            log.push(req);
            reply
        };
        if !reply.delay.is_zero() {
            std::thread::sleep(reply.delay);
        }
        if reply.close {
            return;
        }
        let mut head = format!("HTTP/1.1 {} X\r\ncontent-length: 0\r\n", reply.status);
        for (k, v) in &reply.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let w = reader.get_mut();
        if w.write_all(head.as_bytes())
            .and_then(|()| w.flush())
            .is_err()
        {
            return;
        }
    }
}
