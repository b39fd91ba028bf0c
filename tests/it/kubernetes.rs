//! docker/k8s/indexed-jobs.yaml as Kubernetes would run it: its ConfigMap's job configs, each
//! Indexed Job's pods as processes with the pod's environment (the completion index from the
//! downward API, `$(VAR)` references expanded), against the real broker. The three seed pods
//! write every generated record once; the three reader pods read every one once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::TestKafka;
use crate::daemon_util::*;

const MANIFEST: &str = "docker/k8s/indexed-jobs.yaml";

/// The manifest's documents, parsed with PyYAML (as JSON).
fn manifest() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(MANIFEST);
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
        "{MANIFEST} does not parse: {}",
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

/// Run every pod of Indexed Job `job` at once as a process; all must exit 0.
fn run_pods(
    job: &Value,
    configs: &Path,
    dir: &JobDir,
    extra_env: &[(&str, String)],
    local: impl Fn(&str, String) -> String,
) {
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let completions = spec["completions"].as_u64().unwrap() as usize;
    assert_eq!(
        spec["parallelism"].as_u64(),
        Some(completions as u64),
        "every pod at once"
    );
    let container = &spec["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("/etc/tidegate-jobs", &configs.display().to_string())
        })
        .collect();
    let pods: Vec<_> = (0..completions)
        .map(|index| {
            let env = pod_env(job, index, &local);
            let count = env
                .iter()
                .find(|(n, _)| n == "TIDEGATE__JOB__INSTANCE__COUNT")
                .map(|(_, v)| v.clone());
            assert_eq!(
                count,
                Some(completions.to_string()),
                "the instance count is the completions"
            );
            let log = dir.path(&format!("{}-{index}.log", job["metadata"]["name"].as_str().unwrap()));
            let child = Command::new(binary())
                .args(&args)
                .envs(env)
                .envs(extra_env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start a pod's tidegate");
            (child, log)
        })
        .collect();
    for (mut child, log) in pods {
        let status = wait_for(&mut child, Duration::from_secs(120));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(status.code(), Some(0), "{}:\n{text}", log.display());
    }
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

#[test]
fn the_indexed_jobs_seed_and_read_every_record_once() {
    let kafka = TestKafka::get();
    let docs = manifest();
    let by_kind = |kind: &str, name: &str| -> Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{MANIFEST}: no {kind} {name}"))
    };
    let dir = JobDir::new();
    let configs = dir.path("configs");
    std::fs::create_dir_all(&configs).unwrap();
    let data = by_kind("ConfigMap", "tidegate-jobs")["data"].clone();
    let pod_home = dir.path("pods");
    // the ConfigMap's files, with this machine's broker and a topic of this test
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
    let replay = by_kind("Job", "tidegate-replay");
    let count = 30_000u64;

    // the seed's transactional id is the job's name: unique per test run
    let name = [("TIDEGATE__JOB__NAME", format!("{topic}-seed"))];
    run_pods_with_state(&seed, &configs, &dir, &name, &pod_home, "seed");
    let records = kafka.read_all(&topic);
    let ids: BTreeMap<u64, usize> = records.iter().fold(BTreeMap::new(), |mut m, r| {
        let v: Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        *m.entry(v["id"].as_u64().unwrap()).or_default() += 1;
        m
    });
    assert_eq!(ids.len() as u64, count, "every generated record");
    assert!(ids.values().all(|n| *n == 1), "a record written twice");

    run_pods_with_state(&replay, &configs, &dir, &[], &pod_home, "replay");
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
        (0..count).collect(),
        "every record read"
    );
    assert!(read.values().all(|n| *n == 1), "a record read twice");
    assert!(per_pod.iter().all(|n| *n > 0), "each pod read its share: {per_pod:?}");
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
