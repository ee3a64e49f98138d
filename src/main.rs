//! The `dapi` command: `dapi serve`, `dapi allocate`, `dapi capacity`, `dapi openapi`
//! (see `dapi --help`).

use std::process::ExitCode;

fn main() -> ExitCode {
    dapi::cli::main(std::env::args_os())
}
