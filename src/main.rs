//! The `silas` binary: parses the command line, runs the command, and turns
//! any error into one line on stderr and a non-zero exit code. No command
//! panics on bad input; a panic that escapes anyway is reported on one line.

use std::process::ExitCode;

use clap::Parser;

mod bundled_skills;
mod channels;
mod chat;
mod cli;
mod commands;
mod connection_cmd;
mod control;
mod daemon;
mod daemon_connections;
mod devices;
mod disk_full;
mod doctor;
mod error;
mod libm_shim;
mod malloc;
mod memory_cmd;
mod remote;
mod service;
mod skill_cmd;
mod telegram_bridge;
mod web_bridge;
mod workspace_cmd;

/// The shell's status for a command killed by SIGPIPE (128 + 13).
const SIGPIPE_EXIT: i32 = 141;

/// The panic `print!`/`println!` raise when stdout or stderr is a pipe whose
/// reader has gone (EPIPE, os error 32).
fn output_closed(panic_message: &str) -> bool {
    panic_message.starts_with("failed printing to std") && panic_message.contains("os error 32")
}

fn main() -> ExitCode {
    // Multi-call: `silas __sandbox-exec` is the sandbox launcher (see silas-sandbox).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == silas_sandbox::LAUNCHER_ARG)
    {
        return silas_sandbox::launcher::main();
    }
    // rustls's process-wide crypto provider (ring), before anything can build
    // an HTTPS client; the client builders in silas-llm and silas-netguard
    // also ensure it, so this is belt and braces, not load-bearing.
    silas_llm::ensure_crypto_provider();
    std::panic::set_hook(Box::new(|info| {
        let msg =
            silas_core::error::panic_text(info.payload()).unwrap_or_else(|| "unknown panic".into());
        if silas_storage::panic_is_contained() {
            // Caught and reported as a damaged store (`Store::open`).
            return;
        }
        if output_closed(&msg) {
            // `silas audit tail | head`: the reader has gone, which is how a
            // pipeline ends, not an internal error. Exit as a command killed
            // by SIGPIPE would (Rust ignores the signal, so `print!` panics).
            std::process::exit(SIGPIPE_EXIT);
        }
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error[E_INTERNAL]: internal error{at}: {msg}");
    }));
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::report_parse_error(e),
    };
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.one_line());
            e.exit_code()
        }
    }
}
