//! `subs keys …`: tenants' API keys.
//!
//! By default these commands ask a running server, through its admin API
//! with the operator key: a key created works at once, a revoked one is
//! refused at once. With `--data DIR` (or `--config FILE`) they open the
//! store of a data directory instead, which works only while no server
//! holds it (a server reads the store's keys when it starts): that is how
//! a first key is made without an operator key. A key is printed once,
//! when it is created; only its SHA-256 is stored.
//!
//! Only a redb store is opened directly: where the config file keeps
//! sessions in PostgreSQL (`[store] url`), keys are managed through a
//! running server's admin API.

use std::path::PathBuf;

use anyhow::anyhow;
use reqwest::Method;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use subs_engine::store::{Batch, KeyRecord, NAME_RULE, Op, Store as _, TenantRecord, valid_name};
use subs_server::auth::{hash_key, key_prefix, names_key, new_key};
use subs_store_redb::RedbStore;

use crate::admin::AdminArgs;
use crate::data;
use crate::error::{CliError, CliResult};
use crate::settings;

/// `subs keys …`.
#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Create a key for a tenant and print it (once: only its hash is kept).
    Create(CreateArgs),
    /// List the keys: the store's and the config file's.
    List(ListArgs),
    /// Revoke a key of the store, named by its hash, a prefix of its hash
    /// or of the key, or the key itself.
    Revoke(RevokeArgs),
}

/// Where the keys are: a running server (by default), or the store of a
/// data directory (`--data`, `--config`).
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: AdminArgs,
    /// Open the store of this data directory instead of asking a server;
    /// the server using it must be stopped.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Open the store of this config file's data directory instead of
    /// asking a server (and list the file's keys too).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of text for people.
    #[arg(long)]
    pub json: bool,
}

impl DataArgs {
    /// Whether the store is opened directly rather than a server asked.
    fn offline(&self) -> bool {
        self.data.is_some() || self.config.is_some()
    }
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
    if let settings::StoreChoice::Postgres { url, .. } = settings::store(None, &file)? {
        return Err(CliError::usage(anyhow!(
            "the config file keeps sessions in PostgreSQL ({}): manage keys through a running server's admin API \
             (leave out --data and --config, and give the operator key: --admin-key or SUBS_ADMIN_KEY)",
            subs_store_postgres::redact(&url)
        )));
    }
    let dir = settings::data_dir(args.data.as_deref(), &file)?;
    data::prepare(&dir)?;
    let store = data::open_store(
        &dir.join(settings::STORE_FILE),
        "a running `subs serve` holds it. Manage the keys through the server instead (leave out --data and \
         --config, and give the operator key: --admin-key or SUBS_ADMIN_KEY), or stop the server",
    )?;
    let result = work(&store).await;
    store.close().await.map_err(|e| CliError::failed(anyhow!("closing the store: {e}")))?;
    result
}

async fn create(args: CreateArgs) -> CliResult {
    if !valid_name(&args.tenant) {
        return Err(CliError::usage(anyhow!("`{}` is not a valid tenant name ({NAME_RULE})", args.tenant)));
    }
    if !args.data.offline() {
        return create_online(args).await;
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
        // The tenant is recorded with its first key, as the admin API
        // lists tenants.
        let tenants = store.tenants().await.map_err(|e| CliError::failed(anyhow!(e)))?;
        if !tenants.iter().any(|t| t.tenant == record.tenant) {
            let now = record.created_ms;
            batch.push(Op::PutTenant(TenantRecord {
                tenant: record.tenant.clone(),
                limits: serde_json::Map::new(),
                created_ms: now,
                updated_ms: now,
            }));
        }
        batch.push(Op::PutKey(record.clone()));
        store.commit(batch).await.map_err(|e| CliError::failed(anyhow!("storing the key: {e}")))
    })
    .await?;
    let answer = json!({
        "key": key, "tenant": record.tenant, "hash": record.hash, "prefix": record.prefix, "name": record.name,
        "created_ms": record.created_ms,
    });
    print_created(&answer, args.data.json, "A server reads the store's keys when it starts.");
    Ok(())
}

/// Prints a key just created: alone on stdout (so `KEY=$(subs keys
/// create …)` works), what it is on stderr.
fn print_created(answer: &Value, json: bool, when: &str) {
    if json {
        println!("{answer}");
        return;
    }
    println!("{}", str_at(answer, "key"));
    eprintln!(
        "created a key for tenant `{}` (sha256 {}). It is shown only this once: keep it secret. {when}",
        str_at(answer, "tenant"),
        str_at(answer, "hash")
    );
}

fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

