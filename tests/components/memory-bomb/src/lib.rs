//! Test component: allocates 1 MiB at a time, touching every page, and
//! keeps it all, until the engine's memory limit stops it.

use subs_sdk::prelude::*;

struct MemoryBomb;

impl Agent for MemoryBomb {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![0xA5; 1 << 20]));
            if hoard.len() == usize::MAX {
                return Ok(DecisionResponse::new());
            }
        }
    }
}

subs_sdk::export!(MemoryBomb);
