//! Component workers: agents compiled to WebAssembly components, called
//! in-process, in a sandbox a stranger's upload can run in.
//!
//! A [`ComponentHost`] owns the wasmtime engine (pooling allocator, epoch
//! interruption), the linker holding what the engine grants guests, and
//! the compile cache. [`ComponentHost::load`] validates a component,
//! compiles it once (or loads it compiled from disk) and pre-links it
//! ([`ComponentAgent`]). Every decision then gets a fresh store and
//! instance, with its own limits, so nothing a guest keeps in memory
//! survives into another decision, session or tenant. Agent state lives in
//! `state`, which the engine stores.
//!
//! `docs/sandbox.md` describes the limits, capabilities and cache for
//! operators.
//!
//! # Layout
//!
//! - this file: the host, its configuration, and one decision's run;
//! - `limits`: [`Limits`], their overrides, and the resource limiter;
//! - `validate`: what a component may import and must export;
//! - `cache`: compiled components on disk;
//! - `functions`: compiled functions by content, shared by uploads;
//! - `tier`: large uploads accepted on baseline code, optimized later;
//! - `componentize`: agents uploaded as core modules, made components;
//! - `state`: one store's state, WASI and the `subs:agent/host` interface;
//! - `output`: guest stdout/stderr into the logs;
//! - `probe`: the parts of a decision, each alone, for the benchmarks;
//! - `http`: outgoing `wasi:http` behind the allow-list;
//! - `bindings`: the generated host bindings.
//!
//! # Backtraces
//!
//! wasmtime captures a Rust backtrace in errors it creates while tearing a
//! store down; with `RUST_BACKTRACE=1` in the environment that adds
//! 15–20 µs to every decision. Run the engine with `RUST_LIB_BACKTRACE=0`
//! (panics still print backtraces); the host warns at start when it is not.

mod bindings;
mod branch;
pub mod cache;
mod compile;
mod componentize;
mod cpu;
mod functions;
mod http;
mod inspect;
mod limits;
mod output;
pub mod probe;
mod slots;
mod state;
mod tier;
mod validate;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::Digest as _;
use subs_protocol::decision::WithoutBranch;
use subs_protocol::wit::BranchRequest;
use subs_protocol::wit::FromWit;
use subs_protocol::{DecisionResponse, Messages};
use tracing::Instrument;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline};

pub use self::compile::{ChildSettings, CompileBudget, Compiler, run_child};
pub use self::inspect::{Needs, Shape, inspect};
pub use self::limits::{LimitHit, LimitOverrides, Limits};
pub use self::tier::BASELINE_FROM_CODE_BYTES;

use self::bindings::{Pre, wit};
use self::cache::CompileCache;
use self::componentize::componentize;
use self::cpu::CpuMeter;
use self::http::AllowedHost;
use self::inspect::Unreadable;
use self::limits::Limiter;
use self::output::Labels;
use self::slots::SlotPool;
use self::state::{Grant, QUOTED_CHARS, StoreState};
use subs_core::worker::{BoxFuture, Delivery, DeltaSink, ERROR_TEXT_BYTES, Worker, WorkerError, clip};

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The bytes are not a WebAssembly component wasmtime can compile.
    #[error("not a valid WebAssembly component: {0}")]
    Invalid(String),
    /// The component does not fit the `subs:agent` world: it imports
    /// something the engine does not grant, or lacks the `decide` export.
    #[error("the component does not fit the subs:agent world: {0}")]
    World(String),
    /// The engine could not be configured.
    #[error("the WebAssembly engine could not be set up: {0}")]
    Engine(String),
    /// The compile cache could not be written or read back.
    #[error("the compile cache failed: {0}")]
    Cache(String),
    /// An agent or tenant policy is invalid (an allow-list entry that is
    /// not a host).
    #[error("invalid agent policy: {0}")]
    Policy(String),
    /// Compiling the component would cost more than the compile budget
    /// allows (its shape says so, or the compile ran out of time or
    /// memory).
    #[error("the component is over the compile budget: {0}")]
    CompileBudget(String),
    /// The component cannot start under the limits its decisions run with:
    /// every decision would fail.
    #[error("the component cannot run under its limits: {0}")]
    Limits(String),
    /// Instantiating the component failed (its start trapped, or it asked
    /// the host for something it refused): every decision would fail.
    #[error("the component fails to start: {0}")]
    Start(String),
}

/// What an operator grants one agent, or every agent of a tenant, beyond
/// the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPolicy {
    /// Changes to the default limits.
    pub limits: LimitOverrides,
    /// Hosts the agent may send HTTP requests to (`host` or `host:port`);
    /// `None` keeps the list beneath (the tenant's, else none).
    pub http_hosts: Option<Vec<String>>,
}

