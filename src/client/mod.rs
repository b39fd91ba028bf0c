//! The shared Kafka client, below every feature that talks to Kafka (the source, the sinks, the
//! checkpoint store, the group coordination): client configs from tidegate settings plus
//! pass-through properties, librdkafka logs routed to `tracing`, secrets redacted wherever
//! properties are shown; the seam to a cluster ([`cluster`]); TLS diagnostics; topic ids.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::{Client, ClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::ConsumerContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::metadata::Metadata;
use rdkafka::types::RDKafkaErrorCode;

pub mod cluster;
pub(crate) mod committed;
pub mod exactly_once;
pub mod probe;
pub(crate) mod retry;
pub mod tls;
pub mod topic_ids;

/// A topic and one of its partitions.
pub type TopicPartition = (String, i32);

use crate::error::Error;
use tracing::{debug, error, info, warn};

/// Routes librdkafka's logs and errors to `tracing` (rust-rdkafka would use the `log` crate), and
/// keeps a refused authentication or TLS handshake, which librdkafka only reports here (its
/// calls just time out).
#[derive(Debug, Clone, Default)]
pub struct TracingContext {
    /// Which client this is, for the logs ("reader-0", "sink").
    pub name: String,
    authentication: Arc<Mutex<Option<Refusal>>>,
    transport: Arc<Mutex<TransportLog>>,
    /// A refused authentication or TLS handshake is warned of (once per cause) rather than kept
    /// as the client's refusal ([`Self::passing_refusals`]).
    passing_refusals: bool,
}

/// librdkafka repeats a broker it cannot reach every few hundred milliseconds, in two callbacks
/// each: the first of each cause is a warning, the rest debug lines; the last one is kept to say
/// why a call that needed a broker gave up.
#[derive(Debug, Default)]
struct TransportLog {
    last: Option<String>,
}

/// The causes already warned of, by any client: the reader's, the enumerator's and the sink's
/// clients meet the same unreachable broker.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Lines that are not news: a coordinator still loading (retried, normal on a fresh broker), and
/// a fenced producer (the sink stops with one clear message saying what happened), in each of the
/// words librdkafka has for it: "fenced by a newer instance", the broker's "operation with an old
/// epoch" (when the fencing meets a transaction's offset commit), the fatal error's `_FENCED`.
fn is_explained_elsewhere(message: &str) -> bool {
    message.contains("load in progress")
        || message.contains("fenced by")
        || message.contains("with an old epoch")
        || message.contains("(_FENCED)")
}

/// A librdkafka line without its thread prefix and its "(after 0ms in state CONNECT, …)" tail.
fn cleaned(message: &str) -> &str {
    let message = match message.strip_prefix("[thrd:") {
        Some(rest) => rest.split_once("]: ").map_or(rest, |(_, m)| m),
        None => message,
    };
    message.split(" (after ").next().unwrap_or(message).trim()
}

/// What makes two lines the same cause: the cleaned text without its numbers ("1/1 brokers are
/// down" and "0/1 brokers are down").
fn cause(message: &str) -> String {
    cleaned(message)
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect()
}

/// Why the cluster refused this client, in librdkafka's words.
#[derive(Debug, Clone)]
enum Refusal {
    /// SASL: the credentials.
    Credentials(String),
    /// TLS: a certificate, not yet explained.
    Tls(String),
    /// TLS, with its cause found ([`tls::explain`]).
    TlsExplained(String),
}

impl TracingContext {
    pub fn new(name: impl Into<String>) -> Self {
        TracingContext {
            name: name.into(),
            authentication: Arc::default(),
            transport: Arc::default(),
            passing_refusals: false,
        }
    }

    /// A context that keeps no refusal: for a split reader's consumer, which hears the
    /// client-wide errors of a long replay, where librdkafka retries a refusal that may pass (an
    /// identity provider's token service that failed once, a certificate being rotated). Whether
    /// the cluster refuses the job is for its other clients to find (they fail it at once).
    pub fn passing_refusals(mut self) -> Self {
        self.passing_refusals = true;
        self
    }

    /// Keep `message` as the last transport trouble (when it says more than that brokers are
    /// down); whether its cause is new, so worth a warning.
    fn transport_trouble(&self, message: &str, specific: bool) -> bool {
        if specific {
            self.transport.lock().unwrap_or_else(|p| p.into_inner()).last = Some(cleaned(message).to_string());
        }
        WARNED.lock().unwrap_or_else(|p| p.into_inner()).insert(cause(message))
    }

