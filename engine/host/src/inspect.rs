//! What a component is made of, read from its bytes before anything is
//! compiled: its imports and exports, the core instances, memories and
//! tables instantiating it creates, and how much code a compiler would
//! face.
//!
//! Uploads are checked against this first. A component that imports what
//! the engine does not grant, exports no `decide`, could never instantiate
//! under its tenant's limits, or holds more code than the compile budget
//! allows is refused in milliseconds, with the numbers, instead of after a
//! compile that may take minutes and gigabytes. Reading is one linear pass
//! over the bytes and holds a few counters per module.

use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind, ComponentTypeRef, Encoding,
    Instance, Parser, Payload,
};

/// The shape of a component, as its bytes declare it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    /// The component's imports, by name (`wasi:cli/stdout@0.2.12`).
    pub imports: Vec<String>,
    /// Its exports, by name.
    pub exports: Vec<String>,
    /// What one instantiation creates.
    pub needs: Needs,
    /// Functions its core modules define (each is compiled once, however
    /// often its module is instantiated).
    pub functions: u64,
    /// The largest function body, in bytes.
    pub largest_function: u64,
    /// The most locals any one function declares.
    pub most_locals: u64,
    /// All function bodies, in bytes.
    pub code_bytes: u64,
}

/// What instantiating a component (or one of its modules) creates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Core instances.
    pub core_instances: u64,
    /// Linear memories the instances define.
    pub memories: u64,
    /// Their initial sizes, summed, in bytes.
    pub initial_memory_bytes: u64,
    /// Tables the instances define.
    pub tables: u64,
    /// The largest initial table, in elements.
    pub largest_table: u64,
}

impl Needs {
    fn add(&mut self, other: Needs) {
        self.core_instances = self.core_instances.saturating_add(other.core_instances);
        self.memories = self.memories.saturating_add(other.memories);
        self.initial_memory_bytes = self.initial_memory_bytes.saturating_add(other.initial_memory_bytes);
        self.tables = self.tables.saturating_add(other.tables);
        self.largest_table = self.largest_table.max(other.largest_table);
    }

    /// A module or component whose contents are not in the bytes (an
    /// imported one): it counts as one instance of nothing, and the trial
    /// instantiation after compiling finds out the rest.
    const UNKNOWN: Needs =
        Needs { core_instances: 1, memories: 0, initial_memory_bytes: 0, tables: 0, largest_table: 0 };
}

/// Bytes that could not be read as a component or module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

/// One module or component being read.
enum Frame {
    /// A core module: what one instance of it creates.
    Module(Needs),
    /// A component: its module and component index spaces, each entry what
    /// one instantiation of it creates, and what it instantiates.
    Component { modules: Vec<Needs>, components: Vec<Needs>, creates: Needs },
}

