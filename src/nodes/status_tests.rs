use super::*;

#[test]
fn asks_share_one_read_and_a_fresh_answer_is_reused() {
    let status = Status::new("a:1");
    // No service: the first ask raises the flag, a second one does not raise it again.
    let first = status.answer(Instant::now());
    futures_lite::pin!(first);
    assert!(
        futures_lite::future::block_on(futures_lite::future::poll_once(first.as_mut())).is_none()
    );
    assert!(status.state().wanted);
    // The service takes the flag and answers.
    {
        let mut s = status.state();
        s.wanted = false;
        s.last = Some((Instant::now(), Err(StatusError::Read("x".into()))));
    }
    status.answered.notify(usize::MAX);
    let got = futures_lite::future::block_on(first);
    assert_eq!(got, Err(StatusError::Read("x".into())));
    // A later ask within FRESH gets the same answer without a read.
    let again = futures_lite::future::block_on(status.answer(Instant::now()));
    assert_eq!(again, Err(StatusError::Read("x".into())));
    assert!(!status.state().wanted);
}
