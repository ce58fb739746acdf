use super::*;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use std::sync::mpsc;
use std::sync::Mutex;

/// A gauge whose encoding names the thread it runs on, and first waits for a go from the
/// test (when `gate` holds a receiver).
#[derive(Debug)]
struct Probe {
    gate: Mutex<Option<mpsc::Receiver<()>>>,
    started: Mutex<mpsc::Sender<()>>,
}

impl Collector for Probe {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let _ = self.started.lock().map(|s| s.send(()));
        if let Some(gate) = self.gate.lock().ok().and_then(|mut g| g.take()) {
            let _ = gate.recv();
        }
        let name = std::thread::current().name().unwrap_or("").to_string();
        let id: i64 = if name == "punctual-metrics" { 1 } else { 0 };
        encoder
            .encode_descriptor(
                "probe_on_render_thread",
                "1 on the render thread",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&id)
    }
}

fn probe(gate: Option<mpsc::Receiver<()>>) -> (Renderer, mpsc::Receiver<()>) {
    let (started, encodings) = mpsc::channel();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Probe {
        gate: Mutex::new(gate),
        started: Mutex::new(started),
    }));
    (Renderer::start(Arc::new(registry)), encodings)
}

/// A scrape is encoded on the render thread, not on the thread that asked (a shard's).
#[test]
fn a_scrape_is_rendered_on_the_render_thread() {
    let (r, _) = probe(None);
    let text = futures_lite::future::block_on(r.scrape()).expect("rendered");
    assert!(text.contains("probe_on_render_thread 1"), "{text}");
    assert!(render(&Registry::default()).contains("# EOF"));
}

/// While one scrape is being rendered, `WAITING_SCRAPES - 1` more may wait; the next is
/// refused at once, and every one that waited gets its text.
#[test]
fn scrapes_past_the_bound_are_refused_and_the_waiting_ones_answered() {
    let (go, gate) = mpsc::channel();
    let (r, encodings) = probe(Some(gate));
    let mut waiting = Vec::new();
    for i in 0..WAITING_SCRAPES {
        let (tx, rx) = futures_channel::oneshot::channel();
        r.scrapes.try_send(tx).expect("room to wait");
        waiting.push(rx);
        if i == 0 {
            encodings
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the first scrape's rendering began");
        }
    }
    let refused = futures_lite::future::block_on(r.scrape());
    assert_eq!(refused, Err(ScrapeRefused::Busy));
    go.send(()).expect("the render thread waits");
    for rx in waiting {
        let text = futures_lite::future::block_on(rx).expect("answered");
        assert!(text.contains("probe_on_render_thread 1"), "{text}");
    }
}