/// How a [`ComponentHost`] is set up.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The limits of every decision unless a tenant or agent policy says
    /// otherwise.
    pub limits: Limits,
    /// Policies by tenant, applied before the agent's own.
    pub tenants: HashMap<String, AgentPolicy>,
    /// Whether limits are enforced at all. Off only to measure what they
    /// cost: without them a guest can run forever and use any memory the
    /// pool allows.
    pub enforce_limits: bool,
    /// The most linear memory any decision may be granted; the pool
    /// reserves slots of this size, and larger overrides are cut to it.
    pub max_memory_bytes: usize,
    /// Slots of the instance pool: decisions running at once, when each
    /// needs one (a component of many core instances or memories needs
    /// the room of several; see docs/sandbox.md). More wait for a slot.
    pub max_concurrent: u32,
    /// The most slots one tenant's decisions may hold at once; more of
    /// them wait in the tenant's own line, so other tenants always have
    /// `max_concurrent - tenant_slots` slots.
    pub tenant_slots: u32,
    /// How often the epoch advances: the resolution of the wall-clock and
    /// CPU limits, and how often a long-running guest yields its thread.
    pub epoch_tick: Duration,
    /// The guest's native call stack; deeper recursion traps as a stack
    /// overflow.
    pub max_stack_bytes: usize,
    /// Where compiled components are kept across restarts; `None` compiles
    /// on every load.
    pub compile_cache: Option<PathBuf>,
    /// Fixed answers for names guests' outgoing requests go to, consulted
    /// before the system's resolver (as `/etc/hosts` is). They are held to
    /// the same rule as DNS answers: a name leads only to public
    /// addresses (`localhost` only to loopback).
    pub hosts: HashMap<String, Vec<std::net::IpAddr>>,
    /// Names that may lead to any address, private and loopback ones
    /// included: the operator's internal services, which agents reach by
    /// name (HTTPS needs the name) once it is also on their allow-list.
    pub private_hosts: Vec<String>,
    /// Where components are compiled: in this process, or in a child
    /// process held to the budget's time and memory.
    pub compiler: Compiler,
    /// What compiling one component may cost.
    pub compile_budget: CompileBudget,
    /// The most the shared cache of compiled functions (the compile
    /// cache's `functions` directory) may hold, in bytes; once full,
    /// functions compiled for further uploads are not kept.
    pub function_cache_bytes: u64,
    /// Whether an upload of at least [`BASELINE_FROM_CODE_BYTES`] of code,
    /// not in the compile cache, is accepted on baseline code compiled in
    /// seconds and moved to optimized code in the background (see
    /// docs/sandbox.md). Off for a process that exits after one run, which
    /// would never keep the optimized code.
    pub baseline_first: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            tenants: HashMap::new(),
            enforce_limits: true,
            max_memory_bytes: 1 << 30,
            max_concurrent: 128,
            tenant_slots: 32,
            epoch_tick: Duration::from_millis(10),
            max_stack_bytes: 512 << 10,
            compile_cache: None,
            hosts: HashMap::new(),
            private_hosts: Vec::new(),
            compiler: Compiler::InProcess,
            compile_budget: CompileBudget::default(),
            function_cache_bytes: 1 << 30,
            baseline_first: false,
        }
    }
}

/// The wasmtime engine, what guests are granted, and the compile cache.
/// Cheap to clone.
#[derive(Clone)]
pub struct ComponentHost {
    inner: Arc<Inner>,
    cache: Arc<CompileCache>,
}

struct Inner {
    engine: Engine,
    linker: Linker<StoreState>,
    config: HostConfig,
    /// Tenant policies set while the host runs (by the operator, through
    /// the admin API), each in place of the configuration's for its tenant.
    tenants: std::sync::RwLock<HashMap<String, AgentPolicy>>,
    /// The pool's slots, so a burst of decisions waits rather than failing
    /// to allocate, and no tenant holds more than its share.
    slots: Arc<SlotPool>,
    /// Sends the guests' allowed HTTP requests.
    client: reqwest::Client,
    /// Advances the epoch while the host lives.
    _ticker: Option<Ticker>,
    /// What runs baseline code, made on first need; `None` if it could
    /// not be made (uploads are then compiled optimized at once).
    baseline: std::sync::OnceLock<Option<tier::Baseline>>,
    /// Compiles agents accepted on baseline code optimized.
    optimizer: tier::Optimizer,
}

/// A thread advancing the engine's epoch every tick; stops when dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Ticker {
    fn start(engine: Engine, tick: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new().name("subs-epoch".to_owned()).spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                // The epoch's tick is the clock guests' deadlines are
                // counted in; a thread of its own keeps it going however
                // busy the runtime is.
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        })?;
        Ok(Self { stop })
    }
}

impl Inner {
    /// What runs baseline code, if it can be made.
    fn baseline(&self) -> Option<&tier::Baseline> {
        let made = self.baseline.get_or_init(|| {
            tier::Baseline::new(&self.config)
                .inspect_err(|e| tracing::warn!(error = %e, "no baseline compiler; uploads are compiled optimized"))
                .ok()
        });
        made.as_ref()
    }

    /// The policy set for `tenant` while the host runs, else the
    /// configuration's.
    fn tenant_policy(&self, tenant: &str) -> Option<AgentPolicy> {
        let live = self.tenants.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(tenant).cloned();
        live.or_else(|| self.config.tenants.get(tenant).cloned())
    }

    /// A fresh store of `engine` (the optimized or the baseline one) for
    /// one call into a component under `bound`: the guest's grants and,
    /// when limits are enforced, the resource limiter and the epoch
    /// callback that stops the guest at `wall` or when `meter` (around the
    /// futures that run the guest) passes its CPU limit, yielding to other
    /// tasks at every tick until then.
    fn store(
        &self,
        engine: &Engine,
        bound: &Bound,
        session: String,
        deltas: Option<DeltaSink>,
        wall: Duration,
        meter: &CpuMeter,
    ) -> Store<StoreState> {
        let limits = &bound.limits;
        let grant = Grant {
            labels: Labels { tenant: bound.tenant.clone(), agent: bound.agent.clone(), session },
            log_bytes: limits.log_bytes,
            log_lines: limits.log_lines,
            allowed: bound.allowed.clone(),
            client: self.client.clone(),
        };
        let state = StoreState::new(deltas, grant, Limiter::new(limits));
        let mut store = Store::new(engine, state);
        if self.config.enforce_limits {
            store.limiter(|s| &mut s.limiter);
            let deadline = Instant::now() + wall;
            let (cpu, meter) = (limits.cpu, meter.clone());
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(move |_| {
                if Instant::now() >= deadline {
                    return Err(wasmtime::Error::new(DeadlinePassed));
                }
                if meter.used() > cpu {
                    return Err(wasmtime::Error::new(LimitHit::Cpu(cpu)));
                }
                // Yielding lets other tasks on this thread run while a
                // guest computes, and lets the wall-clock timer fire.
                Ok(UpdateDeadline::Yield(1))
            });
        }
        store
    }
}

