use super::*;

#[test]
fn a_signature_verifies_and_any_change_does_not() {
    let h = signature(b"s3cret", 1_700_000_000, b"{\"a\":1}");
    assert!(h.starts_with("t=1700000000,v1="));
    assert_eq!(h.len(), "t=1700000000,v1=".len() + 64);
    assert_eq!(
        verify(b"s3cret", &h, b"{\"a\":1}", 1_700_000_010, 300),
        Ok(())
    );
    assert_eq!(
        verify(b"s3cret", &h, b"{\"a\":2}", 1_700_000_010, 300),
        Err(VerifyError::Mismatch)
    );
    assert_eq!(
        verify(b"other", &h, b"{\"a\":1}", 1_700_000_010, 300),
        Err(VerifyError::Mismatch)
    );
    assert_eq!(
        verify(b"s3cret", &h, b"{\"a\":1}", 1_700_001_000, 300),
        Err(VerifyError::Stale)
    );
    assert_eq!(
        verify(b"s3cret", "v1=00", b"", 0, 300),
        Err(VerifyError::Malformed)
    );
    assert_eq!(
        verify(b"s3cret", "t=1,v1=zz", b"", 1, 300),
        Err(VerifyError::Mismatch)
    );
}

#[test]
fn every_secret_of_a_rotation_signs_and_each_verifies() {
    let s = Signing::new(Scheme::Punctual, &["new".into(), "old".into()]).expect("valid");
    let h = s.headers("t/k/1", 1_700_000_000, b"{}");
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].1.matches(",v1=").count(), 2);
    for secret in [&b"new"[..], b"old"] {
        assert_eq!(verify(secret, &h[0].1, b"{}", 1_700_000_000, 300), Ok(()));
    }
    assert_eq!(
        verify(b"gone", &h[0].1, b"{}", 1_700_000_000, 300),
        Err(VerifyError::Mismatch)
    );
}

#[test]
fn standard_signatures_verify_with_the_standard_webhooks_library() {
    let (new, old) = (
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_dGhpcy1pcy10aGUtb2xkLWtleS0wMTIzNDU2Nzg5",
    );
    let s = Signing::new(Scheme::Standard, &[new.into(), old.into()]).expect("valid");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let body = br#"{"tenant":"t","key":"k","version":7}"#;
    let mut headers = hyper::HeaderMap::new();
    for (name, value) in s.headers("t/k/7", now, body) {
        headers.insert(name, value.parse().expect("a header value"));
    }
    for secret in [new, old] {
        let wh = standardwebhooks::Webhook::new(secret).expect("the library reads it");
        assert!(wh.verify(body, &headers).is_ok(), "{secret}");
        assert!(wh
            .verify(br#"{"tenant":"t","key":"k","version":8}"#, &headers)
            .is_err());
    }
    let other = standardwebhooks::Webhook::new("whsec_b3RoZXIta2V5LTAxMjM0NTY3ODlhYmNkZWY=")
        .expect("valid");
    assert!(other.verify(body, &headers).is_err());
}

#[test]
fn standard_webhooks_secrets_are_whsec_base64_of_enough_bytes() {
    let key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    assert!(Signing::new(Scheme::Standard, &[key.into()]).is_ok());
    for bad in [
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_not base64!",
        "whsec_c2hvcnQ=",
    ] {
        let e = Signing::new(Scheme::Standard, &[bad.into()]).expect_err(bad);
        assert!(!e.contains(bad), "the secret is not echoed: {e}");
    }
}

#[test]
fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
    // RFC 4231 test case 2 key and data, with the "<t>." prefix folded into the data.
    let h = signature(b"Jefe", 0, b"what do ya want for nothing?");
    let mut m = HmacSha256::new_from_slice(b"Jefe").expect("any key length");
    m.update(b"0.what do ya want for nothing?");
    assert_eq!(
        h,
        format!("t=0,v1={}", hex::encode(m.finalize().into_bytes()))
    );
}
