//! `server`: serve the product, or manage it from the command line ([`server::cli`]).

fn main() -> std::process::ExitCode {
    server::cli::main()
}