/// An engine of `wasm`, a linker granting what guests are granted, and,
/// when limits are enforced, the thread advancing its epoch.
fn runtime(
    wasm: &wasmtime::Config,
    config: &HostConfig,
) -> Result<(Engine, Linker<StoreState>, Option<Ticker>), LoadError> {
    let engine_error = |e: wasmtime::Error| LoadError::Engine(format!("{e:#}"));
    let engine = Engine::new(wasm).map_err(engine_error)?;
    let mut linker = Linker::new(&engine);
    link(&mut linker).map_err(engine_error)?;
    let ticker = match config.enforce_limits {
        true => Some(
            Ticker::start(engine.clone(), config.epoch_tick)
                .map_err(|e| LoadError::Engine(format!("starting the epoch thread: {e}")))?,
        ),
        false => None,
    };
    Ok((engine, linker, ticker))
}

impl ComponentHost {
    /// A host with the default configuration and no compile cache.
    pub fn new() -> Result<Self, LoadError> {
        Self::with_config(HostConfig::default())
    }

    /// A host configured by `config`.
    pub fn with_config(config: HostConfig) -> Result<Self, LoadError> {
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0")
            && std::env::var_os("RUST_LIB_BACKTRACE").is_none()
        {
            tracing::warn!(
                "RUST_BACKTRACE is set without RUST_LIB_BACKTRACE=0: every component decision pays for a backtrace"
            );
        }
        let (engine, linker, ticker) = runtime(&engine_config(&config), &config)?;
        let client = http::client(&config.hosts, &config.private_hosts)
            .map_err(|e| LoadError::Engine(format!("the HTTP client: {e}")))?;
        let cache = Arc::new(CompileCache::new(&engine, config.compile_cache.clone()));
        let slots = SlotPool::new(config.max_concurrent, config.tenant_slots);
        let inner = Inner {
            engine,
            linker,
            config,
            tenants: Default::default(),
            slots,
            client,
            _ticker: ticker,
            baseline: Default::default(),
            optimizer: Default::default(),
        };
        Ok(Self { inner: Arc::new(inner), cache })
    }

    /// This host, keeping compiled components in `dir` (created when
    /// needed) instead of where its configuration said.
    pub fn with_compile_cache(&self, dir: impl Into<PathBuf>) -> Self {
        Self { inner: self.inner.clone(), cache: Arc::new(CompileCache::new(&self.inner.engine, Some(dir.into()))) }
    }

    /// The policy `tenant`'s agents run under now: the one set with
    /// [`set_tenant_policy`](Self::set_tenant_policy), else the
    /// configuration's.
    pub fn tenant_policy(&self, tenant: &str) -> AgentPolicy {
        self.inner.tenant_policy(tenant).unwrap_or_default()
    }

    /// The configuration's policy of `tenant`.
    pub fn configured_tenant_policy(&self, tenant: &str) -> AgentPolicy {
        self.inner.config.tenants.get(tenant).cloned().unwrap_or_default()
    }

    /// Sets the policy of `tenant`'s agents in place of the
    /// configuration's (`None`: the configuration's again). Agents bound
    /// from now on ([`ComponentHost::load_as`], [`ComponentAgent::for_agent`])
    /// run under it; those already bound keep their limits until they are
    /// bound again.
    pub fn set_tenant_policy(&self, tenant: &str, policy: Option<AgentPolicy>) -> Result<(), LoadError> {
        let mut tenants = self.inner.tenants.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        match policy {
            Some(policy) => {
                // An allow-list entry that is not a host is refused now,
                // not at the next bind.
                allowed_hosts(policy.http_hosts.iter().flatten())?;
                tenants.insert(tenant.to_owned(), policy);
            }
            None => {
                tenants.remove(tenant);
            }
        }
        Ok(())
    }

    /// How many components this host compiled rather than loaded compiled
    /// from its cache.
    pub fn compilations(&self) -> u64 {
        self.cache.compilations.load(Ordering::Relaxed)
    }

    /// Loads a component under the default policy; see
    /// [`load_as`](Self::load_as).
    pub fn load(&self, bytes: &[u8]) -> Result<ComponentAgent, LoadError> {
        self.load_as("", "", &AgentPolicy::default(), bytes)
    }

