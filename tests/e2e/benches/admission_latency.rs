//! What nicpolicy adds to a create, as kube-apiserver and its client see it: VCDMachines (CAPVCD
//! v1.3.2's CRDs, v1beta2, a worker of a cluster with three extra networks) created at a fixed
//! rate, without any webhook registered and then with the shipped webhook configurations calling
//! `nicpolicy serve`, on one control plane. For each rate it prints:
//!
//! - the latency the client sees for each create (p50, p99, max), measured per request;
//! - kube-apiserver's `apiserver_request_duration_seconds` for those creates, and
//!   `apiserver_admission_webhook_admission_duration_seconds` of each nicpolicy webhook (the
//!   buckets holding p50 and p99, over the creates of that rate only: the apiserver's buckets
//!   are 5, 25, 100 ms wide, so the client's per-request figures are the finer ones);
//! - the rate reached and the creates refused.
//!
//! Client, kube-apiserver, etcd and nicpolicy share the machine's cores: the figures are those of
//! one machine, compare them within one run.
//!
//! `cargo bench -p nicpolicy-e2e --features e2e --bench admission_latency [-- --seconds N --rates 50,100,200 --reload-interval 30s --native]`
//! (after `cargo test --workspace --no-run`, which builds the `nicpolicy` binary it runs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{DynamicObject, PostParams};
use nicpolicy_e2e::fixtures::{api, cluster_namespace, worker};
use nicpolicy_e2e::webhook::{edit_config, shipped_config};
use nicpolicy_e2e::{ControlPlane, Crds, Kubectl, Webhook};

/// The machines' namespace (a cluster of the same name).
const NAMESPACE: &str = "latency-eu1";
/// Each create's deadline: past it the request counts as failed.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

struct Args {
    seconds: u64,
    rates: Vec<u32>,
    /// `reload.interval` of the webhook's configuration instead of the shipped one (2s).
    reload_interval: Option<String>,
    /// The webhook decides with the CAPVCD rules compiled in (`--bench-native-capvcd`): what
    /// the creates pay without Wasm.
    native: bool,
}

fn args() -> Args {
    let mut args = Args {
        seconds: 10,
        rates: vec![50, 100, 200],
        reload_interval: None,
        native: false,
    };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "--seconds" => {
                args.seconds = given
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--seconds N");
            }
            "--rates" => {
                args.rates = given
                    .next()
                    .map(|list| {
                        list.split(',')
                            .map(|n| n.parse().expect("--rates N,N,..."))
                            .collect()
                    })
                    .expect("--rates N,N,...");
            }
            "--reload-interval" => args.reload_interval = given.next(),
            "--native" => args.native = true,
            // cargo bench passes --bench.
            _ => {}
        }
    }
    args
}

/// Cumulative histogram buckets (`le` -> count) of one metric's series, summed over the series
/// whose labels contain every `(key, value)` of `want`.
type Buckets = BTreeMap<String, BTreeMap<u64, f64>>;

/// The `_bucket` series of `metric` in a Prometheus text page, by series (its labels without
/// `le`), `le` as bits of the bound so they sort.
fn buckets(page: &str, metric: &str) -> Buckets {
    let prefix = format!("{metric}_bucket{{");
    let mut out: Buckets = BTreeMap::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let mut le = None;
        let mut others = Vec::new();
        for pair in labels.split(",") {
            match pair.split_once('=') {
                Some(("le", bound)) => le = Some(bound.trim_matches('"').to_string()),
                Some(_) => others.push(pair),
                None => {}
            }
        }
        let (Some(le), Ok(value)) = (le, value.trim().parse::<f64>()) else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        out.entry(others.join(","))
            .or_default()
            .insert(bound.to_bits(), value);
    }
    out
}

