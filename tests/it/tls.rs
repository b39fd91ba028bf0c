//! Against a broker with TLS listeners (`scripts/kafka` with `KAFKA_TLS=1`, one broker shared by
//! these tests): the broker verified against its CA, mTLS, SASL_SSL with SCRAM (the password from
//! a file), the side clients (dead letters, group commits, transaction markers, end markers) on
//! the same settings, and refused certificates (a wrong CA, an expired certificate, a name the
//! certificate does not hold) failing at once with their cause, in `run` and `validate --connect`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;
use crate::own_broker::OwnBroker;

const MINUTE: Duration = Duration::from_secs(60);
/// A refusal must end a job well before this request timeout.
const REQUEST_TIMEOUT: &str = "60s";

struct TlsBroker {
    broker: OwnBroker,
    /// The harness's clients use the PLAINTEXT listener.
    plain: TestKafka,
    /// The broker's CA and certificates (`scripts/kafka` made them).
    tls: PathBuf,
}

/// The broker these tests share, stopped when the test process exits.
static SHARED: Mutex<Option<Arc<TlsBroker>>> = Mutex::new(None);

fn broker() -> Arc<TlsBroker> {
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(b) = slot.as_ref() {
        return Arc::clone(b);
    }
    let broker = OwnBroker::start_with(&[("KAFKA_TLS", "1")]);
    let shared = Arc::new(TlsBroker {
        plain: broker.kafka(),
        tls: broker.dir.path().join("tls"),
        broker,
    });
    extern "C" fn stop_shared() {
        // dropping the last reference stops the broker and removes its folder
        drop(SHARED.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
    // SAFETY: registers a function without arguments, called once when the process exits
    unsafe {
        libc::atexit(stop_shared);
    }
    *slot = Some(Arc::clone(&shared));
    shared
}

impl TlsBroker {
    fn file(&self, name: &str) -> String {
        self.tls.join(name).display().to_string()
    }

    /// `[…properties]` lines: TLS, the broker verified against `ca`.
    fn ssl(&self, ca: &str) -> String {
        format!("\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{ca}\"\n")
    }

    /// TLS with the client certificate signed by the broker's CA.
    fn mtls(&self) -> String {
        format!(
            "{}\"ssl.certificate.location\" = \"{}\"\n\"ssl.key.location\" = \"{}\"\n",
            self.ssl(&self.file("ca.pem")),
            self.file("client.pem"),
            self.file("client.key")
        )
    }

    /// SASL_SSL as `tidegate`, the password read from `password_file`.
    fn sasl_ssl(&self, password_file: &Path) -> String {
        format!(
            "\"security.protocol\" = \"SASL_SSL\"\n\"ssl.ca.location\" = \"{}\"\n\"sasl.mechanism\" = \"SCRAM-SHA-256\"\n\
             \"sasl.username\" = \"tidegate\"\n\"sasl.password\" = {{ file = \"{}\" }}\n",
            self.file("ca.pem"),
            password_file.display()
        )
    }
}

/// A bounded replay of `topic` at `servers` with `properties`; `extra` adds `[source]` lines and
/// `sink` is the whole sink table(s).
fn replay(dir: &JobDir, name: &str, servers: &str, topic: &str, properties: &str, extra: &str, sink: &str) -> PathBuf {
    dir.config(&format!(
        "[job]\nname = \"{name}\"\n\n[source]\ntype = \"kafka\"\nbootstrap_servers = \"{servers}\"\ntopics = [\"{topic}\"]\n\
         stopping_offsets = \"latest\"\nrequest_timeout = \"{REQUEST_TIMEOUT}\"\n{extra}\n\n[source.properties]\n{properties}\n\
         {sink}\n\n[checkpoint]\npath = \"{{dir}}/{name}.state\"\ninterval = \"1s\"\n"
    ))
}

/// `tidegate validate --connect`: (exit code, stdout, stderr).
fn validate_connect(config: &Path) -> (i32, String, String) {
    let out = Command::new(binary())
        .args(["validate", "--connect", "--config"])
        .arg(config)
        .output()
        .expect("running tidegate validate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The offset `group` committed for partition 0 of `topic`.
fn committed(kafka: &TestKafka, group: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .set("group.id", group)
        .create()
        .expect("a group client");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let offsets = consumer
        .committed_offsets(tpl, Duration::from_secs(20))
        .expect("committed offsets");
    match offsets.find_partition(topic, 0)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

#[test]
fn the_broker_is_verified_against_its_ca() {
    let b = broker();
    let topic = b.plain.create_topic("tls-ssl", 1);
    b.plain.produce(
        &topic,
        &(0..50).map(|i| TestRecord::to(0, format!("{i}"))).collect::<Vec<_>>(),
    );
    let dir = JobDir::new();
    let ssl = b.broker.address("KAFKA_SSL_PORT");
    let config = replay(&dir, "tls-ssl", &ssl, &topic, &b.ssl(&b.file("ca.pem")), "", FILE_SINK);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read_jsonl(&dir.path("out.jsonl")).len(), 50, "{log}");
    let (code, out, err) = validate_connect(&config);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("source: connected to {ssl} over SSL: 1 broker")),
        "{out}"
    );
}

#[test]
fn mutual_tls_carries_dead_letters_group_commits_and_transactions() {
    let b = broker();
    let input = b.plain.create_topic("tls-mtls-in", 1);
    let mut records: Vec<TestRecord> = (0..20).map(|i| TestRecord::to(0, format!("{{\"n\":{i}}}"))).collect();
    records.insert(5, TestRecord::to(0, "{not json"));
    records.push(TestRecord::to(0, "also not json"));
    b.plain.produce(&input, &records);
    let dead = b.plain.create_topic("tls-mtls-dead", 1);
    let out = b.plain.create_topic("tls-mtls-out", 1);
    let group = b.plain.unique_topic("tls-mtls-group");
    let mtls = b.broker.address("KAFKA_MTLS_PORT");
    let dir = JobDir::new();
    // the sink writes through transactions: its producer and its markers client use mTLS too
    let sink = format!(
        "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{mtls}\"\ntopic = \"{out}\"\ndelivery = \"exactly_once\"\n\n[sink.properties]\n{}",
        b.mtls()
    );
    let extra = format!(
        "format = \"json\"\ndecode_errors = \"dead_letter\"\ndead_letter_topic = \"{dead}\"\ngroup_id = \"{group}\""
    );
    let config = replay(&dir, "tls-mtls", &mtls, &input, &b.mtls(), &extra, &sink);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        b.plain.read_all(&out).len(),
        20,
        "the decodable records, committed: {log}"
    );
    let letters = b.plain.read_all(&dead);
    assert_eq!(
        letters.len(),
        2,
        "the undecodable records went to the dead-letter topic: {log}"
    );
    assert_eq!(letters[0].value.as_deref(), Some(&b"{not json"[..]));
    assert_eq!(
        committed(&b.plain, &group, &input),
        Some(22),
        "the group's commit: {log}"
    );

    // the same listener without a client certificate: refused at once, and said so
    let config = replay(
        &dir,
        "tls-mtls",
        &mtls,
        &input,
        &b.ssl(&b.file("ca.pem")),
        "",
        FILE_SINK,
    );
    let started = Instant::now();
    let (code, log) = run(&config, &["--reset-state"], MINUTE);
    let took = started.elapsed();
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(&format!(
            "TLS: {mtls} requires a client certificate (mTLS) and none is configured"
        )),
        "{log}"
    );
    assert!(
        took < Duration::from_secs(20),
        "refused after {took:?} (request timeout {REQUEST_TIMEOUT})"
    );
}