    /// Loads a component as `agent_id` of `tenant`, under `policy` over
    /// the tenant's and the host's limits (logs are tagged with both
    /// names), in the order that makes refusals cheap:
    ///
    /// 1. read its shape without compiling it, and check it against the
    ///    world (what it imports, that it exports `decide`), against the
    ///    limits its decisions will run with (what instantiating it
    ///    creates), and against the compile budget;
    /// 2. compile it within the budget, or load it compiled from the cache;
    /// 3. type-check `decide` and link it;
    /// 4. instantiate it once, as a decision would, so that a component
    ///    that cannot start is refused now rather than failing every
    ///    decision later.
    ///
    /// Only a component that passes all of it is kept in the compile cache.
    pub fn load_as(
        &self,
        tenant: &str,
        agent_id: &str,
        policy: &AgentPolicy,
        bytes: &[u8],
    ) -> Result<ComponentAgent, LoadError> {
        let bound = bind(&self.inner, tenant, agent_id, policy)?;
        let mut compiled = self.compile(bytes, |shape| {
            validate::check_shape(shape)?;
            bound.limits.admit(&shape.needs)
        })?;
        // Baseline code links into the baseline engine, which compiled it.
        let linker = match compiled.pending.as_ref().and_then(|_| self.inner.baseline()) {
            Some(baseline) => &baseline.linker,
            None => &self.inner.linker,
        };
        validate::check(compiled.component.engine(), &compiled.component)?;
        let pre = linker.instantiate_pre(&compiled.component).map_err(|e| LoadError::World(format!("{e:#}")))?;
        let pre = Pre::new(pre).map_err(LoadError::World)?;
        let agent = ComponentAgent {
            code: tier::Code::new(pre),
            checked: Arc::new(AtomicBool::new(false)),
            host: self.inner.clone(),
            bound: Arc::new(bound),
            weight: weight(&compiled.shape.needs),
        };
        agent.trial()?;
        if let Some((place, component)) = compiled.pending.take() {
            let job = tier::Job {
                place,
                component,
                digest: std::mem::take(&mut compiled.digest),
                code: Arc::downgrade(&agent.code),
                cache: self.cache.clone(),
                tenant: agent.bound.tenant.clone(),
                agent: agent.bound.agent.clone(),
                accepted: Instant::now(),
            };
            self.inner.optimizer.submit(&self.inner, job);
            return Ok(agent);
        }
        compiled.keep(&self.cache, self.inner.config.function_cache_bytes)?;
        Ok(agent)
    }

    /// The compiled component of `bytes` (a component, or a core module
    /// carrying its world), after `check` accepted its shape: from the
    /// cache when it holds it, else compiled within the budget.
    fn compile(
        &self,
        bytes: &[u8],
        check: impl FnOnce(&Shape) -> Result<(), LoadError>,
    ) -> Result<Compiled, LoadError> {
        let config = &self.inner.config;
        let engine = &self.inner.engine;
        let component = componentize(bytes)?;
        let shape = inspect(&component).map_err(|Unreadable(why)| LoadError::Invalid(why))?;
        check(&shape)?;
        let digest = hex::encode(sha2::Sha256::digest(bytes));
        if let Some(cached) = self.cache.find(engine, &digest) {
            return Ok(Compiled { component: cached, shape, digest, artifact: None, staged: None, pending: None });
        }
        config.compile_budget.check(&shape)?;
        if let Some(baseline) = self.baseline_for(&shape) {
            let place = self.inner.optimizer.reserve();
            if let Some(place) = place {
                let artifact = compile_with(config, &baseline.engine, &tier::settings(config), &component)?;
                let compiled = cache::deserialize(&baseline.engine, &artifact)?;
                let pending = Some((place, component.into_owned()));
                return Ok(Compiled { component: compiled, shape, digest, artifact: None, staged: None, pending });
            }
        }
        let (artifact, staged) = compile_optimized(&self.inner, &self.cache, &component)?;
        let component = cache::deserialize(engine, &artifact)?;
        Ok(Compiled { component, shape, digest, artifact: Some(artifact), staged, pending: None })
    }

    /// What compiles a component of `shape` first, if it is baseline code.
    fn baseline_for(&self, shape: &Shape) -> Option<&tier::Baseline> {
        let wanted = self.inner.config.baseline_first && shape.code_bytes >= BASELINE_FROM_CODE_BYTES;
        wanted.then(|| self.inner.baseline()).flatten()
    }
}

/// Compiles `component` to optimized code for `host`, in the host's
/// compile child when it has one: the artifact, and the functions the
/// child compiled for it, to be kept in `cache` once the upload is
/// accepted.
fn compile_optimized(
    host: &Inner,
    cache: &CompileCache,
    component: &[u8],
) -> Result<(Vec<u8>, Option<tempfile::TempDir>), LoadError> {
    let config = &host.config;
    cache.compilations.fetch_add(1, Ordering::Relaxed);
    // A compile child keeps the functions it compiles apart, so that only
    // an accepted upload adds to the shared cache.
    let staged = match config.compiler {
        Compiler::InProcess => None,
        Compiler::Child { .. } => cache.stage_functions()?,
    };
    let mut settings = child_settings(config, cache.dir());
    settings.function_staging = staged.as_ref().map(|dir| dir.path().to_owned());
    let artifact = compile_with(config, &host.engine, &settings, component)?;
    Ok((artifact, staged))
}

/// Compiles `component` where `config` says: in this process with
/// `engine`, or in a compile child given `settings` (those `engine` was
/// made with), under the compile budget.
fn compile_with(
    config: &HostConfig,
    engine: &Engine,
    settings: &ChildSettings,
    component: &[u8],
) -> Result<Vec<u8>, LoadError> {
    match &config.compiler {
        Compiler::InProcess => engine.precompile_component(component).map_err(|e| LoadError::Invalid(format!("{e:#}"))),
        Compiler::Child { program, args } => {
            compile::in_child(program, args, settings, &config.compile_budget, component)
        }
    }
}

