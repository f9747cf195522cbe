//! `subs new rust|python|ts NAME`: a new agent project, from the templates under
//! `templates/` in the source tree.
//!
//! The templates are built into the binary, so `subs new` works wherever
//! `subs` is; what they depend on (the SDK) is in the source tree, which
//! the project names by path: the tree `subs` was built from unless
//! `--sdk` names another. In the templates, `{{name}}` is the project's
//! name, `{{crate}}` the same with `-` as `_` (the Rust crate and the
//! built file), and `{{sdk}}` the source tree.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};

use crate::error::{CliError, CliResult};

/// The longest project name.
const MAX_NAME: usize = 64;

/// The languages a project can be made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// A Rust crate built into a component with cargo.
    Rust,
    /// A Python module built into a component with componentize-py.
    Python,
    /// A TypeScript module bundled with esbuild and built into a component
    /// with componentize-js.
    Ts,
}

/// `subs new <LANGUAGE> <NAME>`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project's language.
    #[arg(value_name = "LANGUAGE")]
    pub language: Language,
    /// The project's name, and the directory it is written to (in the
    /// current directory): a lowercase letter, then lowercase letters,
    /// digits, `-` or `_`.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The subs source tree, whose SDK the project depends on. [default:
    /// the tree this subs was built from]
    #[arg(long, value_name = "DIR", env = "SUBS_SOURCE")]
    pub sdk: Option<PathBuf>,
}

/// One file of a template: where it goes in the project, and its text.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
}

/// The Rust template.
const RUST: &[TemplateFile] = &[
    TemplateFile { path: "Cargo.toml", text: include_str!("../../../templates/rust/Cargo.toml.tmpl") },
    TemplateFile { path: "src/lib.rs", text: include_str!("../../../templates/rust/src/lib.rs") },
    TemplateFile { path: "README.md", text: include_str!("../../../templates/rust/README.md") },
    TemplateFile { path: ".gitignore", text: include_str!("../../../templates/rust/.gitignore") },
];

/// The Python template.
const PYTHON: &[TemplateFile] = &[
    TemplateFile { path: "agent.py", text: include_str!("../../../templates/python/agent.py") },
    TemplateFile { path: "tests/__init__.py", text: include_str!("../../../templates/python/tests/__init__.py") },
    TemplateFile { path: "tests/test_agent.py", text: include_str!("../../../templates/python/tests/test_agent.py") },
    TemplateFile { path: "build.sh", text: include_str!("../../../templates/python/build.sh") },
    TemplateFile { path: "README.md", text: include_str!("../../../templates/python/README.md") },
    TemplateFile { path: ".gitignore", text: include_str!("../../../templates/python/.gitignore") },
];

/// The TypeScript template.
const TS: &[TemplateFile] = &[
    TemplateFile { path: "package.json", text: include_str!("../../../templates/ts/package.json") },
    TemplateFile { path: "tsconfig.json", text: include_str!("../../../templates/ts/tsconfig.json") },
    TemplateFile { path: "src/agent.ts", text: include_str!("../../../templates/ts/src/agent.ts") },
    TemplateFile { path: "test/agent.test.ts", text: include_str!("../../../templates/ts/test/agent.test.ts") },
    TemplateFile { path: "README.md", text: include_str!("../../../templates/ts/README.md") },
    TemplateFile { path: ".gitignore", text: include_str!("../../../templates/ts/.gitignore") },
];

/// Writes the project; refuses a name that is not one and a directory
/// that exists, writing nothing.
pub fn exec(args: NewArgs) -> CliResult {
    check_name(&args.name)?;
    let dir = PathBuf::from(&args.name);
    if dir.symlink_metadata().is_ok() {
        return Err(CliError::usage(anyhow!(
            "{} exists: subs new writes a new directory, and leaves existing ones alone",
            dir.display()
        )));
    }
    let sdk = source_tree(args.sdk.as_deref())?;
    let files = match args.language {
        Language::Rust => RUST,
        Language::Python => PYTHON,
        Language::Ts => TS,
    };
    let sdk_text = sdk.to_str().ok_or_else(|| CliError::usage(anyhow!("{}: not UTF-8", sdk.display())))?;
    check_sdk_path(sdk_text)?;
    let crate_name = args.name.replace('-', "_");
    for file in files {
        let text =
            file.text.replace("{{name}}", &args.name).replace("{{crate}}", &crate_name).replace("{{sdk}}", sdk_text);
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        if path.extension().is_some_and(|e| e == "sh") {
            make_executable(&path)?;
        }
    }
    println!("{}", next_steps(args.language, &args.name, &crate_name));
    Ok(())
}