    /// Whether the cluster refused this client (credentials, a certificate).
    pub fn refused(&self) -> bool {
        self.authentication.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// The last transport trouble librdkafka reported ("Connect to ipv4#127.0.0.1:1 failed:
    /// Connection refused"), to say why a call gave up.
    pub fn last_transport_trouble(&self) -> Option<String> {
        self.transport.lock().unwrap_or_else(|p| p.into_inner()).last.clone()
    }

    /// The broker refused this client's credentials (SASL) or a certificate (TLS): fatal,
    /// retrying cannot help. A TLS refusal is explained once, with a second look at the broker's
    /// certificate (a network round trip, outside the lock librdkafka's callback takes).
    pub fn authentication_failure(&self, properties: &BTreeMap<String, String>) -> Option<Error> {
        let refusal = self.authentication.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let message = match refusal {
            Refusal::Credentials(reason) => {
                let user = properties
                    .get("sasl.username")
                    .map(|u| format!(" for user {u}"))
                    .unwrap_or_default();
                format!("authentication failed{user}: {reason}")
            }
            Refusal::Tls(reason) => {
                let explained = tls::explain(&reason, properties);
                *self.authentication.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Refusal::TlsExplained(explained.clone()));
                explained
            }
            Refusal::TlsExplained(explained) => explained,
        };
        Some(Error::runtime(format!("kafka ({})", self.name), message))
    }
}

impl TracingContext {
    /// Keep the first refusal; whether this was it.
    fn refuse(&self, refusal: Refusal) -> bool {
        let mut slot = self.authentication.lock().unwrap_or_else(|p| p.into_inner());
        let first = slot.is_none();
        if first {
            *slot = Some(refusal);
        }
        first
    }
}

/// `ClientContext` for a context that adds delivery or rebalance handling to a [`TracingContext`]
/// field: librdkafka's logs and client-wide errors go through that field.
macro_rules! client_context_through {
    ($context:ty, $field:ident) => {
        impl rdkafka::client::ClientContext for $context {
            fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
                rdkafka::client::ClientContext::log(&self.$field, level, fac, message)
            }

            fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
                rdkafka::client::ClientContext::error(&self.$field, error, reason)
            }
        }
    };
}
pub(crate) use client_context_through;

impl ClientContext for TracingContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let client = self.name.as_str();
        if is_explained_elsewhere(log_message) {
            debug!(client, facility = fac, "librdkafka: {log_message}");
            return;
        }
        match level {
            // a broker that cannot be reached (FAIL): librdkafka retries, so a warning, once
            RDKafkaLogLevel::Error if fac == "FAIL" && !tls::is_refusal(log_message) => {
                if self.transport_trouble(log_message, true) {
                    warn!(
                        client,
                        "librdkafka: {} (retried; repeats are logged at debug)",
                        cleaned(log_message)
                    );
                } else {
                    debug!(client, facility = fac, "librdkafka: {log_message}");
                }
            }
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                error!(client, facility = fac, "librdkafka: {log_message}");
                // a refused TLS handshake is logged by the broker's thread at once; its error
                // event waits in a queue the client may not serve until much later
                if tls::is_refusal(log_message) && !self.passing_refusals {
                    self.refuse(Refusal::Tls(log_message.to_string()));
                }
            }
            // the same warning again (a coordinator still loading, say) is news once
            RDKafkaLogLevel::Warning if !self.transport_trouble(log_message, false) => {
                debug!(client, facility = fac, "librdkafka: {log_message}")
            }
            RDKafkaLogLevel::Warning => warn!(client, facility = fac, "librdkafka: {log_message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                info!(client, facility = fac, "librdkafka: {log_message}")
            }
            RDKafkaLogLevel::Debug => debug!(client, facility = fac, "librdkafka: {log_message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if is_explained_elsewhere(reason) || error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fenced) {
            debug!(client = %self.name, error = %error, "librdkafka: {reason}");
            return;
        }
        // the end of a partition, for a consumer that asked to be told (`enable.partition.eof`):
        // news, not an error (the consumer's poll reports it too)
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            debug!(client = %self.name, "librdkafka: {reason}");
            return;
        }
        let refusal = if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            Some(Refusal::Credentials(reason.to_string()))
        } else if tls::is_refusal(reason) {
            Some(Refusal::Tls(reason.to_string()))
        } else {
            None
        };
        if let Some(refusal) = refusal.filter(|_| !self.passing_refusals) {
            if self.refuse(refusal) {
                error!(client = %self.name, "librdkafka: {reason}");
            }
            return;
        }
        // Transport errors (a broker going away) are retried by librdkafka itself: warn, once
        // per cause
        let specific = !reason.contains("brokers are down");
        if self.transport_trouble(reason, specific) {
            warn!(client = %self.name, error = %error, "librdkafka: {} (retried; repeats are logged at debug)", cleaned(reason));
        } else {
            debug!(client = %self.name, error = %error, "librdkafka: {reason}");
        }
    }
}

