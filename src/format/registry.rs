//! The schema registry client in one place: the `schema_registry` setting (a URL, or a table
//! with basic-auth credentials and a CA), the client built from it (schema_registry_converter's
//! blocking `SrSettings` over a reqwest client that trusts `ca_file`), every call run off the
//! async runtime's threads, and what a failed call means (refused credentials, out of reach,
//! refused request). Avro, Protobuf and JSON Schema all go through [`registry_call`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use schema_registry_converter::blocking::schema_registry::{get_all_subjects, get_schema_by_id, SrSettings};
use schema_registry_converter::error::SRCError;
use schemars::JsonSchema;
use serde::Deserialize;
use tracing::warn;

use super::codec::DecodeError;
use crate::connector::secret::SecretValue;
use crate::error::{Error, Result};

/// `schema_registry`: the Confluent-compatible registry's URL, or a table with credentials.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawRegistry {
    /// `"http://registry:8081"`: no credentials, the system's CAs.
    Url(String),
    /// `{ url = "https://…", username = "…", password = { env = "SR_PASSWORD" }, ca_file = "ca.pem" }`.
    Table(RawRegistryTable),
}

/// `schema_registry` as a table.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRegistryTable {
    /// The registry's URL (Confluent API root: `…/apis/ccompat/v7` for Apicurio).
    pub url: String,
    /// HTTP basic-auth user (Confluent Cloud: the API key).
    pub username: Option<String>,
    /// HTTP basic-auth password: text, `{ file = "…" }` or `{ env = "…" }`; never shown.
    pub password: Option<SecretValue>,
    /// A PEM file of CA certificates trusted for an `https` URL, besides the system's; read
    /// when the registry is called (so a rotated CA is picked up).
    pub ca_file: Option<String>,
}

/// The password redacted.
impl std::fmt::Debug for RawRegistryTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRegistryTable")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// A password, redacted wherever it is shown.
#[derive(Clone)]
struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"[redacted]\"")
    }
}

/// Validated registry settings: everything a call needs, read once at config load.
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// The API root, without a trailing slash.
    pub url: String,
    pub username: Option<String>,
    password: Option<Password>,
    /// The CA file, read at each client build: calls are rare, and a rotated CA is picked up.
    ca_file: Option<PathBuf>,
}

/// The URL, and the user when there is one (never the password).
impl std::fmt::Display for RegistrySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)?;
        let mut extras = Vec::new();
        if let Some(user) = &self.username {
            extras.push(format!("user {user}"));
        }
        if let Some(path) = &self.ca_file {
            extras.push(format!("CA {}", path.display()));
        }
        if !extras.is_empty() {
            write!(f, " ({})", extras.join(", "))?;
        }
        Ok(())
    }
}

impl RegistrySettings {
    /// Plain settings for a URL (tests, the in-process double).
    pub fn from_url(url: &str) -> Self {
        RegistrySettings {
            url: url.trim_end_matches('/').to_string(),
            username: None,
            password: None,
            ca_file: None,
        }
    }

    /// Validate `raw` at config key `key`: the secret is resolved and the CA file read and
    /// parsed now, so a mistake is a config error naming the key.
    pub fn from_raw(key: &str, raw: RawRegistry) -> Result<Self> {
        // a URL given alone is the key itself; in a table it is `url`
        let url_key = match &raw {
            RawRegistry::Url(_) => key.to_string(),
            RawRegistry::Table(_) => format!("{key}.url"),
        };
        let table = match raw {
            RawRegistry::Url(url) => RawRegistryTable {
                url,
                username: None,
                password: None,
                ca_file: None,
            },
            RawRegistry::Table(t) => t,
        };
        if !(table.url.starts_with("http://") || table.url.starts_with("https://")) {
            return Err(Error::config(
                url_key,
                format!("{:?} is not an http:// or https:// URL", table.url),
            ));
        }
        // `https://user:password@host`: the URL is shown in logs and errors, so the secret would be
        let authority = table
            .url
            .split_once("://")
            .map_or("", |(_, rest)| rest.split('/').next().unwrap_or(""));
        if authority.contains('@') {
            return Err(Error::config(
                url_key,
                "credentials in the URL would be shown wherever the URL is; set username and password (or its file or env form) instead",
            ));
        }
        let mut settings = RegistrySettings::from_url(&table.url);
        settings.password = match &table.password {
            Some(p) => Some(Password(p.resolve(&format!("{key}.password"))?)),
            None => None,
        };
        if settings.password.is_some() && table.username.is_none() {
            return Err(Error::config(format!("{key}.username"), "a password needs a username"));
        }
        settings.username = table.username;
        if let Some(file) = table.ca_file {
            if file.is_empty() {
                return Err(Error::config(format!("{key}.ca_file"), "is empty"));
            }
            settings.ca_file = Some(PathBuf::from(file));
        }
        Ok(settings)
    }