async fn create_online(args: CreateArgs) -> CliResult {
    let client = args.data.admin.client()?;
    let body = json!({ "tenant": args.tenant, "name": args.name });
    let request =
        client.request(Method::POST, "/v1/admin/keys").header(CONTENT_TYPE, "application/json").body(body.to_string());
    let answer = client.json(request).await?;
    print_created(&answer, args.data.json, "It works at once.");
    Ok(())
}

async fn list(args: ListArgs) -> CliResult {
    if !args.data.offline() {
        let client = args.data.admin.client()?;
        let answer = client.json(client.request(Method::GET, "/v1/admin/keys")).await?;
        let keys: Vec<(KeyRecord, String)> = answer
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| {
                let record = KeyRecord {
                    tenant: str_at(k, "tenant").to_owned(),
                    hash: str_at(k, "hash").to_owned(),
                    prefix: str_at(k, "prefix").to_owned(),
                    name: k.get("name").and_then(Value::as_str).map(str::to_owned),
                    created_ms: k.get("created_ms").and_then(Value::as_u64).unwrap_or(0),
                };
                (record, str_at(k, "source").to_owned())
            })
            .collect();
        return print_keys(&keys, args.data.json, "no keys");
    }
    let file = settings::load(args.data.config.as_deref())?;
    let mut keys: Vec<(KeyRecord, String)> =
        file.key_records()?.into_iter().map(|k| (k, "config".to_owned())).collect();
    let stored =
        with_store(&args.data, async |store| store.keys().await.map_err(|e| CliError::failed(anyhow!(e)))).await?;
    keys.extend(stored.into_iter().map(|k| (k, "store".to_owned())));
    print_keys(
        &keys,
        args.data.json,
        "no keys: a server on this data directory serves the single tenant `local`, on loopback only \
         (unless it has an operator key)",
    )
}

/// Prints keys and where each comes from, as a table or JSON.
fn print_keys(keys: &[(KeyRecord, String)], json: bool, none: &str) -> CliResult {
    if json {
        let list: Vec<_> = keys
            .iter()
            .map(|(k, source)| {
                json!({ "tenant": k.tenant, "hash": k.hash, "prefix": k.prefix, "name": k.name, "created_ms": k.created_ms, "source": source })
            })
            .collect();
        println!("{}", Value::Array(list));
        return Ok(());
    }
    if keys.is_empty() {
        println!("{none}");
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
                source.clone(),
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
    if !args.data.offline() {
        return revoke_online(args, &wanted).await;
    }
    let file = settings::load(args.data.config.as_deref())?;
    let revoked = with_store(&args.data, async |store| {
        let keys = store.keys().await.map_err(|e| CliError::failed(anyhow!(e)))?;
        let matching: Vec<&KeyRecord> = keys.iter().filter(|k| names_key(k, &wanted)).collect();
        let record = match matching.as_slice() {
            [one] => (*one).clone(),
            [] => {
                let in_file = file.key_records()?.iter().any(|k| names_key(k, &wanted));
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
    let answer = json!({ "tenant": revoked.tenant, "hash": revoked.hash, "prefix": revoked.prefix, "revoked": true });
    print_revoked(&answer, args.data.json);
    Ok(())
}

fn print_revoked(answer: &Value, json: bool) {
    if json {
        println!("{answer}");
    } else {
        println!("revoked the key of tenant `{}` (sha256 {})", str_at(answer, "tenant"), str_at(answer, "hash"));
    }
}

async fn revoke_online(args: RevokeArgs, wanted: &str) -> CliResult {
    let client = args.data.admin.client()?;
    let reference = key_reference(wanted)?;
    let answer = client.json(client.request(Method::DELETE, &format!("/v1/admin/keys/{reference}"))).await?;
    print_revoked(&answer, args.data.json);
    Ok(())
}

/// The length of a tenant key: `subs_` and 32 hex digits.
const KEY_LEN: usize = 37;

/// What names `wanted` in a URL. A whole key is sent as its hash, and more
/// of a key than its listed prefix is cut to the prefix: URLs end up in
/// logs, keys must not.
fn key_reference(wanted: &str) -> CliResult<String> {
    if !wanted.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(CliError::usage(anyhow!("`{wanted}` is neither a key, its prefix, nor (part of) its hash")));
    }
    let prefix = key_prefix(wanted);
    Ok(if !wanted.starts_with("subs_") || wanted == prefix {
        wanted.to_owned()
    } else if wanted.len() == KEY_LEN {
        hash_key(wanted)
    } else {
        prefix
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_go_into_urls() {
        let key = new_key();
        assert_eq!(key_reference(&key).unwrap(), hash_key(&key));
        assert_eq!(key_reference(&key[..20]).unwrap(), key_prefix(&key));
        assert_eq!(key_reference(&key[..12]).unwrap(), &key[..12]);
        assert_eq!(key_reference("0123abcd").unwrap(), "0123abcd");
        assert!(key_reference("../admin/x").is_err());
    }
}
