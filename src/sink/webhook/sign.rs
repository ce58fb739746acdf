//! The delivery's signature, in one of two schemes a tenant chooses (`webhook_signature`):
//!
//! | scheme | headers | signed text | secret |
//! |---|---|---|---|
//! | `punctual` (default) | `Punctual-Signature: t=<unix s>,v1=<hex>[,v1=<hex>…]` | `<t>.<body>` | the configured bytes |
//! | `standard` ([Standard Webhooks](https://www.standardwebhooks.com/)) | `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>[ v1,<base64>…]` | `<id>.<t>.<body>` | `whsec_<base64>`, decoded |
//!
//! Each scheme's tag is HMAC-SHA256. A tenant with several secrets (`webhook_secrets =
//! ["new", "old"]`) gets one `v1` signature for each, so a receiver can roll its key without
//! downtime: it accepts either while both are configured, then the old one is removed.
//!
//! The timestamp is inside the signed text, so a receiver that also bounds its age (a few
//! minutes) refuses a replay of an old delivery; a receiver de-duplicates on the signed body's
//! (tenant, key, version), which names one scheduling, not on an unsigned header.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

fn new_mac(secret: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable_hmac(),
    }
}

fn mac(secret: &[u8], t: u64, body: &[u8]) -> HmacSha256 {
    let mut m = new_mac(secret);
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
    signatures(&[secret.to_vec()], t, body)
}

/// The `Punctual-Signature` value with one `v1` per secret.
fn signatures(secrets: &[Vec<u8>], t: u64, body: &[u8]) -> String {
    let mut out = format!("t={t}");
    for secret in secrets {
        out.push_str(",v1=");
        out.push_str(&hex::encode(mac(secret, t, body).finalize().into_bytes()));
    }
    out
}

/// How a tenant's deliveries are signed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheme {
    /// `Punctual-Signature`.
    #[default]
    Punctual,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    Standard,
}

/// A tenant's signing: the scheme and its keys, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signing {
    pub scheme: Scheme,
    keys: Vec<Vec<u8>>,
}

/// The prefix of a Standard Webhooks secret.
pub const STANDARD_PREFIX: &str = "whsec_";
/// The shortest Standard Webhooks key accepted, decoded (the spec's 24 bytes).
pub const STANDARD_MIN_KEY: usize = 24;

impl Signing {
    /// From the configured secrets: the bytes as written (`punctual`), or `whsec_<base64>`
    /// decoded (`standard`). An error names what is wrong, never the secret.
    pub fn new(scheme: Scheme, secrets: &[String]) -> Result<Signing, String> {
        use base64::Engine;
        if secrets.is_empty() {
            return Err("no secret".into());
        }
        let keys = secrets
            .iter()
            .map(|s| match scheme {
                Scheme::Punctual => Ok(s.as_bytes().to_vec()),
                Scheme::Standard => {
                    let b64 = s.strip_prefix(STANDARD_PREFIX).ok_or(
                        "a Standard Webhooks secret is whsec_<base64> (webhook_signature = \"standard\")",
                    )?;
                    let key = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .map_err(|_| "the part after whsec_ is not base64")?;
                    if key.len() < STANDARD_MIN_KEY {
                        return Err("a Standard Webhooks key decodes to fewer than 24 bytes");
                    }
                    Ok(key)
                }
            })
            .collect::<Result<Vec<_>, &str>>()
            .map_err(str::to_string)?;
        Ok(Signing { scheme, keys })
    }

    /// The headers that sign `body` for delivery `id` (the `Idempotency-Key`) at `t` (Unix s).
    pub fn headers(&self, id: &str, t: u64, body: &[u8]) -> Vec<(&'static str, String)> {
        use base64::Engine;
        match self.scheme {
            Scheme::Punctual => vec![("punctual-signature", signatures(&self.keys, t, body))],
            Scheme::Standard => {
                let tags: Vec<String> = self
                    .keys
                    .iter()
                    .map(|key| {
                        let mut m = new_mac(key);
                        m.update(id.as_bytes());
                        m.update(b".");
                        m.update(t.to_string().as_bytes());
                        m.update(b".");
                        m.update(body);
                        let tag = m.finalize().into_bytes();
                        format!(
                            "v1,{}",
                            base64::engine::general_purpose::STANDARD.encode(tag)
                        )
                    })
                    .collect();
                vec![
                    ("webhook-id", id.to_string()),
                    ("webhook-timestamp", t.to_string()),
                    ("webhook-signature", tags.join(" ")),
                ]
            }
        }
    }
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
#[path = "sign_tests.rs"]
mod tests;
