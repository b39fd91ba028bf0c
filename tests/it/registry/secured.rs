//! The registry behind nginx: TLS with a private CA and basic auth; the right settings work, a
//! wrong password and a missing CA are errors naming the registry (and the user).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;
use crate::common::TestKafka;

/// The registry behind TLS and basic auth: (url, CA file, user, password).
struct Secured {
    url: String,
    ca: String,
    user: String,
    password: String,
}

fn secured() -> Secured {
    Secured {
        url: var("SCHEMA_REGISTRY_TLS_URL"),
        ca: var("SCHEMA_REGISTRY_CA"),
        user: var("SCHEMA_REGISTRY_USER"),
        password: var("SCHEMA_REGISTRY_PASSWORD"),
    }
}

/// `[source.avro]` lines for the secured registry, its CA when `ca`; the password comes from the
/// environment variable `TIDEGATE_IT_SR_PASSWORD`, set per child process by [`tidegate`].
fn secured_avro(s: &Secured, ca: bool, schema_file: Option<&str>) -> String {
    let mut lines = String::new();
    if let Some(f) = schema_file {
        lines.push_str(&format!("schema_file = \"{f}\"\n"));
    }
    lines.push_str(&format!(
        "schema_registry = {{ url = \"{}\", username = \"{}\", password = {{ env = \"TIDEGATE_IT_SR_PASSWORD\" }}{} }}",
        s.url,
        s.user,
        if ca {
            format!(", ca_file = \"{}\"", s.ca)
        } else {
            String::new()
        }
    ));
    lines
}

/// Run `tidegate ARGS` with the registry password `password` in the environment.
fn tidegate(args: &[&str], config: &Path, password: &str, timeout: Duration) -> (i32, String, String) {
    let mut child = std::process::Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(config)
        .env("TIDEGATE_IT_SR_PASSWORD", password)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start tidegate");
    let deadline = Instant::now() + timeout;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "tidegate {args:?} did not end within {timeout:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tls_and_basic_auth_through_a_proxy_work_and_refusals_are_named() {
    let kafka = TestKafka::get();
    let s = secured();
    let dir = JobDir::new();
    let topic = kafka.create_topic("registry-secured", 1);
    let name = unique_name("Tick");
    let avsc = schema(&dir, "tick.avsc", &name, &[]);

    // the right CA and credentials: validate contacts the registry, datagen registers, a replay reads
    let writer = dir.config(&datagen(
        &kafka,
        &topic,
        &secured_avro(&s, true, Some(&avsc)),
        20,
        0,
        "",
        Some(""),
    ));
    let (code, out, err) = tidegate(&["validate", "--connect"], &writer, &s.password, MINUTE);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "schema registry {} (user {}, CA {}): reachable",
            s.url, s.user, s.ca
        )),
        "{out}"
    );
    assert!(
        !out.contains(&s.password) && !err.contains(&s.password),
        "the password never shows"
    );
    let (code, _, err) = tidegate(&["run", "--no-progress"], &writer, &s.password, MINUTE);
    assert_eq!(code, 0, "{err}");
    let reader = JobDir::new();
    let read_config = reader.config(&replay(&kafka, &topic, &secured_avro(&s, true, None), false));
    let (code, _, err) = tidegate(&["run", "--no-progress"], &read_config, &s.password, MINUTE);
    assert_eq!(code, 0, "{err}");
    let seqs: Vec<Value> = read_jsonl(&reader.path("out.jsonl"))
        .into_iter()
        .map(|l| l["value"]["seq"].clone())
        .collect();
    assert_eq!(seqs, (0..20).map(|i| json!(i)).collect::<Vec<_>>());

    // a wrong password: named at validate (exit 1), and at run at once, reader and writer —
    // the reader's timeout is ten minutes: refused credentials are not retried
    let refused = format!("the schema registry {} refused user {} (HTTP 401)", s.url, s.user);
    let wrong = "not-the-password";
    let (code, _, err) = tidegate(&["validate", "--connect"], &read_config, wrong, MINUTE);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&refused), "{err}");
    assert!(!err.contains(wrong), "the password never shows: {err}");
    std::fs::remove_file(reader.path("out.jsonl")).ok();
    let (code, _, err) = tidegate(&["run", "--no-progress"], &read_config, wrong, MINUTE);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&refused) && !err.contains("retrying"), "{err}");
    let (code, _, err) = tidegate(&["run", "--no-progress"], &writer, wrong, MINUTE);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&refused), "{err}");

    // no CA: the certificate is not trusted, and the error says so
    let no_ca = reader.config(&replay(&kafka, &topic, &secured_avro(&s, false, None), false));
    let (code, _, err) = tidegate(&["validate", "--connect"], &no_ca, &s.password, MINUTE);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "cannot make a TLS connection to the schema registry {}",
            s.url
        )) && err.contains("certificate verify failed"),
        "{err}"
    );
}
