//! The `tools` example agent served over HTTP: the same [`tools::Tools`]
//! that `examples/tools` exports as a WebAssembly component, behind
//! `subs-http-worker`.
//!
//! ```text
//! tools-http [--listen ADDR]
//! ```
//!
//! The address comes from `--listen`, else `SUBS_WORKER_LISTEN`, else
//! `127.0.0.1:8787` (port 0 picks a free one). With `SUBS_WORKER_SECRET`
//! set, every request must carry a valid `Subs-Signature` made with it.
//! The first line printed is `listening on http://ADDR/`; register that URL
//! with the engine as the agent's HTTP worker.

use std::process::ExitCode;

use subs_http_worker::WorkerOptions;

const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
const USAGE: &str = "usage: tools-http [--listen ADDR]  (env: SUBS_WORKER_LISTEN, SUBS_WORKER_SECRET)";

#[tokio::main]
async fn main() -> ExitCode {
    let listen = match listen_address(std::env::args().skip(1)) {
        Ok(listen) => listen,
        Err(message) => {
            eprintln!("tools-http: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("tools-http: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut options = WorkerOptions::new();
    let signed = match std::env::var("SUBS_WORKER_SECRET") {
        Ok(secret) if !secret.is_empty() => {
            options = options.require_signature(secret);
            true
        }
        _ => false,
    };
    match listener.local_addr() {
        Ok(addr) => println!(
            "listening on http://{addr}/ ({})",
            if signed { "signatures required" } else { "unsigned requests accepted" }
        ),
        Err(e) => {
            eprintln!("tools-http: the listener has no address: {e}");
            return ExitCode::FAILURE;
        }
    }
    let app = subs_http_worker::router_with(tools::Tools::new(), options);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match subs_http_worker::serve_router(listener, app, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tools-http: the server failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--listen ADDR` / `--listen=ADDR`, else the environment, else the
/// default.
fn listen_address(mut args: impl Iterator<Item = String>) -> Result<String, String> {
    let mut listen = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = Some(args.next().ok_or("--listen needs an address")?),
            "-h" | "--help" => return Err("help".to_owned()),
            other => match other.strip_prefix("--listen=") {
                Some(addr) => listen = Some(addr.to_owned()),
                None => return Err(format!("unexpected argument `{other}`")),
            },
        }
    }
    Ok(listen
        .or_else(|| std::env::var("SUBS_WORKER_LISTEN").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_LISTEN.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<String, String> {
        listen_address(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn the_flag_wins() {
        assert_eq!(parse(&["--listen", "0.0.0.0:9000"]).unwrap(), "0.0.0.0:9000");
        assert_eq!(parse(&["--listen=127.0.0.1:0"]).unwrap(), "127.0.0.1:0");
        assert!(parse(&["--listen"]).unwrap_err().contains("needs an address"));
        assert!(parse(&["--port", "1"]).unwrap_err().contains("--port"));
    }
}
