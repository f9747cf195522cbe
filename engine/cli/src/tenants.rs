//! `subs tenants …`: a running server's tenants and their limits, through
//! its admin API (`/v1/admin/tenants`), with the operator key. Changes
//! take effect at once and are kept in the server's store.

use anyhow::anyhow;
use reqwest::Method;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Map, Value, json};

use crate::admin::AdminArgs;
use crate::client::{Client, checked_name};
use crate::error::{CliError, CliResult};

/// `subs tenants …`.
#[derive(Debug, clap::Subcommand)]
pub enum TenantsCommand {
    /// List the tenants: those created here or by `subs keys`, those of
    /// the config file, and those with keys.
    List(ListArgs),
    /// Create a tenant (nothing changes if it exists, but the limits
    /// `--set` names).
    Create(CreateArgs),
    /// Show a tenant: its keys, its limits (set here, or inherited from the
    /// config file and defaults) and its spending.
    Show(ShowArgs),
    /// Change a tenant's limits, at once: `--set FIELD=VALUE`, `--unset
    /// FIELD` (back to the config file's), `--reset` (all back).
    SetLimits(SetLimitsArgs),
    /// Delete a tenant: its keys are revoked and its open turns cancelled;
    /// its sessions and agents stay stored, out of reach.
    Delete(DeleteArgs),
}

/// Flags of every tenants command.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: AdminArgs,
    /// Print the server's answer as JSON instead of text for people.
    #[arg(long)]
    pub json: bool,
}

/// `subs tenants list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// `subs tenants create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The tenant's name (1 to 128 of A-Z a-z 0-9 _ - . :, not starting with .).
    #[arg(value_name = "TENANT")]
    pub tenant: String,
    /// A limit, `FIELD=VALUE` (see `set-limits`); repeat for more.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// `subs tenants show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The tenant.
    #[arg(value_name = "TENANT")]
    pub tenant: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// `subs tenants set-limits`.