    /// The client settings for schema_registry_converter. Blocking reqwest: build, use and drop
    /// it off the async runtime (see [`registry_call`]).
    fn client(&self) -> std::result::Result<SrSettings, RegistryError> {
        let mut builder = SrSettings::new_builder(self.url.clone());
        if let Some(user) = &self.username {
            builder.set_basic_authorization(user, self.password.as_ref().map(|p| p.0.as_str()));
        }
        let mut http = reqwest::blocking::Client::builder();
        if let Some(path) = &self.ca_file {
            let bad = |why: String| {
                RegistryError::Tls(format!(
                    "the CA file {} (schema_registry.ca_file) for the schema registry {}: {why}",
                    path.display(),
                    self.url
                ))
            };
            let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(format!("not PEM: {e}")))?;
            if certs.is_empty() {
                return Err(bad("it holds no PEM certificate".to_string()));
            }
            http = http.tls_certs_merge(certs);
        }
        builder.build_with(http).map_err(|e| classify(self, &e))
    }

    /// Whoever the calls authenticate as, for errors.
    fn who(&self) -> String {
        match &self.username {
            Some(u) => format!("user {u}"),
            None => "no credentials (set schema_registry.username and password)".to_string(),
        }
    }
}

/// Why a registry call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The registry refused the credentials (HTTP 401/403): retrying cannot help, fail now.
    Refused(String),
    /// The TLS handshake failed (an unknown CA, a name mismatch): retrying cannot help either.
    Tls(String),
    /// Out of reach (no connection, a 5xx): worth retrying.
    Unreachable(String),
    /// The registry answered no (an incompatible schema, a request it refuses).
    Rejected { status: Option<u16>, message: String },
    /// The registry has no schema by that id (HTTP 404 with `error_code` 40403): a record that
    /// names it is undecodable. Any other refusal of a lookup fails the job instead, never the
    /// record: a wrong API root (a bare 404), an unparsable answer, a proxy's page.
    UnknownSchema(String),
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistryError::Refused(m)
            | RegistryError::Tls(m)
            | RegistryError::Unreachable(m)
            | RegistryError::UnknownSchema(m) => f.write_str(m),
            RegistryError::Rejected { message, .. } => f.write_str(message),
        }
    }
}

impl RegistryError {
    /// Whether a retry may succeed.
    pub fn retryable(&self) -> bool {
        matches!(self, RegistryError::Unreachable(_))
    }

    /// As a crate error (exit code 1: a runtime failure), with what was being done.
    pub fn into_error(self, context: impl Into<String>) -> Error {
        Error::runtime(context, self.to_string())
    }
}

/// The error and every cause below it: reqwest's own message leaves out the TLS reason.
fn chain(e: &SRCError) -> String {
    let mut text = match &e.cause {
        Some(c) => format!("{}: {c}", e.error),
        None => e.error.clone(),
    };
    let mut source = std::error::Error::source(e).and_then(std::error::Error::source);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// What a failed call means, with the registry and the user named.
fn classify(settings: &RegistrySettings, e: &SRCError) -> RegistryError {
    let status = e
        .error
        .split("status ")
        .nth(1)
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse::<u16>().ok());
    let detail = chain(e);
    match status {
        Some(401) | Some(403) => RegistryError::Refused(format!(
            "the schema registry {} refused {} (HTTP {})",
            settings.url,
            settings.who(),
            status.unwrap_or_default()
        )),
        // a 5xx, or a registry that asks to be called later (408 timeout, 429 rate limit)
        Some(s) if s >= 500 || s == 408 || s == 429 => {
            RegistryError::Unreachable(format!("the schema registry {}: {detail}", settings.url))
        }
        Some(404) if detail.contains("40403") => RegistryError::UnknownSchema(match &e.cause {
            Some(c) => c.split_once(", message: ").map_or(c.as_str(), |(_, m)| m).to_string(),
            None => e.error.clone(),
        }),
        Some(_) => RegistryError::Rejected {
            status,
            // the registry's own words: `{"error_code": 409, "message": "…"}` as the client shows it
            message: match &e.cause {
                Some(c) => c.split_once(", message: ").map_or(c.as_str(), |(_, m)| m).to_string(),
                None => e.error.clone(),
            },
        },
        // OpenSSL's verification failures ("certificate verify failed", "self-signed certificate
        // in certificate chain") and name mismatches reach us only as text
        None if detail.contains("certificate") || detail.contains("handshake") => RegistryError::Tls(format!(
            "cannot make a TLS connection to the schema registry {} (is schema_registry.ca_file the CA that signed its certificate?): {detail}",
            settings.url
        )),
        None if e.retriable => RegistryError::Unreachable(format!("the schema registry {}: {detail}", settings.url)),
        None => RegistryError::Rejected {
            status: None,
            message: detail,
        },
    }
}