impl ConsumerContext for TracingContext {}

/// For producers whose deliveries are settled by a flush or a transaction's commit (the Kafka
/// checkpoint store's), not one by one.
impl rdkafka::producer::ProducerContext for TracingContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

/// `fetch_metadata` in short slices up to `timeout`, so a refused authentication or TLS
/// handshake fails at once instead of after the whole timeout (librdkafka reports it only to the
/// context).
pub fn fetch_metadata(
    consumer: &BaseConsumer<TracingContext>,
    topic: Option<&str>,
    timeout: Duration,
    properties: &BTreeMap<String, String>,
    what: &str,
) -> crate::error::Result<Metadata> {
    metadata_unless_refused(consumer.client(), topic, timeout, what, || {
        // serve the client's events: librdkafka reports a refused authentication as one
        let _ = consumer.poll(Duration::ZERO);
        consumer.context().authentication_failure(properties)
    })
    // the cluster answered: what it met before is over, and a new outage is news again
    .inspect(|_| {
        *consumer.context().transport.lock().unwrap_or_else(|p| p.into_inner()) = TransportLog::default();
        WARNED.lock().unwrap_or_else(|p| p.into_inner()).clear();
    })
    .map_err(|e| {
        let context = consumer.context();
        let refused = context.refused();
        match context.last_transport_trouble() {
            // "BrokerTransportFailure" says little: what librdkafka met, with the address, more
            Some(trouble) if !refused => {
                crate::error::Error::runtime(format!("kafka: {what}"), format!("no broker answered: {trouble}"))
            }
            _ => e,
        }
    })
}

/// Any client's `fetch_metadata` in short slices up to `timeout`, ending at once when `refused`
/// says the cluster refused the client.
pub fn metadata_unless_refused<C: ClientContext>(
    client: &Client<C>,
    topic: Option<&str>,
    timeout: Duration,
    what: &str,
    mut refused: impl FnMut() -> Option<Error>,
) -> crate::error::Result<Metadata> {
    let deadline = Instant::now() + timeout;
    loop {
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(500));
        let result = client.fetch_metadata(topic, slice);
        if let Some(e) = refused() {
            return Err(e);
        }
        match result {
            Ok(metadata) => return Ok(metadata),
            Err(e) if Instant::now() >= deadline => return Err(crate::error::kafka(what, e)),
            Err(_) => {}
        }
    }
}

/// `validate --connect`'s line for a client that reached its cluster: how, as whom, and `found`.
pub fn connected_line(role: &str, servers: &str, properties: &BTreeMap<String, String>, found: &str) -> String {
    let protocol = properties
        .get("security.protocol")
        .map_or("PLAINTEXT".to_string(), |p| p.to_ascii_uppercase());
    let user = properties
        .get("sasl.username")
        .map(|u| format!(" as {u}"))
        .unwrap_or_default();
    format!("{role}: connected to {servers} over {protocol}{user}: {found}")
}

/// Property names whose values must never be logged or printed.
pub fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("passphrase")
        || k.contains("secret")
        || k.contains("credential")
        || k.contains("private.key")
        || k.ends_with(".key.pem")
        || k.contains("sasl.jaas")
        || k == "ssl.key.pem"
        || k.contains("token")
        || SECRET_KEYS.lock().unwrap_or_else(|p| p.into_inner()).contains(key)
}

/// Property names whose values came from a secret file or variable (`{ file = … }`,
/// `{ env = … }`): secret whatever their name says.
static SECRET_KEYS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Mark property `key` secret: its value came from a secret file or variable.
pub fn mark_secret(key: &str) {
    SECRET_KEYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.to_string());
}