/// The bucket holding the quantile `q` of the counts `after - before` of the series whose
/// labels contain every one of `want`: its bounds `(lower, upper]` and the number of
/// observations; None without observations. kube-apiserver's buckets are coarse (5 ms, 25 ms,
/// 100 ms, ...), so the bucket is what is known, not a value inside it.
fn quantile(before: &Buckets, after: &Buckets, want: &[&str], q: f64) -> Option<((f64, f64), f64)> {
    let mut counts: BTreeMap<u64, f64> = BTreeMap::new();
    for (series, buckets) in after {
        if !want.iter().all(|w| series.contains(w)) {
            continue;
        }
        for (bound, count) in buckets {
            let earlier = before
                .get(series)
                .and_then(|b| b.get(bound))
                .copied()
                .unwrap_or(0.0);
            *counts.entry(*bound).or_default() += count - earlier;
        }
    }
    // Sorted by bound (positive floats sort as their bits).
    let total = counts.values().copied().fold(0.0, f64::max);
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = 0.0;
    for (bits, count) in &counts {
        let bound = f64::from_bits(*bits);
        if *count >= rank {
            return Some(((lower, bound), total));
        }
        lower = bound;
    }
    None
}

fn metrics(kubectl: &Kubectl) -> String {
    let page = kubectl.run(&["get", "--raw", "/metrics"]);
    assert!(page.success, "kube-apiserver's /metrics: {}", page.stderr);
    page.stdout
}

/// A create slower than this is listed with the time it was sent (its pattern shows a cause).
const SLOW: Duration = Duration::from_millis(10);

/// The client's view of one round.
struct Round {
    latencies: Vec<Duration>,
    /// When each create slower than [`SLOW`] was sent, from the round's start, and its latency.
    slow: Vec<(Duration, Duration)>,
    refused: usize,
    first_refusal: Option<String>,
    elapsed: Duration,
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Creates `rate` machines a second for `seconds`, each request started on its tick whether or
/// not the ones before have returned.
async fn round(client: &kube::Client, label: &str, rate: u32, seconds: u64) -> Round {
    let total = u64::from(rate) * seconds;
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let api = Arc::new(api(client, NAMESPACE, "VCDMachine"));
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for n in 0..total {
        ticks.tick().await;
        let name = format!("{NAMESPACE}-md-0-{label}-{rate}-{n:05}");
        let object = worker(
            NAMESPACE,
            &name,
            Some(NAMESPACE),
            Some(&["storage-net", "workload-net", "backup-net"]),
        );
        let typed: DynamicObject = serde_json::from_value(object).expect("a VCDMachine");
        let api = api.clone();
        tasks.spawn(async move {
            let sent = Instant::now();
            let offset = sent - started;
            let created =
                tokio::time::timeout(CREATE_TIMEOUT, api.create(&PostParams::default(), &typed))
                    .await;
            let result = match created {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!("no answer within {CREATE_TIMEOUT:?}")),
            };
            (offset, sent.elapsed(), result)
        });
    }
    let mut latencies = Vec::with_capacity(total as usize);
    let mut slow = Vec::new();
    let mut refused = 0;
    let mut first_refusal = None;
    while let Some(done) = tasks.join_next().await {
        let (offset, latency, result) = done.expect("create task");
        if latency > SLOW {
            slow.push((offset, latency));
        }
        match result {
            Ok(()) => latencies.push(latency),
            Err(err) => {
                refused += 1;
                first_refusal.get_or_insert(err);
            }
        }
    }
    latencies.sort();
    slow.sort();
    Round {
        latencies,
        slow,
        refused,
        first_refusal,
        elapsed: started.elapsed(),
    }
}

fn ms(seconds: f64) -> String {
    format!("{:.2} ms", seconds * 1e3)
}

/// A bucket as `≤ 5 ms` or `25-100 ms`.
fn bucket((lower, upper): (f64, f64)) -> String {
    match (lower == 0.0, upper.is_infinite()) {
        (true, _) => format!("≤ {:.0} ms", upper * 1e3),
        (_, true) => format!("> {:.0} ms", lower * 1e3),
        _ => format!("{:.0}-{:.0} ms", lower * 1e3, upper * 1e3),
    }
}

