//! Load generator for `nicpolicy serve`: starts the release binary on loopback with a
//! self-signed certificate, then posts the AdmissionReviews kube-apiserver sends (tests/fixtures/
//! admission) over HTTPS keep-alive connections at a fixed concurrency for a fixed time.
//!
//! Three servers, started together and loaded in turn: the run is split into rounds (`--rounds`,
//! default 5) that load each server for `seconds / rounds`, so a slow spell of a noisy machine
//! hits all three alike; each server's figures are over all its rounds.
//! - `wasm`: the built-in CAPVCD policy for both kinds, evaluated in Wasm (fresh instance each);
//! - `native`: the same server deciding with the CAPVCD rules compiled into the binary
//!   (`--bench-native-capvcd`), so the difference is what Wasm costs;
//! - `wasm-3-policies`: role-based + static-ip for machines, zone-aware for templates, with the
//!   shipped site settings: resident memory with three policies loaded.
//!
//! - with `--baseline FILE` (another build of `nicpolicy`, such as main's before a change), a
//!   `wasm` and a `native` server of that build too, loaded in the same rounds, so a change is
//!   measured against its baseline in one run.
//!
//! ```console
//! cargo bench -p nicpolicy --bench webhook_load
//! cargo bench -p nicpolicy --bench webhook_load -- --seconds 20 --rounds 10 --concurrency 64
//! cargo bench -p nicpolicy --bench webhook_load -- --baseline /tmp/nicpolicy-main
//! cargo bench -p nicpolicy --bench webhook_load -- --rate 4000
//! ```
//!
//! By default every connection posts its next review as soon as the last is answered (a closed
//! loop): each server runs as fast as it can, so a slower server also batches less per wake-up
//! and shares the cores with a load generator that waits on it. With `--rate N` the reviews are
//! offered on a fixed schedule of N per second to every server alike (an open loop; latency
//! counts from the scheduled time, so a server that falls behind shows it), which compares CPU
//! per review at the same load. A server that cannot keep up is reported.
//!
//! With `--stages`, the `wasm` and `native` servers of this build also time the stages of
//! every review (`nicpolicy serve --bench-stages`), and a table holds each stage's mean against
//! the CPU the whole server spends per review: what the review path does not account for is
//! HTTP, TLS, the async runtime and the kernel.
//!
//! Prints requests/s, latency percentiles, errors and resident memory (idle, and the peak under
//! load) per server, then the Wasm / native ratios.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

/// The reviews posted, in turn: `(endpoint path, fixture)`.
const MIX: [(&str, &str); 4] = [
    (
        "/mutate-infrastructure-cluster-x-k8s-io-v1beta3-vcdmachine",
        "vcdmachine-create-worker",
    ),
    (
        "/validate-infrastructure-cluster-x-k8s-io-v1beta3-vcdmachine",
        "vcdmachine-create-worker",
    ),
    (
        "/validate-infrastructure-cluster-x-k8s-io-v1beta3-vcdmachine",
        "vcdmachine-create-invalid",
    ),
    (
        "/validate-infrastructure-cluster-x-k8s-io-v1beta3-vcdmachinetemplate",
        "vcdmachinetemplate-create-worker",
    ),
];

