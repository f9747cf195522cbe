//! The `subs` binary; the commands live in the `subs_cli` library.

/// mimalloc instead of glibc's malloc: the engine allocates and frees on
/// one thread what another built (batches handed to the store's writer,
/// requests handed to the component), which glibc serialises on its arena
/// locks. Measured in `docs/benchmarks.md`: about a quarter less CPU per
/// durable step, and no more resident memory per idle session. Built
/// without transparent huge pages (the workspace's `no_thp` feature):
/// mimalloc returns idle memory to the system after a second, and
/// faulting a 2 MiB page back in costs a 2 MiB clear each time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Wasmtime captures a std backtrace whenever a store is dropped if
    // `RUST_BACKTRACE` is set; that costs more than a whole decision. Panics
    // still get their backtrace (`RUST_BACKTRACE` governs those); library
    // backtraces are turned off unless the user asked for them.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: this is the first thing the process does, before any
        // thread exists that could read the environment concurrently.
        #[allow(unsafe_code)]
        unsafe {
            std::env::set_var("RUST_LIB_BACKTRACE", "0");
        }
    }
    subs_cli::main()
}
