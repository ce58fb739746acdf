//! No answer before it is durable: a retried DELETE, a replacement's fire, and a restart that
//! reads the disk, not the page cache.

use super::*;

/// A DELETE answered 503 on a full disk leaves its cancel queued, not durable: a retry must
/// not answer 404 from the table (API.md: "a retried DELETE that answers 404 means the first
/// attempt had removed the timer"), since a restart before the cancel commits brings the timer
/// back. The retry waits behind the cancel, and is refused while the disk stays full.
#[test]
fn a_retried_delete_never_answers_404_while_the_first_cancel_is_not_durable() {
    use punctual::store::journal::faults::{Fault, Faults};
    use punctual::store::journal::io::Disk;
    let tmp = tempfile::tempdir().expect("tempdir");
    let trash = tmp.path().join("trash");
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let mut cfg = config(&tmp.path().join("data"));
    cfg.ack_timeout = Duration::from_millis(500);
    cfg.retry_max = Duration::from_millis(20);
    cfg.disk = Disk::faulty(faults.clone());
    let (e, _) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let kept = h
        .schedule("shop", "k", UtcMicros(far()), b"x")
        .expect("durable");
    faults.fail_at(faults.count(), Fault::NoSpace);
    assert!(
        matches!(h.cancel("shop", "k"), Err(Error::StoreUnavailable { .. })),
        "the cancel cannot be written"
    );
    let retry = h.cancel("shop", "k");
    assert!(
        matches!(retry, Err(Error::StoreUnavailable { .. })),
        "the retry told {retry:?} while the first cancel was not durable"
    );
    e.shutdown().expect("shutdown");
    cfg.disk = Disk::default();
    let (e, _) = start(1, cfg).expect("restarts");
    assert_eq!(
        e.handle().get("shop", "k").expect("get").map(|t| t.version),
        Some(kept.version),
        "the cancel never became durable: the timer is still pending"
    );
    e.shutdown().expect("shutdown");
}

/// A replacement due at once fires only once its record is durable: fired before, a crash
/// before its commit would bring back the version it replaced, and a receiver would see the
/// new version, then the old one. While the disk cannot take the record the new version is
/// held (not lost), and it fires once the record is written.
#[test]
fn a_replacement_fires_only_once_its_record_is_durable() {
    use punctual::store::journal::faults::{Fault, Faults};
    use punctual::store::journal::io::Disk;
    let tmp = tempfile::tempdir().expect("tempdir");
    let trash = tmp.path().join("trash");
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let mut cfg = config(&tmp.path().join("data"));
    cfg.ack_timeout = Duration::from_millis(300);
    cfg.retry_max = Duration::from_millis(20);
    cfg.disk = Disk::faulty(faults.clone());
    let (e, fired) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let v1 = h
        .schedule("shop", "k", UtcMicros(far()), b"v1")
        .expect("durable")
        .version;
    faults.fail_at(faults.count(), Fault::NoSpace);
    let replaced = h.schedule("shop", "k", h.now(), b"v2");
    assert!(
        matches!(replaced, Err(Error::StoreUnavailable { .. })),
        "{replaced:?}"
    );
    // Two more ack timeouts' worth of passes: a due timer would have fired long since.
    std::thread::sleep(Duration::from_millis(600));
    let seen = fired.lock().map(|f| f.clone()).unwrap_or_default();
    assert!(
        seen.is_empty(),
        "fired {seen:?} while its record was not durable (v1 = {v1})"
    );
    faults.clear();
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while fired.lock().is_ok_and(|f| f.is_empty()) && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = fired.lock().map(|f| f.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 1, "fires once its record is durable: {seen:?}");
    assert!(seen[0].1 > v1, "the replacement fired: {seen:?}");
    e.shutdown().expect("shutdown");
    cfg.disk = Disk::default();
    let (e, _) = start(1, cfg).expect("restarts");
    assert_eq!(e.handle().get("shop", "k").expect("get"), None, "fired");
    e.shutdown().expect("shutdown");
}

