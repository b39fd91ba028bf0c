//! Why a TLS connection to a broker was refused. librdkafka reports a broker certificate it does
//! not trust only as "certificate verify failed"; this repeats the handshake with OpenSSL (the
//! library librdkafka links) and the client's own CA and host-name settings, to name the cause
//! (expired, an unknown issuer, a name the certificate does not hold) and the certificate.

use std::collections::BTreeMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use openssl::ssl::{HandshakeError, SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::{X509Ref, X509VerifyResult, X509};

/// How long the second look at a broker's certificate may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// What librdkafka says when the broker refuses the client's certificate (mTLS): the TLS alert
/// it received.
const CLIENT_REFUSED: [&str; 5] = [
    "alert bad certificate",
    "alert certificate required",
    "alert unknown ca",
    "alert certificate expired",
    "alert certificate unknown",
];

/// Whether librdkafka's error `reason` is a TLS refusal, which no retry can mend: the broker's
/// certificate is not trusted, or the broker refused the client's.
pub fn is_refusal(reason: &str) -> bool {
    reason.contains("certificate verify failed") || CLIENT_REFUSED.iter().any(|a| reason.contains(a))
}

/// The refusal in `reason` (librdkafka's words, which start with the broker's address) said with
/// its cause, for a client with `properties`.
pub fn explain(reason: &str, properties: &BTreeMap<String, String>) -> String {
    // a log line starts with the thread's name: "[thrd:ssl://host:port/id]: ssl://host:port/id: …"
    let reason = match reason.split_once("]: ") {
        Some((thread, rest)) if thread.starts_with("[thrd:") => rest,
        _ => reason,
    };
    let address = broker_address(reason);
    let at = address.as_deref().unwrap_or("the broker");
    if let Some(alert) = CLIENT_REFUSED.iter().find(|a| reason.contains(*a)) {
        let alert = alert.trim_start_matches("alert ");
        return match properties
            .get("ssl.certificate.location")
            .map(|l| format!("ssl.certificate.location = {l}"))
            .or_else(|| {
                properties
                    .get("ssl.certificate.pem")
                    .map(|_| "ssl.certificate.pem".into())
            }) {
            None => format!(
                "TLS: {at} requires a client certificate (mTLS) and none is configured: set \
                 ssl.certificate.location and ssl.key.location (librdkafka: {reason})"
            ),
            Some(cert) => format!("TLS: {at} refused the client certificate ({cert}): {alert} (librdkafka: {reason})"),
        };
    }
    let trusted = trust_source(properties);
    let Some(address) = address else {
        return format!("TLS: the broker's certificate is not trusted ({trusted}): {reason}");
    };
    match look_again(&address, properties) {
        Ok(Some(why)) => format!("TLS: the certificate of {address} is not trusted: {why}; {trusted}"),
        Ok(None) => format!("TLS: the certificate of {address} is not trusted ({trusted}): {reason}"),
        Err(e) => format!(
            "TLS: the certificate of {address} is not trusted ({trusted}): {reason} (a second look failed: {e})"
        ),
    }
}

/// `host:port` from librdkafka's "ssl://host:port/id: …".
fn broker_address(reason: &str) -> Option<String> {
    let rest = &reason[reason.find("://")? + 3..];
    let end = rest.find('/')?;
    Some(rest[..end].to_string())
}

/// Where the client takes its trusted CAs from, as the config says it.
fn trust_source(properties: &BTreeMap<String, String>) -> String {
    match (properties.get("ssl.ca.pem"), properties.get("ssl.ca.location")) {
        (Some(_), _) => "trusted CAs from ssl.ca.pem".to_string(),
        (None, Some(l)) if l != "probe" => format!("trusted CAs from ssl.ca.location = {l}"),
        _ => "trusted CAs from the system's store (no ssl.ca.location)".to_string(),
    }
}

/// Connect to `address` as librdkafka does and verify its certificate: the verification error
/// with the certificate's subject, issuer, validity and names; `None` if it verifies.
fn look_again(address: &str, properties: &BTreeMap<String, String>) -> Result<Option<String>, String> {
    let (host, _) = address.rsplit_once(':').ok_or("no port in the address")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    match (properties.get("ssl.ca.pem"), properties.get("ssl.ca.location")) {
        (Some(pem), _) => {
            for cert in X509::stack_from_pem(pem.as_bytes()).map_err(|e| format!("ssl.ca.pem: {e}"))? {
                builder.cert_store_mut().add_cert(cert).map_err(|e| e.to_string())?;
            }
        }
        (None, Some(l)) if l != "probe" => {
            let path = std::path::Path::new(l);
            let (file, dir) = if path.is_dir() {
                (None, Some(path))
            } else {
                (Some(path), None)
            };
            builder
                .load_verify_locations(file, dir)
                .map_err(|e| format!("ssl.ca.location {l}: {e}"))?;
        }
        _ => builder.set_default_verify_paths().map_err(|e| e.to_string())?,
    }
    // verify, but finish the handshake whatever the outcome, to read the result and the certificate
    builder.set_verify(SslVerifyMode::NONE);
    let mut config = builder.build().configure().map_err(|e| e.to_string())?;
    // librdkafka checks the broker's name unless ssl.endpoint.identification.algorithm = none
    let check_name = properties
        .get("ssl.endpoint.identification.algorithm")
        .is_none_or(|a| !a.eq_ignore_ascii_case("none"));
    config.set_verify_hostname(check_name);
    let socket = address
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("the address resolves to nothing")?;
    let tcp = TcpStream::connect_timeout(&socket, LOOK_TIMEOUT).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(LOOK_TIMEOUT)).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(LOOK_TIMEOUT)).map_err(|e| e.to_string())?;
    let (result, cert) = match config.connect(host, tcp) {
        Ok(stream) => (stream.ssl().verify_result(), stream.ssl().peer_certificate()),
        Err(HandshakeError::Failure(mid)) | Err(HandshakeError::WouldBlock(mid)) => {
            (mid.ssl().verify_result(), mid.ssl().peer_certificate())
        }
        Err(HandshakeError::SetupFailure(e)) => return Err(e.to_string()),
    };
    if result == X509VerifyResult::OK {
        return Ok(None);
    }
    let mut why = result.error_string().to_string();
    if let Some(cert) = cert {
        why.push_str(&format!(" ({})", describe(&cert)));
    }
    if check_name && why.contains("mismatch") {
        why.push_str(&format!(", connecting to {host}"));
    }
    Ok(Some(why))
}

