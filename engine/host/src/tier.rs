//! Tiered compiling: a large upload is accepted on quickly compiled code
//! and moved to optimized code in the background.
//!
//! Cranelift, which compiles every agent's code, takes 10–15 s of both
//! cores for an interpreter's runtime (SpiderMonkey inside every
//! componentize-js agent, CPython inside every componentize-py one); Winch,
//! wasmtime's single-pass baseline compiler, takes 2–3 s for the same
//! code, which then runs 1.2–1.7× slower. So, with
//! [`HostConfig::baseline_first`](super::HostConfig::baseline_first), an
//! upload of at least [`BASELINE_FROM_CODE_BYTES`] of code that is not in
//! the compile cache is compiled with Winch (in the compile child, under
//! the same budget), checked and trial-instantiated on that code like any
//! other, and accepted. Its decisions run the baseline code while one
//! background thread compiles it with Cranelift, again under the budget,
//! and puts the optimized code in place: decisions that start after that
//! use it, those running finish on the code they started with. Only
//! optimized code is kept in the compile cache, so a restart never runs
//! baseline code for an agent whose optimized code was done.
//!
//! The optimizer works through one compile at a time (a compile uses both
//! cores already), and at most [`QUEUED`] wait for it; an upload that finds
//! the queue full is compiled optimized at once, as without tiering.
//! Baseline code runs in an engine of its own (wasmtime loads Winch code
//! only into an engine configured for it), without the instance pool:
//! its instances are allocated on demand under the same limits, and take
//! the same slots of the pool's accounting, so tiering adds no concurrency.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use wasmtime::Engine;
use wasmtime::component::Linker;

use super::bindings::Pre;
use super::cache::{self, CompileCache};
use super::state::StoreState;
use super::{HostConfig, Inner, LoadError, Ticker, compile};

/// Code, in bytes of function bodies, from which a first compile is a
/// baseline one: below it Cranelift takes well under a second, and a
/// baseline compile would only slow the first decisions.
pub const BASELINE_FROM_CODE_BYTES: u64 = 1 << 20;

/// Optimizing compiles waiting behind the running one, at most.
pub(super) const QUEUED: usize = 8;

/// What runs baseline code: its engine, the same grants linked into it,
/// and its epoch ticker (the limits' clock).
pub(super) struct Baseline {
    pub(super) engine: Engine,
    pub(super) linker: Linker<StoreState>,
    _ticker: Option<Ticker>,
}

impl Baseline {
    pub(super) fn new(config: &HostConfig) -> Result<Self, LoadError> {
        match super::runtime(&compile::compile_config(&settings(config)), config) {
            Ok((engine, linker, ticker)) => Ok(Self { engine, linker, _ticker: ticker }),
            Err(LoadError::Engine(why)) => Err(LoadError::Engine(format!("the baseline engine: {why}"))),
            Err(other) => Err(other),
        }
    }
}

/// The compile settings of baseline code on a host with `config`.
pub(super) fn settings(config: &HostConfig) -> compile::ChildSettings {
    compile::ChildSettings { baseline: true, function_cache: None, ..super::child_settings(config, None) }
}

/// An agent's compiled code, shared by every binding of it: the baseline
/// code until the optimized code replaces it (which engine the code
/// belongs to tells which it is).
pub(super) struct Code {
    pre: RwLock<Pre<StoreState>>,
}

impl Code {
    pub(super) fn new(pre: Pre<StoreState>) -> Arc<Self> {
        Arc::new(Self { pre: RwLock::new(pre) })
    }

    /// The code a decision starting now runs.
    pub(super) fn current(&self) -> Pre<StoreState> {
        self.pre.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn replace(&self, pre: Pre<StoreState>) {
        *self.pre.write().unwrap_or_else(std::sync::PoisonError::into_inner) = pre;
    }
}

/// The background thread that compiles baseline agents optimized, and
/// its queue.
#[derive(Default)]
pub(super) struct Optimizer {
    queue: Mutex<Option<Sender<Job>>>,
    /// Compiles queued or running, bounded by `QUEUED + 1`.
    held: Arc<AtomicUsize>,
}

/// A place in the optimizer's queue, held from before the baseline
/// compile until the optimized code is in place (or the upload failed).
pub(super) struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One optimizing compile.
pub(super) struct Job {
    pub(super) place: Place,
    /// The component, as validated (a core module upload made a component).
    pub(super) component: Vec<u8>,
    /// Its name in the compile cache.
    pub(super) digest: String,
    pub(super) code: Weak<Code>,
    pub(super) cache: Arc<CompileCache>,
    pub(super) tenant: Arc<str>,
    pub(super) agent: Arc<str>,
    /// When the upload was accepted.
    pub(super) accepted: Instant,
}

impl Optimizer {
    /// A place in the queue, if it has one.
    pub(super) fn reserve(&self) -> Option<Place> {
        let held = self.held.fetch_add(1, Ordering::AcqRel);
        let place = Place(self.held.clone());
        (held <= QUEUED).then_some(place)
    }

    /// Queues `job`, starting the thread on first use.
    pub(super) fn submit(&self, host: &Arc<Inner>, job: Job) {
        let mut queue = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let sender = match queue.as_ref() {
            Some(sender) => sender.clone(),
            None => {
                let (sender, jobs) = channel::<Job>();
                // The thread holds the host weakly, so that dropping the host
                // drops the sender and the thread ends with its queue.
                let host = Arc::downgrade(host);
                let started = std::thread::Builder::new()
                    .name("subs-optimize".to_owned())
                    .spawn(move || jobs.into_iter().for_each(|job| optimize(&host, job)));
                if let Err(e) = started {
                    tracing::warn!(error = %e, "the optimizing thread did not start; agents keep their baseline code");
                    return;
                }
                queue.insert(sender).clone()
            }
        };
        if sender.send(job).is_err() {
            tracing::warn!("the optimizing thread is gone; the agent keeps its baseline code");
        }
    }
}

/// Compiles `job`'s component optimized, puts it in place of the baseline
/// code and keeps it in the compile cache.
fn optimize(host: &Weak<Inner>, job: Job) {
    // The place is held until this job is done, whatever its outcome.
    let Job { place: _place, component, digest, code, cache, tenant, agent, accepted } = job;
    let (Some(host), true) = (host.upgrade(), code.strong_count() > 0) else { return };
    let span = tracing::info_span!("optimize", tenant = %tenant, agent = %agent);
    let _entered = span.enter();
    let started = Instant::now();
    let optimized = super::compile_optimized(&host, &cache, &component).and_then(|(artifact, staged)| {
        let compiled = cache::deserialize(&host.engine, &artifact)?;
        let pre = host.linker.instantiate_pre(&compiled).map_err(|e| LoadError::World(format!("{e:#}")))?;
        let pre = Pre::new(pre).map_err(LoadError::World)?;
        if let Some(staged) = &staged {
            cache.keep_functions(staged.path(), host.config.function_cache_bytes);
        }
        cache.keep(&digest, &artifact)?;
        Ok(pre)
    });
    match optimized {
        Ok(pre) => {
            if let Some(code) = code.upgrade() {
                code.replace(pre);
            }
            tracing::info!(
                compile_secs = started.elapsed().as_secs_f64(),
                since_accepted_secs = accepted.elapsed().as_secs_f64(),
                "the agent's optimized code is in place"
            );
        }
        Err(e) => tracing::warn!(error = %e, "compiling the agent optimized failed; it keeps its baseline code"),
    }
}
