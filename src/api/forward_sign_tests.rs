use super::*;

const AB: &str = "0123456789abcdef00000000000000ab";

fn head<'a>(t_ms: u64, nonce: &'a str) -> Head<'a> {
    Head {
        method: "PUT",
        path: "/v1/timers/shop/k",
        node: b"10.0.0.1:7480",
        auth: b"Bearer t",
        t_ms,
        nonce,
    }
}

#[test]
fn a_signature_parses_back_and_any_other_form_is_missing() {
    let v = signature(b"s", &head(1_700, AB), b"{}");
    let (t, n, s) = parse(&v).expect("parses");
    assert_eq!((t, n), (1_700, AB));
    let mut m = mac_of_head(b"s", &head(1_700, AB));
    m.update(b"{}");
    assert_eq!(s, <[u8; 32]>::from(m.finalize().into_bytes()));
    for bad in [
        "",
        "t=1",
        "t=x,n=a,s=00",
        "t=1,n=a,s=zz",
        "t=1,n=a,s=00",
        "q=1",
        "t=1,n=ab,s=0000000000000000000000000000000000000000000000000000000000000000",
        "t=1,n=0123456789abcdef000000000000000g,s=0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        assert_eq!(parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_signature_is_stale_outside_the_window_either_way() {
    let mut h = HeaderMap::new();
    assert_eq!(check_time(&h, 0).err(), Some(Refusal::Missing));
    let now = 1_000_000;
    let w = WINDOW.as_millis() as u64;
    for (t, ok) in [
        (now, true),
        (now - w, true),
        (now + w, true),
        (now - w - 1, false),
        (now + w + 1, false),
    ] {
        let v = signature(b"s", &head(t, AB), b"");
        h.insert(SIGNATURE, HeaderValue::from_str(&v).expect("ascii"));
        assert_eq!(
            check_time(&h, now).is_ok(),
            ok,
            "t = now {:+}",
            t as i64 - now as i64
        );
    }
}

#[test]
fn any_part_changed_changes_the_mac() {
    let base = signature(b"s", &head(5, "n"), b"body");
    let mut h = head(5, "n");
    h.path = "/v1/timers/shop/j";
    let changed = [
        signature(b"t", &head(5, "n"), b"body"),
        signature(b"s", &head(5, "n"), b"bodz"),
        signature(b"s", &head(6, "n"), b"body"),
        signature(b"s", &head(5, "m"), b"body"),
        signature(b"s", &h, b"body"),
        signature(
            b"s",
            &Head {
                auth: b"Bearer u",
                ..head(5, "n")
            },
            b"body",
        ),
        signature(
            b"s",
            &Head {
                node: b"x",
                ..head(5, "n")
            },
            b"body",
        ),
        signature(
            b"s",
            &Head {
                method: "GET",
                ..head(5, "n")
            },
            b"body",
        ),
    ];
    let mac = |v: &str| v.rsplit_once("s=").map(|(_, s)| s.to_owned());
    for c in &changed {
        assert_ne!(mac(c), mac(&base), "{c}");
    }
}

#[test]
fn the_async_mac_is_the_one_at_once() {
    let body = vec![7u8; 3 * CHUNK + 5];
    let h = head(9, "n");
    let at_once = signature(b"s", &h, &body);
    let fed = glommio::LocalExecutorBuilder::default()
        .make()
        .expect("executor")
        .run(async { hex::encode(mac_of(b"s", &h, &body).await) });
    assert!(at_once.ends_with(&format!("s={fed}")));
}