#[test]
fn sasl_ssl_with_a_password_file_commits_and_writes_end_markers() {
    let b = broker();
    let dir = JobDir::new();
    let password = dir.path("kafka-password");
    std::fs::write(&password, "tidegate-secret\n").unwrap();
    let sasl = b.broker.address("KAFKA_SASL_SSL_PORT");
    let topic = b.plain.create_topic("tls-sasl", 1);
    b.plain.produce(
        &topic,
        &(0..30).map(|i| TestRecord::to(0, format!("{i}"))).collect::<Vec<_>>(),
    );
    let group = b.plain.unique_topic("tls-sasl-group");
    let config = replay(
        &dir,
        "tls-sasl",
        &sasl,
        &topic,
        &b.sasl_ssl(&password),
        &format!("group_id = \"{group}\""),
        FILE_SINK,
    );
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read_jsonl(&dir.path("out.jsonl")).len(), 30, "{log}");
    assert_eq!(
        committed(&b.plain, &group, &topic),
        Some(30),
        "the group's commit: {log}"
    );
    assert!(!log.contains("tidegate-secret"), "the password is never logged: {log}");
    let (code, out, err) = validate_connect(&config);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("source: connected to {sasl} over SASL_SSL as tidegate")),
        "{out}"
    );
    assert!(
        out.contains("sasl.password = ***") && !out.contains("tidegate-secret"),
        "{out}"
    );

    // a data generator's records and its end marker, through an exactly-once sink over SASL_SSL
    let seeded = b.plain.create_topic("tls-sasl-seed", 1);
    let config = dir.config(&format!(
        "[job]\nname = \"tls-seed\"\n\n[source]\ntype = \"datagen\"\ncount = 10\nformat = \"json\"\n\n\
         [source.fields]\nn = {{ sequence = {{ start = 0 }} }}\n\n[source.end_marker]\nvalue = {{ type = \"END\" }}\n\n\
         [sink]\ntype = \"kafka\"\nbootstrap_servers = \"{sasl}\"\ntopic = \"{seeded}\"\ndelivery = \"exactly_once\"\n\n\
         [sink.properties]\n{}\n[checkpoint]\npath = \"{{dir}}/seed.state\"\ninterval = \"1s\"\n",
        b.sasl_ssl(&password)
    ));
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    let written = b.plain.read_all(&seeded);
    assert_eq!(written.len(), 11, "10 records and the end marker: {log}");
    assert_eq!(written[10].value.as_deref(), Some(&b"{\"type\":\"END\"}"[..]), "{log}");
}

