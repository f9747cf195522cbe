//! `subs keys …`: API keys in the store of a data directory.
//!
//! These commands open the store directly, so they work only while no
//! server holds it; the server reads keys when it starts. (Keys in the
//! config file need no store at all.) A key is printed once, when it is
//! created; only its SHA-256 is stored.

use std::path::PathBuf;

use anyhow::anyhow;
use serde_json::json;
use subs_engine::store::redb::RedbStore;
use subs_engine::store::{Batch, KeyRecord, Op, Store as _, valid_id};
use subs_server::auth::{hash_key, key_prefix, new_key};

use crate::data;
use crate::error::{CliError, CliResult};
use crate::settings;

/// `subs keys …`.
#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Create a key for a tenant and print it (once: only its hash is kept).
    Create(CreateArgs),
    /// List the keys (the store's, and the config file's with --config).
    List(ListArgs),
    /// Revoke a key of the store, named by its hash, a prefix of its hash
    /// or of the key, or the key itself.
    Revoke(RevokeArgs),
}

/// Where the store is.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// The data directory. [default: the config file's, else a per-user
    /// data directory, e.g. ~/.local/share/subs]
    #[arg(long, value_name = "DIR", env = "SUBS_DATA")]
    pub data: Option<PathBuf>,
    /// The server's config file (for its data directory and keys).
    #[arg(long, value_name = "FILE", env = "SUBS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of text for people.
    #[arg(long)]
    pub json: bool,
}

/// `subs keys create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The tenant the key acts for.
    #[arg(long, value_name = "TENANT")]
    pub tenant: String,
    /// A label, to tell keys apart.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub data: DataArgs,
}

/// `subs keys list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub data: DataArgs,
}

/// `subs keys revoke`.
#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The key's hash, a prefix of it (at least 8 characters), the key's
    /// listed prefix, or the key itself.
    #[arg(value_name = "HASH_OR_PREFIX")]
    pub key: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub data: DataArgs,
}

/// Runs a keys command.
pub async fn exec(command: KeysCommand) -> CliResult {
    match command {
        KeysCommand::Create(args) => create(args).await,
        KeysCommand::List(args) => list(args).await,
        KeysCommand::Revoke(args) => revoke(args).await,
    }
}

/// The store of the data directory, closed when done.
async fn with_store<T>(args: &DataArgs, work: impl AsyncFnOnce(&RedbStore) -> CliResult<T>) -> CliResult<T> {
    let file = settings::load(args.config.as_deref())?;
    let dir = settings::data_dir(args.data.as_deref(), &file)?;
    data::prepare(&dir)?;
    let store = data::open_store(
        &dir.join(settings::STORE_FILE),
        "a running `subs serve` holds it. Stop the server to manage the store's keys, \
         or put keys in the server's config file ([[keys]], see docs/configuration.md)",
    )?;
    let result = work(&store).await;
    store.close().await.map_err(|e| CliError::failed(anyhow!("closing the store: {e}")))?;
    result
}

async fn create(args: CreateArgs) -> CliResult {
    if !valid_id(&args.tenant) {
        return Err(CliError::usage(anyhow!(
            "`{}` is not a valid tenant name (1-128 of A-Z a-z 0-9 _ - . :, not starting with .)",
            args.tenant
        )));
    }
    let key = new_key();
    let record = KeyRecord {
        tenant: args.tenant.clone(),
        hash: hash_key(&key),
        prefix: key_prefix(&key),
        name: args.name.clone(),
        created_ms: subs_engine::clock::now_ms(),
    };
    with_store(&args.data, async |store| {
        let mut batch = Batch::new();
        batch.push(Op::PutKey(record.clone()));
        store.commit(batch).await.map_err(|e| CliError::failed(anyhow!("storing the key: {e}")))
    })
    .await?;
    if args.data.json {
        println!(
            "{}",
            json!({ "key": key, "tenant": record.tenant, "hash": record.hash, "prefix": record.prefix, "name": record.name })
        );
    } else {
        // The key alone on stdout, so `KEY=$(subs keys create …)` works.
        println!("{key}");
        eprintln!(
            "created a key for tenant `{}` (sha256 {}). It is shown only this once: keep it secret. \
             A server reads keys when it starts.",
            record.tenant, record.hash
        );
    }
    Ok(())
}

