use super::*;

fn frames(n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(vec![b'a' + (i % 26) as u8; 1000 + i]))
        .collect()
}

fn joined(frames: &[Bytes]) -> Vec<u8> {
    frames.iter().flat_map(|f| f.iter().copied()).collect()
}

/// Declared or not, one frame or many, the body comes back whole and in order, in a
/// buffer never grown: one of its own size, or the single frame itself.
#[test]
fn a_body_is_gathered_whole_into_a_buffer_of_its_size() {
    crate::runtime::cooperate::on_executor(async {
        let mut slice = Slice::begin();
        for n in [0, 1, 2, 300] {
            let fs = frames(n);
            let whole = joined(&fs);
            for declared in [Some(whole.len()), None] {
                let mut g = Gather::new(declared);
                for f in &fs {
                    g.push(f.clone());
                }
                if declared.is_none() && n > 0 {
                    assert!(g.sized.capacity() == 0, "nothing reserved without a length");
                }
                let body = g.finish(&mut slice).await;
                assert_eq!(body.as_ref(), whole.as_slice(), "{n} frames, {declared:?}");
            }
        }
        // One frame without a declared length: that frame, not a copy.
        let f = Bytes::from(vec![7u8; 10_000]);
        let mut g = Gather::new(None);
        g.push(f.clone());
        assert_eq!(g.finish(&mut slice).await.as_ptr(), f.as_ptr());
    });
}

/// A body longer than it declared (the HTTP layer refuses one, but the gathering does not
/// count on it) still comes back whole and in order.
#[test]
fn a_body_longer_than_declared_is_still_gathered_in_order() {
    crate::runtime::cooperate::on_executor(async {
        let fs = frames(10);
        let whole = joined(&fs);
        let mut g = Gather::new(Some(whole.len() / 2));
        for f in &fs {
            g.push(f.clone());
        }
        assert_eq!(
            g.finish(&mut Slice::begin()).await.as_ref(),
            whole.as_slice()
        );
    });
}
