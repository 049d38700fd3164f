//! `lab`: measures the in-process protocols and prints JSON.
//!
//! ```text
//! lab measure [--iters N] [--sizes 0,100,...]   every protocol: flights, bytes, round trips, CPU per step
//! lab once PROTO VARIANT [--repeat K]              one warm-up, then K measured exchanges (callgrind, constrained profile)
//! lab list                                         the protocols and variants
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use httpcrypt_lab::meter::{Dir, Payload, Phase, Run, Side};
use httpcrypt_lab::{catalogue, hc, Lab};
use serde_json::{json, Value};

fn median(v: &mut [Duration]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn measure(proto: &str, variant: &str, iters: usize, sizes: &[usize]) -> Result<Value> {
    let p = Payload {
        req_body: 100,
        rsp_body: 100,
    };
    let mut lab = Lab::new(proto, variant).with_context(|| format!("{proto}/{variant}: set-up"))?;
    // Warm-up (one-time initialisation in the libraries), then the runs.
    lab.exchange(&p, &mut Run::unmarked())
        .with_context(|| format!("{proto}/{variant}: warm-up"))?;
    let mut runs = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        let mut run = Run::new();
        lab.exchange(&p, &mut run)
            .with_context(|| format!("{proto}/{variant}: exchange"))?;
        runs.push(run);
    }
    let first = &runs[0];
    let flights: Vec<Value> = first
        .flights
        .iter()
        .map(|f| json!({"dir": if f.dir == Dir::C2s {"c2s"} else {"s2c"}, "bytes": f.bytes, "app": f.app, "label": f.label}))
        .collect();
    let mut steps = Vec::new();
    for (i, s) in first.steps.iter().enumerate() {
        let mut t: Vec<Duration> = runs
            .iter()
            .filter_map(|r| r.steps.get(i))
            .map(|x| x.cpu)
            .collect();
        steps.push(json!({
            "side": if s.side == Side::Client {"client"} else {"server"},
            "phase": s.phase.name(), "label": s.label, "cpu_us": median(&mut t)
        }));
    }
    let side_phase = |side: Side, phase: Phase| {
        let mut t: Vec<Duration> = runs.iter().map(|r| r.cpu_phase(side, phase)).collect();
        median(&mut t)
    };
    let mut phases = BTreeMap::new();
    for (sname, side) in [("client", Side::Client), ("server", Side::Server)] {
        let mut m = BTreeMap::new();
        for ph in [
            Phase::KeyAgreement,
            Phase::Auth,
            Phase::Protect,
            Phase::Handshake,
        ] {
            m.insert(ph.name(), side_phase(side, ph));
        }
        let mut t: Vec<Duration> = runs.iter().map(|r| r.cpu(side)).collect();
        m.insert("total", median(&mut t));
        phases.insert(sname, m);
    }
    let mut overhead = Vec::new();
    for &n in sizes {
        let (c2s, s2c) = lab
            .message_overhead(n)
            .with_context(|| format!("{proto}/{variant}: {n} B message"))?;
        overhead.push(json!({"size": n, "c2s": c2s, "s2c": s2c}));
    }
    let rtts = first
        .rtts_first_byte()
        .with_context(|| format!("{proto}/{variant}: no response"))?;
    let mut extra = json!({});
    match &lab {
        Lab::Hc(l, _) => {
            extra = json!({"discovery_bytes": l.cert_len(), "discovery": "certificate, text form (DNS TXT / OPTIONS line)"})
        }
        Lab::HcPq(l, v) => {
            let (cert, kem_text) = l.discovery_parts();
            extra = json!({
                "discovery_bytes": l.discovery_len(),
                "discovery": "suite-2 certificate and ML-KEM-768 key, text form (OPTIONS {mount}/pq answer)",
                "discovery_cert_bytes": cert, "discovery_kem_text_chars": kem_text,
                "note": httpcrypt_lab::hc_pq::note(v),
            })
        }
        Lab::Ohttp(l) => {
            extra = json!({"discovery_bytes": l.config_len(), "discovery": "key configuration (binary)"})
        }
        Lab::Tls(l) => extra = json!({"leaf_cert_bytes": l.leaf_len}),
        Lab::Noise(_) => {}
    }
    Ok(json!({
        "protocol": proto, "variant": variant, "implementation": "in-process",
        "plain_request_bytes": p.request().len(), "plain_response_bytes": p.response().len(),
        "bytes_c2s": first.bytes(Dir::C2s), "bytes_s2c": first.bytes(Dir::S2c),
        "bytes_fresh_100b": first.bytes(Dir::C2s) + first.bytes(Dir::S2c),
        "rtts_first_byte": rtts, "flights": flights, "steps": steps, "cpu_us": phases,
        "iterations": runs.len(), "message_overhead": overhead, "extra": extra,
    }))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for (p, v) in catalogue() {
                println!("{p} {v}");
            }
        }
        Some("once") => {
            let (Some(proto), Some(variant)) = (args.get(1), args.get(2)) else {
                bail!("usage: lab once PROTO VARIANT [--repeat K]");
            };
            let repeat: u32 = match args.get(3).map(String::as_str) {
                Some("--repeat") => args.get(4).context("--repeat K")?.parse()?,
                _ => 1,
            };
            let p = Payload {
                req_body: 100,
                rsp_body: 100,
            };
            let mut lab = Lab::new(proto, variant)?;
            lab.exchange(&p, &mut Run::unmarked())?;
            let t0 = std::time::Instant::now();
            let mut bytes = 0;
            for _ in 0..repeat.clamp(1, 100_000) {
                let mut run = Run::new();
                lab.exchange(&p, &mut run)?;
                bytes = run.bytes(Dir::C2s) + run.bytes(Dir::S2c);
            }
            let wall = t0.elapsed().as_secs_f64() * 1e6 / f64::from(repeat.max(1));
            println!(
                "{}",
                json!({"protocol": proto, "variant": variant, "bytes_fresh_100b": bytes, "wall_us_per_exchange": wall})
            );
        }
        Some("measure") => {
            let mut iters = 200;
            let mut sizes = vec![0, 100, 1024, 16 * 1024, 1024 * 1024];
            let mut only: Option<String> = None;
            let mut i = 1;
            while i < args.len() {
                match args[i].as_str() {
                    "--iters" => iters = args.get(i + 1).context("--iters N")?.parse()?,
                    "--sizes" => {
                        sizes = args
                            .get(i + 1)
                            .context("--sizes LIST")?
                            .split(',')
                            .map(str::parse)
                            .collect::<Result<_, _>>()?
                    }
                    "--only" => only = args.get(i + 1).cloned(),
                    other => bail!("unknown option {other}"),
                }
                i += 2;
            }
            let mut out = Vec::new();
            let mut failed = Vec::new();
            for (proto, variant) in catalogue() {
                if only.as_deref().is_some_and(|o| o != proto) {
                    continue;
                }
                match measure(proto, variant, iters, &sizes) {
                    Ok(v) => out.push(v),
                    Err(e) => {
                        eprintln!("lab: {proto}/{variant} failed: {e:#}");
                        failed.push(format!("{proto}/{variant}: {e:#}"));
                    }
                }
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs();
            let fields: Vec<Value> = hc::post_field_sizes(
                &Payload {
                    req_body: 100,
                    rsp_body: 100,
                },
                now,
            )
            .into_iter()
            .map(|(k, v)| json!({"field": k, "bytes": v}))
            .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"results": out, "failed": failed, "httpcrypt_request_fields": fields})
                )?
            );
            if !failed.is_empty() {
                std::process::exit(1);
            }
        }
        _ => bail!("usage: lab measure|once|list (see the module header)"),
    }
    Ok(())
}
