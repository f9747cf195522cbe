//! Agents in a real OCI registry: Debian's `docker-registry` (CNCF
//! `distribution`), started here on loopback with an htpasswd-protected
//! repository. `subs push` and `subs agents put ID oci://…` against it, a
//! turn from the pulled agent, the version's reference and digest across
//! a restart; a tampered layer, a registry off the allow-list and wrong
//! credentials refused; artifacts pushed by `oras` pulled by subs and the
//! other way round; `subs run oci://…` a second time with the registry
//! gone.
//!
//! Without `docker-registry` and `htpasswd` (`apt-get install
//! docker-registry apache2-utils`) the tests are skipped with a message,
//! unless `SUBS_REQUIRE_REGISTRY=1` makes them fail.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{ADD, Output, PATIENCE, Process, Server, TOOLS, http, stream_turn, subs};

const USER: &str = "ci";
const PASSWORD: &str = "s3cret";

fn required() -> bool {
    std::env::var_os("SUBS_REQUIRE_REGISTRY").is_some_and(|v| v == "1")
}

/// Skips the test (returns `None`) with a message, or fails it when the
/// registry tests are required.
fn missing<T>(what: &str) -> Option<T> {
    assert!(!required(), "SUBS_REQUIRE_REGISTRY=1 and {what}");
    eprintln!("skipped: {what} (set SUBS_REQUIRE_REGISTRY=1 to fail instead)");
    None
}