/// A component compiled (or found compiled) for this host.
struct Compiled {
    component: wasmtime::component::Component,
    shape: Shape,
    /// SHA-256 of the uploaded bytes, hex: its name in the cache.
    digest: String,
    /// The compiled artifact, when it was compiled now and is not in the
    /// cache yet.
    artifact: Option<Vec<u8>>,
    /// The functions a compile child compiled for it, not in the shared
    /// function cache yet; removed when dropped.
    staged: Option<tempfile::TempDir>,
    /// For baseline code: the optimizer's place held for it and the
    /// component to compile optimized once the upload is accepted.
    pending: Option<(tier::Place, Vec<u8>)>,
}

impl Compiled {
    /// Keeps a component compiled now in `cache`, with the functions
    /// compiled for it, once it was accepted.
    fn keep(self, cache: &CompileCache, function_cache_bytes: u64) -> Result<(), LoadError> {
        if let Some(staged) = &self.staged {
            cache.keep_functions(staged.path(), function_cache_bytes);
        }
        match &self.artifact {
            Some(artifact) => cache.keep(&self.digest, artifact),
            None => Ok(()),
        }
    }
}

/// How many of the pool's slots one instance of a component takes: the
/// pool holds, per slot, [`CORE_INSTANCES_PER_SLOT`] core instances,
/// [`MEMORIES_PER_SLOT`] memories and [`TABLES_PER_SLOT`] tables.
fn weight(needs: &Needs) -> u32 {
    let slots = |n: u64, per: u32| n.div_ceil(u64::from(per));
    let most = slots(needs.core_instances, CORE_INSTANCES_PER_SLOT)
        .max(slots(needs.memories, MEMORIES_PER_SLOT))
        .max(slots(needs.tables, TABLES_PER_SLOT));
    u32::try_from(most).unwrap_or(u32::MAX).max(1)
}

/// Core instances the pool holds per slot.
const CORE_INSTANCES_PER_SLOT: u32 = 16;
/// Linear memories the pool holds per slot.
const MEMORIES_PER_SLOT: u32 = 4;
/// Tables the pool holds per slot.
const TABLES_PER_SLOT: u32 = 16;
/// How much of each pooled linear memory stays mapped once its instance is
/// gone: the pages the instance wrote, up to this much, are reset in place
/// instead of being unmapped. An interpreter (CPython, SpiderMonkey) writes
/// a few MiB all over its heap on every decision; with less than that kept,
/// the next fresh instance faults those pages in again, which was most of a
/// Python decision's time. Warm memories hold at most this much each and
/// never more than they last used; see docs/sandbox.md.
const MEMORY_KEEP_RESIDENT: usize = 16 << 20;

/// The settings that shape compiled code, for a compile child; compiled
/// functions are read from `compile_cache`'s `functions` directory (and
/// kept there, unless the caller stages them elsewhere).
fn child_settings(config: &HostConfig, compile_cache: Option<&std::path::Path>) -> ChildSettings {
    ChildSettings {
        epoch_interruption: config.enforce_limits,
        max_stack_bytes: config.max_stack_bytes,
        function_cache: compile_cache.map(|dir| dir.join(cache::FUNCTIONS)),
        function_staging: None,
        baseline: false,
    }
}

/// What an agent of `tenant` runs with under `policy`.
fn bind(host: &Inner, tenant: &str, agent: &str, policy: &AgentPolicy) -> Result<Bound, LoadError> {
    let config = &host.config;
    let tenant_policy = host.tenant_policy(tenant);
    let mut limits = config.limits.clone();
    if let Some(t) = &tenant_policy {
        limits = limits.with(&t.limits);
    }
    limits = limits.with(&policy.limits);
    limits.memory_bytes = limits.memory_bytes.min(config.max_memory_bytes);
    let hosts = policy.http_hosts.as_ref().or_else(|| tenant_policy.as_ref().and_then(|t| t.http_hosts.as_ref()));
    let allowed = allowed_hosts(hosts.into_iter().flatten())?;
    Ok(Bound { tenant: tenant.into(), agent: agent.into(), limits, allowed })
}

/// An allow-list, parsed; an entry that is not a host is an error.
fn allowed_hosts<'a>(hosts: impl Iterator<Item = &'a String>) -> Result<Arc<[AllowedHost]>, LoadError> {
    hosts
        .map(|h| AllowedHost::parse(h).ok_or_else(|| LoadError::Policy(format!("`{h}` is not a host or host:port"))))
        .collect()
}

/// The engine configuration of a host: the compile settings a compile
/// child uses too, and pooled, pre-faulted instances.
fn engine_config(config: &HostConfig) -> wasmtime::Config {
    let n = config.max_concurrent.max(1);
    let mut pool = PoolingAllocationConfig::new();
    // Each slot has room for a few core modules (the guest, its shims; a
    // component of many takes several slots, see `weight`).
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_SLOT))
        .total_memories(n.saturating_mul(MEMORIES_PER_SLOT))
        .total_tables(n.saturating_mul(TABLES_PER_SLOT))
        .total_stacks(n)
        .max_memory_size(config.max_memory_bytes)
        .table_elements(config.limits.table_elements.max(20_000))
        // Keeping the pages a decision dirtied mapped and clean (found with
        // pagemap scanning, reset in place) means a fresh instance does not
        // fault its memory, tables and stack in on every decision.
        .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
        .table_keep_resident(64 << 10)
        .async_stack_keep_resident(128 << 10)
        .pagemap_scan(Enabled::Auto);
    // In-process compiles keep functions where the host's configuration
    // keeps compiled components (the engine is made once); a compile
    // child keeps them where its host's cache is.
    let mut wasm = compile::compile_config(&child_settings(config, config.compile_cache.as_deref()));
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    wasm
}