/// Reads the shape of `bytes`, a component or a core module.
pub fn inspect(bytes: &[u8]) -> Result<Shape, Unreadable> {
    let mut shape = Shape::default();
    let mut stack: Vec<Frame> = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| Unreadable(format!("{e}")))?;
        let root = stack.len() == 1;
        match payload {
            Payload::Version { encoding, .. } => stack.push(match encoding {
                Encoding::Module => Frame::Module(Needs { core_instances: 1, ..Needs::default() }),
                Encoding::Component => {
                    Frame::Component { modules: Vec::new(), components: Vec::new(), creates: Needs::default() }
                }
            }),
            Payload::End(_) => {
                let done = stack.pop().ok_or_else(|| Unreadable("an end without a start".to_owned()))?;
                let (needs, is_module) = match done {
                    Frame::Module(needs) => (needs, true),
                    Frame::Component { creates, .. } => (creates, false),
                };
                match stack.last_mut() {
                    Some(Frame::Component { modules, components, .. }) => {
                        if is_module {
                            modules.push(needs)
                        } else {
                            components.push(needs)
                        }
                    }
                    Some(Frame::Module(_)) => return Err(Unreadable("a module nested in a module".to_owned())),
                    None => shape.needs = needs,
                }
            }
            Payload::MemorySection(reader) => {
                let Some(Frame::Module(needs)) = stack.last_mut() else { continue };
                for memory in reader {
                    let memory = memory.map_err(|e| Unreadable(format!("{e}")))?;
                    needs.memories += 1;
                    let bytes = memory.initial.saturating_mul(1u64 << memory.page_size_log2());
                    needs.initial_memory_bytes = needs.initial_memory_bytes.saturating_add(bytes);
                }
            }
            Payload::TableSection(reader) => {
                let Some(Frame::Module(needs)) = stack.last_mut() else { continue };
                for table in reader {
                    let table = table.map_err(|e| Unreadable(format!("{e}")))?;
                    needs.tables += 1;
                    needs.largest_table = needs.largest_table.max(table.ty.initial);
                }
            }
            Payload::FunctionSection(reader) => shape.functions = shape.functions.saturating_add(reader.count().into()),
            Payload::CodeSectionEntry(body) => {
                let size = body.range().len() as u64;
                shape.code_bytes = shape.code_bytes.saturating_add(size);
                shape.largest_function = shape.largest_function.max(size);
                let mut locals = 0u64;
                let reader = body.get_locals_reader().map_err(|e| Unreadable(format!("{e}")))?;
                for entry in reader {
                    let (count, _) = entry.map_err(|e| Unreadable(format!("{e}")))?;
                    locals = locals.saturating_add(count.into());
                }
                shape.most_locals = shape.most_locals.max(locals);
            }
            Payload::InstanceSection(reader) => {
                let Some(Frame::Component { modules, creates, .. }) = stack.last_mut() else { continue };
                for instance in reader {
                    if let Instance::Instantiate { module_index, .. } =
                        instance.map_err(|e| Unreadable(format!("{e}")))?
                    {
                        creates.add(modules.get(module_index as usize).copied().unwrap_or(Needs::UNKNOWN));
                    }
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                let Some(Frame::Component { components, creates, .. }) = stack.last_mut() else { continue };
                for instance in reader {
                    if let ComponentInstance::Instantiate { component_index, .. } =
                        instance.map_err(|e| Unreadable(format!("{e}")))?
                    {
                        creates.add(components.get(component_index as usize).copied().unwrap_or_default());
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    let alias = alias.map_err(|e| Unreadable(format!("{e}")))?;
                    let (module, entry) = match alias {
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::CoreModule, count, index } => {
                            (true, outer(&stack, count, index, true))
                        }
                        ComponentAlias::Outer { kind: ComponentOuterAliasKind::Component, count, index } => {
                            (false, outer(&stack, count, index, false))
                        }
                        ComponentAlias::InstanceExport { kind: ComponentExternalKind::Module, .. } => {
                            (true, Needs::UNKNOWN)
                        }
                        ComponentAlias::InstanceExport { kind: ComponentExternalKind::Component, .. } => {
                            (false, Needs::default())
                        }
                        _ => continue,
                    };
                    if let Some(Frame::Component { modules, components, .. }) = stack.last_mut() {
                        if module { modules.push(entry) } else { components.push(entry) }
                    }
                }
            }
            Payload::ComponentImportSection(reader) => {
                for import in reader {
                    let import = import.map_err(|e| Unreadable(format!("{e}")))?;
                    // A type import (`use types.{decision-request}` in a
                    // world) names a type, not something to link.
                    let linked = !matches!(import.ty, ComponentTypeRef::Type(_) | ComponentTypeRef::Value(_));
                    if root && linked {
                        shape.imports.push(import.name.name.to_owned());
                    }
                    if let Some(Frame::Component { modules, components, .. }) = stack.last_mut() {
                        match import.ty {
                            ComponentTypeRef::Module(_) => modules.push(Needs::UNKNOWN),
                            ComponentTypeRef::Component(_) => components.push(Needs::default()),
                            _ => {}
                        }
                    }
                }
            }
            Payload::ComponentExportSection(reader) if root => {
                for export in reader {
                    shape.exports.push(export.map_err(|e| Unreadable(format!("{e}")))?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(shape)
}

/// What one instantiation of the module (or component) `index` of the
/// component `count` levels out creates.
fn outer(stack: &[Frame], count: u32, index: u32, module: bool) -> Needs {
    let at = stack.len().checked_sub(1 + count as usize).and_then(|i| stack.get(i));
    match at {
        Some(Frame::Component { modules, components, .. }) => {
            let list = if module { modules } else { components };
            list.get(index as usize).copied().unwrap_or(if module { Needs::UNKNOWN } else { Needs::default() })
        }
        _ => {
            if module {
                Needs::UNKNOWN
            } else {
                Needs::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wat(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }

    #[test]
    fn counts_what_instantiation_creates_nested_and_repeated() {
        let bytes = wat(r#"
            (component
                (import "wasi:cli/stdout@0.2.12" (instance))
                (core module $m (memory 2) (table 7 funcref) (func (local i32 i64 i64)) (func))
                (core module $n (memory 1) (memory 1))
                (core instance (instantiate $m))
                (core instance (instantiate $m))
                (component $c
                    (core module $inner (memory 3))
                    (core instance (instantiate $inner))
                    (core instance (instantiate $inner))
                )
                (instance (instantiate $c))
                (core instance (instantiate $n))
            )
        "#);
        let shape = inspect(&bytes).unwrap();
        assert_eq!(shape.imports, ["wasi:cli/stdout@0.2.12"]);
        assert_eq!(
            shape.needs,
            Needs {
                core_instances: 5,
                memories: 6,
                initial_memory_bytes: (2 + 2 + 3 + 3 + 1 + 1) << 16,
                tables: 2,
                largest_table: 7,
            }
        );
        assert_eq!(shape.functions, 2);
        assert_eq!(shape.most_locals, 3);
    }
}
