//! Who may reach the endpoint's state: the `Host` a request names (against DNS rebinding: a page
//! whose own name resolves to this address still names its own host), the `Origin` of a POST
//! (against a page of another site posting to a port it can reach), and the bearer token
//! `POST /control` asks for.

use std::net::{IpAddr, SocketAddr};

use hyper::header::{HeaderMap, AUTHORIZATION, HOST, ORIGIN};
use hyper::StatusCode;

use super::settings::{parse_authority, AllowedHost, ControlToken};

/// The guard of one listener.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The address the endpoint is bound to (its port the one actually bound).
    pub bound: SocketAddr,
    pub allowed: Vec<AllowedHost>,
    pub token: Option<ControlToken>,
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    NoHost,
    ForeignHost(String),
    ForeignOrigin(String),
    NoToken,
    WrongToken,
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NoHost => StatusCode::BAD_REQUEST,
            Refusal::ForeignHost(_) => StatusCode::MISDIRECTED_REQUEST,
            Refusal::ForeignOrigin(_) => StatusCode::FORBIDDEN,
            Refusal::NoToken | Refusal::WrongToken => StatusCode::UNAUTHORIZED,
        }
    }

    /// What the client is told (never the token).
    pub fn message(&self) -> String {
        match self {
            Refusal::NoHost => "no Host header".to_string(),
            Refusal::ForeignHost(h) => {
                format!("this endpoint does not answer to the host {h:?}: add it to metrics.allowed_hosts")
            }
            Refusal::ForeignOrigin(o) => format!("requests from the origin {o:?} are refused"),
            Refusal::NoToken => "POST /control needs Authorization: Bearer <metrics.control_token>".to_string(),
            Refusal::WrongToken => "the bearer token is wrong".to_string(),
        }
    }
}