/// Links what guests are granted: the `subs:agent/host` interface, WASI's
/// clocks, randomness, stdio and the inert CLI interfaces a standard
/// library imports, and `wasi:http`; and, inert, the filesystem and
/// sockets that other languages' runtimes import whether an agent uses
/// them or not: no directory is preopened, so no file can be opened, and
/// the WASI context denies every socket (see `state`).
fn link(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::{cli, filesystem, random, sockets};
    use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
    use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};

    type S = StoreState;
    // I/O, both clocks, `random`, stdin/stdout/stderr.
    wasmtime_wasi::p2::add_to_linker_proxy_interfaces_async(linker)?;
    random::insecure::add_to_linker::<S, WasiRandom>(linker, <S as WasiRandomView>::random)?;
    random::insecure_seed::add_to_linker::<S, WasiRandom>(linker, <S as WasiRandomView>::random)?;
    cli::environment::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    cli::exit::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    cli::terminal_input::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    cli::terminal_output::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    cli::terminal_stdin::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    cli::terminal_stdout::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    cli::terminal_stderr::add_to_linker::<S, WasiCli>(linker, <S as WasiCliView>::cli)?;
    filesystem::types::add_to_linker::<S, WasiFilesystem>(linker, <S as WasiFilesystemView>::filesystem)?;
    filesystem::preopens::add_to_linker::<S, WasiFilesystem>(linker, <S as WasiFilesystemView>::filesystem)?;
    let network = sockets::network::LinkOptions::default();
    sockets::network::add_to_linker::<S, WasiSockets>(linker, &network, <S as WasiSocketsView>::sockets)?;
    sockets::instance_network::add_to_linker::<S, WasiSockets>(linker, <S as WasiSocketsView>::sockets)?;
    sockets::tcp::add_to_linker::<S, WasiSockets>(linker, <S as WasiSocketsView>::sockets)?;
    sockets::tcp_create_socket::add_to_linker::<S, WasiSockets>(linker, <S as WasiSocketsView>::sockets)?;
    sockets::udp::add_to_linker::<S, WasiSockets>(linker, <S as WasiSocketsView>::sockets)?;
    sockets::udp_create_socket::add_to_linker::<S, WasiSockets>(linker, <S as WasiSocketsView>::sockets)?;
    sockets::ip_name_lookup::add_to_linker::<S, WasiSockets>(linker, <S as WasiSocketsView>::sockets)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    bindings::host::add_to_linker::<S, HasSelf<S>>(linker, |s| s)?;
    bindings::branch::add_to_linker::<S, HasSelf<S>>(linker, |s| s)?;
    Ok(())
}

/// What one agent of one tenant runs with.
struct Bound {
    tenant: Arc<str>,
    agent: Arc<str>,
    limits: Limits,
    allowed: Arc<[AllowedHost]>,
}

/// A compiled, pre-linked agent component: ready to instantiate once per
/// decision. Cheap to clone.
#[derive(Clone)]
pub struct ComponentAgent {
    /// Its code, shared by every binding of the same upload.
    code: Arc<tier::Code>,
    /// Whether an instance of `pre` passed the type check of `decide`
    /// (shared by every binding of the same component).
    checked: Arc<AtomicBool>,
    host: Arc<Inner>,
    bound: Arc<Bound>,
    /// Slots of the pool one instance takes.
    weight: u32,
}

impl std::fmt::Debug for ComponentAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentAgent")
            .field("tenant", &self.bound.tenant)
            .field("agent", &self.bound.agent)
            .field("limits", &self.bound.limits)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentHost").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// A decision stopped at its wall-clock limit from inside the guest (the
/// epoch callback); reported as [`WorkerError::Timeout`].
#[derive(Debug, thiserror::Error)]
#[error("the decision ran past its deadline")]
struct DeadlinePassed;

/// A replay asks a component as a decision would, and reports the HTTP
/// requests refused to it.
impl subs_core::replay::Candidate for ComponentAgent {
    fn decide_reporting(
        &self,
        delivery: Delivery,
    ) -> BoxFuture<'_, (Result<DecisionResponse, WorkerError>, Option<String>)> {
        Box::pin(ComponentAgent::decide_reporting(self, delivery))
    }
}

impl ComponentAgent {
    /// The same component as `agent_id` of `tenant`: the tenant's policy
    /// from the host's configuration, then `policy`, over the defaults;
    /// logs are tagged with both names.
    pub fn for_agent(&self, tenant: &str, agent_id: &str, policy: &AgentPolicy) -> Result<Self, LoadError> {
        let bound = bind(&self.host, tenant, agent_id, policy)?;
        Ok(Self {
            code: self.code.clone(),
            checked: self.checked.clone(),
            host: self.host.clone(),
            bound: Arc::new(bound),
            weight: self.weight,
        })
    }

    /// The limits each decision of this agent runs with.
    pub fn limits(&self) -> &Limits {
        &self.bound.limits
    }

    /// The size of the agent's compiled code, in bytes: what it holds in
    /// memory and in the compile cache.
    pub fn compiled_bytes(&self) -> u64 {
        let range = self.code.current().instance_pre().component().image_range();
        (range.end.addr() - range.start.addr()) as u64
    }

    /// Whether the agent runs optimized code: false from the upload of a
    /// large component until its optimized compile is done (see
    /// [`HostConfig::baseline_first`]).
    pub fn optimized(&self) -> bool {
        Engine::same(self.code.current().instance_pre().engine(), &self.host.engine)
    }

