use super::super::faults::Fault;
use super::*;

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_default()
}

#[test]
fn a_power_cut_undoes_exactly_what_was_not_made_durable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, trash) = (tmp.path().join("d"), tmp.path().join("trash"));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let disk = Disk::faulty(faults.clone());
    let (kept, lost, moved, gone) = (
        dir.join("kept"),
        dir.join("lost"),
        dir.join("moved"),
        dir.join("gone"),
    );
    let io = || -> io::Result<()> {
        let k = disk.create_new(&kept)?;
        disk.write_at(&k, b"synced", 0)?;
        disk.sync(&k)?;
        let g = disk.create_new(&gone)?;
        disk.write_at(&g, b"old", 0)?;
        disk.sync(&g)?;
        disk.sync_dir(&dir)?;
        disk.write_at(&k, b"SYNCED and more", 0)?;
        disk.unlink(&gone)?;
        let l = disk.create_new(&lost)?;
        disk.write_at(&l, b"never synced", 0)?;
        disk.sync(&l)?;
        disk.rename(&lost, &moved)?;
        Ok(())
    };
    io().expect("the operations");
    assert_eq!(faults.count(), 13);
    assert_eq!(read(&kept), b"SYNCED and more");
    assert!(!gone.exists() && moved.exists());
    faults.power_cut(|_| false).expect("power cut");
    assert_eq!(read(&kept), b"synced", "the unsynced overwrite is undone");
    assert_eq!(
        read(&gone),
        b"old",
        "an unlink before the directory sync is undone"
    );
    assert!(
        !moved.exists() && !lost.exists(),
        "a name never made durable is gone, whatever its data"
    );
    assert!(faults.dead(), "nothing runs after the power is cut");
    assert!(disk.sync_dir(&dir).is_err());
}

#[test]
fn a_power_cut_keeps_the_file_an_unsynced_rename_replaced_and_undoes_new_directories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, trash) = (tmp.path().join("d"), tmp.path().join("trash"));
    std::fs::create_dir_all(&trash).expect("trash");
    let faults = Faults::new(&trash);
    let disk = Disk::faulty(faults.clone());
    let (current, next, sub) = (dir.join("CURRENT"), dir.join("CURRENT.tmp"), dir.join("g"));
    let io = || -> io::Result<()> {
        disk.create_dir(&dir)?;
        disk.sync_dir(tmp.path())?;
        disk.create_synced(&current, b"old")?;
        disk.sync_dir(&dir)?;
        disk.create_synced(&next, b"new")?;
        disk.rename(&next, &current)?;
        disk.create_dir(&sub)?;
        disk.create_synced(&sub.join("f"), b"x")?;
        disk.sync_dir(&sub)
    };
    io().expect("the operations");
    assert_eq!(read(&current), b"new");
    faults.power_cut(|_| false).expect("power cut");
    assert_eq!(read(&current), b"old", "the replaced file is back");
    assert!(!next.exists(), "the new name was never durable");
    assert!(
        !sub.exists(),
        "a directory whose name was never synced is gone"
    );
    assert!(dir.exists(), "a directory whose name was synced stays");
}

#[test]
fn a_fault_fails_its_operation_and_death_stops_every_later_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let faults = Faults::new(tmp.path());
    let disk = Disk::faulty(faults.clone());
    let f = disk.create_new(&tmp.path().join("f")).expect("create");
    faults.fail_at(1, Fault::Eio);
    assert_eq!(
        disk.write_at(&f, b"x", 0).map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO))
    );
    assert!(disk.write_at(&f, b"x", 0).is_ok(), "EIO is once");
    faults.fail_at(3, Fault::NoSpace);
    assert!(disk.sync(&f).is_ok(), "before the fault");
    for _ in 0..2 {
        assert_eq!(
            disk.write_at(&f, b"y", 1).map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENOSPC))
        );
    }
    assert!(disk.sync(&f).is_ok(), "a full disk still syncs");
    faults.clear();
    assert!(disk.write_at(&f, b"y", 1).is_ok(), "room again");
    faults.fail_at(faults.count(), Fault::Die);
    assert!(disk.sync(&f).is_err() && disk.write_at(&f, b"z", 2).is_err());
    assert_eq!(
        read(&tmp.path().join("f")),
        b"xy",
        "nothing after the death"
    );
}
