//! `--metrics ADDR`: the Prometheus endpoint and the health check of
//! `serve` and `gateway`, scraped from the running binary. Every line of
//! every scrape is parsed as the Prometheus text exposition format (0.0.4),
//! and the counters must move as the requests made between two scrapes say:
//! fresh key agreements, tickets, session-cache hits, refusals by their
//! spec §12 code, connections, durations.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use httpcrypt::proto::client::ClientCredential;
use httpcrypt::proto::outer::Mount;
use httpcrypt::proto::KexSecret;
use rand_core::OsRng;

/// One parsed exposition: every sample by name and labels, and the type
/// of every family.
#[derive(Debug, Default)]
struct Scrape {
    samples: HashMap<(String, BTreeMap<String, String>), f64>,
    types: HashMap<String, String>,
}

impl Scrape {
    /// The value of `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let key = (
            name.to_string(),
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        *self
            .samples
            .get(&key)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
    }

    /// Every label value of `label` that `name` has.
    fn label_values(&self, name: &str, label: &str) -> HashSet<String> {
        self.samples
            .keys()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, l)| l.get(label).cloned())
            .collect()
    }
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|e| format!("value {s:?}: {e}")),
    }
}

/// `{a="x",b="y"}` (after the metric name) and what follows it.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((labels, s));
    };
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without '='")?;
        let name = rest[..eq].trim();
        if !is_name(name, false) {
            return Err(format!("label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value without quotes")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("escape \\{c}")),
                },
                (_, c) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// Parses a whole exposition strictly: `# HELP` and `# TYPE` lines with
/// valid names (one each per family, the TYPE before its samples), sample
/// lines `name{labels} value [timestamp]`, each series once, histograms
/// with rising buckets that end in `+Inf` equal to `_count`.
fn parse(text: &str) -> Result<Scrape, String> {
    let mut scrape = Scrape::default();
    let mut helped = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let fail = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            let bad = match (words.next(), words.next(), words.next()) {
                (Some("HELP"), Some(name), Some(_)) => {
                    !is_name(name, true) || !helped.insert(name.to_string())
                }
                (Some("TYPE"), Some(name), Some(kind)) => {
                    !is_name(name, true)
                        || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
                        || scrape
                            .types
                            .insert(name.to_string(), kind.to_string())
                            .is_some()
                }
                _ => false, // another comment
            };
            if bad {
                return Err(fail("bad or repeated HELP or TYPE".into()));
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| fail("no value".into()))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(fail("metric name".into()));
        }
        let (labels, rest) = parse_labels(&line[name_end..]).map_err(fail)?;
        let mut words = rest.split_whitespace();
        let value =
            parse_value(words.next().ok_or_else(|| fail("no value".into()))?).map_err(fail)?;
        if let Some(ts) = words.next() {
            ts.parse::<i64>()
                .map_err(|e| fail(format!("timestamp: {e}")))?;
        }
        if words.next().is_some() {
            return Err(fail("trailing text".into()));
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                let f = name.strip_suffix(s)?;
                (scrape.types.get(f).map(String::as_str) == Some("histogram")).then_some(f)
            })
            .unwrap_or(name);
        if !scrape.types.contains_key(family) {
            return Err(fail(format!("sample before its TYPE ({family})")));
        }
        if scrape
            .samples
            .insert((name.to_string(), labels), value)
            .is_some()
        {
            return Err(fail("series repeated".into()));
        }
    }
    for (family, kind) in &scrape.types {
        if kind != "histogram" {
            continue;
        }
        let mut buckets: Vec<(f64, f64)> = scrape
            .samples
            .iter()
            .filter(|((n, _), _)| *n == format!("{family}_bucket"))
            .map(|((_, l), v)| {
                let le = l.get("le").ok_or(format!("{family}: bucket without le"))?;
                Ok((parse_value(le)?, *v))
            })
            .collect::<Result<_, String>>()?;
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
            return Err(format!("{family}: buckets fall"));
        }
        let count = scrape
            .samples
            .get(&(format!("{family}_count"), BTreeMap::new()))
            .ok_or(format!("{family}: no _count"))?;
        if buckets.last() != Some(&(f64::INFINITY, *count)) {
            return Err(format!("{family}: +Inf bucket is not the count"));
        }
    }
    Ok(scrape)
}