    /// Instantiates the component once, as a decision would, without
    /// calling it: an upload whose instance cannot start (it needs more
    /// than its limits, or its start traps) is refused with the reason.
    fn trial(&self) -> Result<(), LoadError> {
        block_on(self.instantiate_only()).map_err(|e| match e {
            WorkerError::LimitExceeded(hit) => LoadError::Limits(format!("starting it ran into {hit}")),
            other => LoadError::Start(other.to_string()),
        })
    }

    /// Decides as [`Worker::decide`] does, and tells which outgoing HTTP
    /// requests the engine refused the guest meanwhile ("`destination`:
    /// why; …"), whether or not it decided: a replay reports them, as its
    /// guest may not reach anything.
    pub async fn decide_reporting(
        &self,
        delivery: Delivery,
    ) -> (Result<DecisionResponse, WorkerError>, Option<String>) {
        let mut refused = None;
        let result = self.decide_once(delivery, &mut refused).await;
        (result, refused)
    }

    async fn decide_once(
        &self,
        delivery: Delivery,
        refused: &mut Option<String>,
    ) -> Result<DecisionResponse, WorkerError> {
        let limits = &self.bound.limits;
        let enforce = self.host.config.enforce_limits;
        let wall = match delivery.request.deadline.as_deref().and_then(until) {
            Some(left) => left.min(limits.wall_clock),
            None => limits.wall_clock,
        };
        // The permit is declared before the store so it is released after
        // the store (and its pooled instance) is gone.
        let _slot = self.host.slots.acquire(&self.bound.tenant, self.weight).await;
        let meter = CpuMeter::new();
        let pre = self.code.current();
        let engine = pre.instance_pre().engine();
        let mut store =
            self.host.store(engine, &self.bound, delivery.request.session_id.clone(), delivery.deltas, wall, &meter);
        let call = Call::new(&pre, delivery.request);
        let run = meter.meter(async {
            match call {
                Call::Typed(pre, request) => {
                    let agent =
                        pre.instantiate_checked_once(&mut store, &self.checked).await.map_err(Failure::Start)?;
                    let answer = agent.call_decide(&mut store, &request).await.map_err(Failure::Call)?;
                    Ok(answer.map(|a| Answer::Typed(Box::new(a))))
                }
                Call::Json(pre, request) => {
                    let agent = pre.instantiate_async(&mut store).await.map_err(Failure::Start)?;
                    let answer = agent.call_decide(&mut store, &request).await.map_err(Failure::Call)?;
                    Ok(answer.map(Answer::Json))
                }
                Call::Lazy(pre, request, messages) => {
                    let agent =
                        pre.instantiate_checked_once(&mut store, &self.checked).await.map_err(Failure::Start)?;
                    let branch = store.data_mut().open_branch(messages).map_err(Failure::Start)?;
                    let answer = agent.call_decide(&mut store, &request, branch).await.map_err(Failure::Call);
                    store.data_mut().close_branch();
                    Ok(answer?.map(|a| Answer::Typed(Box::new(a))))
                }
                Call::LazyJson(pre, request, messages) => {
                    let agent = pre.instantiate_async(&mut store).await.map_err(Failure::Start)?;
                    let branch = store.data_mut().open_branch(messages).map_err(Failure::Start)?;
                    let answer = agent.call_decide(&mut store, &request, branch).await.map_err(Failure::Call);
                    store.data_mut().close_branch();
                    Ok(answer?.map(Answer::Json))
                }
            }
        });
        let outcome = if enforce {
            tokio::time::timeout(wall, run).await.map_err(|_| WorkerError::Timeout(wall))?
        } else {
            run.await
        };
        *refused = store.data().refused();
        match outcome {
            Ok(Ok(answer)) => answer.decision(enforce.then_some(limits.decision_bytes)),
            Ok(Err(e)) => {
                // A guest declining after a refused request usually
                // declines because of it; say so in the engine's words.
                let mut message = clip(e.message, ERROR_TEXT_BYTES);
                if let Some(note) = refused_http(store.data()) {
                    message.push_str(&format!(" ({note})"));
                }
                Err(WorkerError::Declined { message, retryable: e.retryable })
            }
            Err(failure) => Err(self.explain(failure, store.data(), wall)),
        }
    }

    /// Turns a failed start or call into the error the delivery fails
    /// with: the limit the guest hit if it hit one, else what trapped, with
    /// the guest's last stderr line (a Rust panic message; from a guest
    /// without WASI, its last error log line, where the SDK sends panics)
    /// and any refused capability, which usually say why.
    fn explain(&self, failure: Failure, state: &StoreState, wall: Duration) -> WorkerError {
        let (error, starting) = match failure {
            Failure::Start(e) => (e, true),
            Failure::Call(e) => (e, false),
        };
        tracing::debug!(error = ?error, "guest failed");
        if error.downcast_ref::<DeadlinePassed>().is_some() {
            return WorkerError::Timeout(wall);
        }
        if let Some(hit) = error.downcast_ref::<LimitHit>() {
            return WorkerError::LimitExceeded(hit.to_string());
        }
        if let Some(hit) = &state.limiter.hit {
            return WorkerError::LimitExceeded(hit.to_string());
        }
        let mut message = match error.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::StackOverflow) => {
                format!("stack overflow (the call stack is limited to {} KiB)", self.host.config.max_stack_bytes >> 10)
            }
            Some(trap) => trap.to_string(),
            None => error.root_cause().to_string(),
        };
        if let Some(note) = refused_http(state) {
            message.push_str(&format!("; {note}"));
        }
        if let Some(tail) = state.stderr_tail() {
            let tail: String = tail.chars().take(QUOTED_CHARS).collect();
            message.push_str(&format!("; its stderr ends: {tail}"));
        } else if let Some(line) = state.last_error() {
            message.push_str(&format!("; its last error log: {line}"));
        }
        if starting { WorkerError::Instantiation(message) } else { WorkerError::Trapped(message) }
    }
}