/// A certificate in a line: subject, issuer, validity, names.
fn describe(cert: &X509Ref) -> String {
    let name = |n: &openssl::x509::X509NameRef| {
        n.entries()
            .filter_map(|e| {
                Some(format!(
                    "{}={}",
                    e.object().nid().short_name().ok()?,
                    e.data().to_string().ok()?
                ))
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let names: Vec<String> = cert
        .subject_alt_names()
        .map(|sans| {
            sans.iter()
                .filter_map(|n| {
                    n.dnsname().map(|d| format!("DNS:{d}")).or_else(|| {
                        n.ipaddress().and_then(|ip| match ip.len() {
                            4 => Some(format!("IP:{}", std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]))),
                            16 => <[u8; 16]>::try_from(ip)
                                .ok()
                                .map(|b| format!("IP:{}", std::net::Ipv6Addr::from(b))),
                            _ => None,
                        })
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "certificate {}, issued by {}, valid from {} until {}, names {}",
        name(cert.subject_name()),
        name(cert.issuer_name()),
        cert.not_before(),
        cert.not_after(),
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_told_from_transport_errors() {
        assert!(is_refusal(
            "ssl://127.0.0.1:9403/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified"
        ));
        assert!(is_refusal(
            "ssl://127.0.0.1:9405/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate: SSL alert number 42"
        ));
        assert!(!is_refusal(
            "ssl://127.0.0.1:9400/bootstrap: SSL handshake failed: Disconnected: SSL connection closed by peer"
        ));
        assert!(!is_refusal(
            "127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
        ));
    }

    #[test]
    fn the_broker_address_is_read_from_librdkafkas_words() {
        assert_eq!(
            broker_address("sasl_ssl://kafka-1.example.com:9093/1: SSL handshake failed").as_deref(),
            Some("kafka-1.example.com:9093")
        );
        assert_eq!(broker_address("no address here"), None);
    }

    #[test]
    fn a_missing_client_certificate_is_named() {
        let reason =
            "ssl://127.0.0.1:9405/bootstrap: Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate";
        let said = explain(reason, &BTreeMap::new());
        assert!(said.contains("127.0.0.1:9405 requires a client certificate"), "{said}");
        let props = [("ssl.certificate.location".to_string(), "/c.pem".to_string())].into();
        let said = explain(reason, &props);
        assert!(
            said.contains("refused the client certificate (ssl.certificate.location = /c.pem): bad certificate"),
            "{said}"
        );
    }
}
