//! `tidegate::testing`'s Kafka containers are removed by testcontainers, as its docs say: a
//! container of a test's own when it is dropped (also within `#[tokio::test]`), the shared one
//! when the test process exits (without a `docker` command on the PATH) and when it is
//! interrupted. Needs a Docker engine: the Docker tier runs them (`scripts/docker test`).
//!
//! The shared container lives as long as its process, so those tests run this test binary again
//! as a child (`TIDEGATE_CONTAINER_CHILD` says which part it plays) and watch it from outside.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tidegate::testing::Kafka;

use crate::common::wait_until;

const MINUTE: Duration = Duration::from_secs(60);
const CHILD: &str = "TIDEGATE_CONTAINER_CHILD";

/// Whether Docker knows the container (running or not).
fn exists(id: &str) -> bool {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", &format!("id={id}")])
        .output()
        .expect("the docker command (the parent's check)");
    assert!(
        out.status.success(),
        "docker ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

#[tokio::test]
async fn a_container_of_a_tests_own_is_removed_when_dropped_even_in_a_tokio_test() {
    let container = Kafka::start().expect("a Kafka container (needs Docker)");
    let id = container.id().to_string();
    assert!(exists(&id), "the container {id} runs");
    container
        .kafka()
        .create_topic_async("containers-own", 1)
        .await
        .expect("the broker answers");
    drop(container);
    assert!(!exists(&id), "the container {id} is left after its drop");
}

/// The child's part: start the shared container (its id goes to stderr), then end as `mode` says.
fn child(mode: &str) {
    let kafka = Kafka::get().expect("the shared Kafka container (needs Docker)");
    kafka.create_topic("containers-shared", 1).expect("the broker answers");
    if mode == "interrupted" {
        eprintln!("child: waiting for a signal");
        let deadline = Instant::now() + MINUTE * 2;
        while Instant::now() < deadline {
            std::thread::park_timeout(Duration::from_secs(1));
        }
        panic!("child: no signal came");
    }
    // "exit": the test passes, the process exits normally
}

/// A child process, killed if the test fails while it runs.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Run this test binary's `test` as a child in `mode`, with `path` as its PATH: its Kafka
/// container's id, once the container runs, and the child.
fn start_child(test: &str, mode: &str, path: &str) -> (String, Child) {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env_remove("KAFKA_BOOTSTRAP_SERVERS")
        .env("PATH", path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the test binary again");
    let stderr = child.stderr.take().expect("the child's stderr");
    let child = Child(child);
    let mut lines = BufReader::new(stderr).lines();
    let id = loop {
        let line = match lines.next() {
            Some(Ok(line)) => line,
            _ => panic!("the child ended without starting a container"),
        };
        if let Some(rest) = line.strip_prefix("tidegate tests: shared Kafka container ") {
            break rest.split(' ').next().expect("an id").to_string();
        }
    };
    // keep draining the child's stderr, so it never blocks on a full pipe
    std::thread::spawn(move || lines.for_each(drop));
    (id, child)
}

/// PATH without any folder holding a `docker` command.
fn path_without_docker() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    let kept: Vec<&str> = path
        .split(':')
        .filter(|dir| !std::path::Path::new(dir).join("docker").exists())
        .collect();
    kept.join(":")
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + MINUTE;
    loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            panic!("the child did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_shared_container_is_removed_when_the_process_exits_without_a_docker_command() {
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let (id, mut child) = start_child(
        "containers::the_shared_container_is_removed_when_the_process_exits_without_a_docker_command",
        "exit",
        &path_without_docker(),
    );
    let status = wait_for_exit(&mut child);
    assert!(status.success(), "the child's test failed: {status}");
    // removed before the process ended: nothing is left to wait for
    assert!(!exists(&id), "the shared container {id} outlived its process");
}

#[test]
fn the_shared_container_is_removed_when_the_process_is_interrupted() {
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let (id, mut child) = start_child(
        "containers::the_shared_container_is_removed_when_the_process_is_interrupted",
        "interrupted",
        &std::env::var("PATH").unwrap_or_default(),
    );
    // the child has caught SIGINT (testcontainers' watchdog installed its handler)
    let caught = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigCgt:"))
                    .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            })
            .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
    };
    let pid = child.0.id();
    wait_until("the child catching SIGINT", MINUTE, || caught(pid));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = wait_for_exit(&mut child);
    assert!(!status.success(), "the child ended on its own: {status}");
    assert!(
        !exists(&id),
        "the shared container {id} outlived its interrupted process"
    );
}
