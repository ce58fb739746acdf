//! What the pages do with a timer they cannot hand to the wheel: a damaged page's timers are
//! counted as lost and never left pointing at a page that is gone, and a timer the wheel
//! refuses is held, not dropped.

use super::tests::{pager, the_page, timer, until_written, walk, Model, SECOND, T0};
use super::*;
use crate::runtime::cooperate::on_executor;

/// A bucket of 100 records of about 1 KiB, written to disk; then one byte in its middle
/// flipped. What `walk` loaded.
async fn damaged_bucket(dir: &std::path::Path, p: &mut Pager) -> Model {
    let big = vec![b'q'; 1_000];
    let d = UtcMicros(T0 + 5 * SECOND);
    for i in 0..100u64 {
        p.put(&timer(&format!("k{i:03}"), &big), d, i + 1)
            .expect("paged");
    }
    until_written(p).await;
    let page = the_page(dir);
    let mut bytes = std::fs::read(&page).expect("page");
    let cut = bytes.len() / 2;
    bytes[cut] ^= 0xff;
    std::fs::write(&page, &bytes).expect("damaged");
    walk(p, T0 + 2 * SECOND, SECOND / 4).await
}

/// One damaged record costs the timers between it and the next mark, not the rest of the
/// page: the load goes on past it. The timers it could not take are counted as lost, their
/// entries stay with their bucket (kept while they point at it), a GET of one answers an
/// error rather than another timer, and cancelling them gives the bucket and its file back.
#[test]
fn a_damaged_record_loses_only_its_mark_and_the_lost_are_counted_until_cancelled() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let wheel = damaged_bucket(dir.path(), &mut p).await;
        // A mark every 4 KiB: at most the records of 4 KiB, and the damaged one, are lost.
        let most = (files::MARK as usize).div_ceil(1_000) + 1;
        assert!(
            wheel.len() >= 100 - most,
            "{} of 100 loaded: the load stopped at the damage",
            wheel.len()
        );
        assert!(wheel.len() < 100, "the damage lost nothing?");
        for (k, (_, v, payload)) in &wheel {
            assert_eq!(format!("k{:03}", v - 1), *k, "each as it was put");
            assert_eq!(payload.len(), 1_000);
        }
        assert_eq!(p.stats().2, 1, "the damage counted once");
        let lost: Vec<String> = (0..100)
            .map(|i| format!("k{i:03}"))
            .filter(|k| !wheel.contains_key(k))
            .collect();
        assert_eq!(p.lost(), lost.len() as u64, "the lost counted");
        assert_eq!(
            p.len(),
            lost.len(),
            "still paged: cancels and GETs find them"
        );
        for k in &lost {
            let read = p.read(timer(k, b"").identity()).expect("found");
            let e = read.await.err().expect("no record read back");
            assert!(e.to_string().contains("damaged"), "{e}");
        }
        // The bucket and its file stay while an entry points at them.
        glommio::timer::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            std::fs::read_dir(dir.path().join("pages"))
                .expect("dir")
                .count(),
            1
        );
        let (last, rest) = lost.split_last().expect("some lost");
        for k in rest {
            assert!(p.remove(timer(k, b"").identity()).is_some(), "{k}");
        }
        assert_eq!(p.lost(), 1);
        // A replace of the last one, into another bucket, leaves nothing pointing at it.
        let later = UtcMicros(T0 + 60 * SECOND);
        let old = p.put(&timer(last, b"again"), later, 1_000).expect("paged");
        assert_eq!(
            old.map(|o| o.version),
            Some(1 + last[1..].parse::<u64>().expect("n"))
        );
        assert_eq!(p.lost(), 0);
        glommio::timer::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            std::fs::read_dir(dir.path().join("pages"))
                .expect("dir")
                .count(),
            0,
            "the damaged page removed once nothing points at it"
        );
        let r = p.read(timer(last, b"").identity()).expect("found").await;
        assert_eq!(r.expect("in memory").timer.payload(), b"again");
    });
}

/// A loaded timer the wheel hands back is held, not dropped: still paged (counted, found,
/// read back, cancelled), offered again at every step, and loaded once when the wheel takes
/// it; one cancelled while held never loads.
#[test]
fn a_loaded_timer_the_wheel_refuses_is_held_and_loads_later_once() {
    let dir = tempfile::tempdir().expect("tmp");
    on_executor(async {
        let mut p = pager(dir.path(), 4, Disk::default()).await;
        let d = UtcMicros(T0 + 5 * SECOND);
        let mut model = Model::new();
        for i in 0..50u64 {
            let key = format!("k{i:02}");
            p.put(&timer(&key, b"body"), d, i + 1).expect("paged");
            model.insert(key, (d, i + 1, b"body".to_vec()));
        }
        // The wheel takes nothing while its loads read the whole bucket.
        let now = UtcMicros(T0 + 2 * SECOND);
        for _ in 0..200 {
            let went = p.load_step(now, || false, |t, _, _| Err(t));
            assert_eq!(went, 0);
            if p.load.is_none() && p.held() == 50 {
                break;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!((p.held(), p.len()), (50, 50), "held, and still paged");
        let k07 = timer("k07", b"");
        assert_eq!(p.find(k07.identity()).map(|f| f.version), Some(8));
        let r = p.read(k07.identity()).expect("found").await.expect("read");
        assert_eq!((r.timer.payload(), r.version), (&b"body"[..], 8));
        assert!(p.remove(k07.identity()).is_some(), "a held timer cancels");
        model.remove("k07");
        assert_eq!((p.held(), p.len()), (49, 49));
        // Replaced into a later bucket while held: the held copy goes.
        let k08 = timer("k08", b"later");
        let later = UtcMicros(T0 + 60 * SECOND);
        assert!(p.put(&k08, later, 100).expect("paged").is_some());
        model.remove("k08");
        assert_eq!(p.held(), 48);
        // The wheel takes them now: each loads once, as it was put.
        let mut wheel = Model::new();
        let went = p.load_step(
            now,
            || false,
            |t, d, v| {
                let old = wheel.insert(t.key().to_string(), (d, v, t.payload().to_vec()));
                assert!(old.is_none(), "{} loaded twice", t.key());
                Ok(())
            },
        );
        assert_eq!(went, 48);
        assert_eq!(wheel, model);
        assert_eq!((p.held(), p.len()), (0, 1), "k08 waits in its own bucket");
    });
}
