//! The `dapi` command: `dapi allocate`, `dapi capacity` (and, later, `dapi serve`).

use std::process::ExitCode;

use dapi::cli;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    cli::main(&args)
}