/// `openssl` with `args` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (the `openssl` package) is needed for the TLS tests");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate `name`.pem (key `name`.key) for `subject_alt_name`, signed by the broker's CA
/// and valid from `start` to `end` (`YYYYMMDDHHMMSSZ`), made with `openssl ca`.
fn certificate(b: &TlsBroker, dir: &Path, name: &str, subject_alt_name: &str, start: &str, end: &str) {
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), format!("{:02X}\n", name.len() + 1)).unwrap();
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nserial = serial\nnew_certs_dir = .\n\
         default_md = sha256\npolicy = p\ncopy_extensions = copy\n[p]\ncommonName = supplied\n",
    )
    .unwrap();
    let (key, csr, pem) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"));
    openssl(
        dir,
        &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr]
            .into_iter()
            .chain([
                "-subj",
                "/CN=broker",
                "-addext",
                &format!("subjectAltName={subject_alt_name}"),
            ])
            .collect::<Vec<_>>(),
    );
    let (ca, ca_key) = (b.file("ca.pem"), b.file("ca.key"));
    openssl(
        dir,
        &[
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-cert",
            &ca,
            "-keyfile",
            &ca_key,
            "-startdate",
            start,
            "-enddate",
            end,
            "-in",
            &csr,
            "-out",
            &pem,
        ],
    );
}

/// `openssl s_server` presenting `name`.pem on a free port: a TLS endpoint whose certificate the
/// client refuses in the handshake, before any Kafka request.
struct TlsServer {
    child: Child,
    address: String,
}

