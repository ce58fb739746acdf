use super::*;

#[test]
fn a_thread_started_by_a_pinned_one_can_be_moved_back_to_every_core_of_the_process() {
    let all = available_cores();
    let first = all[0];
    let (inherited, moved) = std::thread::spawn(move || {
        pin_current_thread(&[first]).expect("pin to one core");
        std::thread::spawn(move || {
            let inherited = current_thread_cores();
            pin_current_thread(&available_cores()).expect("pin back");
            (inherited, current_thread_cores())
        })
        .join()
        .expect("inner thread")
    })
    .join()
    .expect("outer thread");
    assert_eq!(inherited, vec![first], "a child inherits its parent's pin");
    assert_eq!(
        moved, all,
        "and can be given back every core the process has"
    );
    assert_eq!(available_cores(), all, "the process's cores are read once");
}

#[test]
fn pinning_to_no_valid_core_changes_nothing() {
    let before = std::thread::spawn(|| {
        let before = current_thread_cores();
        pin_current_thread(&[]).expect("empty list");
        pin_current_thread(&[libc::CPU_SETSIZE as usize]).expect("out of range");
        (before, current_thread_cores())
    })
    .join()
    .expect("thread");
    assert_eq!(before.0, before.1);
}