impl Guard {
    /// The request names a host this endpoint answers to.
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(HOST)
            .ok_or(Refusal::NoHost)?
            .to_str()
            .map_err(|_| Refusal::ForeignHost("(not text)".into()))?;
        match parse_authority(host) {
            Some((name, port)) if self.allows(&name, port) => Ok(()),
            _ => Err(Refusal::ForeignHost(host.to_string())),
        }
    }

    /// A browser's request comes from a page of this endpoint (or from no page at all: curl,
    /// Prometheus and scripts send no `Origin`).
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        let text = origin.to_str().unwrap_or("(not text)");
        let parsed = text.split_once("://").and_then(|(scheme, authority)| {
            let default = match scheme.to_ascii_lowercase().as_str() {
                "http" => 80,
                "https" => 443,
                _ => return None,
            };
            parse_authority(authority).map(|(name, port)| (name, port.unwrap_or(default)))
        });
        match parsed {
            Some((name, port)) if self.allows_origin(&name, port) => Ok(()),
            _ => Err(Refusal::ForeignOrigin(text.to_string())),
        }
    }

    /// The request carries the control token, when one is set.
    pub fn check_token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .ok_or(Refusal::NoToken)?;
        if token.matches(given) {
            Ok(())
        } else {
            Err(Refusal::WrongToken)
        }
    }

    /// `name:port` is this endpoint: its own address, any address when it listens on all of
    /// them, `localhost`, or an allowed name. A rebinding needs a name of the attacker's; an
    /// address or `localhost` cannot be one, so their port is not checked (Docker's published
    /// ports and `kubectl port-forward` name other ports than the bound one).
    /// `port`: the Host header's, `None` when it names none (80 or 443, by the scheme the client
    /// used, which a proxy in front may have ended).
    fn allows(&self, name: &str, port: Option<u16>) -> bool {
        self.is_own(name)
            || self.allowed.iter().any(|h| {
                h.name == name
                    && match (h.port, port) {
                        (None, _) => true,
                        (Some(p), Some(q)) => p == q,
                        (Some(p), None) => p == 80 || p == 443,
                    }
            })
    }

    /// An `Origin` is a page's: its port counts (pages on one host are apart by their ports),
    /// so this endpoint's own names with its own port, or an allowed name.
    fn allows_origin(&self, name: &str, port: u16) -> bool {
        (self.is_own(name) && port == self.bound.port())
            || self
                .allowed
                .iter()
                .any(|h| h.name == name && h.port.is_none_or(|p| p == port))
    }

    fn is_own(&self, name: &str) -> bool {
        let ip = self.bound.ip();
        match name.parse::<IpAddr>() {
            Ok(addr) => addr == ip || ip.is_unspecified(),
            Err(_) => name == "localhost" && (ip.is_loopback() || ip.is_unspecified()),
        }
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn guard(bound: &str, allowed: &[(&str, Option<u16>)]) -> Guard {
        Guard {
            bound: bound.parse().unwrap(),
            allowed: allowed
                .iter()
                .map(|(n, p)| AllowedHost {
                    name: n.to_string(),
                    port: *p,
                })
                .collect(),
            token: None,
        }
    }

    fn headers(pairs: &[(hyper::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn host(g: &Guard, value: &str) -> Result<(), Refusal> {
        g.check_host(&headers(&[(HOST, value)]))
    }

    #[test]
    fn the_host_must_be_this_endpoint() {
        let g = guard("127.0.0.1:9464", &[("proxy.internal", None)]);
        for ok in [
            "127.0.0.1:9464",
            "127.0.0.1:19464",
            "localhost:9464",
            "LOCALHOST",
            "proxy.internal",
            "proxy.internal:443",
        ] {
            assert_eq!(host(&g, ok), Ok(()), "{ok}");
        }
        for foreign in [
            "evil.example",
            "evil.example:9464",
            "10.0.0.1:9464",
            "localhost.evil.example:9464",
        ] {
            assert_eq!(
                host(&g, foreign),
                Err(Refusal::ForeignHost(foreign.into())),
                "{foreign}"
            );
        }
        assert_eq!(g.check_host(&HeaderMap::new()), Err(Refusal::NoHost));
        // on every address: any IP address with the port (a pod's, a node's), still no names
        let all = guard("0.0.0.0:9464", &[("tidegate", Some(9464))]);
        for ok in ["10.1.2.3:9464", "10.1.2.3:80", "localhost:9464", "tidegate:9464"] {
            assert_eq!(host(&all, ok), Ok(()), "{ok}");
        }
        for foreign in ["tidegate:80", "rebound.example:9464"] {
            assert!(host(&all, foreign).is_err(), "{foreign}");
        }
        // behind a TLS proxy the Host names no port: an allowed `name:443` takes it
        let proxied = guard("127.0.0.1:9464", &[("tls.proxy", Some(443))]);
        assert_eq!(host(&proxied, "tls.proxy"), Ok(()));
        assert_eq!(host(&proxied, "tls.proxy:443"), Ok(()));
        assert!(host(&proxied, "tls.proxy:8443").is_err());
        let v6 = guard("[::1]:9464", &[]);
        assert_eq!(host(&v6, "[::1]:9464"), Ok(()));
        assert!(host(&v6, "[::2]:9464").is_err());
    }

    #[test]
    fn a_foreign_origin_is_refused_and_no_origin_is_a_script() {
        let g = guard("127.0.0.1:9464", &[]);
        assert_eq!(g.check_origin(&HeaderMap::new()), Ok(()));
        assert_eq!(g.check_origin(&headers(&[(ORIGIN, "http://127.0.0.1:9464")])), Ok(()));
        assert_eq!(g.check_origin(&headers(&[(ORIGIN, "http://localhost:9464")])), Ok(()));
        for foreign in [
            "http://evil.example",
            "http://evil.example:9464",
            "null",
            "http://10.0.0.1:9464",
            // a page of another port on this host is another origin
            "http://localhost:3000",
            "http://127.0.0.1",
            "file://",
        ] {
            assert_eq!(
                g.check_origin(&headers(&[(ORIGIN, foreign)])),
                Err(Refusal::ForeignOrigin(foreign.into())),
                "{foreign}"
            );
        }
    }

    #[test]
    fn the_token_is_asked_for_when_set() {
        let mut g = guard("127.0.0.1:9464", &[]);
        assert_eq!(g.check_token(&HeaderMap::new()), Ok(()), "no token set: none asked");
        g.token = Some(ControlToken::new("s3cret".into()));
        assert_eq!(g.check_token(&HeaderMap::new()), Err(Refusal::NoToken));
        assert_eq!(g.check_token(&headers(&[(AUTHORIZATION, "Bearer s3cret")])), Ok(()));
        assert_eq!(g.check_token(&headers(&[(AUTHORIZATION, "bearer s3cret")])), Ok(()));
        assert_eq!(
            g.check_token(&headers(&[(AUTHORIZATION, "Bearer s3cre")])),
            Err(Refusal::WrongToken)
        );
        assert_eq!(
            g.check_token(&headers(&[(AUTHORIZATION, "Basic s3cret")])),
            Err(Refusal::NoToken)
        );
        assert!(!Refusal::WrongToken.message().contains("s3cret"));
    }
}
