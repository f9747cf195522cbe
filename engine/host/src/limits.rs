//! What one decision may use: the limits, their defaults, the overrides an
//! operator sets per tenant or per agent, and the resource limiter that
//! enforces the memory and table limits inside wasmtime.

use std::time::Duration;

use super::LoadError;
use super::inspect::Needs;

/// The limits of one decision. Every decision runs in a fresh instance, so
/// each limit bounds exactly one call of the agent's `decide`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory, in bytes, summed over the component's memories.
    /// Growing past it fails the growth; the guest then usually traps, and
    /// the error names this limit.
    pub memory_bytes: usize,
    /// Wall-clock time from the start of instantiation. The request's
    /// `deadline`, when earlier, wins.
    pub wall_clock: Duration,
    /// Time the decision keeps a thread busy: its guest code and the host
    /// calls it makes (randomness, clocks, output, deltas, HTTP bodies),
    /// but not its waits (an outgoing request in flight, a sleep). Checked
    /// at every epoch tick (10 ms by default) while guest code runs.
    pub cpu: Duration,
    /// Elements of any one table.
    pub table_elements: usize,
    /// Core instances in the decision's store. A component instantiates a
    /// few core modules; a component that nests many is refused.
    pub instances: usize,
    /// Tables in the decision's store.
    pub tables: usize,
    /// Linear memories in the decision's store.
    pub memories: usize,
    /// The returned decision, measured as the JSON the engine would store.
    pub decision_bytes: usize,
    /// Bytes of stdout and stderr captured into the logs, and, counted
    /// apart, of lines sent through the host's `log`; the rest is dropped,
    /// with one warning.
    pub log_bytes: usize,
    /// Lines the guest may send through the host's `log`.
    pub log_lines: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            wall_clock: Duration::from_secs(30),
            cpu: Duration::from_secs(10),
            table_elements: 20_000,
            instances: 32,
            tables: 32,
            memories: 4,
            decision_bytes: 16 << 20,
            log_bytes: 1 << 20,
            log_lines: 1000,
        }
    }
}

/// Changes to some [`Limits`]; `None` keeps the value beneath. Applied in
/// order: the host's defaults, then the tenant's overrides, then the
/// agent's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    /// See [`Limits::memory_bytes`].
    pub memory_bytes: Option<usize>,
    /// See [`Limits::wall_clock`].
    pub wall_clock: Option<Duration>,
    /// See [`Limits::cpu`].
    pub cpu: Option<Duration>,
    /// See [`Limits::table_elements`].
    pub table_elements: Option<usize>,
    /// See [`Limits::instances`].
    pub instances: Option<usize>,
    /// See [`Limits::tables`].
    pub tables: Option<usize>,
    /// See [`Limits::memories`].
    pub memories: Option<usize>,
    /// See [`Limits::decision_bytes`].
    pub decision_bytes: Option<usize>,
    /// See [`Limits::log_bytes`].
    pub log_bytes: Option<usize>,
    /// See [`Limits::log_lines`].
    pub log_lines: Option<usize>,
}

impl Limits {
    /// These limits with `overrides` applied.
    pub fn with(&self, overrides: &LimitOverrides) -> Limits {
        Limits {
            memory_bytes: overrides.memory_bytes.unwrap_or(self.memory_bytes),
            wall_clock: overrides.wall_clock.unwrap_or(self.wall_clock),
            cpu: overrides.cpu.unwrap_or(self.cpu),
            table_elements: overrides.table_elements.unwrap_or(self.table_elements),
            instances: overrides.instances.unwrap_or(self.instances),
            tables: overrides.tables.unwrap_or(self.tables),
            memories: overrides.memories.unwrap_or(self.memories),
            decision_bytes: overrides.decision_bytes.unwrap_or(self.decision_bytes),
            log_bytes: overrides.log_bytes.unwrap_or(self.log_bytes),
            log_lines: overrides.log_lines.unwrap_or(self.log_lines),
        }
    }
}

impl Limits {
    /// Refuses a component whose instance needs more than these limits
    /// allow to start at all (every decision would fail), naming each
    /// number and the setting that raises it.
    pub(crate) fn admit(&self, needs: &Needs) -> Result<(), LoadError> {
        let mut over = Vec::new();
        let mut check = |what: &str, needs: u64, limit: usize, setting: &str| {
            if needs > limit as u64 {
                over.push(format!("{needs} {what} (its limit is {limit}, setting `{setting}`)"));
            }
        };
        check("core instances", needs.core_instances, self.instances, "instances");
        check("linear memories", needs.memories, self.memories, "memories");
        check("tables", needs.tables, self.tables, "tables");
        check("table elements in one table", needs.largest_table, self.table_elements, "table_elements");
        if needs.initial_memory_bytes > self.memory_bytes as u64 {
            over.push(format!(
                "{} of linear memory at start (its limit is {}, setting `memory_bytes`)",
                mib(usize::try_from(needs.initial_memory_bytes).unwrap_or(usize::MAX)),
                mib(self.memory_bytes)
            ));
        }
        if over.is_empty() {
            return Ok(());
        }
        Err(LoadError::Limits(format!(
            "to start it needs {}; raise them in the sandbox limits of its tenant or agent \
             ([tenants.<tenant>.sandbox] or [agents.<tenant>.<agent>] in the config file)",
            over.join(", ")
        )))
    }
}

