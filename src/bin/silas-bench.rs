//! `silas-bench`: the load tool (issue #19). Glue only; the logic is in
//! `silas-loadtool` (`loadtool/`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use silas_loadtool::Mode;

/// Starts the real `silas` daemon with a zero-latency fake model on
/// loopback and drives WebSocket clients against it.
#[derive(Parser)]
#[command(name = "silas-bench")]
struct Cli {
    /// The `silas` binary (default: the one next to this program).
    #[arg(long, global = true)]
    silas: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, global = true, default_value_t = 600)]
    max_seconds: u64,
    /// Print the report as JSON.
    #[arg(long, global = true)]
    json: bool,
    /// Also write every reply's latency (microseconds, one per line, in the
    /// order the replies came; with one client, the turn order) to this
    /// file: which turns make the tail.
    #[arg(long, global = true)]
    latencies: Option<PathBuf>,
    #[command(subcommand)]
    mode: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Chatbot customers, one scope each, all at once.
    ManyScopes {
        #[arg(long, default_value_t = 100)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        turns: usize,
    },
    /// The owner pipelining into one scope (backpressure).
    HotScope {
        #[arg(long, default_value_t = 500)]
        turns: usize,
        #[arg(long, default_value_t = 50)]
        in_flight: usize,
    },
    /// Idle owner-authenticated connections: memory per connection.
    Idle {
        #[arg(long, default_value_t = 1000)]
        connections: usize,
    },
    /// Rounds of fresh visitors; RSS after each round.
    Churn {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 400)]
        visitors: usize,
        #[arg(long, default_value_t = 1)]
        turns: usize,
        /// One more reading this long after the last round, with no
        /// visitor (0: none). Past the per-minute rate windows (61 s or
        /// more), it shows what the past visitors left behind.
        #[arg(long, default_value_t = 0)]
        settle_seconds: u64,
    },
}

fn default_silas() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("silas")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("silas"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mode = match cli.mode {
        Cmd::ManyScopes { clients, turns } => Mode::ManyScopes { clients, turns },
        Cmd::HotScope { turns, in_flight } => Mode::HotScope { turns, in_flight },
        Cmd::Idle { connections } => Mode::Idle { connections },
        Cmd::Churn {
            rounds,
            visitors,
            turns,
            settle_seconds,
        } => Mode::Churn {
            rounds,
            visitors,
            turns,
            settle_seconds,
        },
    };
    let silas = cli.silas.unwrap_or_else(default_silas);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("silas-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(silas_loadtool::run(&silas, mode, cli.max_seconds)) {
        Ok(report) => {
            if let Some(path) = &cli.latencies {
                let lines: String = report
                    .latencies
                    .iter()
                    .map(|d| format!("{}\n", d.as_micros()))
                    .collect();
                if let Err(e) = std::fs::write(path, lines) {
                    eprintln!("silas-bench: {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            if cli.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(j) => println!("{j}"),
                    Err(e) => {
                        eprintln!("silas-bench: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                println!("{report}");
            }
            if report.daemon_alive {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("silas-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
