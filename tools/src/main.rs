//! The `prox` command-line tool: see `prox --help`.
//!
//! Exit status: 0 on success, 1 on failure (the error chain is printed on
//! stderr), 2 on a usage error (printed by clap).

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match prox_tools::cmd::parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version on stdout (exit 0) and usage errors on
            // stderr (exit 2).
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    prox_tools::cmd::init_logging();
    prox_tools::progress::set_quiet(cli.global.quiet);
    match prox_tools::cmd::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if prox_tools::out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
