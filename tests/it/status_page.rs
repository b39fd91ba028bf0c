//! The status page (`GET /`) in a real browser: headless Chromium (Debian's `chromium`) loads it
//! from a running replay and must show the numbers `GET /status` reports. With
//! `TIDEGATE_STATUS_SCREENSHOT=docs/img/status-page.png` it also writes the README's screenshot.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{TestKafka, TestRecord};
use crate::control::{control, controlled_config, status};
use crate::daemon_util::*;

const MINUTE: Duration = Duration::from_secs(60);

/// Run headless Chromium on `url` with `args`; its stdout.
fn chromium(url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let output = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--virtual-time-budget=3000"])
        .args(args)
        .arg(url)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `chromium` ({e}): this test needs it: apt-get install -y chromium (Debian's package)")
        });
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The text of the element with `id` in `dom`.
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page:\n{dom}"));
    let start = at + dom[at..].find('>').expect("tag end") + 1;
    let end = start + dom[start..].find('<').expect("text end");
    &dom[start..end]
}

/// The cells of the table row of split `id`.
fn row_of(dom: &str, id: &str) -> Vec<String> {
    let at = dom
        .find(&format!("data-split=\"{id}\""))
        .unwrap_or_else(|| panic!("no row for split {id} in the page:\n{dom}"));
    let end = at + dom[at..].find("</tr>").expect("row end");
    dom[at..end]
        .split("<td>")
        .skip(1)
        .map(|cell| cell.split("</td>").next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_status_page_shows_what_status_reports_in_chromium() {
    let kafka = TestKafka::get();
    let topic = kafka.create_topic("status-page", 2);
    let records: Vec<TestRecord> = (0..1_000)
        .map(|i| TestRecord::to(i % 2, format!("value-{i}")).at(1_790_000_000_000 + i as i64))
        .collect();
    kafka.produce(&topic, &records);
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let url = format!("http://{addr}/");
    let config = dir.config(&controlled_config(&kafka, &topic, port, "max_rate = 100"));
    let daemon = Daemon::start(&config, &[]);
    daemon.wait_until("50 records", MINUTE, || {
        status(&addr).is_some_and(|s| s["records"]["emitted"].as_u64() >= Some(50))
    });
    // paused, the numbers stand still while the browser loads the page
    assert_eq!(control(&addr, r#"{"paused": true}"#).0, 200);
    let checkpoints = |s: &serde_json::Value| s["checkpoints"].as_u64().unwrap_or(0);
    // a record already past the pause check when it came may still be emitted (seen once in
    // CI: a position one further on the page than in /status taken after a checkpoint): wait
    // until the positions stand still over a checkpoint
    let positions = |s: &serde_json::Value| s["splits"].to_string();
    let mut shown = status(&addr).expect("status");
    let mut still = false;
    for _ in 0..5 {
        let c0 = checkpoints(&shown);
        daemon.wait_until("a checkpoint after the pause", MINUTE, || {
            status(&addr).is_some_and(|s| checkpoints(&s) > c0)
        });
        let now = status(&addr).expect("status");
        still = positions(&now) == positions(&shown);
        shown = now;
        if still {
            break;
        }
    }
    assert!(still, "paused, the positions still move over 5 checkpoints: {shown}");
    // the page against /status read just before it loads; a page that loaded while a position
    // still moved gets two more tries (every try's rows are in the failure message)
    let rows_of = |dom: &str, shown: &serde_json::Value| -> Vec<(Vec<String>, [String; 5])> {
        let splits = shown["splits"].as_array().expect("splits");
        assert_eq!(splits.len(), 2);
        splits
            .iter()
            .map(|s| {
                let id = s["id"].as_str().expect("id");
                let want = [
                    // named as plan and the summary name a partition
                    format!("{}:{}", s["topic"].as_str().expect("topic"), s["partition"]),
                    s["position"].to_string(),
                    s["stop"].to_string(),
                    s["records_left"].to_string(),
                    "reading".to_string(),
                ];
                (row_of(dom, id), want)
            })
            .collect()
    };
    let mut tries = Vec::new();
    let dom = loop {
        let dom = chromium(&url, &["--dump-dom"]);
        let rows = rows_of(&dom, &shown);
        let same = rows.iter().all(|(row, want)| row == want);
        tries.push(rows);
        if same || tries.len() == 3 {
            assert!(same, "the page's split rows (shown, /status) in each try: {tries:?}");
            break dom;
        }
        shown = status(&addr).expect("status");
    };
    assert_eq!(text_of(&dom, "state"), "paused", "{dom}");
    assert_eq!(text_of(&dom, "done"), shown["records"]["done"].to_string(), "{dom}");
    assert_eq!(text_of(&dom, "expected"), "1000");
    assert!(text_of(&dom, "limits").contains("max_rate 100"), "{dom}");

    // running again: a screenshot (the README's when asked for)
    assert_eq!(control(&addr, r#"{"paused": false}"#).0, 200);
    daemon.wait_until("a rate to show", MINUTE, || {
        status(&addr).is_some_and(|s| s["rate"].as_f64() > Some(0.0) && s["eta_seconds"].is_number())
    });
    let shot = dir.path("status-page.png");
    chromium(
        &url,
        &[&format!("--screenshot={}", shot.display()), "--window-size=1200,800"],
    );
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if let Ok(target) = std::env::var("TIDEGATE_STATUS_SCREENSHOT") {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join(target);
        std::fs::copy(&shot, &target).expect("copying the screenshot");
        eprintln!("screenshot written to {}", target.display());
    }
    assert_eq!(control(&addr, r#"{"max_rate": null}"#).0, 200);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    assert_eq!(line_count(&dir.path("out.jsonl")), 1_000);
}

/// A page of another origin cannot control the job from a browser: headless Chromium loads a
/// page served elsewhere (by Python's http.server, under the name `evil.example`, which the
/// browser resolves to 127.0.0.1 as a DNS rebinding would) that POSTs pauses to the endpoint by
/// its address and by the rebound name, as JSON (a CORS preflight) and as plain text (none);
/// each request fails and the job is never paused.
#[test]
fn a_page_of_another_origin_cannot_control_the_job_in_chromium() {
    let dir = JobDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = format!(
        r#"
[source]
type = "datagen"
rate = 50
seed = 7
[source.fields]
seq = {{ sequence = {{}} }}
[sink]
type = "null"
[checkpoint]
path = "{{dir}}/job.state"
interval = "200ms"
[metrics]
listen = "{addr}"
"#
    );
    let daemon = Daemon::start(&dir.config(&config), &[]);
    daemon.wait_until("/status", MINUTE, || status(&addr).is_some());
    let site = dir.path("site");
    std::fs::create_dir_all(&site).expect("site dir");
    let attempts = [
        format!("http://{addr}/control"),
        format!("http://evil.example:{port}/control"),
    ];
    let mut script = String::from("const results = [];\n");
    for url in &attempts {
        for (mode, kind) in [("cors", "application/json"), ("no-cors", "text/plain")] {
            script += &format!(
                "try {{ const r = await fetch({url:?}, {{ method: 'POST', mode: '{mode}', headers: {{ 'Content-Type': '{kind}' }}, body: '{{\"paused\": true}}' }}); results.push('{mode} ' + r.type + ' ' + r.status); }} catch (e) {{ results.push('{mode} failed: ' + e); }}\n"
            );
        }
    }
    script += "document.getElementById('out').textContent = results.join(' | ');\n";
    std::fs::write(
        site.join("attack.html"),
        format!("<html><body><p id=\"out\">pending</p><script>(async () => {{\n{script}}})();</script></body></html>"),
    )
    .expect("attack page");
    let site_port = free_port();
    let mut server = std::process::Command::new("python3")
        .args(["-m", "http.server", &site_port.to_string(), "--bind", "127.0.0.1"])
        .current_dir(&site)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    daemon.wait_until("the other site", MINUTE, || {
        std::net::TcpStream::connect(("127.0.0.1", site_port)).is_ok()
    });
    let dom = chromium(
        &format!("http://evil.example:{site_port}/attack.html"),
        &["--host-resolver-rules=MAP evil.example 127.0.0.1", "--dump-dom"],
    );
    let _ = server.kill();
    let _ = server.wait();
    let out = text_of(&dom, "out");
    // the page ran its four attempts: none was answered with what it asked for (the CORS ones
    // fail, the no-cors ones get an opaque answer the server refused)
    assert_eq!(out.matches(" | ").count(), 3, "{dom}");
    assert!(
        !out.contains("cors basic 200") && !out.contains("cors cors 200"),
        "{out}"
    );
    let s = status(&addr).expect("status");
    assert_eq!(s["state"], "running", "a page of another origin paused the job: {out}");
    daemon.signal(libc::SIGTERM);
    let (code, log) = daemon.wait(MINUTE);
    assert_eq!(code.code(), Some(0), "{log}");
    // the no-cors attempts reached the server and were refused by the guards
    assert!(log.contains("POST /control refused"), "{log}");
}