#[derive(Debug, clap::Args)]
pub struct SetLimitsArgs {
    /// The tenant.
    #[arg(value_name = "TENANT")]
    pub tenant: String,
    /// Set a limit: `max_sessions=50`, `budget=12.5`, `max_body_bytes=65536`,
    /// `sandbox={"cpu_ms":500}`; `null` (or `none`) means no limit. The
    /// value is JSON, else a string. Repeat for more.
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Drop what was set for a limit: the config file's applies again.
    /// Repeat for more.
    #[arg(long = "unset", value_name = "FIELD")]
    pub unset: Vec<String>,
    /// Drop everything set before (then apply `--set`).
    #[arg(long)]
    pub reset: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// `subs tenants delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The tenant.
    #[arg(value_name = "TENANT")]
    pub tenant: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// Runs a tenants command.
pub async fn exec(command: TenantsCommand) -> CliResult {
    match command {
        TenantsCommand::List(args) => list(args).await,
        TenantsCommand::Create(args) => create(args).await,
        TenantsCommand::Show(args) => show(args).await,
        TenantsCommand::SetLimits(args) => set_limits(args).await,
        TenantsCommand::Delete(args) => delete(args).await,
    }
}

fn path(tenant: &str) -> CliResult<String> {
    Ok(format!("/v1/admin/tenants/{}", checked_name("tenant name", tenant)?))
}

async fn list(args: ListArgs) -> CliResult {
    let client = args.common.admin.client()?;
    let Some(tenants) = client.list("/v1/admin/tenants", args.common.json, "tenants").await? else { return Ok(()) };
    let rows: Vec<[String; 5]> = tenants
        .iter()
        .map(|t| {
            let limits = &t["limits"];
            [
                str_at(t, "tenant").to_owned(),
                t["keys"].to_string(),
                limit(&limits["max_sessions"]),
                budget(&limits["budget"]),
                source(t),
            ]
        })
        .collect();
    print!("{}", crate::table(["TENANT", "KEYS", "MAX SESSIONS", "BUDGET", "SOURCE"], &rows));
    Ok(())
}

async fn create(args: CreateArgs) -> CliResult {
    let client = args.common.admin.client()?;
    let path = path(&args.tenant)?;
    let mut request = client.request(Method::PUT, &path);
    if !args.set.is_empty() {
        let mut limits = Map::new();
        apply_sets(&mut limits, &args.set)?;
        request = request.header(CONTENT_TYPE, "application/json").body(json!({ "limits": limits }).to_string());
    }
    let response = client.send(request).await?;
    let created = response.status() == reqwest::StatusCode::CREATED;
    let tenant = answer(&client, response).await?;
    if args.common.json {
        println!("{tenant}");
    } else if created {
        println!("created tenant {} (`subs keys create --tenant {}` makes it a key)", args.tenant, args.tenant);
    } else {
        println!("tenant {} exists{}", args.tenant, if args.set.is_empty() { "" } else { "; its limits are set" });
    }
    Ok(())
}

async fn show(args: ShowArgs) -> CliResult {
    let client = args.common.admin.client()?;
    let path = path(&args.tenant)?;
    let tenant = client.json(client.request(Method::GET, &path)).await?;
    let limits = client.json(client.request(Method::GET, &format!("{path}/limits"))).await?;
    if args.common.json {
        let mut both = tenant;
        both["spent"] = limits["spent"].clone();
        println!("{both}");
        return Ok(());
    }
    let keys = tenant["keys"].as_u64().unwrap_or(0);
    println!(
        "tenant {} · {} · {keys} key{}",
        str_at(&tenant, "tenant"),
        source(&tenant),
        if keys == 1 { "" } else { "s" }
    );
    print_limits(&limits);
    Ok(())
}

async fn set_limits(args: SetLimitsArgs) -> CliResult {
    if args.set.is_empty() && args.unset.is_empty() && !args.reset {
        return Err(CliError::usage(anyhow!("say what to change: --set FIELD=VALUE, --unset FIELD or --reset")));
    }
    let client = args.common.admin.client()?;
    let path = format!("{}/limits", path(&args.tenant)?);
    // What was set before stays unless this command changes it: the API's
    // PUT replaces the whole object.
    let mut limits = if args.reset {
        Map::new()
    } else {
        let current = client.json(client.request(Method::GET, &path)).await?;
        current["overrides"].as_object().cloned().unwrap_or_default()
    };
    for field in &args.unset {
        limits.remove(field.trim());
    }
    apply_sets(&mut limits, &args.set)?;
    let request = client
        .request(Method::PUT, &path)
        .header(CONTENT_TYPE, "application/json")
        .body(Value::Object(limits).to_string());
    let answer = client.json(request).await?;
    if args.common.json {
        println!("{answer}");
    } else {
        println!("limits of tenant {} (in effect now):", args.tenant);
        print_limits(&answer);
    }
    Ok(())
}

async fn delete(args: DeleteArgs) -> CliResult {
    let client = args.common.admin.client()?;
    let path = path(&args.tenant)?;
    let answer = client.json(client.request(Method::DELETE, &path)).await?;
    if args.common.json {
        println!("{answer}");
    } else {
        println!(
            "deleted tenant {}: revoked {} key(s), cancelled {} open turn(s); its sessions and agents stay stored, \
             out of reach",
            args.tenant, answer["revoked_keys"], answer["cancelled_turns"]
        );
    }
    Ok(())
}

/// Applies `FIELD=VALUE` settings to `limits`.
fn apply_sets(limits: &mut Map<String, Value>, sets: &[String]) -> CliResult {
    for set in sets {
        let Some((field, value)) = set.split_once('=') else {
            return Err(CliError::usage(anyhow!("--set `{set}`: give FIELD=VALUE, like max_sessions=50")));
        };
        let (field, value) = (field.trim(), value.trim());
        if field.is_empty() {
            return Err(CliError::usage(anyhow!("--set `{set}`: the field is missing")));
        }
        limits.insert(field.to_owned(), parse_value(value));
    }
    Ok(())
}

/// A `--set` value: JSON when it reads as JSON (`50`, `null`, `{…}`),
/// `none` and `unlimited` as `null`, else a string (`12.50` reads as a
/// number, which budgets take exactly).
fn parse_value(text: &str) -> Value {
    match text {
        "none" | "unlimited" => Value::Null,
        _ => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
    }
}

/// Prints a `LimitsView`: each limit, whether it was set here, and what
/// the tenant spent.
fn print_limits(view: &Value) {
    let overrides = view["overrides"].as_object().cloned().unwrap_or_default();
    let mut rows: Vec<[String; 3]> = Vec::new();
    if let Some(limits) = view["limits"].as_object() {
        for (field, value) in limits {
            let shown = if field == "budget" { budget(value) } else { limit(value) };
            let set = if overrides.contains_key(field) { "set here" } else { "inherited" };
            rows.push([field.clone(), shown, set.to_owned()]);
        }
    }
    if let Some(sandbox) = overrides.get(subs_server::tenants::SANDBOX) {
        rows.push(["sandbox".to_owned(), sandbox.to_string(), "set here".to_owned()]);
    }
    print!("{}", crate::table(["LIMIT", "VALUE", "FROM"], &rows));
    if let Some(spent) = view["spent"].as_str() {
        println!("spent ${spent}");
    }
}

fn limit(value: &Value) -> String {
    match value {
        Value::Null => "none".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn budget(value: &Value) -> String {
    match value {
        Value::Null => "none".to_owned(),
        other => format!("${}", limit(other)),
    }
}

fn source(tenant: &Value) -> String {
    match (tenant["stored"].as_bool(), tenant["configured"].as_bool()) {
        (Some(true), Some(true)) => "stored, config file",
        (_, Some(true)) => "config file",
        (Some(true), _) => "stored",
        _ => "keys only",
    }
    .to_owned()
}

fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Reads a response's JSON.
async fn answer(client: &Client, response: reqwest::Response) -> CliResult<Value> {
    let bytes = response.bytes().await.map_err(|e| client.transport(&e))?;
    serde_json::from_slice(&bytes).map_err(|e| CliError::failed(anyhow!("the server's answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_values_are_json_or_strings() {
        let mut limits = Map::new();
        apply_sets(
            &mut limits,
            &["max_sessions=50".into(), "budget=12.50".into(), "x=none".into(), "sandbox={\"cpu_ms\":5}".into()],
        )
        .unwrap();
        assert_eq!(
            Value::Object(limits),
            json!({"max_sessions": 50, "budget": 12.5, "x": null, "sandbox": {"cpu_ms": 5}})
        );
        assert_eq!(parse_value("abc"), json!("abc"));
        assert!(apply_sets(&mut Map::new(), &["max_sessions".into()]).is_err());
        assert!(apply_sets(&mut Map::new(), &["=3".into()]).is_err());
    }
}