/// Runs `future` to its end on this thread. The trial instantiation at
/// load is the engine's one async step in a synchronous call; it needs no
/// runtime (the epoch callback's yields wake the future at once).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => return output,
            std::task::Poll::Pending => std::thread::park(),
        }
    }
}

/// The outgoing requests the engine refused during a decision, if any.
fn refused_http(state: &StoreState) -> Option<String> {
    state.refused().map(|refused| format!("the engine refused outgoing HTTP to {refused}"))
}

/// One call of `decide`: the agent's code, and the request in the form
/// of the world it was built against (made before the guest's CPU time is
/// metered).
enum Call<'a> {
    Typed(&'a bindings::AgentPre<StoreState>, Box<wit::DecisionRequest>),
    /// The request as the protocol's JSON.
    Json(&'a bindings::json::AgentJsonPre<StoreState>, String),
    /// The request without its branch, and the branch, which the guest
    /// reads through a `messages` resource.
    Lazy(&'a bindings::v2::AgentPre<StoreState>, Box<bindings::branch::DecisionRequest>, Messages),
    /// The request as JSON without its branch, and the branch.
    LazyJson(&'a bindings::v2::json::AgentJsonPre<StoreState>, String, Messages),
}

impl<'a> Call<'a> {
    fn new(pre: &'a Pre<StoreState>, request: subs_protocol::DecisionRequest) -> Self {
        match pre {
            Pre::Typed(pre) => Self::Typed(pre, Box::new(request.into())),
            Pre::Json(pre) => Self::Json(pre, subs_protocol::to_json(&request)),
            Pre::Lazy(pre) => {
                let (request, messages) = bindings::branch::DecisionRequest::split(request);
                Self::Lazy(pre, Box::new(request), messages)
            }
            Pre::LazyJson(pre) => {
                // Written before the branch is moved out: a client view
                // sends only what the branch does not hold.
                let json = subs_protocol::to_json(&WithoutBranch(&request));
                Self::LazyJson(pre, json, request.messages)
            }
        }
    }
}

/// A decision in the form of its agent's world.
enum Answer {
    /// Boxed: a typed decision is ten times the size of the JSON variant.
    Typed(Box<wit::DecisionResponse>),
    /// The protocol's JSON, as the guest wrote it.
    Json(String),
}

impl Answer {
    /// The decision, read as any worker's is (the error names the field),
    /// and held to `limit` bytes of JSON when one is given.
    fn decision(self, limit: Option<usize>) -> Result<DecisionResponse, WorkerError> {
        let too_large = |limit| WorkerError::LimitExceeded(LimitHit::DecisionSize { limit }.to_string());
        match self {
            Self::Typed(decision) => {
                let decision = DecisionResponse::from_wit(*decision).map_err(WorkerError::MalformedDecision)?;
                match limit {
                    Some(limit) if !fits(&decision, limit) => Err(too_large(limit)),
                    _ => Ok(decision),
                }
            }
            Self::Json(text) => {
                // The text is the decision's size, and is held to the limit
                // before it is parsed.
                match limit {
                    Some(limit) if text.len() > limit => Err(too_large(limit)),
                    _ => subs_protocol::from_json(&text).map_err(WorkerError::MalformedDecision),
                }
            }
        }
    }
}

/// Why a run failed before the guest answered.
enum Failure {
    /// Instantiation failed (a start function trapped, a limit at start).
    Start(wasmtime::Error),
    /// `decide` trapped or was stopped.
    Call(wasmtime::Error),
}

/// The time left until an RFC 3339 deadline; `None` when it cannot be
/// read or has already passed, and the wall-clock limit applies alone. A
/// deadline in the past at delivery means clocks disagree or the request
/// is a replay (the engine's own wait, which set it, ends on its own
/// clock), so it is not taken to mean "no time at all".
fn until(deadline: &str) -> Option<Duration> {
    let at = humantime::parse_rfc3339_weak(deadline).ok()?;
    at.duration_since(std::time::SystemTime::now()).ok().filter(|left| !left.is_zero())
}

/// Whether the decision's JSON fits in `limit` bytes; stops counting at
/// the limit.
fn fits(decision: &DecisionResponse, limit: usize) -> bool {
    struct Budget(usize);
    impl std::io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.checked_sub(buf.len()).ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Budget(limit), decision).is_ok()
}

impl Worker for ComponentAgent {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        // At debug level: a decision runs inside the session's span and
        // the actor's `decision` span, which name all of this at info level;
        // a second span per decision at info would only repeat them, at a
        // cost the durable loop feels (two spans formatted per step).
        let span = tracing::debug_span!(
            "decide",
            tenant = %self.bound.tenant,
            session = %delivery.request.session_id,
            agent = %delivery.request.agent_id,
            trigger = delivery.request.trigger.kind(),
            attempt = delivery.request.attempts,
        );
        Box::pin(async move { self.decide_once(delivery, &mut None).await }.instrument(span))
    }

    fn kind(&self) -> &'static str {
        "component"
    }

    /// Its guest reaches only the engine: WASI's files and sockets are
    /// linked inert, and outgoing HTTP goes only to the allow-list, here
    /// empty. (Its output lines reach the engine's logs.)
    fn contained(&self) -> bool {
        self.bound.allowed.is_empty()
    }
}
