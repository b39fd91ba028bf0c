//! The `[metrics]` section: where the HTTP endpoint listens, whether `POST /control` may change
//! the job, which `Host` names it answers to, and the token control asks for.

use std::net::SocketAddr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::connector::secret::SecretValue;
use crate::connector::values::duration_at;
use crate::error::{Error, Result};

/// `[metrics]`
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// Address of the HTTP endpoint (`/metrics` for Prometheus, `/healthz`, `/ping`, `/ready`,
    /// `/status`, the status page `/`, `POST /control`), e.g. "127.0.0.1:9464"; a bare port binds
    /// to loopback. Default: no endpoint.
    pub listen: Option<String>,
    /// Whether `POST /control` on the same listener may pause, resume and change rates. Default:
    /// true on a loopback address or when `control_token` is set, false otherwise. On any other
    /// address it needs `control_token`. `GET /status` and the status page `/` are served either
    /// way.
    pub control: Option<bool>,
    /// The bearer token `POST /control` requires (`Authorization: Bearer <token>`), written here,
    /// or `{ env = "NAME" }` / `{ file = "/run/secrets/x" }`. Required for control on an address
    /// other than loopback; when set, required on loopback too. Never logged or shown.
    pub control_token: Option<SecretValue>,
    /// More `Host` names the endpoint answers to, as `name` (any port) or `name:port`: a
    /// Service's or a proxy's name. The bound address, any IP address when it listens on all
    /// addresses, and `localhost` are always allowed, with any port; a
    /// request naming another host gets 421 on every endpoint but `/healthz`, `/ping` and
    /// `/ready` (the guard against DNS rebinding).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// How long the endpoint keeps serving after the job ends, e.g. "30s": a short job's last
    /// counts would otherwise go before Prometheus scrapes them. `/status` then says the job's
    /// state, `/ready` answers 503, and SIGTERM or SIGINT ends the wait. Default: "0s".
    pub linger: Option<String>,
}

/// The bearer token of `POST /control`: never shown, compared in constant time.
#[derive(Clone)]
pub struct ControlToken(String);

impl ControlToken {
    pub fn new(token: String) -> Self {
        ControlToken(token)
    }

    /// Whether `given` is the token. Hand-rolled (one loop): a constant-time comparison is all
    /// it needs, and no crate in the tree offers one.
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        let mut diff = a.len() ^ b.len();
        for (i, x) in a.iter().enumerate() {
            diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
        }
        diff == 0
    }
}

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A `Host` name the endpoint answers to besides its own address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// Lower case; an IPv6 address without its brackets.
    pub name: String,
    /// `None`: any port.
    pub port: Option<u16>,
}

/// The validated `[metrics]` section.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    pub listen: Option<SocketAddr>,
    /// `POST /control` is allowed.
    pub control: bool,
    pub control_token: Option<ControlToken>,
    pub allowed_hosts: Vec<AllowedHost>,
    /// `metrics.linger`: serving on after the job ends.
    pub linger: Duration,
}

impl MetricsConfig {
    /// Validate the section; errors name the key.
    pub fn from_raw(raw: RawMetrics) -> Result<MetricsConfig> {
        let listen = raw.listen.as_deref().map(parse_listen).transpose()?;
        let control_token = raw
            .control_token
            .map(|t| t.resolve("metrics.control_token"))
            .transpose()?
            .map(ControlToken::new);
        if let Some(token) = &control_token {
            if token.0.is_empty() {
                return Err(Error::config(
                    "metrics.control_token",
                    "is empty: no request could carry it",
                ));
            }
            if token.0.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::config(
                    "metrics.control_token",
                    "holds a space or a control character: a bearer token is one word",
                ));
            }
        }
        let beyond_loopback = listen.filter(|a| !a.ip().is_loopback());
        let control = raw
            .control
            .unwrap_or(listen.is_some_and(|a| a.ip().is_loopback()) || control_token.is_some());
        if let (true, Some(addr), None) = (control, beyond_loopback, &control_token) {
            return Err(Error::config(
                "metrics.control_token",
                format!(
                    "POST /control on {addr}, beyond loopback, needs a token: set metrics.control_token \
                     (e.g. {{ env = \"TIDEGATE_CONTROL_TOKEN\" }}), or metrics.control = false"
                ),
            ));
        }
        let allowed_hosts = raw
            .allowed_hosts
            .iter()
            .enumerate()
            .map(|(i, h)| parse_allowed_host(h).map_err(|m| Error::config(format!("metrics.allowed_hosts[{i}]"), m)))
            .collect::<Result<_>>()?;
        let linger = raw
            .linger
            .as_deref()
            .map(|t| duration_at("metrics.linger", t))
            .transpose()?
            .unwrap_or_default();
        if !linger.is_zero() && listen.is_none() {
            return Err(Error::config(
                "metrics.linger",
                "keeps the endpoint serving after the job ends, but metrics.listen is not set",
            ));
        }
        Ok(MetricsConfig {
            listen,
            control,
            control_token,
            allowed_hosts,
            linger,
        })
    }
}