struct Options {
    seconds: u64,
    rounds: u64,
    concurrency: usize,
    workers: usize,
    baseline: Option<PathBuf>,
    /// Reviews per second offered to each server; `None` for the closed loop.
    rate: Option<u64>,
    /// Whether this build's `wasm` and `native` servers time their review stages.
    stages: bool,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut options = Options {
            seconds: 10,
            rounds: 5,
            concurrency: 32,
            workers: 2,
            baseline: None,
            rate: None,
            stages: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| -> Result<u64> {
                let text = args
                    .next()
                    .with_context(|| format!("{name} needs a value"))?;
                text.parse()
                    .with_context(|| format!("{name} {text:?}: not a whole number"))
            };
            match arg.as_str() {
                "--seconds" => options.seconds = value("--seconds")?,
                "--rounds" => options.rounds = value("--rounds")?,
                "--concurrency" => options.concurrency = value("--concurrency")? as usize,
                "--workers" => options.workers = value("--workers")? as usize,
                "--rate" => options.rate = Some(value("--rate")?),
                "--stages" => options.stages = true,
                "--baseline" => {
                    let file = args.next().context("--baseline needs a nicpolicy binary")?;
                    options.baseline = Some(PathBuf::from(file));
                }
                // cargo bench passes --bench; criterion-style filters are not used here.
                "--bench" => {}
                other => {
                    bail!("unknown argument {other:?} (--seconds N, --rounds N, --concurrency N, --workers N, --rate N, --stages, --baseline FILE)")
                }
            }
        }
        ensure!(options.seconds > 0, "--seconds must be at least 1");
        ensure!(options.rounds > 0, "--rounds must be at least 1");
        ensure!(options.concurrency > 0, "--concurrency must be at least 1");
        ensure!(options.workers > 0, "--workers must be at least 1");
        ensure!(options.rate != Some(0), "--rate must be at least 1");
        Ok(options)
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A served configuration: the example cluster and inventory, `workers` evaluation slots, and
/// every connection of the cap open to the load generator (one client address).
fn write_config(dir: &Path, name: &str, policies: &str, workers: usize) -> Result<PathBuf> {
    let examples = workspace().join("examples").canonicalize()?;
    let text = format!(
        "apiVersion: nicpolicy.io/v1alpha1\n\
         kind: ServeConfig\n\
         inventory: {inventory}\n\
         onPolicyFailure: Deny\n\
         onUnknownCluster: Deny\n\
         clusters: {{source: Static, files: [{cluster}]}}\n\
         evaluation: {{workers: {workers}, queueTimeout: 2s}}\n\
         connections: {{maxPerClient: 128}}\n\
         reload: {{enabled: false}}\n\
         policies:\n{policies}",
        inventory = examples.join("inventory.yaml").display(),
        cluster = examples.join("cluster.yaml").display(),
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
    Ok(path)
}

const CAPVCD: &str = "  VCDMachine: [{builtin: capvcd, timeout: 250ms}]\n  \
                      VCDMachineTemplate: [{builtin: capvcd, timeout: 250ms}]\n";

/// Role-based with the site settings of the shipped configuration (config/nicpolicy/
/// nicpolicy.yaml, read from there so the bench follows it), static-ip after it, zone-aware for
/// templates.
fn three_policies() -> Result<String> {
    let file = workspace().join("config/nicpolicy/nicpolicy.yaml");
    let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
    let shipped: Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{}: not YAML", file.display()))?;
    let site = shipped
        .pointer("/policies/VCDMachine/0/settings")
        .filter(|settings| settings.is_object())
        .with_context(|| {
            format!(
                "{}: policies.VCDMachine[0].settings is not set",
                file.display()
            )
        })?;
    // JSON is YAML's flow syntax: the settings go in as one line.
    Ok(format!(
        "  VCDMachine:
    - {{builtin: role-based, timeout: 250ms, settings: {site}}}
    - {{builtin: static-ip, timeout: 250ms, settings: {{manualNetworks: [storage-net]}}}}
  VCDMachineTemplate:
    - builtin: zone-aware
      timeout: 250ms
      settings:
        default: {{storage: storage-net, workload: workload-net, backup: backup-net}}
"
    ))
}

/// A running `nicpolicy serve`; killed when dropped.
struct Served {
    child: Child,
    address: SocketAddr,
    ca_pem: String,
    /// Started with `--bench-stages`.
    timed: bool,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(
        binary: &Path,
        dir: &Path,
        config: &Path,
        native: bool,
        stages: bool,
    ) -> Result<Served> {
        // A free port: bound, read, released; the server binds it a moment later.
        let address = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let ca = dir.join(format!("ca-{}.crt", address.port()));
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg("--config")
            .arg(config)
            .arg("--listen")
            .arg(address.to_string())
            .arg("--tls-self-signed")
            .arg("--ca-bundle")
            .arg(&ca)
            .args(["--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if native {
            command.arg("--bench-native-capvcd");
        }
        if stages {
            command.arg("--bench-stages");
        }
        let mut child = command.spawn().context("cannot start nicpolicy serve")?;
        // Forward the server's log lines, so a failure to start says why.
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if !line.contains("benchmark mode") {
                        eprintln!("  server: {line}");
                    }
                }
            });
        }
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("nicpolicy serve exited at start ({status})");
            }
            if std::net::TcpStream::connect(address).is_ok() && ca.exists() {
                break;
            }
            ensure!(
                started.elapsed() < Duration::from_secs(30),
                "nicpolicy serve did not listen on {address} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let ca_pem = std::fs::read_to_string(&ca)?;
        Ok(Served {
            child,
            address,
            ca_pem,
            timed: stages,
        })
    }

    fn rss_bytes(&self) -> Option<u64> {
        rss_bytes(self.child.id())
    }
}