async fn measure(
    client: &kube::Client,
    kubectl: &Kubectl,
    label: &str,
    rates: &[u32],
    seconds: u64,
    with: bool,
) {
    // Connections opened and caches filled before anything is counted.
    round(client, &format!("{label}-warm"), 50, 2).await;
    for &rate in rates {
        let before = metrics(kubectl);
        let result = round(client, label, rate, seconds).await;
        let after = metrics(kubectl);
        let done = result.latencies.len();
        let p = |q| percentile(&result.latencies, q).as_secs_f64();
        println!(
            "{label:>8} {rate:>4}/s: {done} created in {:.1} s ({:.0}/s), {} refused{}; client p50 {}, p99 {}, max {}",
            result.elapsed.as_secs_f64(),
            done as f64 / result.elapsed.as_secs_f64(),
            result.refused,
            result
                .first_refusal
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
            ms(p(0.5)),
            ms(p(0.99)),
            ms(result.latencies.last().map_or(0.0, Duration::as_secs_f64)),
        );
        if !result.slow.is_empty() {
            let list: Vec<String> = result
                .slow
                .iter()
                .take(12)
                .map(|(at, took)| format!("{:.2} s: {}", at.as_secs_f64(), ms(took.as_secs_f64())))
                .collect();
            println!(
                "{:>17} {} creates over {}: sent at {}",
                "",
                result.slow.len(),
                ms(SLOW.as_secs_f64()),
                list.join(", ")
            );
        }
        let request = "apiserver_request_duration_seconds";
        let (before_r, after_r) = (buckets(&before, request), buckets(&after, request));
        let create = [
            "resource=\"vcdmachines\"",
            "verb=\"POST\"",
            "group=\"infrastructure.cluster.x-k8s.io\"",
        ];
        if let (Some((p50, n)), Some((p99, _))) = (
            quantile(&before_r, &after_r, &create, 0.5),
            quantile(&before_r, &after_r, &create, 0.99),
        ) {
            println!(
                "{:>17} kube-apiserver request duration ({n:.0} creates): p50 {}, p99 {}",
                "",
                bucket(p50),
                bucket(p99)
            );
        }
        if !with {
            continue;
        }
        let webhook = "apiserver_admission_webhook_admission_duration_seconds";
        let (before_w, after_w) = (buckets(&before, webhook), buckets(&after, webhook));
        for (kind, name) in [
            ("mutating", "mvcdmachine.nicpolicy.io"),
            ("validating", "vvcdmachine.nicpolicy.io"),
        ] {
            let series = [
                format!("name=\"{name}\""),
                "operation=\"CREATE\"".to_string(),
            ];
            let want: Vec<&str> = series.iter().map(String::as_str).collect();
            match (
                quantile(&before_w, &after_w, &want, 0.5),
                quantile(&before_w, &after_w, &want, 0.99),
            ) {
                (Some((p50, n)), Some((p99, _))) => println!(
                    "{:>17} {kind} webhook {name} ({n:.0} calls): p50 {}, p99 {}",
                    "",
                    bucket(p50),
                    bucket(p99)
                ),
                _ => println!("{:>17} {kind} webhook {name}: no calls counted", ""),
            }
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let plane = ControlPlane::start("admission-latency", Crds::Release)
        .expect("a control plane with CAPVCD v1.3.2's CRDs");
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, NAMESPACE);
    let client = plane.client().await;
    println!(
        "VCDMachine creates for {} s at each rate; client, kube-apiserver, etcd and nicpolicy on the same {} cores",
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    measure(
        &client,
        &kubectl,
        "without",
        &args.rates,
        args.seconds,
        false,
    )
    .await;
    let config = shipped_config(&plane, "admission-latency");
    if let Some(interval) = &args.reload_interval {
        edit_config(
            &config,
            "nicpolicy.yaml",
            "reload:\n  interval: 2s",
            &format!("reload:\n  interval: {interval}"),
        );
        println!("the webhook's reload.interval: {interval}");
    }
    let mut extra_args = Vec::new();
    if args.native {
        println!("the webhook decides with the CAPVCD rules compiled in (no Wasm)");
        extra_args.push("--bench-native-capvcd".to_string());
    }
    // At the shipped log level: the suites' debug level writes a line per review.
    let mut webhook = Webhook::start_as(&plane, &config, "info", extra_args).await;
    webhook.register().await;
    measure(&client, &kubectl, "with", &args.rates, args.seconds, true).await;
    drop(webhook);
}