/// A GET on a fresh connection: (status, content type, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let host = addr.to_string();
    let (rsp, _) = exchange(
        addr,
        &wire(
            "GET",
            path,
            &[("Host", &host), ("Connection", "close")],
            b"",
        ),
    );
    let ctype = rsp.header("content-type").unwrap_or_default().to_string();
    (
        rsp.status,
        ctype,
        String::from_utf8_lossy(&rsp.body).into_owned(),
    )
}

fn scrape(metrics: SocketAddr) -> Scrape {
    let (status, ctype, body) = get(metrics, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    parse(&body).unwrap_or_else(|e| panic!("not the Prometheus text format: {e}\n{body}"))
}

/// The metrics address the server printed.
fn metrics_addr(server: &Proc) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(a) = server.log().lines().find_map(|l| {
            l.split("metrics on http://")
                .nth(1)?
                .strip_suffix("/metrics")?
                .parse()
                .ok()
        }) {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "no metrics line:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` on fresh scrapes for a few seconds.
fn eventually(metrics: SocketAddr, what: &str, cond: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = scrape(metrics);
        if cond(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: {s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_counts_what_it_decides_and_exposes_it_to_prometheus() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("keys");
    let root = tmp.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), b"hello metrics\n").unwrap();
    keygen(&keys, false);
    let server = serve(&keys, &root, &["--metrics", "127.0.0.1:0"]);
    let metrics = metrics_addr(&server);
    let url = format!("http://{}/a.txt", server.addr);

    let (status, _, body) = get(metrics, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert_eq!(get(metrics, "/nothing").0, 404);

    let before = scrape(metrics);
    // Every series is there from the start, at zero: no gaps in graphs.
    let reasons = before.label_values("httpcrypt_rejections_total", "reason");
    for code in httpcrypt::metrics::REASONS {
        assert!(reasons.contains(*code), "no reason {code}");
    }
    assert_eq!(
        before.get("httpcrypt_requests_total", &[("outcome", "fresh_key")]),
        0.0
    );
    assert!(before.get("httpcrypt_key_expiry_seconds", &[]) > 0.0);
    assert!(before.get("httpcrypt_next_rotation_seconds", &[]) > 0.0);
    assert_eq!(before.get("httpcrypt_keys", &[]), 1.0);
    assert_eq!(before.get("httpcrypt_defence_active", &[]), 0.0);
    for name in [
        "httpcrypt_requests_total",
        "httpcrypt_rejections_total",
        "httpcrypt_key_agreements_total",
        "httpcrypt_key_rotations_total",
        "httpcrypt_admission_decisions_total",
        "httpcrypt_connections_total",
    ] {
        assert_eq!(
            before.types.get(name).map(String::as_str),
            Some("counter"),
            "{name}"
        );
    }
    assert_eq!(
        before
            .types
            .get("httpcrypt_request_duration_seconds")
            .map(String::as_str),
        Some("histogram")
    );

    // A fresh key: one X25519.
    let out = fetch(&[&url]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(out.stdout_text(), "hello metrics\n");
    // One client, three requests: a fresh key, then its tickets.
    let out = fetch(&["--repeat", "3", &url]);
    assert!(out.status.success(), "{}", out.stderr_text());
    assert_eq!(
        out.stderr_text().matches("credential ticket").count(),
        2,
        "{}",
        out.stderr_text()
    );

    // A kept key pair: the second request's key comes from the session
    // cache; the same request again is a cache hit refused as a replay.
    let mount = Mount::new("").unwrap();
    let certs = certs(server.addr, &mount);
    let cert = certs.last().unwrap();
    let secret = KexSecret::generate(&mut OsRng);
    let host = server.addr.to_string();
    let now = httpcrypt::clock::unix_now();
    let first = Sealed::with_credential(cert, ClientCredential::Key(&secret), &mount);
    let first_bytes = first.get(&host, &first.stream("GET", "/a.txt", now, b""));
    let (rsp, _) = exchange(server.addr, &first_bytes);
    assert_eq!(first.open(&rsp).1, b"hello metrics\n");
    let second = Sealed::with_credential(cert, ClientCredential::Key(&secret), &mount);
    let (rsp, _) = exchange(
        server.addr,
        &second.get(&host, &second.stream("GET", "/a.txt", now, b"")),
    );
    assert_eq!(second.open(&rsp).1, b"hello metrics\n");
    let (rsp, _) = exchange(server.addr, &first_bytes);
    assert_eq!(first.open_problem(&rsp).0, 425, "a replay");

    // Refused before any key: not a nonce path.
    let (rsp, _) = exchange(
        server.addr,
        &wire("GET", "/not-a-nonce", &[("Host", &host)], b""),
    );
    assert_eq!(rsp.status, 400);

    let after = eventually(metrics, "every connection closed", |s| {
        s.get("httpcrypt_connections_open", &[]) == 0.0
    });
    let delta =
        |name: &str, labels: &[(&str, &str)]| after.get(name, labels) - before.get(name, labels);
    let requests = |outcome| delta("httpcrypt_requests_total", &[("outcome", outcome)]);
    assert_eq!(requests("fresh_key"), 3.0, "two fetches and the kept key");
    assert_eq!(
        delta("httpcrypt_key_agreements_total", &[("suite", "1")]),
        3.0
    );
    assert_eq!(requests("ticket"), 2.0);
    assert_eq!(
        requests("session_cache"),
        2.0,
        "the second request and the replay"
    );
    assert_eq!(requests("refused"), 1.0);
    assert_eq!(requests("plaintext"), 0.0);
    assert!(
        requests("certificates") >= 3.0,
        "OPTIONS of both fetches and of the test"
    );
    let rejections = |reason| delta("httpcrypt_rejections_total", &[("reason", reason)]);
    assert_eq!(rejections("bad_nonce_path"), 1.0);
    assert_eq!(rejections("replay"), 1.0);
    assert_eq!(rejections("unknown_key"), 0.0);
    // Fresh-key requests are judged by the (idle) defence; cache hits are not.
    assert_eq!(
        delta(
            "httpcrypt_admission_decisions_total",
            &[("decision", "admitted_off")]
        ),
        3.0
    );
    // certs, three sealed exchanges, the refusal, and the fetches' own.
    assert!(delta("httpcrypt_connections_total", &[]) >= 7.0);
    assert!(delta("httpcrypt_request_duration_seconds_count", &[]) >= 8.0);
    assert!(delta("httpcrypt_request_duration_seconds_sum", &[]) > 0.0);
    assert_eq!(
        delta("httpcrypt_key_rotations_total", &[("result", "failed")]),
        0.0
    );

    let (status, _, _) = get(metrics, "/healthz");
    assert_eq!(status, 200);

    // The Grafana dashboard asks only for series the server exports.
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../packaging/grafana-dashboard.json"),
    )
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut asked = 0;
    for panel in doc["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("httpcrypt_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let family = name.strip_suffix("_bucket").unwrap_or(&name);
                assert!(
                    after.types.contains_key(family),
                    "the dashboard asks for {name}"
                );
                asked += 1;
            }
        }
    }
    assert!(asked >= 10, "{asked}");
}

/// `gateway --metrics` serves the same endpoint; a request passed through
/// in plaintext (outside the mount) counts as such.
#[test]
fn gateway_serves_metrics_and_health() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("keys");
    keygen(&keys, false);
    let up = upstream();
    let gw = gateway(
        &keys,
        up.addr,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--mount",
            "/hc",
            "--pass-through",
        ],
    );
    let metrics = metrics_addr(&gw);
    assert_eq!(get(metrics, "/healthz").0, 200);
    let before = scrape(metrics);
    let host = gw.addr.to_string();
    let (rsp, _) = exchange(
        gw.addr,
        &wire(
            "GET",
            "/plain",
            &[("Host", &host), ("Connection", "close")],
            b"",
        ),
    );
    assert!(rsp.status < 500, "{rsp:?}");
    let after = eventually(metrics, "the plaintext request", |s| {
        s.get("httpcrypt_request_duration_seconds_count", &[])
            > before.get("httpcrypt_request_duration_seconds_count", &[])
    });
    let plaintext = |s: &Scrape| s.get("httpcrypt_requests_total", &[("outcome", "plaintext")]);
    assert_eq!(plaintext(&after) - plaintext(&before), 1.0);
}

/// The parser itself refuses what Prometheus would.
#[test]
fn the_parser_refuses_broken_expositions() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n";
    assert!(parse(good).is_ok());
    for bad in [
        "a_total 1\n",                        // no TYPE
        "# TYPE a counter\na{x=\"1} 1\n",     // open quote
        "# TYPE a counter\na{1x=\"1\"} 1\n",  // label name
        "# TYPE a counter\na one\n",          // value
        "# TYPE a counter\na 1\na 2\n",       // repeated series
        "# TYPE a counter\n# TYPE a gauge\n", // repeated TYPE
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0\n",
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}
