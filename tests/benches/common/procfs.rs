//! What Linux says of a process in /proc: its CPU time and memory. Standard library only, so the
//! controller's scale benchmark (tests/e2e/benches/) reads its child's figures the same way the
//! benchmarks here read their own.

use std::collections::BTreeMap;

/// User + system CPU seconds of process `pid` (`"self"` for this one).
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is field 3; utime and stime
    // are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The fields of /proc/PID/status given in kB (VmHWM, VmRSS, RssAnon, RssFile, ...), in KiB.
pub fn status_kib(pid: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            let kib = value.trim().strip_suffix(" kB")?.trim().parse().ok()?;
            Some((key.to_string(), kib))
        })
        .collect()
}

/// Peak resident memory (VmHWM) of process `pid`, in MiB.
pub fn peak_rss_mib(pid: &str) -> f64 {
    status_kib(pid).get("VmHWM").copied().unwrap_or(0) as f64 / 1024.0
}
