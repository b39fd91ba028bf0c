//! docker/k8s/indexed-jobs.yaml as Kubernetes would run it: its ConfigMap's job configs, each
//! Indexed Job's pods as processes with the pod's environment (the completion index from the
//! downward API, `$(VAR)` references expanded), against the real broker. The three seed pods
//! write every generated record once, also when one of them is killed mid-run and started again
//! with no disk (their state is in the Kafka store); the three reader pods read every one once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{wait_until, TestKafka};
use crate::daemon_util::*;

const MANIFEST: &str = "docker/k8s/indexed-jobs.yaml";

/// The manifest's documents, parsed with PyYAML (as JSON).
fn manifest() -> Vec<Value> {
    documents(MANIFEST)
}

/// The documents of the YAML file at `manifest` (relative to the repository), parsed with PyYAML
/// (as JSON).
pub(crate) fn documents(manifest: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(manifest);
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{manifest} does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from PyYAML")
}

/// `$(NAME)` references to earlier variables, expanded as the kubelet does.
fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = value.to_string();
    for (name, v) in env {
        out = out.replace(&format!("$({name})"), v);
    }
    out
}

/// The environment of pod `index` of `job`, with `local` rewriting values for this machine.
fn pod_env(job: &Value, index: usize, local: impl Fn(&str, String) -> String) -> Vec<(String, String)> {
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container["env"].as_array().cloned().unwrap_or_default() {
        let name = var["name"].as_str().unwrap().to_string();
        let value = match (&var["value"], &var["valueFrom"]["fieldRef"]["fieldPath"]) {
            (Value::String(v), _) => expand(v, &env),
            (_, Value::String(path)) => {
                assert_eq!(
                    path, "metadata.annotations['batch.kubernetes.io/job-completion-index']",
                    "{name}: only the completion index comes from the downward API"
                );
                index.to_string()
            }
            _ => panic!("{name}: neither a value nor the completion index"),
        };
        let value = local(&name, value);
        env.push((name, value));
    }
    env
}

/// Rewrites an environment variable's value for this machine (name, value → value).
type Localize<'a> = Box<dyn Fn(&str, String) -> String + 'a>;

/// The pods of Indexed Job `job` as processes of this machine: the container's arguments (with
/// the ConfigMap's files under `configs`) and each pod's environment.
struct Pods<'a> {
    job: &'a Value,
    args: Vec<String>,
    completions: usize,
    dir: &'a JobDir,
    extra_env: Vec<(String, String)>,
    local: Localize<'a>,
}

impl<'a> Pods<'a> {
    fn new(
        job: &'a Value,
        configs: &Path,
        dir: &'a JobDir,
        extra_env: &[(&str, String)],
        local: impl Fn(&str, String) -> String + 'a,
    ) -> Self {
        let spec = &job["spec"];
        assert_eq!(spec["completionMode"], "Indexed");
        let completions = spec["completions"].as_u64().unwrap() as usize;
        assert_eq!(
            spec["parallelism"].as_u64(),
            Some(completions as u64),
            "every pod at once"
        );
        let container = &spec["template"]["spec"]["containers"][0];
        let args = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                a.as_str()
                    .unwrap()
                    .replace("/etc/tidegate-jobs", &configs.display().to_string())
            })
            .collect();
        Pods {
            job,
            args,
            completions,
            dir,
            extra_env: extra_env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            local: Box::new(local),
        }
    }

    /// Start pod `index` (`attempt` numbers its log); its stderr goes to the returned log file.
    fn start(&self, index: usize, attempt: usize) -> (std::process::Child, std::path::PathBuf) {
        let env = pod_env(self.job, index, &self.local);
        let count = env
            .iter()
            .find(|(n, _)| n == "TIDEGATE__JOB__INSTANCE__COUNT")
            .map(|(_, v)| v.clone());
        assert_eq!(
            count,
            Some(self.completions.to_string()),
            "the instance count is the completions"
        );
        let name = self.job["metadata"]["name"].as_str().unwrap();
        let log = self.dir.path(&format!("{name}-{index}-{attempt}.log"));
        let child = Command::new(binary())
            .args(&self.args)
            .envs(env)
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start a pod's tidegate");
        (child, log)
    }
}

