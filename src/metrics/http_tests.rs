//! The endpoint over real connections: its guards, `/ready`, the request deadline and the cap
//! on connections.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::core::JobStats;
use crate::metrics::settings::{ControlToken, MetricsConfig};

const TOKEN: &str = "s3cret-token";

struct Served {
    addr: SocketAddr,
    stats: Arc<JobStats>,
    stop: watch::Sender<bool>,
    _task: tokio::task::JoinHandle<()>,
}

async fn served(limits: Limits) -> Served {
    let stats = Arc::new(JobStats::default());
    let (stop, stop_rx) = watch::channel(false);
    let config = MetricsConfig {
        listen: None,
        control: true,
        control_token: Some(ControlToken::new(TOKEN.into())),
        allowed_hosts: vec![crate::metrics::settings::AllowedHost {
            name: "proxy.internal".into(),
            port: None,
        }],
        linger: std::time::Duration::ZERO,
    };
    let endpoint = Endpoint {
        metrics: Metrics::detached(Arc::clone(&stats)),
        status: Arc::new(StatusBoard::new("job".into(), Arc::clone(&stats))),
        control: true,
        stop: stop_rx,
        limits,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    Served {
        addr,
        stats,
        stop,
        _task: serve_on(listener, &config, endpoint),
    }
}

/// Send `raw` and read the answer until the server closes: (status, whole answer).
async fn exchange(addr: SocketAddr, raw: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut answer))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, answer)
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        r += &format!("{k}: {v}\r\n");
    }
    r + &format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

fn limits() -> Limits {
    Limits {
        request_timeout: Duration::from_millis(300),
        max_connections: 2,
    }
}

#[tokio::test]
async fn a_foreign_host_origin_or_token_is_refused_and_the_job_untouched() {
    let s = served(limits()).await;
    let own = s.addr.to_string();
    let bearer = format!("Bearer {TOKEN}");
    let get = |host: &str| request("GET", "/status", &[("Host", host)], "");
    assert_eq!(exchange(s.addr, &get(&own)).await.0, 200);
    assert_eq!(
        exchange(s.addr, &get(&format!("localhost:{}", s.addr.port()))).await.0,
        200
    );
    assert_eq!(exchange(s.addr, &get("proxy.internal")).await.0, 200);
    let (code, answer) = exchange(s.addr, &get("evil.example")).await;
    assert_eq!(code, 421, "{answer}");
    assert!(answer.contains("metrics.allowed_hosts"), "{answer}");
    for path in ["/metrics", "/"] {
        let r = request("GET", path, &[("Host", "evil.example")], "");
        assert_eq!(exchange(s.addr, &r).await.0, 421, "{path}");
    }
    assert_eq!(exchange(s.addr, "GET /status HTTP/1.0\r\n\r\n").await.0, 400, "no Host");

    let pause = r#"{"paused": true}"#;
    let json = ("Content-Type", "application/json");
    let post = |headers: &[(&str, &str)]| request("POST", "/control", headers, pause);
    let cases: [(&[(&str, &str)], u16); 5] = [
        (&[("Host", "evil.example"), json, ("Authorization", &bearer)], 421),
        (
            &[
                ("Host", &own),
                ("Origin", "http://evil.example"),
                json,
                ("Authorization", &bearer),
            ],
            403,
        ),
        (
            &[("Host", &own), ("Origin", "null"), json, ("Authorization", &bearer)],
            403,
        ),
        (&[("Host", &own), json], 401),
        (&[("Host", &own), json, ("Authorization", "Bearer wrong")], 401),
    ];
    for (headers, want) in cases {
        let (code, answer) = exchange(s.addr, &post(headers)).await;
        assert_eq!(code, want, "{headers:?}: {answer}");
        assert!(!answer.contains(TOKEN), "{answer}");
        assert!(!s.stats.throttle.is_paused(), "{headers:?} paused the job");
    }
    let (code, answer) = exchange(s.addr, &post(&[("Host", &own), json])).await;
    assert!(
        answer.contains("WWW-Authenticate: Bearer") || answer.contains("www-authenticate: Bearer"),
        "{code} {answer}"
    );
    let origin = format!("http://{own}");
    let (code, answer) = exchange(
        s.addr,
        &post(&[("Host", &own), ("Origin", &origin), json, ("Authorization", &bearer)]),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    assert!(s.stats.throttle.is_paused());
}

#[tokio::test]
async fn ready_follows_the_run_and_the_stop_and_ping_answers_any_host() {
    let s = served(limits()).await;
    let get = |path: &str| request("GET", path, &[("Host", "anything.example")], "");
    assert_eq!(exchange(s.addr, &get("/ping")).await.0, 200);
    assert_eq!(exchange(s.addr, &get("/healthz")).await.0, 200);
    assert_eq!(exchange(s.addr, &get("/ready")).await.0, 503, "no run yet");
    s.stats.running.store(true, Ordering::Relaxed);
    assert_eq!(exchange(s.addr, &get("/ready")).await.0, 200);
    s.stop.send(true).unwrap();
    assert_eq!(exchange(s.addr, &get("/ready")).await.0, 503, "stopping");
}

#[tokio::test]
async fn a_slow_body_gets_408_and_idle_connections_beyond_the_cap_leave_only_the_probes() {
    let s = served(limits()).await;
    let own = s.addr.to_string();
    let started = Instant::now();
    let head = format!(
        "POST /control HTTP/1.1\r\nHost: {own}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{{\"paused\""
    );
    let (code, answer) = exchange(s.addr, &head).await;
    assert_eq!(code, 408, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(!s.stats.throttle.is_paused());

    // two clients that send nothing hold both slots: a third is told 503 at once
    let idle = [
        TcpStream::connect(s.addr).await.unwrap(),
        TcpStream::connect(s.addr).await.unwrap(),
    ];
    let status = request("GET", "/status", &[("Host", &own)], "");
    let mut turned_away = false;
    for _ in 0..50 {
        let (code, _) = exchange(s.addr, &status).await;
        if code == 503 {
            turned_away = true;
            break;
        }
        // the idle connections may not be accepted yet
        tokio::task::yield_now().await;
    }
    assert!(turned_away, "a third connection was served while two held the slots");
    // past the cap the probes still answer: a liveness probe must not fail for idle clients
    let ping = request("GET", "/ping", &[("Host", &own)], "");
    assert_eq!(exchange(s.addr, &ping).await.0, 200);
    // the idle ones are let go within their deadline, and the endpoint serves again
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, answer) = exchange(s.addr, &status).await;
        if code == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the idle clients' deadline: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(idle);
}
