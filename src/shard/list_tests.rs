use super::*;

fn listed(keys: &[&str]) -> Vec<Listed> {
    keys.iter()
        .map(|k| Listed {
            key: k.to_string(),
            fire_at_us: 1,
            version: 1,
            payload: Vec::new(),
        })
        .collect()
}

fn keys(l: &[Listed]) -> Vec<&str> {
    l.iter().map(|t| t.key.as_str()).collect()
}

/// Keys of the wheel and of the pages interleaved: the page is the first `limit` of both by
/// key, and says which of them are paged (for their payloads' reads).
#[test]
fn the_wheels_and_the_pages_keys_merge_by_key_up_to_the_limit() {
    let (out, at) = merge(listed(&["a", "c", "e"]), listed(&["b", "d", "f"]), 4);
    assert_eq!(keys(&out), ["a", "b", "c", "d"]);
    assert_eq!(at, [1, 3]);
    let (out, at) = merge(listed(&["a"]), listed(&["b", "c"]), 10);
    assert_eq!((keys(&out), at), (vec!["a", "b", "c"], vec![1, 2]));
    let (out, at) = merge(listed(&["b", "c"]), Vec::new(), 1);
    assert_eq!(
        (keys(&out), at),
        (vec!["b", "c"], vec![]),
        "the wheel's own limit"
    );
    let (out, at) = merge(listed(&["a", "b"]), listed(&["b"]), 10);
    assert_eq!((keys(&out), at), (vec!["a", "b"], vec![]), "a key once");
}