/// Wait for each pod; all must exit 0.
fn all_succeed(pods: Vec<(std::process::Child, std::path::PathBuf)>) {
    for (mut child, log) in pods {
        let status = wait_for(&mut child, Duration::from_secs(120));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(status.code(), Some(0), "{}:\n{text}", log.display());
    }
}

/// Run every pod of Indexed Job `job` at once as a process; all must exit 0.
fn run_pods(
    job: &Value,
    configs: &Path,
    dir: &JobDir,
    extra_env: &[(&str, String)],
    local: impl Fn(&str, String) -> String,
) {
    let pods = Pods::new(job, configs, dir, extra_env, local);
    all_succeed((0..pods.completions).map(|index| pods.start(index, 0)).collect());
}

fn wait_for(child: &mut std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("a pod did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The manifest's ConfigMap files (for this machine's broker and a topic of this test) and Jobs.
struct Manifest {
    configs: std::path::PathBuf,
    seed: Value,
    replay: Value,
    topic: String,
    /// The seed's environment here: a job name (its transactional ids) and a store topic of
    /// this test.
    seed_env: Vec<(&'static str, String)>,
}

fn local_manifest(kafka: &TestKafka, dir: &JobDir) -> Manifest {
    let docs = manifest();
    let by_kind = |kind: &str, name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{MANIFEST}: no {kind} {name}"))
    };
    let configs = dir.path("configs");
    std::fs::create_dir_all(&configs).unwrap();
    let data = by_kind("ConfigMap", "tidegate-jobs")["data"].clone();
    let topic = kafka.unique_topic("k8s-events");
    for (file, text) in data.as_object().unwrap() {
        let text = text
            .as_str()
            .unwrap()
            .replace("kafka:9092", &kafka.bootstrap)
            .replace("\"events\"", &format!("\"{topic}\""));
        std::fs::write(configs.join(file), text).unwrap();
    }
    let seed = by_kind("Job", "tidegate-seed");
    // no volume: the seed's state is in Kafka, so a pod can start anywhere
    let mounts = &seed["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    assert!(
        mounts
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["mountPath"] == "/etc/tidegate-jobs"),
        "the seed pods mount only their configs: {mounts}"
    );
    let seed_env = vec![
        ("TIDEGATE__JOB__NAME", format!("{topic}-seed")),
        ("TIDEGATE__CHECKPOINT__TOPIC", format!("{topic}-state")),
    ];
    Manifest {
        configs,
        seed,
        replay: by_kind("Job", "tidegate-replay"),
        topic,
        seed_env,
    }
}

const COUNT: u64 = 30_000;

/// The records a run wrote, from its summary line (`… N records read, M written …`).
fn written_in(log: &str) -> u64 {
    log.lines()
        .find_map(|line| {
            let (_, rest) = line.split_once(" records read, ")?;
            rest.split_once(" written")?.0.replace(',', "").parse().ok()
        })
        .unwrap_or_else(|| panic!("no summary line in the pod's log:\n{log}"))
}

/// Every generated id in `topic` exactly once.
fn assert_seeded_once(kafka: &TestKafka, topic: &str) {
    let records = kafka.read_all(topic);
    let ids: BTreeMap<u64, usize> = records.iter().fold(BTreeMap::new(), |mut m, r| {
        let v: Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        *m.entry(v["id"].as_u64().unwrap()).or_default() += 1;
        m
    });
    assert_eq!(ids.len() as u64, COUNT, "every generated record");
    let twice: Vec<_> = ids.iter().filter(|(_, n)| **n != 1).take(5).collect();
    assert!(
        twice.is_empty(),
        "records written more than once (id, times): {twice:?}"
    );
}

#[test]
fn the_indexed_jobs_seed_and_read_every_record_once() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let m = local_manifest(&kafka, &dir);
    let pod_home = dir.path("pods");
    run_pods(&m.seed, &m.configs, &dir, &m.seed_env, |_, v| v);
    assert_seeded_once(&kafka, &m.topic);

    run_pods_with_state(&m.replay, &m.configs, &dir, &[], &pod_home, "replay");
    let mut read = BTreeMap::new();
    let mut per_pod = Vec::new();
    for index in 0..3 {
        let lines = read_jsonl(&pod_home.join(format!("out/events-{index}.jsonl")));
        per_pod.push(lines.len());
        for line in lines {
            *read.entry(line["value"]["id"].as_u64().unwrap()).or_insert(0usize) += 1;
        }
    }
    assert_eq!(
        read.keys().copied().collect::<BTreeSet<u64>>(),
        (0..COUNT).collect(),
        "every record read"
    );
    assert!(read.values().all(|n| *n == 1), "a record read twice");
    assert!(per_pod.iter().all(|n| *n > 0), "each pod read its share: {per_pod:?}");
}

