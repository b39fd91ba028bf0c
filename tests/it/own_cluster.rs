//! A three-node Kafka cluster of the tests' own (`scripts/kafka` with `KAFKA_NODES=3` on free
//! ports and a temp directory), shared by the `cluster::` tests, which kill, stop, start and cut
//! off its nodes; and a firewall rule that cuts the daemon off one node, removed by its Drop.

use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::common::{wait_until, TestKafka};
use crate::daemon_util::free_port;

pub const NODES: usize = 3;

/// A cluster of three KRaft nodes (each a broker and a controller), replication factor 3 and
/// `min.insync.replicas = 2` by default. Drop stops every node.
pub struct OwnCluster {
    pub env: Vec<(String, String)>,
    pub dir: tempfile::TempDir,
    /// The bootstrap list of all nodes' client listeners.
    pub bootstrap: String,
    /// The client port of node i + 1.
    pub ports: Vec<u16>,
}

fn ports() -> Vec<u16> {
    (0..NODES).map(|_| free_port()).collect()
}

fn list(ports: &[u16]) -> String {
    ports.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
}

impl OwnCluster {
    /// Start the three nodes; a start that fails is tried again on other ports (up to three
    /// times): a port picked free may be taken by another process's connection before its node
    /// binds it (a CI run met that once, with the secured tier's brokers starting beside it).
    pub fn start() -> OwnCluster {
        let mut failures = Vec::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(cluster) => return cluster,
                Err(e) => {
                    eprintln!("cluster: a start failed; trying again on other ports:\n{e}");
                    failures.push(e);
                }
            }
        }
        panic!(
            "the cluster did not start in three tries:\n{}",
            failures.join("\n-----\n")
        );
    }

    fn try_start() -> Result<OwnCluster, String> {
        let dir = tempfile::tempdir().expect("temp dir for the cluster");
        let client = ports();
        let env = vec![
            ("KAFKA_NODES".to_string(), NODES.to_string()),
            ("KAFKA_PORTS".to_string(), list(&client)),
            ("KAFKA_CONTROLLER_PORTS".to_string(), list(&ports())),
            ("KAFKA_INTERNAL_PORTS".to_string(), list(&ports())),
            ("KAFKA_DIR".to_string(), dir.path().display().to_string()),
        ];
        let cluster = OwnCluster {
            env,
            dir,
            bootstrap: client
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect::<Vec<_>>()
                .join(","),
            ports: client,
        };
        let out = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
            .arg("start")
            .envs(cluster.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("running scripts/kafka");
        if !out.status.success() {
            // whatever nodes of it still run
            let _ = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
                .arg("stop")
                .envs(cluster.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .output();
            return Err(format!("scripts/kafka start: {}", String::from_utf8_lossy(&out.stderr)));
        }
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            cluster.bootstrap,
            "scripts/kafka start prints the bootstrap list"
        );
        Ok(cluster)
    }

    /// Run `scripts/kafka ARGS` on this cluster; panics with its stderr when it fails.
    pub fn script(&self, args: &[&str]) -> String {
        let out = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("running scripts/kafka");
        assert!(
            out.status.success(),
            "scripts/kafka {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// kill -9 node `node` (1..=3).
    pub fn kill(&self, node: i32) {
        self.script(&["kill", &node.to_string()]);
    }

    /// Stop node `node` gracefully (controlled shutdown).
    pub fn stop_node(&self, node: i32) {
        self.script(&["stop-node", &node.to_string()]);
    }

    /// Start node `node` again on its data and wait until it answers.
    pub fn start_node(&self, node: i32) {
        self.script(&["start-node", &node.to_string()]);
    }

    /// Every node running (a no-op for those that are): a test begins on a whole cluster even
    /// when the one before failed half-way.
    pub fn heal(&self) {
        for node in 1..=NODES as i32 {
            self.start_node(node);
        }
    }

    /// The node id of the active controller (the KRaft quorum leader).
    pub fn controller(&self) -> i32 {
        let out = self.script(&["controller"]);
        out.trim()
            .parse()
            .unwrap_or_else(|e| panic!("scripts/kafka controller printed {out:?}: {e}"))
    }

    /// The harness's clients on the whole cluster.
    pub fn kafka(&self) -> TestKafka {
        TestKafka::at(&self.bootstrap)
    }

    /// A fresh topic of `partitions`, replication factor 3, `min.insync.replicas = 2`.
    pub fn create_topic(&self, prefix: &str, partitions: i32) -> String {
        let kafka = self.kafka();
        let name = kafka.unique_topic(prefix);
        kafka.create_named_topic_with(&name, partitions, NODES as i32, &[("min.insync.replicas", "2")]);
        name
    }

    /// Create `name` (replication factor 3, `min.insync.replicas = 2`), or say why the cluster refused.
    pub fn try_create_topic(&self, name: &str, partitions: i32) -> Result<(), String> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| format!("admin client: {e}"))?;
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(NODES as i32))
            .set("retention.ms", "-1")
            .set("min.insync.replicas", "2");
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = crate::common::block_on(admin.create_topics([&topic], &options)).map_err(|e| e.to_string())?;
        for r in results {
            r.map_err(|(t, e)| format!("creating {t}: {e:?} ({e})"))?;
        }
        self.kafka().wait_for_partitions(name, partitions);
        Ok(())
    }

    fn metadata(&self) -> Option<rdkafka::metadata::Metadata> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .ok()?;
        consumer.fetch_metadata(None, Duration::from_secs(5)).ok()
    }

    /// The leader (node id) of `topic`:`partition`, once it has one.
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let mut leader = -1;
        wait_until(
            &format!("a leader for {topic}:{partition}"),
            Duration::from_secs(60),
            || {
                leader = self
                    .metadata()
                    .and_then(|md| {
                        let t = md.topics().iter().find(|t| t.name() == topic)?;
                        Some(t.partitions().iter().find(|p| p.id() == partition)?.leader())
                    })
                    .unwrap_or(-1);
                leader > 0
            },
        );
        leader
    }

    /// Wait until no partition (the internal ones too) is led by `node`: the controller has
    /// fenced a killed node and moved its leaderships.
    pub fn wait_for_leaders_off(&self, node: i32) {
        wait_until(
            &format!("every leadership moved off node {node}"),
            Duration::from_secs(60),
            || {
                self.metadata().is_some_and(|md| {
                    md.topics()
                        .iter()
                        .all(|t| t.partitions().iter().all(|p| p.leader() > 0 && p.leader() != node))
                })
            },
        );
    }

    /// Wait until every partition of every topic (the internal ones too) has all three replicas
    /// in sync: a rolling restart moves on only then.
    pub fn wait_for_full_isr(&self) {
        wait_until(
            "every partition's ISR back to 3 replicas",
            Duration::from_secs(120),
            || {
                self.metadata().is_some_and(|md| {
                    md.brokers().len() == NODES
                        && md
                            .topics()
                            .iter()
                            .all(|t| t.partitions().iter().all(|p| p.isr().len() == NODES && p.leader() > 0))
                })
            },
        );
    }

    fn stop_all(&self) {
        let _ = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
            .arg("stop")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output();
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

static SHARED: OnceLock<Mutex<OwnCluster>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(cluster) = SHARED.get() {
        let cluster = cluster.lock().unwrap_or_else(|e| e.into_inner());
        // killed, not stopped: its data is thrown away, and three combined nodes stopping
        // together wait up to 30 s for a controlled shutdown no quorum is left to grant
        for node in 1..=NODES {
            let _ = Command::new(format!("{}/scripts/kafka", env!("CARGO_MANIFEST_DIR")))
                .args(["kill", &node.to_string()])
                .envs(cluster.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .output();
        }
        let _ = std::fs::remove_dir_all(cluster.dir.path());
    }
}

/// The cluster the `cluster::` tests share (started by the first, stopped when the test binary
/// exits: a static is never dropped, so an exit hook stops it), healed and held for one test at a
/// time. Sharing is sound because each test uses topics and a job of its own and leaves every
/// node running (`heal` restarts one a failed test left down).
pub fn shared() -> MutexGuard<'static, OwnCluster> {
    let cluster = SHARED.get_or_init(|| {
        let cluster = OwnCluster::start();
        // SAFETY: registers a plain function to run at exit; it only runs `scripts/kafka stop`.
        unsafe {
            libc::atexit(stop_shared);
        }
        Mutex::new(cluster)
    });
    let cluster = cluster.lock().unwrap_or_else(|e| e.into_inner());
    cluster.heal();
    cluster
}

