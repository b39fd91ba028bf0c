//! A Kafka broker of a test's own (`scripts/kafka` on free ports and a temp directory), which the
//! test may kill, pause, or start with SASL/SCRAM and ACLs, or with TLS listeners.

use std::process::Command;

use crate::common::TestKafka;
use crate::daemon_util::free_port;

/// A broker of the test's own, on its own port and data directory, that the test may kill.
pub struct OwnBroker {
    pub env: Vec<(String, String)>,
    pub dir: tempfile::TempDir,
    pub bootstrap: String,
}

impl OwnBroker {
    pub fn start() -> OwnBroker {
        Self::start_with(&[])
    }

    /// A broker with more of `scripts/kafka`'s environment (`KAFKA_SASL_USERS`, `KAFKA_TLS`). A
    /// start that fails is tried again on other ports (up to three times): a port picked free may
    /// be taken by another process's connection before the broker binds it.
    pub fn start_with(extra: &[(&str, &str)]) -> OwnBroker {
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Self::try_start_with(extra) {
                Ok(broker) => return broker,
                Err(e) => {
                    eprintln!("own broker: a start failed; trying again on other ports:\n{e}");
                    failures.push(e);
                }
            }
        }
        panic!(
            "the broker did not start in three tries:\n{}",
            failures.join("\n-----\n")
        );
    }

    fn try_start_with(extra: &[(&str, &str)]) -> Result<OwnBroker, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut env = vec![
            ("KAFKA_PORT".to_string(), port.to_string()),
            ("KAFKA_CONTROLLER_PORT".to_string(), free_port().to_string()),
            ("KAFKA_INTERNAL_PORT".to_string(), free_port().to_string()),
            ("KAFKA_SSL_PORT".to_string(), free_port().to_string()),
            ("KAFKA_SASL_SSL_PORT".to_string(), free_port().to_string()),
            ("KAFKA_MTLS_PORT".to_string(), free_port().to_string()),
            ("KAFKA_DIR".to_string(), dir.path().display().to_string()),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let b = OwnBroker {
            env,
            dir,
            bootstrap: format!("127.0.0.1:{port}"),
        };
        let out = b.run("start");
        if !out.status.success() {
            let _ = b.run("stop");
            return Err(format!("scripts/kafka start: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(b)
    }

    fn run(&self, verb: &str) -> std::process::Output {
        Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
            .arg(verb)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("running scripts/kafka")
    }

    pub fn script(&self, verb: &str) {
        let out = self.run(verb);
        assert!(
            out.status.success(),
            "scripts/kafka {verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The loopback address of the listener whose port is in `var` (`KAFKA_SSL_PORT`, say).
    pub fn address(&self, var: &str) -> String {
        let port = self
            .env
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {var} in the broker's environment"));
        format!("127.0.0.1:{port}")
    }

    pub fn pid(&self) -> i32 {
        std::fs::read_to_string(self.dir.path().join("broker.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the broker this test started.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    pub fn kafka(&self) -> TestKafka {
        TestKafka::at(&self.bootstrap)
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let _ = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
            .arg("stop")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output();
    }
}