fn parse_listen(text: &str) -> Result<SocketAddr> {
    let t = text.trim().trim_start_matches(':');
    if let Ok(port) = t.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.trim()
        .parse()
        .map_err(|_| Error::config("metrics.listen", format!("{text:?} is not host:port (or a port)")))
}

/// `name`, `name:port`, `[v6]` or `[v6]:port`: a `Host` header's value.
pub fn parse_authority(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        match after {
            "" => (name, None),
            _ => (name, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    let bracketed = text.starts_with('[');
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') || (bracketed && c == ':');
    (!name.is_empty() && name.chars().all(valid)).then(|| (name.to_ascii_lowercase(), port))
}

fn parse_allowed_host(text: &str) -> std::result::Result<AllowedHost, String> {
    if text.contains("://") || text.contains('/') {
        return Err(format!(
            "{text:?} is a URL: give the host name only, as `name` or `name:port`"
        ));
    }
    let (name, port) =
        parse_authority(text).ok_or_else(|| format!("{text:?} is not a host name, `name` or `name:port`"))?;
    Ok(AllowedHost { name, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(listen: &str, control: Option<bool>, token: Option<&str>) -> RawMetrics {
        RawMetrics {
            listen: Some(listen.to_string()),
            control,
            control_token: token.map(|t| SecretValue::Text(t.to_string())),
            allowed_hosts: Vec::new(),
            linger: None,
        }
    }

    #[test]
    fn lingering_needs_an_endpoint_and_a_duration() {
        let mut r = raw("9464", None, None);
        r.linger = Some("30s".into());
        assert_eq!(MetricsConfig::from_raw(r).unwrap().linger, Duration::from_secs(30));
        let mut r = raw("9464", None, None);
        r.listen = None;
        r.linger = Some("30s".into());
        let e = MetricsConfig::from_raw(r).unwrap_err().to_string();
        assert!(e.contains("metrics.linger") && e.contains("metrics.listen"), "{e}");
        let mut r = raw("9464", None, None);
        r.linger = Some("soon".into());
        let e = MetricsConfig::from_raw(r).unwrap_err().to_string();
        assert!(e.contains("metrics.linger") && e.contains("duration"), "{e}");
        assert!(MetricsConfig::from_raw(raw("9464", None, None))
            .unwrap()
            .linger
            .is_zero());
    }

    #[test]
    fn control_beyond_loopback_needs_a_token_and_a_token_switches_it_on() {
        let loopback = MetricsConfig::from_raw(raw("9464", None, None)).unwrap();
        assert!(loopback.control && loopback.control_token.is_none());
        let open = MetricsConfig::from_raw(raw("0.0.0.0:9464", None, None)).unwrap();
        assert!(!open.control, "control stays off beyond loopback without a token");
        let e = MetricsConfig::from_raw(raw("0.0.0.0:9464", Some(true), None))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("metrics.control_token: POST /control on 0.0.0.0:9464, beyond loopback, needs a token"),
            "{e}"
        );
        let guarded = MetricsConfig::from_raw(raw("0.0.0.0:9464", None, Some("s3cret"))).unwrap();
        assert!(guarded.control);
        assert!(!format!("{guarded:?}").contains("s3cret"), "{guarded:?}");
        let e = MetricsConfig::from_raw(raw("9464", None, Some("")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metrics.control_token: is empty"), "{e}");
        let e = MetricsConfig::from_raw(raw("9464", None, Some("two words")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("metrics.control_token: holds a space"), "{e}");
    }

    #[test]
    fn a_token_matches_only_itself() {
        let t = ControlToken("s3cret".into());
        assert!(t.matches("s3cret"));
        for other in ["", "s3cre", "s3cret!", "S3cret", "x3cret"] {
            assert!(!t.matches(other), "{other}");
        }
    }

    #[test]
    fn allowed_hosts_are_names_with_or_without_a_port() {
        let mut r = raw("9464", None, None);
        r.allowed_hosts = vec!["Tidegate.Example".into(), "proxy:8080".into(), "[::1]:9464".into()];
        let m = MetricsConfig::from_raw(r).unwrap();
        let hosts: Vec<_> = m.allowed_hosts.iter().map(|h| (h.name.as_str(), h.port)).collect();
        assert_eq!(
            hosts,
            [("tidegate.example", None), ("proxy", Some(8080)), ("::1", Some(9464))]
        );
        for (bad, why) in [
            ("http://x", "is a URL"),
            ("x:port", "is not a host name"),
            ("", "is not a host name"),
        ] {
            let mut r = raw("9464", None, None);
            r.allowed_hosts = vec!["ok".into(), bad.into()];
            let e = MetricsConfig::from_raw(r).unwrap_err().to_string();
            assert!(e.contains("metrics.allowed_hosts[1]: ") && e.contains(why), "{e}");
        }
    }
}