/// A `docker-registry` on 127.0.0.1, its storage and htpasswd in a
/// temporary directory; killed when dropped.
struct Registry {
    child: Option<Child>,
    /// `127.0.0.1:<port>`.
    addr: String,
    dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Option<Self> {
        let Ok(htpasswd) = Command::new("htpasswd").args(["-Bbn", USER, PASSWORD]).output() else {
            return missing("`htpasswd` is not installed (apt-get install apache2-utils)");
        };
        assert!(htpasswd.status.success(), "htpasswd: {}", String::from_utf8_lossy(&htpasswd.stderr));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
        // A free port: bound, read and released just before the registry
        // takes it.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    \
             rootdirectory: {storage}\nhttp:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: subs-test\n    path: \
             {htpasswd}\n",
            storage = dir.path().join("storage").display(),
            htpasswd = dir.path().join("htpasswd").display(),
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let child = match Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                return missing(&format!("`docker-registry` does not start ({e}; apt-get install docker-registry)"));
            }
        };
        let registry = Self { child: Some(child), addr, dir };
        // Up once it accepts connections.
        let what = format!("docker-registry listens on {}", registry.addr);
        subs_tests::wait::eventually_blocking(Duration::from_secs(20), what, || {
            std::net::TcpStream::connect(&registry.addr).is_ok()
        });
        Some(registry)
    }

    /// `127.0.0.1:<port>/<path>`.
    fn reference(&self, path: &str) -> String {
        format!("{}/{path}", self.addr)
    }

    /// A docker config directory (`DOCKER_CONFIG`) with `password` for
    /// this registry, as `docker login` writes it.
    fn docker_config(&self, password: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let auth = base64(&format!("{USER}:{password}"));
        let config = serde_json::json!({ "auths": { self.addr.clone(): { "auth": auth } } });
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        dir
    }

    /// The file the registry keeps blob `digest` in.
    fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.path().join(format!("storage/docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]))
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Runs `subs args…` with `DOCKER_CONFIG` set, to its end.
fn subs_with(docker_config: &Path, args: &[&str]) -> Output {
    let child = subs()
        .args(args)
        .env("DOCKER_CONFIG", docker_config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("subs starts");
    let mut process = Process::new(child);
    let code = process.wait(PATIENCE);
    Output { code, stdout: process.stdout_text(), stderr: process.stderr_text() }
}

/// `subs push FILE REF --plain-http`; the manifest digest it printed.
fn push(docker_config: &Path, file: &str, reference: &str) -> String {
    let out = subs_with(docker_config, &["push", file, reference, "--plain-http", "--json"]);
    assert_eq!(out.code, Some(0), "subs push: {}", out.stderr);
    let answer: Value = serde_json::from_str(out.stdout.trim()).expect("subs push --json prints JSON");
    answer["digest"].as_str().unwrap().to_owned()
}

async fn agent(url: &str, id: &str) -> (u16, Value) {
    let response = http().get(format!("{url}/v1/agents/{id}")).send().await.unwrap();
    (response.status().as_u16(), serde_json::from_slice(&response.bytes().await.unwrap()).unwrap())
}

async fn put_oci(url: &str, id: &str, reference: &str) -> (u16, Value) {
    let body = serde_json::json!({ "oci": reference });
    let response = http()
        .put(format!("{url}/v1/agents/{id}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), serde_json::from_slice(&response.bytes().await.unwrap()).unwrap())
}

fn served_add(events: &[(Option<u64>, String, Value)]) -> bool {
    events.iter().any(|(_, _, data)| data.to_string().contains(r#"{\"sum\":3}"#))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pushed_agent_is_pulled_by_tag_and_digest_served_and_kept_across_a_restart() {
    let Some(registry) = Registry::start() else { return };
    let docker = registry.docker_config(PASSWORD);
    let tagged = registry.reference("team/agent:v1");
    let digest = push(docker.path(), TOOLS, &tagged);
    // Another agent, whose layer is then tampered with on the registry's disk.
    let other = registry.reference("team/other:v1");
    let other_digest = push(docker.path(), subs_tests::guests::PASSTHROUGH, &other);

    // `localhost:<port>` is the same registry under another name, given
    // wrong credentials; a listener nobody may reach stands for a registry
    // off the allow-list.
    let port = registry.addr.rsplit_once(':').unwrap().1;
    let alias = format!("localhost:{port}");
    let stranger = TcpListener::bind("127.0.0.1:0").unwrap();
    stranger.set_nonblocking(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    let toml = format!(
        "[oci]\nallow_registries = [\"{addr}\", \"{alias}\"]\ninsecure = [\"{addr}\", \"{alias}\"]\npull_timeout_secs = \
         20\n[oci.credentials.\"{addr}\"]\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n[oci.credentials.\"{alias}\"]\n\
         username = \"{USER}\"\npassword = \"wrong\"\n",
        addr = registry.addr
    );
    std::fs::write(&config, toml).unwrap();
    let data = dir.path().join("data");
    let config_arg = config.to_str().unwrap();
    let mut server = Server::start(&data, "127.0.0.1:0", &["--config", config_arg]);
    let url = server.url.clone();

    // By tag, through the CLI: the server pulls, checks and compiles it.
    let put = subs_with(docker.path(), &["agents", "put", "tools", &format!("oci://{tagged}"), "--server", &url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let (status, view) = agent(&url, "tools").await;
    assert_eq!(status, 200);
    assert_eq!(view["versions"][0]["oci"]["reference"], tagged.as_str(), "{view}");
    assert_eq!(view["versions"][0]["oci"]["digest"], digest.as_str(), "{view}");
    // By digest.
    let pinned = format!("{}@{digest}", registry.reference("team/agent"));
    let (status, view) = put_oci(&url, "pinned", &pinned).await;
    assert_eq!(status, 201, "{view}");
    assert_eq!(view["versions"][0]["oci"]["digest"], digest.as_str());
    // A turn from the pulled agent.
    assert!(served_add(&stream_turn(&url, "s1", "tools", ADD).await), "the pulled agent answered the turn");

    // A tampered layer: same size, other bytes.
    let manifest: Value = {
        let path = registry.blob_path(&other_digest);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let layer = registry.blob_path(manifest["layers"][0]["digest"].as_str().unwrap());
    let mut bytes = std::fs::read(&layer).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&layer, bytes).unwrap();
    let (status, error) = put_oci(&url, "other", &other).await;
    assert_eq!(status, 422, "{error}");
    let message = error["error"].as_str().unwrap();
    assert!(message.contains("does not match its digest") && message.contains(&other), "{message}");
    assert_eq!(agent(&url, "other").await.0, 404, "nothing stored from a failed pull");

    // Off the allow-list: refused before any connection.
    let outside = format!("{}/team/agent:v1", stranger.local_addr().unwrap());
    let (status, error) = put_oci(&url, "outside", &outside).await;
    assert_eq!(status, 403, "{error}");
    assert!(error["error"].as_str().unwrap().contains("allow_registries"), "{error}");
    assert!(stranger.accept().is_err(), "no connection was made to a registry off the allow-list");

    // Wrong credentials: a 4xx naming the registry.
    let (status, error) = put_oci(&url, "wrong", &format!("{alias}/team/agent:v1")).await;
    assert_eq!(status, 422, "{error}");
    let message = error["error"].as_str().unwrap();
    assert!(message.contains(&format!("registry `{alias}`")) && message.contains("refused"), "{message}");
    assert_eq!(agent(&url, "wrong").await.0, 404);

    // After a restart, the version still says where it came from.
    server.process.terminate();
    server.process.wait(PATIENCE);
    let server = Server::start(&data, "127.0.0.1:0", &["--config", config_arg]);
    let (status, view) = agent(&server.url, "tools").await;
    assert_eq!(status, 200);
    assert_eq!(view["versions"][0]["oci"]["reference"], tagged.as_str(), "{view}");
    assert_eq!(view["versions"][0]["oci"]["digest"], digest.as_str(), "{view}");
    let got = subs_with(docker.path(), &["agents", "get", "tools", "--server", &server.url]);
    assert!(got.stdout.contains(&tagged) && got.stdout.contains(&digest), "{}", got.stdout);
    assert!(served_add(&stream_turn(&server.url, "s2", "tools", ADD).await));

    // And a stored version goes back to a registry: `subs agents push`.
    let again = registry.reference("team/copy:v1");
    let out = subs_with(docker.path(), &["agents", "push", "tools", &again, "--plain-http", "--server", &server.url]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("pinned: {}@sha256:", registry.reference("team/copy"))), "{}", out.stdout);
}

#[test]
fn subs_run_pulls_once_and_runs_again_with_the_registry_gone() {
    let Some(mut registry) = Registry::start() else { return };
    let docker = registry.docker_config(PASSWORD);
    let tagged = registry.reference("team/agent:v1");
    push(docker.path(), TOOLS, &tagged);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, format!("[oci]\ninsecure = [\"{}\"]\n", registry.addr)).unwrap();
    let cache = dir.path().join("cache");
    let run = |what: &str| {
        let out = subs_with(
            docker.path(),
            &[
                "run",
                &format!("oci://{tagged}"),
                ADD,
                "--config",
                config.to_str().unwrap(),
                "--cache",
                cache.to_str().unwrap(),
            ],
        );
        assert_eq!(out.code, Some(0), "{what}: {}", out.stderr);
        assert!(out.stdout.contains(r#"add returned {"sum":3}."#), "{what}: {}", out.stdout);
    };
    run("the first run, which pulls");
    registry.stop();
    // Nothing listens on the registry's address any more: any request
    // would fail the run.
    assert!(std::net::TcpStream::connect(&registry.addr).is_err());
    run("the second run, offline");
}

/// The python of the oras venv (scripts/oci-tools/setup.sh).
fn oras_python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    match Command::new(root.join("scripts/oci-tools/setup.sh")).current_dir(&root).output() {
        Ok(out) if out.status.success() => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            Some(PathBuf::from(stdout.lines().last().expect("setup.sh prints the venv's python").trim()))
        }
        Ok(out) => missing(&format!("scripts/oci-tools/setup.sh failed: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => missing(&format!("scripts/oci-tools/setup.sh does not run ({e})")),
    }
}

/// Runs a Python script with oras against the registry: `args` are its
/// `sys.argv[1:]` after the registry's address, user and password.
fn oras(python: &Path, registry: &Registry, cwd: &Path, script: &str, args: &[&str]) -> String {
    let prelude = "import sys, json, oras.client\nhost, user, password = sys.argv[1:4]\nclient = \
                   oras.client.OrasClient(hostname=host, insecure=True, auth_backend='basic')\nclient.auth.set_basic_auth(user, password)\n";
    let out = Command::new(python)
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .args([registry.addr.as_str(), USER, PASSWORD])
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "oras: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn artifacts_pushed_by_oras_are_pulled_by_subs_and_the_other_way_round() {
    let Some(registry) = Registry::start() else { return };
    let Some(python) = oras_python() else { return };
    let docker = registry.docker_config(PASSWORD);
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(TOOLS, dir.path().join("agent.wasm")).unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"architecture":"wasm","os":"wasip2"}"#).unwrap();

    // oras pushes the CNCF layout; subs runs it.
    let by_oras = registry.reference("team/oras:v1");
    oras(
        &python,
        &registry,
        dir.path(),
        "client.push(target=sys.argv[4], files=['agent.wasm:application/wasm'], \
         manifest_config='config.json:application/vnd.wasm.config.v0+json')\n",
        &[&by_oras],
    );
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, format!("[oci]\ninsecure = [\"{}\"]\n", registry.addr)).unwrap();
    let out = subs_with(
        docker.path(),
        &[
            "run",
            &format!("oci://{by_oras}"),
            ADD,
            "--config",
            config.to_str().unwrap(),
            "--cache",
            dir.path().join("cache").to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains(r#"add returned {"sum":3}."#), "{}", out.stdout);

    // subs pushes; oras reads the manifest and pulls the layer.
    let by_subs = registry.reference("team/subs:v1");
    push(docker.path(), TOOLS, &by_subs);
    let pulled = dir.path().join("pulled");
    let manifest = oras(
        &python,
        &registry,
        dir.path(),
        "print(json.dumps(client.get_manifest(sys.argv[4])))\nclient.pull(target=sys.argv[4], outdir=sys.argv[5])\n",
        &[&by_subs, pulled.to_str().unwrap()],
    );
    let manifest: Value = serde_json::from_str(manifest.lines().last().unwrap()).unwrap();
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json", "{manifest}");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.wasm.config.v0+json", "{manifest}");
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm", "{manifest}");
    let file = std::fs::read_dir(&pulled).unwrap().next().expect("oras pulled the layer").unwrap().path();
    assert_eq!(std::fs::read(file).unwrap(), std::fs::read(TOOLS).unwrap(), "the same bytes");
}
