//! What the operator's commands share: the server and the operator key of
//! the admin API (`subs tenants`, `subs keys`), and `subs admin-key`, which
//! makes an operator key.

use anyhow::anyhow;
use serde_json::json;
use subs_server::auth::{hash_key, new_admin_key};

use crate::client::{Client, DEFAULT_SERVER};
use crate::error::{CliError, CliResult};

/// Where the admin API is, and the key it takes.
#[derive(Debug, Clone, clap::Args)]
pub struct AdminArgs {
    /// The server's base URL.
    #[arg(long, value_name = "URL", env = "SUBS_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// The operator key (the server's `[admin]` key, or the SUBS_ADMIN_KEY
    /// it was started with).
    #[arg(long, value_name = "KEY", env = "SUBS_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
}

impl AdminArgs {
    /// A client of the admin API; the operator key is required.
    pub fn client(&self) -> CliResult<Client> {
        let Some(key) = self.admin_key.clone().filter(|k| !k.trim().is_empty()) else {
            return Err(CliError::usage(anyhow!(
                "the admin API takes the operator key: pass --admin-key or set SUBS_ADMIN_KEY \
                 (`subs admin-key` makes one; docs/configuration.md)"
            )));
        };
        Client::with_key(&self.server, Some(key), "pass the operator key: --admin-key or SUBS_ADMIN_KEY")
    }
}

/// `subs admin-key`.
#[derive(Debug, clap::Args)]
pub struct AdminKeyArgs {
    /// Print JSON (`{"key", "hash"}`) instead of text for people.
    #[arg(long)]
    pub json: bool,
}

/// Prints a new operator key, and on stderr the config file lines that
/// give it to a server.
pub fn admin_key(args: &AdminKeyArgs) -> CliResult {
    let key = new_admin_key();
    let hash = hash_key(&key);
    if args.json {
        println!("{}", json!({ "key": key, "hash": hash }));
        return Ok(());
    }
    // The key alone on stdout, so `KEY=$(subs admin-key)` works.
    println!("{key}");
    eprintln!(
        "a new operator key, shown only this once. Give its hash to the server in its config file:\n\n\
         [admin]\nkey_sha256 = \"{hash}\"\n\n\
         (or start it with SUBS_ADMIN_KEY set to the key), and the key to `subs tenants` and `subs keys` \
         with --admin-key or SUBS_ADMIN_KEY."
    );
    Ok(())
}
