//! Sandbox spawn latency: the full path (launcher start, isolation, spawn of
//! `/bin/true`, supervision, report) with and without a network namespace,
//! reported as p50/p99 over repeated runs.
//!
//! Run: `cargo bench -p silas-sandbox --bench spawn` (figures in BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use silas_sandbox::{Launcher, SandboxSpec, SubprocessSandbox};

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sandbox = SubprocessSandbox::new(Launcher::sibling_binary().unwrap());
    let base = tempfile::tempdir().unwrap();
    let runs = 200;
    for network in [true, false] {
        let mut lat: Vec<Duration> = Vec::with_capacity(runs);
        for i in 0..runs {
            let dir: PathBuf = sandbox
                .fresh_work_dir(base.path(), &format!("run-{network}-{i}"))
                .unwrap();
            let mut spec = SandboxSpec::new(vec!["/bin/true".into()], dir);
            spec.network = network;
            let t0 = Instant::now();
            let out = rt.block_on(sandbox.run(&spec)).unwrap();
            lat.push(t0.elapsed());
            assert!(out.success());
        }
        lat.sort();
        let pct = |q: f64| lat[((runs as f64 * q) as usize).min(runs - 1)].as_secs_f64() * 1e3;
        println!(
            "sandbox/spawn_true network_namespace={}: p50 {:.2} ms, p99 {:.2} ms over {runs} runs",
            !network,
            pct(0.50),
            pct(0.99)
        );
    }
}
