//! Where the time of a review goes, stage by stage, with the policy in Wasm and with the rules
//! native, in one process: the webhook's review path (`Reviewer::review`, no HTTP or TLS) on the
//! load generator's mix, then single evaluations (`Policy::evaluate`) against the native round
//! trip, on the inputs of the `evaluate` benchmark. The stage clock is `nicpolicy::stages`; the
//! variants run interleaved, round after round, and each stage's median over the rounds is
//! shown, so a slow spell of the machine hits every variant alike.
//!
//! The guest's own stages (decode, rules, encode) need a build of the CAPVCD policy with the
//! plugin's `stage-marks` feature: `tests/benches/review_stages.sh` builds it and passes it as
//! `NICPOLICY_BENCH_STAGE_WASM=FILE`; without it, the guest call is one stage.
//!
//! With `--evict KB`, the review path also runs each reviewer *cold*, interleaved with the warm
//! runs: every cold review starts after reading a buffer of that many kilobytes (outside the
//! timed part), so that it finds the CPU's caches as a review over HTTPS does (TLS, HTTP and the
//! async runtime run between two reviews of a server and take the caches over). A second table
//! shows the cold runs. Without it the loop answers review after review with its code and data
//! warm.
//!
//! `cargo bench -p nicpolicy-tests --bench review_stages [-- --rounds N --batch N --evict KB]`

mod common;

use std::hint::black_box;
use std::sync::Arc;

use common::review::{self, Review};
use nicpolicy::stages::{self, Spent, Stage};
use nicpolicy::webhook::Reviewer;
use nicpolicy::{Host, HostConfig, Policy, PolicyOptions, RequestFormat};
use nicpolicy_plugin::binary;
use nicpolicy_plugin::schema::EvaluateOutput;
use nicpolicy_plugin::{capvcd, Decision, Request};

/// Each stage's median over every recorded review or evaluation (a preempted one moves the
/// median of no stage), then the median time after the last mark and of the total, in
/// nanoseconds.
fn medians(samples: &[Spent]) -> Vec<f64> {
    let column = |time: &dyn Fn(&Spent) -> std::time::Duration| {
        let mut values: Vec<f64> = samples.iter().map(|s| time(s).as_nanos() as f64).collect();
        common::median(&mut values)
    };
    let mut row: Vec<f64> = Stage::ALL
        .iter()
        .map(|stage| column(&|s: &Spent| s.get(*stage)))
        .collect();
    // Time after the last mark (returning the answer) belongs to no stage of its own.
    row.push(column(&|s: &Spent| s.unmarked));
    row.push(column(&|s: &Spent| s.total()));
    row
}

/// Prints one table: a column per variant, a row per stage any variant spent time in, the
/// total, and the difference of the last variant from the first.
fn table(title: &str, labels: &[String], medians: &[Vec<f64>]) {
    println!("\n{title}");
    let header: Vec<&str> = labels.iter().map(String::as_str).collect();
    println!(
        "| stage | {} | {} − {} |",
        header.join(" | "),
        header[header.len() - 1],
        header[0]
    );
    println!("|---|{}---|", "---|".repeat(labels.len()));
    let names: Vec<&str> = Stage::ALL
        .iter()
        .map(|s| s.describe())
        .chain(["(after the last stage)", "**total**"])
        .collect();
    for (row, name) in names.iter().enumerate() {
        let values: Vec<f64> = medians.iter().map(|m| m[row]).collect();
        if values.iter().all(|v| *v < 5.0) {
            continue;
        }
        let cells: Vec<String> = values.iter().map(|v| common::show_ns(*v)).collect();
        let diff = values[values.len() - 1] - values[0];
        let sign = if diff < 0.0 { "−" } else { "+" };
        println!(
            "| {name} | {} | {sign}{} |",
            cells.join(" | "),
            common::show_ns(diff.abs())
        );
    }
    let total = |m: &Vec<f64>| m[m.len() - 1];
    let sum = |m: &Vec<f64>| m[..m.len() - 1].iter().sum::<f64>();
    let sums: Vec<String> = medians.iter().map(|m| common::show_ns(sum(m))).collect();
    println!("| (sum of the stage medians) | {} | |", sums.join(" | "));
    let (first, last) = (total(&medians[0]), total(&medians[medians.len() - 1]));
    println!(
        "\n{} / {}: ×{:.2}; {} adds {} per review, {:.0} % of its total",
        header[header.len() - 1],
        header[0],
        last / first,
        header[header.len() - 1],
        common::show_ns(last - first),
        100.0 * (last - first) / last
    );
}

/// Reads every cache line of a buffer, to push the last review's code and data out of the
/// CPU's caches before the next.
struct Evictor {
    buffer: Vec<u8>,
}

impl Evictor {
    fn new(kilobytes: usize) -> Self {
        Evictor {
            // Written once, so every page is backed and reading it touches memory.
            buffer: vec![1; kilobytes * 1024],
        }
    }

    fn evict(&self) {
        let sum = self
            .buffer
            .iter()
            .step_by(64)
            .fold(0u8, |sum, byte| sum.wrapping_add(*byte));
        black_box(sum);
    }
}