/// An iptables rule dropping what is sent to one client port on loopback (the daemon's and the
/// harness's connections to that broker; the brokers replicate and vote on their own ports, so the
/// cluster stays whole). Commented `tidegate-cluster-test` for finding a leftover
/// (`iptables -S OUTPUT | grep tidegate-cluster-test`); Drop removes it, also when the test fails.
pub struct Cut {
    rule: Vec<String>,
}

impl Cut {
    pub fn client_port(port: u16) -> Cut {
        let rule: Vec<String> = [
            "OUTPUT",
            "-o",
            "lo",
            "-p",
            "tcp",
            "--dport",
            &port.to_string(),
            "-m",
            "comment",
            "--comment",
            &format!("tidegate-cluster-test pid {}", std::process::id()),
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = Command::new("iptables").arg("-I").args(&rule).output();
        match out {
            Ok(out) if out.status.success() => Cut { rule },
            Ok(out) => panic!(
                "iptables -I {rule:?} failed (the partition test runs as root, as CI does): {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!("running iptables ({e}): `apt-get install -y iptables` (the partition test needs it)"),
        }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        let removed = Command::new("iptables").arg("-D").args(&self.rule).status();
        if !removed.is_ok_and(|s| s.success()) {
            eprintln!(
                "cluster: could not remove the iptables rule {:?}: remove it by hand",
                self.rule
            );
        }
    }
}
