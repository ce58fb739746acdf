//! The allow-list of one tenant's callbacks: URL prefixes compared on normalised URLs, and
//! the networks its deliveries may reach beyond the public internet.
//!
//! A prefix and a callback are both parsed as WHATWG URLs (the `url` crate), so that what is
//! compared is what a client will request: the scheme, the host (lower-cased, IDNA, and an
//! IPv4 address in any of its spellings such as `2130706433` made `127.0.0.1`), the port
//! (the scheme's default made explicit) and the path segments. A callback matches a prefix
//! when scheme, host and port are equal and its path segments begin with the prefix's
//! (a prefix's last segment, when it does not end in `/`, may be the start of the callback's
//! segment, as in a text prefix).
//!
//! A callback whose path could be read by some server as leaving its prefix is refused before
//! any comparison, since servers differ in how they resolve such paths and the one in front
//! of the receiver decides: `http://h/acme/../beta/hook` must never pass `http://h/acme/`.
//! Refused, in the path (the query is not a path, and a receiver never resolves it):
//!
//! | form | example | read as `..` or `/` by |
//! |---|---|---|
//! | a dot segment | `/acme/../beta`, `/acme/./x` | every server, and the URL parser itself |
//! | a backslash | `/acme\..\beta` | the URL parser (a `\` is a `/` in http URLs), IIS |
//! | an encoded slash or backslash | `/acme/..%2Fbeta`, `a%5Cb` | nginx (decodes, then resolves dot segments), some proxies |
//! | an encoded dot | `/acme/%2e%2e/beta`, `%2ehook` | the URL parser (`%2e` is a dot), nginx |
//! | any of those encoded again | `/acme/..%252Fbeta` | a proxy that decodes before forwarding |
//! | a dot segment with `;` parameters | `/acme/..;/beta`, `.;x` | Tomcat, Spring, Jetty (path parameters are dropped) |
//!
//! A dot never needs encoding (it is unreserved), so refusing every encoded one costs no
//! real callback; a `;` in any other segment (`/hook;v=1`) is allowed.
//!
//! A prefix whose host is an IP literal (`http://127.0.0.1:9000/`) also allows exactly that
//! address for the connection (see `address.rs`), so such configurations need no
//! `callback_allow_networks`.

use ipnet::IpNet;
use std::net::IpAddr;
use url::{Host, Url};

/// One normalised `callback_allow` prefix.
#[derive(Clone, Debug)]
struct Prefix {
    scheme: String,
    host: Host<String>,
    port: u16,
    /// Path segments that must be equal.
    whole: Vec<String>,
    /// A last segment the callback's segment must start with ("" when the prefix ends in `/`).
    partial: String,
}

/// A tenant's allow-list: its prefixes and the networks its deliveries may reach.
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    prefixes: Vec<Prefix>,
    networks: Vec<IpNet>,
}

/// Parses `url` as a callback or prefix would be: http(s), a host, no user information, no
/// fragment, no dot segment, no backslash.
pub fn parse(url: &str) -> Result<Url, &'static str> {
    if url.contains('\\') {
        return Err("a backslash is not allowed");
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("the scheme must be http or https")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return Err("the scheme must be http or https");
    }
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let path = path.split(['?', '#']).next().unwrap_or("");
    path.split('/').try_for_each(check_segment)?;
    let u = Url::parse(url).map_err(|_| "not a URL")?;
    // Again as normalised, which is what is stored and requested.
    u.path().split('/').try_for_each(check_segment)?;
    if !u.username().is_empty() || u.password().is_some() {
        return Err("user information is not allowed");
    }
    if u.fragment().is_some() {
        return Err("a fragment is not allowed");
    }
    if u.host().is_none() {
        return Err("no host");
    }
    Ok(u)
}

