//! The binary's allocator: jemalloc, unprefixed (so librdkafka's `malloc` is jemalloc's too), with
//! the settings src/main.rs gives it. Run as a user runs it; no broker needed.

use std::process::Command;

use crate::daemon_util::binary;

/// jemalloc reports where each of its settings came from when `confirm_conf` is on.
fn confirmed_conf(malloc_conf: &str) -> String {
    let out = Command::new(binary())
        .arg("--version")
        .env("MALLOC_CONF", malloc_conf)
        .output()
        .expect("running tidegate --version");
    assert!(out.status.success(), "tidegate --version failed: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_binary_allocates_with_an_unprefixed_jemalloc_that_returns_freed_pages_promptly() {
    let report = confirmed_conf("confirm_conf:true");
    // read at all: jemalloc initialized. Through `MALLOC_CONF` (a prefixed jemalloc reads
    // `_RJEM_MALLOC_CONF`): its symbols are `malloc` and `free`, which librdkafka links to
    assert!(
        report.contains("value of the environment variable MALLOC_CONF): \"confirm_conf:true\""),
        "jemalloc did not read MALLOC_CONF (glibc's malloc, or a prefixed jemalloc):\n{report}"
    );
    // the binary's own settings, before the environment's
    assert!(
        report.contains("global variable malloc_conf): \"dirty_decay_ms:100,muzzy_decay_ms:0\""),
        "src/main.rs's malloc_conf was not read:\n{report}"
    );
    assert!(report.contains("Set conf value: dirty_decay_ms:100"), "{report}");
}

#[test]
fn the_environment_still_overrides_the_binary_s_allocator_settings() {
    let report = confirmed_conf("confirm_conf:true,dirty_decay_ms:5000");
    let ours = report
        .find("Set conf value: dirty_decay_ms:100")
        .expect("the binary's setting");
    let theirs = report
        .find("Set conf value: dirty_decay_ms:5000")
        .expect("the environment's setting");
    assert!(ours < theirs, "the environment's value must be applied last:\n{report}");
}