impl TlsServer {
    fn start(dir: &Path, name: &str) -> TlsServer {
        let address = format!("127.0.0.1:{}", free_port());
        let child = Command::new("openssl")
            .current_dir(dir)
            .args(["s_server", "-quiet", "-accept", &address, "-cert"])
            .args([format!("{name}.pem"), "-key".into(), format!("{name}.key")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let server = TlsServer { child, address };
        crate::common::wait_until("openssl s_server listens", MINUTE, || {
            std::net::TcpStream::connect(&server.address).is_ok()
        });
        server
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn refused_certificates_fail_at_once_naming_the_cause() {
    let b = broker();
    let topic = b.plain.create_topic("tls-refused", 1);
    let dir = JobDir::new();
    let work = dir.dir.path();
    // another CA, which did not sign the broker's certificate
    openssl(
        work,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other-ca.key",
            "-out",
            "other-ca.pem",
            "-days",
            "30",
            "-subj",
            "/CN=another CA",
        ],
    );
    certificate(
        &b,
        work,
        "expired",
        "IP:127.0.0.1",
        "20250101000000Z",
        "20250201000000Z",
    );
    certificate(
        &b,
        work,
        "misnamed",
        "DNS:kafka.example.com",
        "20250101000000Z",
        "20991231000000Z",
    );
    let expired = TlsServer::start(work, "expired");
    let misnamed = TlsServer::start(work, "misnamed");
    let ssl = b.broker.address("KAFKA_SSL_PORT");
    let other_ca = work.join("other-ca.pem").display().to_string();
    let cases = [
        (
            "a wrong CA",
            ssl.clone(),
            other_ca.as_str(),
            "unable to get local issuer certificate",
        ),
        (
            "an expired certificate",
            expired.address.clone(),
            &b.file("ca.pem"),
            "certificate has expired",
        ),
        (
            "a name not in the certificate",
            misnamed.address.clone(),
            &b.file("ca.pem"),
            "IP address mismatch",
        ),
    ];
    let mut seen = Vec::new();
    for (what, servers, ca, cause) in cases {
        let config = replay(&dir, "tls-refused", &servers, &topic, &b.ssl(ca), "", FILE_SINK);
        let started = Instant::now();
        let (code, log) = run(&config, &["--reset-state"], MINUTE);
        let took = started.elapsed();
        assert_eq!(code, 1, "{what}: {log}");
        let said = format!("TLS: the certificate of {servers} is not trusted: {cause}");
        assert!(log.contains(&said), "{what}: {said:?} not in {log}");
        assert!(
            took < Duration::from_secs(20),
            "{what}: refused after {took:?} (request timeout {REQUEST_TIMEOUT})"
        );
        let (code, _, err) = validate_connect(&config);
        assert_eq!(code, 1, "{what}: validate --connect: {err}");
        assert!(err.contains(&said), "{what}: validate --connect: {err}");
        seen.push(format!("{what} in {:.1} s", took.as_secs_f64()));
    }
    // the sink's producer: the same refusal, at once
    let out = b.plain.create_topic("tls-refused-out", 1);
    let config = dir.config(&format!(
        "[job]\nname = \"tls-refused-sink\"\n\n[source]\ntype = \"datagen\"\ncount = 10\nformat = \"json\"\n\n\
         [source.fields]\nn = {{ sequence = {{ start = 0 }} }}\n\n[sink]\ntype = \"kafka\"\nbootstrap_servers = \"{ssl}\"\n\
         topic = \"{out}\"\nflush_timeout = \"{REQUEST_TIMEOUT}\"\n\n[sink.properties]\n{}",
        b.ssl(&other_ca)
    ));
    let said =
        format!("kafka (sink): TLS: the certificate of {ssl} is not trusted: unable to get local issuer certificate");
    let started = Instant::now();
    let (code, log) = run(&config, &[], MINUTE);
    let took = started.elapsed();
    assert_eq!(code, 1, "the sink: {log}");
    assert!(log.contains(&said), "the sink: {said:?} not in {log}");
    assert!(took < Duration::from_secs(20), "the sink: refused after {took:?}");
    let (code, _, err) = validate_connect(&config);
    assert_eq!(code, 1, "the sink: validate --connect: {err}");
    assert!(err.contains(&said), "the sink: validate --connect: {err}");
    seen.push(format!("the sink's wrong CA in {:.1} s", took.as_secs_f64()));
    eprintln!("tls: refused at once: {}", seen.join(", "));
}