/// Refuses a path segment that some server could read as leaving the prefix (the module's
/// table): an encoded `/`, `\` or `.` at any depth of encoding, or a dot segment, with or
/// without `;` parameters. Each round of decoding shortens a segment that holds an escape, so
/// the rounds end.
fn check_segment(seg: &str) -> Result<(), &'static str> {
    let mut text = seg.as_bytes().to_vec();
    loop {
        let lower = text.to_ascii_lowercase();
        let holds = |escape: &[u8]| lower.windows(3).any(|w| w == escape);
        if holds(b"%2f") || holds(b"%5c") {
            return Err("a path with an encoded '/' or '\\' is not allowed");
        }
        if holds(b"%2e") {
            return Err("a path with an encoded '.' is not allowed");
        }
        let decoded: Vec<u8> = percent_encoding::percent_decode(&text).collect();
        if decoded == text {
            break;
        }
        text = decoded;
    }
    let name = text.split(|&b| b == b';').next().unwrap_or_default();
    if name == b"." || name == b".." {
        return Err(
            "a path with a '.' or '..' segment (with or without ';' parameters) is not allowed",
        );
    }
    Ok(())
}

/// Checks an allow-list prefix's shape: a scheme, a host, and the `/` that ends the authority
/// (so it cannot be extended into another host), without user information.
pub fn check_allow_prefix(prefix: &str) -> Result<(), &'static str> {
    let rest = prefix
        .strip_prefix("https://")
        .or_else(|| prefix.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    let slash = rest
        .find('/')
        .ok_or("must end its host with '/' (for example https://hooks.example.com/)")?;
    let authority = &rest[..slash];
    if authority.is_empty() || authority.contains('@') {
        return Err("must name a host, without user information");
    }
    Ok(())
}

impl Prefix {
    fn new(prefix: &str) -> Result<Prefix, &'static str> {
        check_allow_prefix(prefix)?;
        let u = parse(prefix)?;
        if u.query().is_some() {
            return Err("must not hold a query");
        }
        let host = u.host().ok_or("no host")?.to_owned();
        let port = u.port_or_known_default().ok_or("no port")?;
        let mut whole: Vec<String> = u
            .path_segments()
            .map(|s| s.map(str::to_string).collect())
            .unwrap_or_default();
        let partial = whole.pop().unwrap_or_default();
        Ok(Prefix {
            scheme: u.scheme().to_string(),
            host,
            port,
            whole,
            partial,
        })
    }

    fn matches(&self, u: &Url) -> bool {
        if u.scheme() != self.scheme
            || u.host().map(|h| h.to_owned()).as_ref() != Some(&self.host)
            || u.port_or_known_default() != Some(self.port)
        {
            return false;
        }
        let mut segs = u.path_segments().into_iter().flatten();
        for want in &self.whole {
            if segs.next() != Some(want.as_str()) {
                return false;
            }
        }
        match segs.next() {
            Some(seg) => seg.starts_with(self.partial.as_str()),
            None => self.partial.is_empty(),
        }
    }

    /// The address a prefix with an IP-literal host names.
    fn literal(&self) -> Option<IpAddr> {
        match &self.host {
            Host::Ipv4(a) => Some(IpAddr::V4(*a)),
            Host::Ipv6(a) => Some(IpAddr::V6(*a)),
            Host::Domain(_) => None,
        }
    }
}

impl AllowList {
    /// From the configured prefixes and `callback_allow_networks`; an IP-literal prefix adds
    /// its address to the networks.
    pub fn new(prefixes: &[String], networks: &[IpNet]) -> Result<AllowList, String> {
        let prefixes = prefixes
            .iter()
            .map(|p| Prefix::new(p).map_err(|e| format!("{p:?} {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut nets = networks.to_vec();
        nets.extend(prefixes.iter().filter_map(Prefix::literal).map(IpNet::from));
        Ok(AllowList {
            prefixes,
            networks: nets,
        })
    }

    /// Whether `url` (already parsed by [`parse`]) starts with one of the prefixes.
    pub fn permits(&self, url: &Url) -> bool {
        self.prefixes.iter().any(|p| p.matches(url))
    }

    /// The networks a delivery may reach beyond the public internet.
    pub fn networks(&self) -> &[IpNet] {
        &self.networks
    }

    /// A fingerprint of [`Self::networks`]: equal for equal lists, so connections checked under
    /// one list are pooled apart from those of another.
    pub fn networks_id(&self) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0).hash_one(&self.networks)
    }
}

#[cfg(test)]
#[path = "allow_tests.rs"]
mod tests;