/// The review path: every reviewer answers the mix, `batch` reviews per round.
fn review_path(rounds: usize, batch: usize, evict_kb: usize, marked: Option<&str>) {
    let reviews = review::reviews();
    let mut reviewers: Vec<(String, Arc<Reviewer>)> = vec![
        (
            "rules native".to_string(),
            review::reviewer("native", "{builtin: capvcd}", true),
        ),
        (
            "Wasm".to_string(),
            review::reviewer("wasm", "{builtin: capvcd}", false),
        ),
    ];
    if let Some(file) = marked {
        reviewers.insert(
            1,
            (
                "Wasm, stage-marked build".to_string(),
                review::reviewer("wasm-marked", &format!("{{path: {file}}}"), false),
            ),
        );
    }
    review::same_answers(&reviewers, &reviews);
    let per_round = batch.div_ceil(reviews.len()).max(1);
    let evictor = Evictor::new(evict_kb);
    // Each reviewer warm, then (with --evict) the native and the built-in Wasm one cold.
    let mut runs: Vec<(String, &Reviewer, bool)> = reviewers
        .iter()
        .map(|(label, reviewer)| (label.clone(), reviewer.as_ref(), false))
        .collect();
    if evict_kb > 0 {
        for (label, reviewer) in [&reviewers[0], &reviewers[reviewers.len() - 1]] {
            runs.push((format!("{label}, cold"), reviewer.as_ref(), true));
        }
    }
    // Per run, per review of the mix.
    let mut samples: Vec<Vec<Vec<Spent>>> = vec![vec![Vec::new(); reviews.len()]; runs.len()];
    // The server's decoded-size estimate of each body (before the review, outside Reviewer),
    // timed in the same rounds: per review of the mix, in nanoseconds.
    let mut estimates: Vec<Vec<f64>> = vec![Vec::new(); reviews.len()];
    for _ in 0..rounds {
        for _ in 0..per_round {
            for (review, times) in reviews.iter().zip(estimates.iter_mut()) {
                let started = std::time::Instant::now();
                black_box(nicpolicy::webhook::decoded::estimate(black_box(
                    &review.body,
                )));
                times.push(started.elapsed().as_nanos() as f64);
            }
        }
        for ((_, reviewer, cold), samples) in runs.iter().zip(&mut samples) {
            for _ in 0..per_round {
                for (review, samples) in reviews.iter().zip(samples.iter_mut()) {
                    let Review {
                        endpoint,
                        kind,
                        body,
                        ..
                    } = review;
                    if *cold {
                        evictor.evict();
                    }
                    let (answer, one) =
                        stages::record(|| reviewer.review(*endpoint, *kind, black_box(body)));
                    black_box(answer);
                    samples.push(one);
                }
            }
        }
    }
    // The mix is even: a review of it costs the mean of the four reviews' medians.
    let medians: Vec<Vec<f64>> = samples
        .iter()
        .map(|per_review| {
            let each: Vec<Vec<f64>> = per_review.iter().map(|s| medians(s)).collect();
            (0..each[0].len())
                .map(|c| each.iter().map(|m| m[c]).sum::<f64>() / each.len() as f64)
                .collect()
        })
        .collect();
    let labels: Vec<String> = runs.iter().map(|(l, _, _)| l.clone()).collect();
    let warm = reviewers.len();
    let estimate = estimates
        .iter_mut()
        .map(|times| common::median(times))
        .sum::<f64>()
        / estimates.len() as f64;
    let wasm_total = medians[warm - 1][medians[warm - 1].len() - 1];
    println!(
        "\nthe server's decoded-size estimate (webhook::decoded::estimate, before each review): {} per review of the mix, {:.1} % of the Wasm review path's {}",
        common::show_ns(estimate),
        100.0 * estimate / wasm_total,
        common::show_ns(wasm_total)
    );
    table(
        &format!(
            "review path in process, per review of the load generator's mix: medians over {rounds} \
             interleaved rounds of {} reviews",
            per_round * reviews.len()
        ),
        &labels[..warm],
        &medians[..warm],
    );
    if evict_kb > 0 {
        table(
            &format!(
                "the same run, cold: {evict_kb} KB read before each review (interleaved with the \
                 warm runs above)"
            ),
            &labels[warm..],
            &medians[warm..],
        );
    }
}

/// The native round trip of the `evaluate` benchmark, marked like the Wasm path: the host's
/// encode, the guest's decode, rules and encode, the host's decode and checks.
fn native_round_trip(request: &Request) -> Decision {
    let input = serde_json::to_vec(request).expect("requests encode");
    stages::mark(Stage::RequestEncode);
    let decoded: Request = serde_json::from_slice(&input).expect("requests decode");
    stages::mark(Stage::GuestDecode);
    native_rules_and_back(&decoded)
}

/// [`native_round_trip`] with the request in the binary format (`nicpolicy_plugin::binary`).
fn native_round_trip_binary(request: &Request) -> Decision {
    let mut input = Vec::with_capacity(1024);
    binary::encode(request.with_settings(&request.settings), &mut input).expect("requests encode");
    stages::mark(Stage::RequestEncode);
    let decoded = binary::decode(&input).expect("requests decode");
    stages::mark(Stage::GuestDecode);
    native_rules_and_back(&decoded)
}

