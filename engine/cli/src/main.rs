//! The `subs` binary; the commands live in the `subs_cli` library.

fn main() -> std::process::ExitCode {
    subs_cli::main()
}
