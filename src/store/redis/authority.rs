//! The authority of a Redis URL that names several servers (`redis+sentinel://`,
//! `redis+cluster://`): `[user:password@]host:port[,host:port…]`.
//!
//! The `url` crate reads a URL with one host; a comma-separated list of them is not a URL it
//! accepts, so the list is split here and each host is checked with `url::Host::parse` (a DNS
//! name, an IPv4 address, or an IPv6 address in brackets), so that a typo is refused at start
//! with the server it is in rather than found at the first connect. The credentials are
//! percent-decoded as in any URL's userinfo.

use redis::RedisConnectionInfo;

/// `[user:password@]host:port[,host:port…]`: the servers, and the credentials (database 0).
/// `what` names a server in errors ("sentinel", "cluster node").
pub fn parse(
    authority: &str,
    what: &str,
) -> Result<(Vec<(String, u16)>, RedisConnectionInfo), String> {
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut servers = Vec::new();
    for h in hosts.split(',') {
        servers.push(host_port(h, what)?);
    }
    let mut redis = RedisConnectionInfo::default();
    if let Some(u) = userinfo {
        let decode = |s: &str| {
            // Never quoted: it may be the password.
            percent_decode(s).ok_or_else(|| "credentials: bad percent-encoding".to_owned())
        };
        match u.split_once(':') {
            Some((user, pass)) => {
                if !user.is_empty() {
                    redis.username = Some(decode(user)?);
                }
                redis.password = Some(decode(pass)?);
            }
            None => redis.username = Some(decode(u)?),
        }
    }
    Ok((servers, redis))
}

/// One `host:port` (`[v6]:port` for an IPv6 address): the host without brackets, and the port.
pub fn host_port(h: &str, what: &str) -> Result<(String, u16), String> {
    let (host, port) = h
        .rsplit_once(':')
        .ok_or_else(|| format!("{what} {h:?} needs host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{what} {h:?}: port {port:?} is not a number 1-65535"))?;
    if host.is_empty() || port == 0 {
        return Err(format!("{what} {h:?} needs a host and a port 1-65535"));
    }
    let bare = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{what} {h:?}: an IPv6 address is written [addr]:port"))?,
        None if host.contains(':') => {
            return Err(format!(
                "{what} {h:?}: an IPv6 address is written [addr]:port"
            ))
        }
        None => host,
    };
    // `Host::parse` wants an IPv6 address in brackets, as it appears in a URL.
    let checked = if bare.contains(':') {
        format!("[{bare}]")
    } else {
        bare.to_owned()
    };
    url::Host::parse(&checked).map_err(|e| format!("{what} {h:?}: host {bare:?}: {e}"))?;
    Ok((bare.to_owned(), port))
}

/// `%XX` sequences decoded, as in a URL's userinfo; `None` on a bad sequence or bad UTF-8.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[path = "authority_tests.rs"]
mod tests;