/// Properties as they may be shown: secrets replaced by `***`.
pub fn redacted(properties: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    properties
        .iter()
        .map(|(k, v)| (k.clone(), if is_secret(k) { "***".to_string() } else { v.clone() }))
        .collect()
}

/// The properties that say how to reach and authenticate to the cluster (security protocol,
/// SASL, TLS, sockets, DNS), for a client that shares another's connection settings but not its
/// role: consumer-only or producer-only properties would only draw librdkafka's warnings.
pub fn connection_properties(properties: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const PREFIXES: [&str; 6] = [
        "security.",
        "sasl.",
        "ssl.",
        "socket.",
        "client.dns.",
        "broker.address.",
    ];
    properties
        .iter()
        .filter(|(k, _)| PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A client config: `defaults` first, then `bootstrap.servers`, then the user's pass-through
/// properties, which win over both.
pub fn client_config(
    bootstrap_servers: &str,
    defaults: &[(&str, &str)],
    properties: &BTreeMap<String, String>,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (k, v) in defaults {
        config.set(*k, *v);
    }
    config.set("bootstrap.servers", bootstrap_servers);
    for (k, v) in properties {
        config.set(k, v);
    }
    config.set_log_level(RDKafkaLogLevel::Warning);
    config
}

/// [`client_config`] for a consumer: with [`fit_message_size`].
pub fn consumer_client_config(
    bootstrap_servers: &str,
    defaults: &[(&str, &str)],
    properties: &BTreeMap<String, String>,
) -> ClientConfig {
    let mut config = client_config(bootstrap_servers, defaults, properties);
    fit_message_size(&mut config, properties);
    // the group protocol is the group member's alone (crate::client::cluster::native's
    // membership_config): the other consumers join no group
    config.remove("group.protocol").remove("group.remote.assignor");
    config
}

/// librdkafka refuses a consumer whose `fetch.max.bytes` is below its `message.max.bytes`
/// (1,000,000 unless set). A user's smaller `fetch.max.bytes` lowers `message.max.bytes` with it
/// (librdkafka's least: 1000) in every consumer tidegate makes, as the readers' prefetch settings
/// always did: the enumerator's, the group's and the stores' consumers then take the config the
/// readers take, so `validate` and `run` agree. Both set by the user, and inconsistent: left for
/// librdkafka to refuse, naming them.
pub fn fit_message_size(config: &mut ClientConfig, properties: &BTreeMap<String, String>) {
    if properties.contains_key("message.max.bytes") {
        return;
    }
    let number = |key: &str| config.get(key).and_then(|v| v.trim().parse::<u64>().ok());
    let Some(fetch) = number("fetch.max.bytes") else {
        return;
    };
    if number("message.max.bytes").unwrap_or(1_000_000) > fetch {
        config.set("message.max.bytes", fetch.max(1000).to_string());
    }
}

/// Create a client from `config` and drop it at once, to check the properties: librdkafka
/// checks names, values and their combinations (`fetch.max.bytes` below `message.max.bytes`)
/// only when a client is created. The probe has no bootstrap servers and logs nothing: it never
/// connects (no DNS lookup, no broker thread to wait for; a simulated cluster's made-up address
/// is never resolved) and says nothing of its missing brokers. An error names
/// `section.properties`, and the property when librdkafka's message names one of the user's.
pub fn check_properties<C: rdkafka::config::FromClientConfig>(
    config: &ClientConfig,
    section: &str,
    properties: &BTreeMap<String, String>,
) -> crate::error::Result<()> {
    let mut probe = config.clone();
    probe.remove("bootstrap.servers");
    fit_message_size(&mut probe, properties);
    if !properties.contains_key("log_level") {
        probe.set("log_level", "0");
    }
    match probe.create::<C>() {
        Ok(client) => {
            drop(client);
            Ok(())
        }
        Err(e) => {
            let message = match &e {
                KafkaError::ClientCreation(m) => m.clone(),
                // a property librdkafka does not know, or a value it refuses
                KafkaError::ClientConfig(_, description, _, _) => description.clone(),
                other => other.to_string(),
            };
            let key = properties
                .keys()
                .filter(|k| message.contains(k.as_str()))
                .max_by_key(|k| k.len())
                .map(|k| format!("{section}.properties.\"{k}\""))
                .unwrap_or_else(|| format!("{section}.properties"));
            Err(crate::error::Error::config(
                key,
                format!("librdkafka refuses it: {message}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests;