/// VmRSS of a process, from /proc (Linux).
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU time a process has used, `(user, system)`, from /proc (Linux).
fn cpu_time(pid: u32) -> Option<(Duration, Duration)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    // The kernel reports in clock ticks: USER_HZ, 100 on Linux.
    Some((
        Duration::from_millis(user * 10),
        Duration::from_millis(system * 10),
    ))
}

/// One review to post: the endpoint URL, the body, and what the answer must be.
struct Review {
    url: String,
    body: Vec<u8>,
    uid: String,
}

/// What a server answered for each review of the mix, to compare servers by.
fn outcome(response: &Value) -> (bool, bool, usize) {
    let r = &response["response"];
    (
        r["allowed"].as_bool().unwrap_or(false),
        r["patch"].is_string(),
        r["status"]["details"]["causes"]
            .as_array()
            .map_or(0, Vec::len),
    )
}

#[derive(Default)]
struct Run {
    latencies: Vec<Duration>,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
}

impl Run {
    fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
        self.latencies[rank.min(self.latencies.len() - 1)]
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
}

fn client(served: &Served, concurrency: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(served.ca_pem.as_bytes())?)
        .http1_only()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_secs(10))
        .build()?)
}

fn reviews(served: &Served) -> Result<Vec<Review>> {
    MIX.iter()
        .map(|(path, fixture)| {
            let file = workspace().join(format!("tests/fixtures/admission/{fixture}.json"));
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
            let value: Value = serde_json::from_str(&text)?;
            let uid = value["request"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            Ok(Review {
                url: format!("https://localhost:{}{path}", served.address.port()),
                body: serde_json::to_vec(&value)?,
                uid,
            })
        })
        .collect()
}

async fn post(client: &reqwest::Client, review: &Review) -> Result<Value> {
    let response = client
        .post(&review.url)
        .header("content-type", "application/json")
        .body(review.body.clone())
        .send()
        .await?;
    let status = response.status();
    let bytes = response.bytes().await?;
    ensure!(
        status.is_success(),
        "HTTP {status}: {}",
        String::from_utf8_lossy(&bytes)
    );
    let value: Value = serde_json::from_slice(&bytes)?;
    ensure!(
        value["response"]["uid"] == review.uid.as_str(),
        "answer for another uid: {}",
        value["response"]["uid"]
    );
    Ok(value)
}

/// How many evaluations the server cut at `evaluation.inlineBudget` and ran again on a
/// blocking thread (`None` for a build without the counter, such as an older baseline).
async fn inline_overruns(client: &reqwest::Client, served: &Served) -> Result<Option<u64>> {
    let url = format!("https://localhost:{}/metrics", served.address.port());
    let text = client.get(url).send().await?.text().await?;
    Ok(text.lines().find_map(|line| {
        line.strip_prefix("nicpolicy_inline_budget_overruns_total ")?
            .trim()
            .parse()
            .ok()
    }))
}

/// The stage times the server kept since the last call (`--bench-stages`), and forgets them.
async fn stage_summary(client: &reqwest::Client, served: &Served) -> Result<Value> {
    let url = format!("https://localhost:{}/bench/stages", served.address.port());
    let response = client.get(url).send().await?;
    ensure!(
        response.status().is_success(),
        "GET /bench/stages: HTTP {}",
        response.status()
    );
    Ok(serde_json::from_slice(&response.bytes().await?)?)
}

/// One answer per review of the mix, checked before any load.
async fn warm_up(client: &reqwest::Client, reviews: &[Review]) -> Result<Vec<(bool, bool, usize)>> {
    let mut outcomes = Vec::new();
    for review in reviews {
        outcomes.push(outcome(&post(client, review).await?));
    }
    // Open every keep-alive connection before the clock starts.
    for _ in 0..50 {
        post(client, &reviews[0]).await?;
    }
    Ok(outcomes)
}

/// Posts the mix for `duration` over `concurrency` connections: each posts its next review as
/// soon as the last is answered, or, with a `rate`, when the fixed schedule says so.
async fn load(
    client: reqwest::Client,
    reviews: Arc<Vec<Review>>,
    concurrency: usize,
    duration: Duration,
    rate: Option<u64>,
) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let ticket = Arc::new(AtomicU64::new(0));
    let started = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let client = client.clone();
            let reviews = reviews.clone();
            let stop = stop.clone();
            let ticket = ticket.clone();
            tokio::spawn(async move {
                let mut run = Run::default();
                let mut next = task;
                loop {
                    let sent = match rate {
                        None if stop.load(Ordering::Relaxed) => break,
                        None => tokio::time::Instant::now(),
                        Some(rate) => {
                            // The next free slot of the schedule, whichever connection is free.
                            let k = ticket.fetch_add(1, Ordering::Relaxed);
                            next = k as usize;
                            let at = started + Duration::from_secs_f64(k as f64 / rate as f64);
                            if at >= started + duration {
                                break;
                            }
                            tokio::time::sleep_until(at).await;
                            at
                        }
                    };
                    let review = &reviews[next % reviews.len()];
                    next += 1;
                    match post(&client, review).await {
                        // From the scheduled time with a rate: waiting for a free connection
                        // is part of the latency a slow server causes.
                        Ok(_) => run.latencies.push(sent.elapsed()),
                        Err(err) => {
                            run.errors += 1;
                            run.first_error.get_or_insert_with(|| format!("{err:#}"));
                        }
                    }
                }
                run
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Run::default();
    for task in tasks {
        if let Ok(run) = task.await {
            total.latencies.extend(run.latencies);
            total.errors += run.errors;
            if total.first_error.is_none() {
                total.first_error = run.first_error;
            }
        }
    }
    total.elapsed = started.elapsed();
    total
}

/// A server under test: its client, its reviews, what it answered at warm-up, and its figures
/// so far.
struct Measured {
    name: &'static str,
    served: Served,
    client: reqwest::Client,
    reviews: Arc<Vec<Review>>,
    run: Run,
    rss_idle: u64,
    rss_peak: u64,
    /// The server's CPU time over all rounds: user, system.
    cpu: (Duration, Duration),
    outcomes: Vec<(bool, bool, usize)>,
    /// Whether the server times its stages (`--bench-stages`), and what it timed.
    timed: bool,
    stages: Option<Value>,
}

impl Measured {
    /// Checks every review of the mix once, opens the connections, reads idle memory.
    fn warm_up(
        runtime: &tokio::runtime::Runtime,
        name: &'static str,
        served: Served,
        options: &Options,
    ) -> Result<Measured> {
        let reviews = Arc::new(reviews(&served)?);
        let client = client(&served, options.concurrency)?;
        let outcomes = runtime.block_on(warm_up(&client, &reviews))?;
        let timed = served.timed;
        if timed {
            // The warm-up's reviews are not part of the load.
            runtime.block_on(stage_summary(&client, &served))?;
        }
        std::thread::sleep(Duration::from_millis(500));
        let rss_idle = served.rss_bytes().unwrap_or(0);
        Ok(Measured {
            name,
            served,
            client,
            reviews,
            run: Run::default(),
            rss_idle,
            rss_peak: 0,
            cpu: (Duration::ZERO, Duration::ZERO),
            outcomes,
            timed,
            stages: None,
        })
    }

    /// The server's CPU time per answered review, in microseconds.
    fn cpu_per_review_us(&self) -> f64 {
        self.per_review_us(self.cpu.0 + self.cpu.1)
    }

    /// The server's system (kernel) CPU time per answered review, in microseconds.
    fn system_per_review_us(&self) -> f64 {
        self.per_review_us(self.cpu.1)
    }

    fn per_review_us(&self, time: Duration) -> f64 {
        time.as_secs_f64() * 1e6 / self.run.latencies.len().max(1) as f64
    }

    /// One round of load; latencies and time add up over rounds, the memory peak is kept.
    fn round(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        concurrency: usize,
        duration: Duration,
        rate: Option<u64>,
    ) {
        // Resident memory sampled through the round.
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = {
            let sampling = sampling.clone();
            let pid = self.served.child.id();
            std::thread::spawn(move || {
                let mut peak = 0;
                while sampling.load(Ordering::Relaxed) {
                    peak = peak.max(rss_bytes(pid).unwrap_or(0));
                    std::thread::sleep(Duration::from_millis(50));
                }
                peak
            })
        };
        let pid = self.served.child.id();
        let cpu_before = cpu_time(pid);
        let run = runtime.block_on(load(
            self.client.clone(),
            self.reviews.clone(),
            concurrency,
            duration,
            rate,
        ));
        if let (Some(before), Some(after)) = (cpu_before, cpu_time(pid)) {
            self.cpu.0 += after.0.saturating_sub(before.0);
            self.cpu.1 += after.1.saturating_sub(before.1);
        }
        sampling.store(false, Ordering::Relaxed);
        self.rss_peak = self.rss_peak.max(sampler.join().unwrap_or(0));
        self.run.latencies.extend(run.latencies);
        self.run.errors += run.errors;
        self.run.elapsed += run.elapsed;
        if self.run.first_error.is_none() {
            self.run.first_error = run.first_error;
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// The Wasm / native ratios of a pair of servers of one build.
fn compare(label: &str, wasm: &Measured, native: &Measured) {
    let (run, native_run) = (&wasm.run, &native.run);
    println!(
        "{label}Wasm / native: throughput {:.2} (Wasm overhead {:.1}% of throughput), p50 {:.2}x, p99 {:.2}x",
        run.per_second() / native_run.per_second(),
        (1.0 - run.per_second() / native_run.per_second()) * 100.0,
        run.percentile(50.0).as_secs_f64() / native_run.percentile(50.0).as_secs_f64(),
        run.percentile(99.0).as_secs_f64() / native_run.percentile(99.0).as_secs_f64(),
    );
    let (w, n) = (wasm.cpu_per_review_us(), native.cpu_per_review_us());
    println!(
        "{label}server CPU per review: Wasm {w:.0} us, native {n:.0} us: Wasm adds {:.0} us \
         (system {:+.0} us), {:.1}% of the Wasm server's CPU per review",
        w - n,
        wasm.system_per_review_us() - native.system_per_review_us(),
        (w - n) / w * 100.0
    );
}

/// Each stage's mean per review in the `wasm` and `native` servers (wall time on the worker,
/// the slowest 5 % of reviews left out), then the review path against the server's CPU per
/// review: the rest is HTTP, TLS, the async runtime and the kernel.
fn stage_table(wasm: &Measured, wasm_stages: &Value, native: &Measured, native_stages: &Value) {
    let us =
        |summary: &Value, at: usize| summary["stages"][at]["meanNs"].as_f64().unwrap_or(0.0) / 1e3;
    let total = |summary: &Value| summary["totalMeanNs"].as_f64().unwrap_or(0.0) / 1e3;
    println!(
        "\nstages of the reviews answered on a worker, mean per review ({} and {} reviews timed):\n",
        wasm_stages["kept"], native_stages["kept"]
    );
    println!("| stage | wasm | native | wasm − native |");
    println!("|---|---|---|---|");
    let count = wasm_stages["stages"].as_array().map_or(0, Vec::len);
    for at in 0..count {
        let (w, n) = (us(wasm_stages, at), us(native_stages, at));
        if w < 0.005 && n < 0.005 {
            continue;
        }
        let name = wasm_stages["stages"][at]["stage"].as_str().unwrap_or("?");
        println!("| {name} | {w:.2} us | {n:.2} us | {:+.2} us |", w - n);
    }
    let (w, n) = (total(wasm_stages), total(native_stages));
    println!(
        "| **review path** | {w:.2} us | {n:.2} us | {:+.2} us |",
        w - n
    );
    let (cw, cn) = (wasm.cpu_per_review_us(), native.cpu_per_review_us());
    println!(
        "| server CPU per review | {cw:.0} us | {cn:.0} us | {:+.0} us |",
        cw - cn
    );
    println!(
        "| rest: HTTP, TLS, async runtime, kernel | {:.0} us | {:.0} us | {:+.0} us |",
        cw - w,
        cn - n,
        (cw - w) - (cn - n)
    );
}

fn main() -> Result<()> {
    let options = Options::parse()?;
    let dir = workspace().join("target/bench-webhook");
    std::fs::create_dir_all(&dir)?;
    let capvcd = write_config(&dir, "capvcd", CAPVCD, options.workers)?;
    let three = write_config(&dir, "three-policies", &three_policies()?, options.workers)?;
    // The client's own threads: two, like the server's cores; both share this machine.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let built = Path::new(env!("CARGO_BIN_EXE_nicpolicy"));
    let timed = options.stages;
    let mut servers = vec![
        ("wasm", built, &capvcd, false, timed),
        ("native", built, &capvcd, true, timed),
        ("wasm-3-policies", built, &three, false, false),
    ];
    if let Some(baseline) = &options.baseline {
        ensure!(
            baseline.is_file(),
            "--baseline {}: no such file",
            baseline.display()
        );
        servers.push(("wasm (baseline)", baseline, &capvcd, false, false));
        servers.push(("native (baseline)", baseline, &capvcd, true, false));
    }
    let mut results = Vec::new();
    for (name, binary, config, native, timed) in servers {
        let served = Served::start(binary, &dir, config, native, timed)?;
        results.push(Measured::warm_up(&runtime, name, served, &options)?);
    }
    let round = Duration::from_secs_f64(options.seconds as f64 / options.rounds as f64);
    for number in 1..=options.rounds {
        let offered = options
            .rate
            .map_or_else(String::new, |rate| format!(", {rate} reviews/s offered"));
        eprintln!(
            "round {number}/{}: {} connections{offered}, {:.1} s per server ...",
            options.rounds,
            options.concurrency,
            round.as_secs_f64()
        );
        for measured in &mut results {
            measured.round(&runtime, options.concurrency, round, options.rate);
        }
    }
    for measured in &mut results {
        measured.run.latencies.sort_unstable();
        if measured.timed {
            let summary = runtime.block_on(stage_summary(&measured.client, &measured.served));
            measured.stages = Some(summary.with_context(|| format!("{}: stages", measured.name))?);
        }
    }

    // The Wasm and native servers (of both builds) must decide alike, or the comparison
    // means nothing.
    for other in results.iter().filter(|m| !m.name.starts_with("wasm-3")) {
        ensure!(
            results[0].outcomes == other.outcomes,
            "wasm and {} answered differently: {:?} vs {:?}",
            other.name,
            results[0].outcomes,
            other.outcomes
        );
    }

    let load = options.rate.map_or_else(
        || "as fast as each server answers".to_string(),
        |rate| format!("{rate} reviews/s offered"),
    );
    println!(
        "\n{} connections, {load}, {} s per server in {} interleaved rounds, {} evaluation slots, \
         mix of {} reviews (mutate + validate worker CREATE, invalid CREATE, template CREATE)\n",
        options.concurrency,
        options.seconds,
        options.rounds,
        options.workers,
        MIX.len()
    );
    println!("| server | reviews/s | p50 ms | p90 ms | p99 ms | max ms | errors | server CPU per review | of which system | RSS idle MB | RSS peak MB | evaluations cut on the worker |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for m in &results {
        let cut = runtime
            .block_on(inline_overruns(&m.client, &m.served))
            .ok()
            .flatten()
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {:.0} us | {:.0} us | {} | {} | {cut} |",
            m.name,
            m.run.per_second(),
            ms(m.run.percentile(50.0)),
            ms(m.run.percentile(90.0)),
            ms(m.run.percentile(99.0)),
            ms(m.run.percentile(100.0)),
            m.run.errors,
            m.cpu_per_review_us(),
            m.system_per_review_us(),
            mb(m.rss_idle),
            mb(m.rss_peak),
        );
    }
    println!();
    if let Some(rate) = options.rate {
        // Below the offered rate, the figures are those of a saturated server, not of the load.
        for m in results
            .iter()
            .filter(|m| m.run.per_second() < 0.97 * rate as f64)
        {
            println!(
                "{} did not keep up: {:.0} reviews/s answered of {rate} offered",
                m.name,
                m.run.per_second()
            );
        }
    }
    compare("", &results[0], &results[1]);
    if let (Some(wasm), Some(native)) = (&results[0].stages, &results[1].stages) {
        stage_table(&results[0], wasm, &results[1], native);
    }
    if results.len() == 5 {
        compare("baseline ", &results[3], &results[4]);
    }
    for m in &results {
        if let Some(err) = &m.run.first_error {
            eprintln!("{}: first error: {err}", m.name);
        }
    }
    ensure!(
        results.iter().all(|m| m.run.errors == 0),
        "some reviews failed (see above)"
    );
    Ok(())
}