#[test]
fn a_seed_pod_killed_mid_run_and_started_again_without_a_disk_writes_every_record_once() {
    let kafka = TestKafka::get();
    let dir = JobDir::new();
    let m = local_manifest(&kafka, &dir);
    // slowed down so that pod 1 is mid-run when it is killed: 3,000 records/s over the three
    // pods, 1,000/s each, about 10 s for each pod's 10,000 (checkpoints every 2 s)
    let mut env = m.seed_env.clone();
    env.push(("TIDEGATE__SOURCE__RATE", "3000".to_string()));
    let pods = Pods::new(&m.seed, &m.configs, &dir, &env, |_, v| v);
    let mut running: Vec<_> = (0..3).map(|index| pods.start(index, 0)).collect();
    let (mut victim, victim_log) = running.remove(1);
    let log_text = || std::fs::read_to_string(&victim_log).unwrap_or_default();
    wait_until("pod 1's first checkpoint", Duration::from_secs(60), || {
        log_text().contains("checkpoint complete")
    });
    assert!(
        victim.try_wait().unwrap().is_none(),
        "pod 1 was meant to be killed mid-run, it ended:\n{}",
        log_text()
    );
    victim.kill().expect("kill -9 pod 1");
    victim.wait().unwrap();
    // a new pod for index 1, on another node: nothing of the first one is left but what it
    // wrote to Kafka
    running.push(pods.start(1, 1));
    all_succeed(running);
    let resumed = std::fs::read_to_string(dir.path("tidegate-seed-1-1.log")).unwrap_or_default();
    assert!(
        resumed.contains("restoring from the last checkpoint"),
        "the new pod 1 did not resume from the Kafka store:\n{resumed}"
    );
    // mid-run: the new pod wrote part of pod 1's share, not none of it (killed after its last
    // checkpoint) nor all of it (started over)
    let written = written_in(&resumed);
    assert!(
        written > 0 && written < COUNT / 3,
        "the new pod 1 wrote {written} of its share of {}:\n{resumed}",
        COUNT / 3
    );
    assert_seeded_once(&kafka, &m.topic);
}

/// [`run_pods`] with each pod's volume (the manifest's emptyDir at /var/lib/tidegate) under
/// `home`: its state file its own, at `home/<name>-<index>/`.
fn run_pods_with_state(
    job: &Value,
    configs: &Path,
    dir: &JobDir,
    extra_env: &[(&str, String)],
    home: &Path,
    name: &str,
) {
    let mut job = job.clone();
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("the container's env");
    env.push(serde_json::json!({
        "name": "TIDEGATE__CHECKPOINT__PATH",
        "value": format!("{}/{name}-$(TIDEGATE__JOB__INSTANCE__INDEX)/job.state", home.display()),
    }));
    std::fs::create_dir_all(home.join("out")).unwrap();
    let home = home.to_path_buf();
    run_pods(&job, configs, dir, extra_env, move |_, v| {
        v.replace("/var/lib/tidegate", &home.display().to_string())
    });
}