/// A limit a decision ran into; the error a delivery fails with says which
/// and by how much.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitHit {
    /// Linear memory would have grown past the limit.
    #[error("its memory limit of {} (it asked for {})", mib(*limit), mib(*asked))]
    Memory {
        /// The limit, in bytes.
        limit: usize,
        /// The size the guest asked to grow to, in bytes.
        asked: usize,
    },
    /// A table would have grown past the limit.
    #[error("its table limit of {limit} elements (it asked for {asked})")]
    Table {
        /// The limit, in elements.
        limit: usize,
        /// The size the guest asked to grow to.
        asked: usize,
    },
    /// The guest ran code for longer than its CPU limit.
    #[error("its CPU limit of {0:?}: it kept running without deciding")]
    Cpu(Duration),
    /// The returned decision was larger than the limit.
    #[error("its decision size limit of {} (the decision was larger)", mib(*limit))]
    DecisionSize {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Bytes as MiB with one decimal, the unit operators set limits in.
fn mib(bytes: usize) -> String {
    #[allow(clippy::cast_precision_loss)]
    let mib = bytes as f64 / f64::from(1u32 << 20);
    format!("{mib:.1} MiB")
}

/// Enforces [`Limits`] on one store, and remembers the limit a guest hit:
/// a failed growth makes the guest trap on its own terms (Rust aborts with
/// `unreachable`), and the error should name the limit, not the symptom.
pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    instances: usize,
    tables: usize,
    memories: usize,
    /// Bytes of linear memory granted so far, over every memory of the
    /// store; the limit is on the sum.
    memory_in_use: usize,
    /// The first limit the guest ran into, if any.
    pub(crate) hit: Option<LimitHit>,
}

impl Limiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            memory_bytes: limits.memory_bytes,
            table_elements: limits.table_elements,
            instances: limits.instances,
            tables: limits.tables,
            memories: limits.memories,
            memory_in_use: 0,
            hit: None,
        }
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let asked = self.memory_in_use.saturating_sub(current).saturating_add(desired);
        if asked > self.memory_bytes {
            self.hit.get_or_insert(LimitHit::Memory { limit: self.memory_bytes, asked });
            return Ok(false);
        }
        self.memory_in_use = asked;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            self.hit.get_or_insert(LimitHit::Table { limit: self.table_elements, asked: desired });
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::ResourceLimiter;

    use super::*;

    #[test]
    fn overrides_apply_field_by_field() {
        let base = Limits::default();
        let tenant = base.with(&LimitOverrides { memory_bytes: Some(1 << 20), ..LimitOverrides::default() });
        let agent = tenant.with(&LimitOverrides { cpu: Some(Duration::from_millis(5)), ..LimitOverrides::default() });
        assert_eq!(agent.memory_bytes, 1 << 20);
        assert_eq!(agent.cpu, Duration::from_millis(5));
        assert_eq!(agent.wall_clock, base.wall_clock);
    }

    #[test]
    fn a_component_needing_more_than_its_limits_is_refused_with_the_numbers_and_settings() {
        let limits = Limits::default();
        let fits =
            Needs { core_instances: 32, memories: 4, initial_memory_bytes: 1 << 20, tables: 2, largest_table: 10 };
        assert!(limits.admit(&fits).is_ok());
        let err = limits
            .admit(&Needs { core_instances: 61, initial_memory_bytes: 80 << 20, ..fits })
            .unwrap_err()
            .to_string();
        assert!(err.contains("61 core instances (its limit is 32, setting `instances`)"), "{err}");
        assert!(
            err.contains("80.0 MiB of linear memory at start (its limit is 64.0 MiB, setting `memory_bytes`)"),
            "{err}"
        );
        assert!(!err.contains("tables"), "only what is over is named: {err}");
    }

    #[test]
    fn memory_is_limited_over_all_memories_and_the_hit_is_remembered() {
        let mut limiter = Limiter::new(&Limits { memory_bytes: 3 << 16, ..Limits::default() });
        assert!(limiter.memory_growing(0, 2 << 16, None).unwrap());
        assert!(limiter.memory_growing(0, 1 << 16, None).unwrap());
        assert!(!limiter.memory_growing(1 << 16, 2 << 16, None).unwrap());
        assert_eq!(limiter.hit, Some(LimitHit::Memory { limit: 3 << 16, asked: 4 << 16 }));
        assert!(limiter.hit.unwrap().to_string().starts_with("its memory limit of"));
    }
}