/// Where logical block `lblk` of `file` lies on its device, in bytes (FIBMAP; root only), and
/// the file system's block size.
fn physical_block(file: &std::fs::File, lblk: u64) -> (u64, u64) {
    use std::os::unix::io::AsRawFd;
    let (mut bsz, mut blk): (libc::c_int, libc::c_int) = (0, lblk as libc::c_int);
    // SAFETY: FIGETBSZ and FIBMAP write one int through the pointer, which outlives the call;
    // the descriptor is open.
    let (a, b) = unsafe {
        (
            libc::ioctl(file.as_raw_fd(), 2 /* FIGETBSZ */, &mut bsz),
            libc::ioctl(file.as_raw_fd(), 1 /* FIBMAP */, &mut blk),
        )
    };
    assert!(
        a == 0 && b == 0 && blk > 0,
        "FIBMAP: {}",
        std::io::Error::last_os_error()
    );
    (blk as u64 * bsz as u64, bsz as u64)
}

/// The page cache can hold a commit the disk does not, as after a failed `fdatasync` (the
/// kernel keeps the pages it could not write, marked clean): here the commit's blocks are
/// zeroed on the device under the mounted file system, whose cache still has them. A restart
/// must replay the disk: had it replayed the cache, its next commit would carry the next
/// batch number, and once the cache went (a reboot) the commit it read would be missing, a
/// gap that refuses the start.
#[test]
fn a_restart_replays_what_the_disk_holds_not_what_the_page_cache_kept() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let fs = match LoopFs::mount(tmp.path()) {
        Ok(fs) => fs,
        Err(why) if std::env::var_os("PUNCTUAL_SKIP_ROOT_TESTS").is_some() => {
            eprintln!("\n!!! SKIPPED (PUNCTUAL_SKIP_ROOT_TESTS): the page-cache test needs root and a loop device: {why}\n");
            return;
        }
        Err(why) => panic!(
            "the page-cache test needs root and a loop device to write under a mounted file system: {why}. Run as root, or set PUNCTUAL_SKIP_ROOT_TESTS=1 to skip it knowingly"
        ),
    };
    let mut cfg = config(&fs.mnt.join("data"));
    cfg.segment_bytes = 4 << 20;
    let (e, _) = start(1, cfg.clone()).expect("starts");
    let h = e.handle();
    let due = UtcMicros(far());
    h.schedule("shop", "a", due, b"a").expect("a");
    h.schedule("shop", "b", due, b"b").expect("b");
    e.shutdown().expect("shutdown");
    // The last commit (b's) is the segment's last 4 KiB; zero it on the device only.
    let seg = std::fs::read_dir(shard_dir(&fs.mnt.join("data")))
        .expect("shard dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .expect("a segment");
    let file = std::fs::File::open(&seg).expect("segment");
    let len = file.metadata().expect("stat").len();
    assert!(len >= 8192 && len % 4096 == 0, "{len}");
    let img = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp.path().join("fs.img"))
        .expect("image");
    let (_, bsz) = physical_block(&file, 0);
    for lblk in (len - 4096) / bsz..len / bsz {
        let (at, bsz) = physical_block(&file, lblk);
        img.write_all_at(&vec![0u8; bsz as usize], at)
            .expect("zero");
    }
    img.sync_all().expect("sync the image");
    let mut cached = vec![0u8; 4096];
    file.read_exact_at(&mut cached, len - 4096).expect("read");
    assert!(
        cached.iter().any(|&b| b != 0),
        "the cache still holds b's commit"
    );
    drop(file);

    let (e, _) = start(1, cfg.clone()).expect("restarts");
    let h = e.handle();
    let b = h.get("shop", "b").expect("get");
    h.schedule("shop", "c", due, b"c").expect("c");
    e.shutdown().expect("shutdown");
    assert_eq!(
        b, None,
        "replayed b's commit from the page cache; the disk never held it"
    );
    // What a reboot does to the cache.
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches");
    let (e, _) = start(1, cfg).expect("starts from what the disk holds");
    let h = e.handle();
    for k in ["a", "c"] {
        assert!(h.get("shop", k).expect("get").is_some(), "{k} lost");
    }
    e.shutdown().expect("shutdown");
    drop(fs);
}
