use super::*;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn table(entries: &[(&str, TenantConfig)]) -> BTreeMap<String, TenantConfig> {
    entries
        .iter()
        .map(|(n, c)| (n.to_string(), c.clone()))
        .collect()
}

fn acme() -> TenantConfig {
    TenantConfig {
        token: Some(TOKEN.into()),
        max_pending: Some(2),
        ..Default::default()
    }
}

fn code(r: Result<(), ApiError>) -> &'static str {
    r.map_or_else(|e| e.code(), |()| "ok")
}

#[test]
fn bearer_scheme_is_case_insensitive_and_token_exact() {
    let t = Tenants::new(&table(&[("acme", acme())]), true);
    let with = |h: String| t.admit("acme", Some(h.as_bytes()));
    assert_eq!(code(with(format!("Bearer {TOKEN}"))), "ok");
    assert_eq!(code(with(format!("bEaReR {TOKEN}"))), "ok");
    assert_eq!(
        code(with(format!("Bearer {}", &TOKEN[1..]))),
        "unauthorized"
    );
    assert_eq!(code(with(format!("Basic {TOKEN}"))), "unauthorized");
    assert_eq!(code(with("Bearer".into())), "unauthorized");
    assert_eq!(code(t.admit("acme", None)), "unauthorized");
    assert_eq!(code(t.admit("open", Some(b"Bearer whatever"))), "ok");
}

#[test]
fn a_caller_without_the_token_spends_none_of_the_tenants_budget() {
    let limited = TenantConfig {
        max_requests_per_s: Some(1),
        burst: Some(1),
        ..acme()
    };
    let t = Tenants::new(&table(&[("acme", limited)]), false);
    for _ in 0..5 {
        assert_eq!(code(t.admit("acme", Some(b"Bearer guess"))), "unauthorized");
    }
    let auth = format!("Bearer {TOKEN}");
    assert_eq!(code(t.admit("acme", Some(auth.as_bytes()))), "ok");
    assert_eq!(code(t.admit("acme", Some(auth.as_bytes()))), "rate_limited");
}

#[test]
fn an_unlisted_tenant_is_refused_once_tenants_are_configured() {
    let closed = Tenants::new(&table(&[("acme", acme())]), false);
    assert_eq!(code(closed.admit("other", None)), "unknown_tenant");
    assert_eq!(
        code(closed.admit("other", Some(format!("Bearer {TOKEN}").as_bytes()))),
        "unknown_tenant",
        "another tenant's token opens nothing"
    );
    let open = Tenants::new(&table(&[("acme", acme())]), true);
    assert_eq!(code(open.admit("other", None)), "ok");
    assert_eq!(code(Tenants::default().admit("anyone", None)), "ok");
}

#[test]
fn a_tenant_past_its_burst_is_rate_limited_and_told_when_to_retry() {
    let limited = TenantConfig {
        max_requests_per_s: Some(1),
        burst: Some(3),
        ..acme()
    };
    let t = Tenants::new(&table(&[("acme", limited), ("calm", acme())]), false);
    let auth = format!("Bearer {TOKEN}");
    for i in 0..3 {
        assert_eq!(code(t.admit("acme", Some(auth.as_bytes()))), "ok", "{i}");
    }
    match t.admit("acme", Some(auth.as_bytes())) {
        Err(ApiError::RateLimited { retry_after_s, .. }) => {
            assert!((1..=2).contains(&retry_after_s), "{retry_after_s}")
        }
        other => panic!("expected rate_limited, got {other:?}"),
    }
    // Another tenant has its own budget.
    for _ in 0..10 {
        assert_eq!(code(t.admit("calm", Some(auth.as_bytes()))), "ok");
    }
}

#[test]
fn the_reader_token_opens_a_read_of_every_known_tenant_and_spends_its_rate() {
    const READER: &str = "reader-reader-reader-reader-0123456789";
    let limited = TenantConfig {
        max_requests_per_s: Some(1),
        burst: Some(1),
        ..acme()
    };
    let t = Tenants::new(&table(&[("acme", limited)]), false);
    let reader = format!("Bearer {READER}");
    // Not for a write: `admit` knows no reader.
    assert_eq!(
        code(t.admit("acme", Some(reader.as_bytes()))),
        "unauthorized"
    );
    // Without a reader token set, nothing but the tenant's own opens a read.
    assert_eq!(
        code(t.admit_read("acme", Some(reader.as_bytes()), None)),
        "unauthorized"
    );
    assert_eq!(
        code(t.admit_read("acme", Some(reader.as_bytes()), Some(READER))),
        "ok"
    );
    // The read counted against the tenant's rate.
    assert_eq!(
        code(t.admit_read("acme", Some(reader.as_bytes()), Some(READER))),
        "rate_limited"
    );
    // An unknown tenant stays unknown to the reader.
    assert_eq!(
        code(t.admit_read("ghost", Some(reader.as_bytes()), Some(READER))),
        "unknown_tenant"
    );
}