/// What to do with the new project.
fn next_steps(language: Language, name: &str, crate_name: &str) -> String {
    match language {
        Language::Rust => format!(
            "Made {name}/. Build it and chat with it:\n  cd {name}\n  cargo test\n  \
             cargo build --target wasm32-wasip2 --release\n  subs run target/wasm32-wasip2/release/{crate_name}.wasm"
        ),
        Language::Python => format!(
            "Made {name}/. Build it and chat with it:\n  cd {name}\n  python3 -m unittest\n  ./build.sh\n  \
             subs run {name}.wasm"
        ),
        Language::Ts => format!(
            "Made {name}/. Build it and chat with it:\n  cd {name}\n  npm install && npm run build\n  npm test\n  \
             subs run {name}.wasm"
        ),
    }
}

/// Lets the project's build script run as `./build.sh`.
fn make_executable(path: &Path) -> CliResult {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Whether `name` can name a project in every language: a package, a
/// crate, a directory.
fn check_name(name: &str) -> CliResult {
    let mut chars = name.chars();
    let fits = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= MAX_NAME;
    if fits {
        Ok(())
    } else {
        Err(CliError::usage(anyhow!(
            "`{name}` is not a project name: a lowercase letter, then lowercase letters, digits, - or _ \
             (at most {MAX_NAME})"
        )))
    }
}

/// Whether the source tree's path can be written as it is into every
/// template: a TOML, JSON or Python string, a shell variable in double
/// quotes and a shell word in single quotes.
fn check_sdk_path(path: &str) -> CliResult {
    match path.chars().find(|c| matches!(c, '"' | '\'' | '\\' | '$' | '`') || c.is_control()) {
        None => Ok(()),
        Some(c) => Err(CliError::usage(anyhow!(
            "{path}: the subs source tree's path holds {c:?}, which the project's files cannot quote: \
             move the tree or name a copy with --sdk DIR"
        ))),
    }
}

/// The source tree the project's SDK comes from: `given`, or the one this
/// binary was built from; either must hold the SDK.
fn source_tree(given: Option<&Path>) -> CliResult<PathBuf> {
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (tree, how) = match given {
        Some(tree) => (tree.to_path_buf(), "--sdk"),
        None => (built_from, "the tree this subs was built from"),
    };
    let tree = tree.canonicalize().ok().filter(|t| t.join("guest-sdk/Cargo.toml").is_file()).ok_or_else(|| {
        CliError::usage(anyhow!(
            "{} ({how}) is not a subs source tree with its guest-sdk/: name one with --sdk DIR",
            tree.display()
        ))
    })?;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_every_language() {
        for good in ["a", "approver", "my-agent_2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(MAX_NAME + 1);
        for bad in ["", "Agent", "2agent", "-a", "a b", "a/b", "../a", "a.b", long.as_str()] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tree_path_the_templates_cannot_quote_is_refused() {
        assert!(check_sdk_path("/home/me/my subs-0.1 (copy)/src").is_ok());
        for bad in ["/a\"b", "/a'b", "/a\\b", "/$HOME/subs", "/a`id`", "/a\nb"] {
            let err = check_sdk_path(bad).expect_err(bad).to_string();
            assert!(err.contains("cannot quote"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_templates_name_only_what_is_replaced() {
        for file in RUST.iter().chain(PYTHON).chain(TS) {
            let mut rest = file.text;
            while let Some(at) = rest.find("{{") {
                let end = rest[at..].find("}}").expect("closed") + at + 2;
                assert!(
                    ["{{name}}", "{{crate}}", "{{sdk}}"].contains(&&rest[at..end]),
                    "{}: {}",
                    file.path,
                    &rest[at..end]
                );
                rest = &rest[end..];
            }
        }
    }
}