/// Run a schema registry call on a thread of its own: schema_registry_converter's blocking client
/// is reqwest's, which must neither run nor be dropped on an async runtime's thread (the reader
/// tasks decode there). On a multi-threaded runtime the waiting worker hands its other tasks to
/// the others meanwhile (`block_in_place`). Calls are rare: once per schema id, or once to register.
pub fn registry_call<T: Send + 'static>(
    settings: &RegistrySettings,
    call: impl FnOnce(&SrSettings) -> std::result::Result<T, SRCError> + Send + 'static,
) -> std::result::Result<T, RegistryError> {
    let s = settings.clone();
    let run = move || {
        std::thread::spawn(move || {
            let client = s.client()?;
            call(&client).map_err(|e| classify(&s, &e))
        })
        .join()
        .unwrap_or_else(|_| {
            Err(RegistryError::Rejected {
                status: None,
                message: "the schema registry client panicked".to_string(),
            })
        })
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(run),
        _ => run(),
    }
}

/// Schema `id`'s text, retried with backoff while the registry is out of reach, up to `timeout`.
/// Refused credentials and TLS failures fail at once; an id the registry does not know makes the
/// record undecodable (the decode-error policy's business).
pub fn fetch_schema(
    settings: &RegistrySettings,
    id: u32,
    timeout: Duration,
) -> std::result::Result<String, DecodeError> {
    fetch_retried(settings, id, timeout, move |client| {
        get_schema_by_id(id, client).map(|r| r.schema)
    })
}

/// `call` (a lookup of schema `id`) retried with backoff while the registry is out of reach, up
/// to `timeout`; refused credentials and TLS failures fail at once; an id the registry does not
/// know is [`DecodeError::Invalid`].
pub fn fetch_retried<T: Send + 'static>(
    settings: &RegistrySettings,
    id: u32,
    timeout: Duration,
    call: impl Fn(&SrSettings) -> std::result::Result<T, SRCError> + Send + Clone + 'static,
) -> std::result::Result<T, DecodeError> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(100);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match registry_call(settings, call.clone()) {
            Ok(found) => return Ok(found),
            Err(RegistryError::UnknownSchema(message)) => {
                return Err(DecodeError::Invalid(format!(
                    "schema {id} from the registry: {message}"
                )))
            }
            Err(e) if !e.retryable() => return Err(DecodeError::Unavailable(format!("fetching schema {id}: {e}"))),
            Err(e) if Instant::now() >= deadline => {
                return Err(DecodeError::Unavailable(format!(
                    "the schema registry {} did not give schema {id} within {timeout:?} ({attempts} attempts): {e}",
                    settings.url
                )))
            }
            Err(e) => {
                warn!(registry = %settings.url, schema = id, error = %e, retry_in_ms = backoff.as_millis() as u64,
                      "the schema registry is out of reach; retrying");
                std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// `tidegate validate`'s check: one request (the subject list), so an unreachable registry,
/// refused credentials or an untrusted certificate show before a run.
pub fn check(settings: &RegistrySettings) -> Result<usize> {
    registry_call(settings, get_all_subjects)
        .map(|subjects| subjects.len())
        .map_err(|e| e.into_error("checking the schema registry"))
}

/// How a writer names the subject it registers a schema under (Confluent's strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SubjectNameStrategy {
    /// TopicNameStrategy: `<topic>-value` (`<topic>-key` for keys).
    #[default]
    Topic,
    /// RecordNameStrategy: the schema's full name (`namespace.Name`).
    Record,
    /// TopicRecordNameStrategy: `<topic>-<namespace.Name>`.
    TopicRecord,
}

impl SubjectNameStrategy {
    /// The subject for a schema of full name `record` written to `topic`, as key or value.
    pub fn subject(self, topic: &str, record: Option<&str>, is_key: bool) -> std::result::Result<String, String> {
        let named =
            || record.ok_or_else(|| format!("the {self:?} subject name strategy needs a named schema (a record)"));
        Ok(match self {
            SubjectNameStrategy::Topic => format!("{topic}-{}", if is_key { "key" } else { "value" }),
            SubjectNameStrategy::Record => named()?.to_string(),
            SubjectNameStrategy::TopicRecord => format!("{topic}-{}", named()?),
        })
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
