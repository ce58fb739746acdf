use super::*;

const REQ: &[u8] = b"t=1700,n=0123456789abcdef0000000000000001,s=00";

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::default()
        .make()
        .expect("executor")
        .run(f)
}

fn json_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h
}

#[test]
fn a_signed_answer_verifies_for_its_forward_only() {
    let mut resp = Response::new(Full::new(Bytes::from_static(b"{\"version\":1}")));
    *resp.status_mut() = StatusCode::CREATED;
    *resp.headers_mut() = json_headers();
    let (parts, body, given) = run(async {
        let signed = sign(b"s", REQ, resp).await;
        let (parts, body) = signed.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let given = parts.headers.get(ANSWER_SIGNATURE).cloned();
        (parts, body, given)
    });
    assert_eq!(&body[..], b"{\"version\":1}", "the body is kept");
    let h = AnswerHead {
        request: REQ,
        status: parts.status,
        headers: &parts.headers,
    };
    let check = |secret: &[u8], h: &AnswerHead<'_>, body: &[u8]| {
        run(async { verify(secret, h, given.as_ref(), body).await })
    };
    assert_eq!(check(b"s", &h, &body), Ok(()));
    assert_eq!(
        given.as_ref().and_then(|v| v.to_str().ok()),
        Some(answer_signature(b"s", &h, &body).as_str()),
        "at once and fed agree"
    );
    let other = b"t=1700,n=0123456789abcdef0000000000000002,s=00";
    let mut retried = json_headers();
    retried.insert(RETRY_AFTER, HeaderValue::from_static("1"));
    for (what, h2, b2, secret) in [
        (
            "another forward",
            AnswerHead {
                request: other,
                ..h
            },
            &body[..],
            &b"s"[..],
        ),
        (
            "another status",
            AnswerHead {
                status: StatusCode::OK,
                ..h
            },
            &body[..],
            b"s",
        ),
        (
            "a header added",
            AnswerHead {
                headers: &retried,
                ..h
            },
            &body[..],
            b"s",
        ),
        ("another body", h, b"{\"version\":2}", b"s"),
        ("another secret", h, &body[..], b"t"),
    ] {
        assert_eq!(check(secret, &h2, b2), Err(Unproven::Wrong), "{what}");
    }
}

#[test]
fn an_answer_without_a_signature_of_this_form_is_missing() {
    let headers = json_headers();
    let h = AnswerHead {
        request: REQ,
        status: StatusCode::CREATED,
        headers: &headers,
    };
    for bad in [None, Some("s=zz"), Some("s=00"), Some("t=1")] {
        let v = bad.map(HeaderValue::from_static);
        let got = run(async { verify(b"s", &h, v.as_ref(), b"").await });
        assert_eq!(got, Err(Unproven::Missing), "{bad:?}");
    }
}

#[test]
fn an_answer_is_bound_to_the_forward_s_signature_as_sent() {
    let mut h = HeaderMap::new();
    assert!(bound_to(&h).is_empty());
    h.insert(SIGNATURE, HeaderValue::from_static("t=1,n=2,s=3"));
    assert_eq!(&bound_to(&h)[..], b"t=1,n=2,s=3");
}