async fn list(args: ListArgs) -> CliResult {
    let file = settings::load(args.data.config.as_deref())?;
    let mut keys: Vec<(KeyRecord, &str)> = file.key_records()?.into_iter().map(|k| (k, "config")).collect();
    let stored = with_store(&args.data, async |store| store.keys().map_err(|e| CliError::failed(anyhow!(e)))).await?;
    keys.extend(stored.into_iter().map(|k| (k, "store")));
    if args.data.json {
        let list: Vec<_> = keys
            .iter()
            .map(|(k, source)| {
                json!({ "tenant": k.tenant, "hash": k.hash, "prefix": k.prefix, "name": k.name, "created_ms": k.created_ms, "source": source })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    if keys.is_empty() {
        println!("no keys: a server on this data directory serves the single tenant `local`, on loopback only");
        return Ok(());
    }
    let rows: Vec<[String; 5]> = keys
        .iter()
        .map(|(k, source)| {
            [
                k.tenant.clone(),
                if k.prefix.is_empty() { "-".to_owned() } else { format!("{}…", k.prefix) },
                k.hash.chars().take(16).collect(),
                k.name.clone().unwrap_or_else(|| "-".to_owned()),
                (*source).to_owned(),
            ]
        })
        .collect();
    print!("{}", crate::table(["TENANT", "KEY", "SHA256", "NAME", "SOURCE"], &rows));
    Ok(())
}

async fn revoke(args: RevokeArgs) -> CliResult {
    let wanted = args.key.trim().to_owned();
    if wanted.len() < 8 {
        return Err(CliError::usage(anyhow!("give at least 8 characters of the key's hash or prefix")));
    }
    let file = settings::load(args.data.config.as_deref())?;
    let revoked = with_store(&args.data, async |store| {
        let keys = store.keys().map_err(|e| CliError::failed(anyhow!(e)))?;
        let matching: Vec<&KeyRecord> = keys.iter().filter(|k| matches(k, &wanted)).collect();
        let record = match matching.as_slice() {
            [one] => (*one).clone(),
            [] => {
                let in_file = file.key_records()?.iter().any(|k| matches(k, &wanted));
                return Err(CliError::failed(if in_file {
                    anyhow!("that key is in the config file, not the store: remove it from the file")
                } else {
                    anyhow!("no stored key matches `{wanted}` (see `subs keys list`)")
                }));
            }
            many => {
                let hashes: Vec<String> = many.iter().map(|k| k.hash.chars().take(16).collect()).collect();
                return Err(CliError::usage(anyhow!(
                    "`{wanted}` matches {} keys ({}…): give more of the hash",
                    many.len(),
                    hashes.join("…, ")
                )));
            }
        };
        let mut batch = Batch::new();
        batch.push(Op::DeleteKey { tenant: record.tenant.clone(), hash: record.hash.clone() });
        store.commit(batch).await.map_err(|e| CliError::failed(anyhow!("revoking the key: {e}")))?;
        Ok(record)
    })
    .await?;
    if args.data.json {
        println!("{}", json!({ "tenant": revoked.tenant, "hash": revoked.hash, "revoked": true }));
    } else {
        println!("revoked the key of tenant `{}` (sha256 {})", revoked.tenant, revoked.hash);
    }
    Ok(())
}

/// Whether `wanted` names `key`: its hash or a prefix of it, its listed
/// prefix (or more of the key), or the key itself.
fn matches(key: &KeyRecord, wanted: &str) -> bool {
    let lower = wanted.to_ascii_lowercase();
    key.hash.starts_with(&lower)
        || (!key.prefix.is_empty() && (wanted.starts_with(&key.prefix) || key.prefix.starts_with(wanted)))
        || key.hash == hash_key(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_named_by_hash_prefix_or_key() {
        let key = "subs_0123456789abcdef0123456789abcdef";
        let record = KeyRecord {
            tenant: "t".to_owned(),
            hash: hash_key(key),
            prefix: key_prefix(key),
            name: None,
            created_ms: 0,
        };
        assert!(matches(&record, &record.hash));
        assert!(matches(&record, &record.hash[..8]));
        assert!(matches(&record, &record.hash[..8].to_uppercase()));
        assert!(matches(&record, &record.prefix));
        assert!(matches(&record, key));
        assert!(!matches(&record, "subs_ffffffff"));
        assert!(!matches(&record, "00000000"));
    }
}
