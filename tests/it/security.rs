//! Against a SASL/SCRAM broker with ACLs (Kafka's StandardAuthorizer, `scripts/kafka` with
//! `KAFKA_SASL_USERS`): a refused password and a missing ACL are said in those words and fail at
//! once, a revoked ACL fails a live replay after the request timeout with warnings before, and
//! the dead-letter producer authenticates as the source does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{TestKafka, TestRecord};
use crate::daemon_util::*;
use crate::own_broker::OwnBroker;

const MINUTE: Duration = Duration::from_secs(60);
const USERS: &str = "admin:admin-secret,alice:alice-secret,bob:bob-secret";

/// The SCRAM properties of `user` in a tidegate config table.
fn credentials(user: &str, password: &str) -> String {
    format!(
        "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"SCRAM-SHA-256\"\n\"sasl.username\" = \"{user}\"\n\"sasl.password\" = \"{password}\"\n"
    )
}

struct SaslBroker {
    broker: OwnBroker,
    /// The harness's clients authenticate as the super user.
    admin: TestKafka,
    admin_config: PathBuf,
}

impl SaslBroker {
    fn start() -> SaslBroker {
        let broker = OwnBroker::start_with(&[("KAFKA_SASL_USERS", USERS)]);
        let admin = broker.kafka().with_properties(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", "admin"),
            ("sasl.password", "admin-secret"),
        ]);
        let admin_config = broker.dir.path().join("admin.properties");
        std::fs::write(
            &admin_config,
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"admin-secret\";\n",
        )
        .unwrap();
        SaslBroker {
            broker,
            admin,
            admin_config,
        }
    }

    /// Change ACLs with Kafka's own AclCommand, as the super user.
    fn acl(&self, args: &[&str]) {
        let classpath = std::process::Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
            .arg("classpath")
            .output()
            .unwrap();
        let classpath = String::from_utf8_lossy(&classpath.stdout).trim().to_string();
        let out = std::process::Command::new("java")
            .args(["-Xmx128m", "-cp", &classpath, "org.apache.kafka.tools.AclCommand"])
            .args(["--bootstrap-server", &self.broker.bootstrap, "--command-config"])
            .arg(&self.admin_config)
            .args(args)
            .output()
            .expect("running Kafka's AclCommand (java)");
        assert!(
            out.status.success(),
            "AclCommand {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A bounded replay of `topic` as `user`, into `sink`.
    fn replay(&self, dir: &JobDir, topic: &str, user: &str, password: &str, extra: &str, sink: &str) -> PathBuf {
        dir.config(&format!(
            "[source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\ntopics = [\"{topic}\"]\nrequest_timeout = \"20s\"\n{extra}\n\n{sink}\n\n[source.properties]\n{}",
            self.broker.bootstrap,
            credentials(user, password)
        ))
    }
}

#[test]
fn a_sasl_broker_with_acls_gets_clear_answers() {
    let sasl = SaslBroker::start();
    let topic = sasl.admin.create_topic("sec-a", 1);
    sasl.admin.produce(
        &topic,
        &(0..100).map(|i| TestRecord::to(0, format!("{i}"))).collect::<Vec<_>>(),
    );
    sasl.acl(&[
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        &topic,
    ]);
    let dir = JobDir::new();
    let bounded = "stopping_offsets = \"latest\"";

    // a refused password: said so, naming the user, at once rather than after request_timeout
    let config = sasl.replay(&dir, &topic, "alice", "wrong", bounded, "[sink]\ntype = \"null\"");
    let started = Instant::now();
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("authentication failed for user alice"), "{log}");
    let refused_after = started.elapsed();
    assert!(
        refused_after < Duration::from_secs(10),
        "failed after {refused_after:?}"
    );
    assert!(!log.contains("wrong\""), "the password is never printed: {log}");

    // no ACL: not authorized, not "does not exist"
    let config = sasl.replay(&dir, &topic, "bob", "bob-secret", bounded, "[sink]\ntype = \"null\"");
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains(&format!("not authorized to describe topic {topic} (user bob)"))
            && !log.contains("does not exist"),
        "{log}"
    );

    // the ACL holds: the replay reads everything
    let config = sasl.replay(&dir, &topic, "alice", "alice-secret", bounded, FILE_SINK);
    let (code, log) = run(&config, &[], MINUTE);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read_jsonl(&dir.path("out.jsonl")).len(), 100);

    // a live replay whose ACL is revoked: warnings, then exit 1 after request_timeout (3 s)
    let live = sasl
        .replay(&dir, &topic, "alice", "alice-secret", "", FILE_SINK)
        .display()
        .to_string();
    let live = std::path::Path::new(&live);
    std::fs::write(
        live,
        std::fs::read_to_string(live).unwrap().replace("\"20s\"", "\"3s\""),
    )
    .unwrap();
    let daemon = Daemon::start(live, &["--reset-state"]);
    wait_until_log(&daemon, "splits assigned");
    sasl.acl(&[
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        &topic,
    ]);
    let (status, log) = daemon.wait(MINUTE);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("the partition cannot be read")
            && log.contains("Topic authorization failed")
            && log.contains(&format!("reading {topic}:0")),
        "{log}"
    );

    // dead letters travel over SASL too (the dead-letter producer takes the source's credentials)
    let poison = sasl.admin.create_topic("sec-poison", 1);
    sasl.admin.produce(
        &poison,
        &[TestRecord::to(0, "{\"ok\":1}"), TestRecord::to(0, "{not json")],
    );
    let dead = sasl.admin.create_topic("sec-dead", 1);
    for (t, ops) in [(&poison, ["Read", "Describe"]), (&dead, ["Write", "Describe"])] {
        sasl.acl(&[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            ops[0],
            "--operation",
            ops[1],
            "--topic",
            t,
        ]);
    }
    let config = sasl.replay(
        &dir,
        &poison,
        "alice",
        "alice-secret",
        &format!("{bounded}\nformat = \"json\"\ndecode_errors = \"dead_letter\"\ndead_letter_topic = \"{dead}\""),
        FILE_SINK,
    );
    let (code, log) = run(&config, &["--reset-state"], MINUTE);
    assert_eq!(code, 0, "{log}");
    let letters = sasl.admin.read_all(&dead);
    assert_eq!(letters.len(), 1, "the poison record is in the dead-letter topic: {log}");
    assert_eq!(letters[0].value.as_deref(), Some(&b"{not json"[..]));
    eprintln!(
        "security: a wrong password fails in {:.1} s (request_timeout 20 s) naming the user; a missing ACL says \"not authorized\"; \
         a revoked ACL fails a live replay after request_timeout (3 s); dead letters go over SASL",
        refused_after.as_secs_f64()
    );
}

fn wait_until_log(daemon: &Daemon, text: &str) {
    crate::common::wait_until(text, MINUTE, || daemon.log_text().contains(text));
}
