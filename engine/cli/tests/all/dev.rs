//! `subs dev`: a project made by `subs new python`, built and chatted
//! with; a change to its sources rebuilds it and replays the conversation
//! against the new build, naming each decision that changed; a build that
//! fails is shown and the chat goes on with the last one.

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// What makes the offline model call the template's `lookup_order`.
const LOOKUP: &str = r#"use tool lookup_order with {"order_id": "A1"}"#;

/// How long a build and the compile of what it built may take: the
/// component holds CPython, and the machine may be busy.
const BUILD: Duration = Duration::from_secs(180);

/// Reads `dev`'s stdout until a line satisfies `done` (at most `patience`);
/// panics with what it printed otherwise.
fn until(dev: &mut crate::Process, what: &str, patience: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + patience;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match dev.line(left) {
            Some(line) if done(&line) => return line,
            Some(_) => {}
            None => break,
        }
    }
    let stderr = dev.stderr_text();
    panic!("waiting for {what}: stdout so far {:#?}\nstderr {stderr}", dev.lines);
}

/// Types `text` and Enter.
fn say(stdin: &mut std::process::ChildStdin, text: &str) {
    writeln!(stdin, "{text}").expect("subs dev reads its stdin");
}

/// The next stdout line, which must be `expected`.
fn next_is(dev: &mut crate::Process, expected: &str) {
    let line = dev.line(crate::PATIENCE);
    assert_eq!(line.as_deref(), Some(expected), "stdout so far {:#?}", dev.lines);
}

#[test]
fn a_change_rebuilds_replays_the_conversation_and_the_chat_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let new = crate::subs()
        .args(["new", "python", "shop"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .status()
        .expect("subs new runs");
    assert!(new.success());
    let project = dir.path().join("shop");
    let agent = project.join("agent.py");
    let source = std::fs::read_to_string(&agent).unwrap();
    assert!(source.contains(r#""status": "shipped""#), "{source}");

    let mut command = crate::subs();
    command
        .args(["dev", project.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The componentize-py the tree's own Python builds installed, when
    // there is one; else the project's script installs the pinned one.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let installed = root.join("target/guests/py/tree/examples/tools-py/.venv/bin/componentize-py");
    if installed.is_file() {
        command.env("COMPONENTIZE_PY", &installed);
    }
    let mut child = command.spawn().expect("subs dev starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut dev = crate::Process::new(child);

    until(&mut dev, "the chat", BUILD, |l| l.starts_with("Chatting with shop (session dev in .subs/)"));
    say(&mut stdin, LOOKUP);
    until(&mut dev, "the first build's result", crate::PATIENCE, |l| {
        l == r#"← lookup_order: {"order_id":"A1","status":"shipped"}"#
    });
    until(&mut dev, "the answer", crate::PATIENCE, |l| l.starts_with("lookup_order returned"));

    // The tool's result changes: the decision that returned it is named,
    // with the change.
    std::fs::write(&agent, source.replace(r#""status": "shipped""#, r#""status": "delivered""#)).unwrap();
    until(&mut dev, "the rebuild", crate::PATIENCE, |l| l == "agent.py changed: building…");
    let replayed = until(&mut dev, "the replay", BUILD, |l| l.starts_with("replayed "));
    assert!(replayed.ends_with("decisions of the conversation against the new build: 1 changed"), "{replayed}");
    let changed = dev.line(crate::PATIENCE).unwrap_or_default();
    assert!(
        changed.starts_with("  changed: turn_1 step ") && changed.ends_with(" tool.execute"),
        "{changed}; stdout {:#?}",
        dev.lines
    );
    next_is(&mut dev, r#"    ~ /actions/0/result/status: "shipped" → "delivered""#);
    next_is(&mut dev, "the chat goes on with the new build");

    // The chat goes on, in the same session, on the new build.
    say(&mut stdin, LOOKUP);
    until(&mut dev, "the new build's result", crate::PATIENCE, |l| {
        l == r#"← lookup_order: {"order_id":"A1","status":"delivered"}"#
    });
    until(&mut dev, "the answer", crate::PATIENCE, |l| l.starts_with("lookup_order returned"));

    // A syntax error: the build's error is shown, and the chat goes on
    // with the last build.
    let broken = source.replace(r#""status": "shipped""#, r#""status": "delivered""#) + "\ndef broken(:\n";
    std::fs::write(&agent, broken).unwrap();
    until(&mut dev, "the rebuild", crate::PATIENCE, |l| l == "agent.py changed: building…");
    until(&mut dev, "the failure", BUILD, |l| l == "the build failed:");
    until(&mut dev, "the build's error", crate::PATIENCE, |l| l.contains("SyntaxError"));
    until(&mut dev, "the chat", crate::PATIENCE, |l| l == "the chat goes on with the last build");
    say(&mut stdin, r#"use tool lookup_order with {"order_id": "B2"}"#);
    until(&mut dev, "the last build's result", crate::PATIENCE, |l| {
        l == r#"← lookup_order: {"order_id":"B2","status":"delivered"}"#
    });
    until(&mut dev, "the answer", crate::PATIENCE, |l| l.starts_with("lookup_order returned"));

    // The end of input leaves; the session stays in the project.
    drop(stdin);
    assert_eq!(dev.wait(crate::PATIENCE), Some(0), "stderr: {}", dev.stderr_text());
    assert!(project.join(".subs/subs.redb").is_file());
    let gitignore = std::fs::read_to_string(project.join(".gitignore")).unwrap();
    assert!(gitignore.lines().any(|l| l == ".subs/"), "{gitignore}");
}

#[test]
fn a_directory_that_is_not_a_project_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not an agent").unwrap();
    let out = crate::output(&["dev", dir.path().to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stdout);
    assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
    assert!(
        out.stderr.contains("is not an agent project: subs dev takes a directory made by `subs new`"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join(".subs").exists(), "nothing written");

    let out = crate::output(&["dev", dir.path().join("missing").to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stdout);
    assert!(out.stderr.contains("missing: No such file or directory"), "{}", out.stderr);
}
