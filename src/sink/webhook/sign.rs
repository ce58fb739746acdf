//! The delivery's signature: `Punctual-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret,
//! "<t>.<body>")>`, and its verification for receivers (constant time).
//!
//! The timestamp is inside the signed text, so a receiver that also bounds its age (a few
//! minutes) refuses a replay of an old delivery; the `Idempotency-Key` takes care of
//! deliveries repeated on purpose.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8], t: u64, body: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut m = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable_hmac(),
    };
    m.update(t.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

#[cold]
fn unreachable_hmac() -> HmacSha256 {
    // HMAC accepts every key length; keep a value rather than a panic all the same.
    <HmacSha256 as Mac>::new(&Default::default())
}

/// The header value for `body`, signed with `secret` at `t` (Unix seconds).
pub fn signature(secret: &[u8], t: u64, body: &[u8]) -> String {
    let tag = mac(secret, t, body).finalize().into_bytes();
    format!("t={t},v1={}", hex::encode(tag))
}

/// Why a signature was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the header is not t=<unix s>,v1=<hex>")]
    Malformed,
    #[error("the timestamp is further from now than the tolerance")]
    Stale,
    #[error("no v1 signature matches the body")]
    Mismatch,
}

/// Checks a `Punctual-Signature` header against `body`: the timestamp within `tolerance_s`
/// of `now_unix_s`, and some `v1=` signature equal (in constant time) to the expected one.
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now_unix_s: u64,
    tolerance_s: u64,
) -> Result<(), VerifyError> {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<u64>().ok(),
            Some(("v1", v)) => sigs.push(v),
            _ => {}
        }
    }
    let t = t.ok_or(VerifyError::Malformed)?;
    if sigs.is_empty() {
        return Err(VerifyError::Malformed);
    }
    if t.abs_diff(now_unix_s) > tolerance_s {
        return Err(VerifyError::Stale);
    }
    let expected = mac(secret, t, body).finalize().into_bytes();
    let mut ok = subtle::Choice::from(0);
    for s in sigs {
        if let Ok(given) = hex::decode(s) {
            ok |= given.as_slice().ct_eq(expected.as_slice());
        }
    }
    if bool::from(ok) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
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
}