fn native_rules_and_back(decoded: &Request) -> Decision {
    let decision = capvcd::evaluate(decoded);
    stages::mark(Stage::Rules);
    let output = serde_json::to_vec(&EvaluateOutput::Decision(decision)).expect("decisions encode");
    stages::mark(Stage::GuestEncode);
    let decision = nicpolicy::policy::decode_decision(&output).expect("decisions decode");
    stages::mark(Stage::OutputDecode);
    decision
}

type Evaluator = Box<dyn Fn(&Request) -> Decision>;

/// Single evaluations on the inputs of the `evaluate` benchmark.
fn evaluations(rounds: usize, batch: usize, marked: Option<&[u8]>) {
    let host = Host::new(HostConfig {
        cache_dir: None,
        max_instances: 8,
        ..HostConfig::default()
    })
    .expect("engine starts");
    let load = |wasm: &[u8]| -> Policy {
        host.load(wasm, PolicyOptions::default())
            .expect("the CAPVCD policy loads")
    };
    let wasm = |policy: Policy| -> Evaluator {
        Box::new(move |request| {
            policy
                .evaluate(request)
                .expect("the CAPVCD policy evaluates")
                .decision
        })
    };
    let builtin = load(nicpolicy::builtin::CAPVCD_WASM);
    let format = |format| {
        builtin
            .with_request_format(format)
            .expect("the SDK's module takes every format")
    };
    let (json, binary1) = (format(RequestFormat::Json), format(RequestFormat::Binary1));
    assert_eq!(builtin.request_format(), RequestFormat::Binary3);
    let mut variants: Vec<(String, Evaluator)> = vec![
        ("native round trip".to_string(), Box::new(native_round_trip)),
        (
            "native round trip, binary request".to_string(),
            Box::new(native_round_trip_binary),
        ),
        ("Wasm, JSON request".to_string(), wasm(json)),
        ("Wasm, binary v1".to_string(), wasm(binary1)),
        ("Wasm".to_string(), wasm(builtin)),
    ];
    if let Some(bytes) = marked {
        variants.insert(
            2,
            ("Wasm, stage-marked build".to_string(), wasm(load(bytes))),
        );
    }
    let cases = common::evaluate_cases();
    let labels: Vec<String> = variants.iter().map(|(l, _)| l.clone()).collect();
    let mut ratios = Vec::new();
    for (name, request) in &cases {
        let decisions: Vec<Decision> = variants.iter().map(|(_, run)| run(request)).collect();
        assert!(
            decisions.iter().all(|d| *d == decisions[0]),
            "{name}: every variant decides alike"
        );
        let mut samples: Vec<Vec<Spent>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for ((_, run), samples) in variants.iter().zip(&mut samples) {
                for _ in 0..batch {
                    let (decision, one) = stages::record(|| run(black_box(request)));
                    black_box(decision);
                    samples.push(one);
                }
            }
        }
        let medians: Vec<Vec<f64>> = samples.iter().map(|s| medians(s)).collect();
        let total = |m: &Vec<f64>| m[m.len() - 1];
        let of = |label: &str| {
            let at = labels.iter().position(|l| l == label).expect("a variant");
            total(&medians[at])
        };
        ratios.push((
            name.clone(),
            of("native round trip"),
            of("Wasm, JSON request"),
            of("Wasm, binary v1"),
            of("Wasm"),
        ));
        table(
            &format!(
                "evaluation of {name}: medians over {rounds} interleaved rounds of {batch} evaluations"
            ),
            &labels,
            &medians,
        );
    }
    println!(
        "\n| machine | native round trip | Wasm, JSON request | Wasm, binary v1 | Wasm (binary v2) | JSON / native round trip | binary v1 / native round trip | Wasm / native round trip |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, native, json, binary1, wasm) in ratios {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            common::show_ns(native),
            common::show_ns(json),
            common::show_ns(binary1),
            common::show_ns(wasm),
            json / native,
            binary1 / native,
            wasm / native
        );
    }
}

fn main() {
    let benching = common::benching();
    let rounds = common::arg("--rounds", if benching { 30 } else { 1 });
    let batch = common::arg("--batch", if benching { 200 } else { 4 });
    let evict_kb = common::arg("--evict", 0);
    // Absolute: the reviewer's configuration file names it from another directory.
    let marked = std::env::var("NICPOLICY_BENCH_STAGE_WASM")
        .ok()
        .map(|file| {
            std::fs::canonicalize(&file)
                .unwrap_or_else(|err| panic!("NICPOLICY_BENCH_STAGE_WASM: {file}: {err}"))
                .display()
                .to_string()
        });
    let marked_bytes = marked.as_ref().map(|file| {
        std::fs::read(file)
            .unwrap_or_else(|err| panic!("NICPOLICY_BENCH_STAGE_WASM: {file}: {err}"))
    });
    review_path(rounds, batch, evict_kb, marked.as_deref());
    evaluations(rounds, batch, marked_bytes.as_deref());
}
