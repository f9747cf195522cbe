//! Test component: a guest that tries to carry a secret from one decision
//! to the next. `client.action` names:
//!
//! - `store` `{"xored": [..]}`: keeps the secret (each byte XOR 0x5A, so
//!   the request never holds the secret itself) in a global and on the
//!   heap, and answers `stored`;
//! - `store-and-read`: stores, then reads the global back in the same
//!   decision (proving the global works);
//! - `read`: answers with the global's value, or `(none)`;
//! - `scan` `{"xored": [..]}`: searches the whole linear memory for the
//!   secret's bytes and answers `found` or `not found`;
//! - `store-and-scan`: stores, then scans in the same decision (proving
//!   the scan finds what is there);
//! - `spray` `{"xored": [..]}`: writes the secret at the start of pages
//!   of a block the heap grows into, every other page for the first
//!   [`SCATTERED`] bytes (hundreds of separate dirty runs) and every page
//!   for the next [`CONTIGUOUS`] (more than the host keeps mapped), and
//!   answers `sprayed`;
//! - `grow-and-scan` `{"xored": [..]}`: grows the heap as far as `spray`
//!   did, without writing it, then scans like `scan`;
//! - `spray-and-scan`: both in the same decision.

use std::sync::Mutex;

use subs_sdk::prelude::*;

struct Secret;

/// What a decision may leave behind, if instances were reused.
static SECRET: Mutex<Option<String>> = Mutex::new(None);

const KEY: u8 = 0x5A;

fn xored(args: &Value) -> Vec<u8> {
    args["xored"].as_array().into_iter().flatten().filter_map(Value::as_u64).map(|b| b as u8).collect()
}

/// The secret the request carries, XORed back.
fn secret(args: &Value) -> Vec<u8> {
    xored(args).into_iter().map(|b| b ^ KEY).collect()
}

fn store(args: &Value) {
    let secret = String::from_utf8_lossy(&secret(args)).into_owned();
    // A heap copy that outlives the decision's own data, as a leak would.
    std::mem::forget(secret.clone().into_bytes());
    *SECRET.lock().unwrap() = Some(secret);
}

/// The part of the sprayed block written every other page.
const SCATTERED: usize = 4 << 20;
/// The part of the sprayed block written on every page.
const CONTIGUOUS: usize = 18 << 20;
const PAGE: usize = 4096;

/// Writes the secret at the start of pages of a fresh heap block, which is
/// leaked so it stays written until the instance is gone.
#[allow(unsafe_code)]
fn spray(args: &Value) {
    let secret = secret(args);
    let mut block: Vec<u8> = Vec::with_capacity(SCATTERED + CONTIGUOUS);
    let base = block.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    let pages = (0..SCATTERED).step_by(2 * PAGE).chain((SCATTERED..SCATTERED + CONTIGUOUS).step_by(PAGE));
    for at in pages {
        for (i, &byte) in secret.iter().enumerate() {
            // SAFETY: `at + i` is within the block's capacity (`secret` is
            // far shorter than a page). Volatile, because the block is never
            // read here and the optimizer would drop plain writes to it.
            unsafe { core::ptr::write_volatile(base.add(at + i), byte) };
        }
    }
    // Leaked where the optimizer cannot see it unused, so it is allocated.
    std::mem::forget(std::hint::black_box(block));
}

/// Grows the heap over what `spray` wrote, leaving the bytes as they are.
fn grow() {
    std::mem::forget(std::hint::black_box(Vec::<u8>::with_capacity(SCATTERED + CONTIGUOUS)));
}

fn read() -> String {
    SECRET.lock().unwrap().clone().unwrap_or_else(|| "(none)".to_owned())
}

/// Looks for the secret anywhere in linear memory, comparing through the
/// XOR so the needle itself is never written out.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
fn scan(args: &Value) -> bool {
    let needle = xored(args);
    if needle.is_empty() {
        return false;
    }
    let size = core::arch::wasm32::memory_size(0) * 65536;
    // Address 0 is left out: reading it is undefined behaviour in Rust.
    (8..size.saturating_sub(needle.len())).any(|at| {
        needle.iter().enumerate().all(|(i, &x)| {
            // SAFETY: `at + i` lies inside linear memory, which is plain
            // bytes; reading it volatile keeps the optimizer out of it.
            let byte = unsafe { core::ptr::read_volatile((at + i) as *const u8) };
            byte == x ^ KEY
        })
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn scan(_args: &Value) -> bool {
    false
}

/// The answer to a scan: `found` or `not found`.
fn scanned(args: &Value) -> String {
    if scan(args) { "found" } else { "not found" }.to_owned()
}

impl Agent for Secret {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let Trigger::ClientAction(action) = &request.trigger else {
            return Ok(DecisionResponse::new());
        };
        let args = action.args.clone().unwrap_or_default();
        let answer = match action.name.as_str() {
            "store" => {
                store(&args);
                "stored".to_owned()
            }
            "store-and-read" => {
                store(&args);
                read()
            }
            "read" => read(),
            "scan" => scanned(&args),
            "store-and-scan" => {
                store(&args);
                scanned(&args)
            }
            "spray" => {
                spray(&args);
                "sprayed".to_owned()
            }
            "grow-and-scan" => {
                grow();
                scanned(&args)
            }
            "spray-and-scan" => {
                spray(&args);
                scanned(&args)
            }
            other => return Err(DecideError::terminal(format!("unknown action {other}"))),
        };
        Ok(DecisionResponse::new().with_message(DraftMessage::assistant(answer)))
    }
}

subs_sdk::export!(Secret);
