//! Notices between nodes: what a commit sends (`pg_notify` inside the
//! group's transaction, so it is delivered at commit and only if the
//! commit happens) and the task that hears the other nodes'.
//!
//! One payload carries the sending node's name and an array of notices,
//! compactly:
//!
//! ```json
//! {"f":"node-a","n":[["e","tenant","session",4,7],["i","tenant","session"],["r","request-id"],["R"]]}
//! ```
//!
//! (`e`: events `4..=7` of a session; `i`: an item in a session's inbox;
//! `r`: the answer to a forwarded request; `R`: agents, keys or tenants
//! changed.) A group's notices go into as few payloads as NOTIFY's limit
//! (under 8000 bytes) allows; ids are at most 256 bytes, so every notice
//! fits one.
//!
//! # When the listener loses its connection
//!
//! PostgreSQL keeps no notices for a listener that is not connected, so
//! whatever was sent meanwhile is lost. When the listener is connected and
//! listening again, it sends every receiver one [`Notice::Missed`] from
//! the node named [`MISSED`] (an empty name, which no node has): receivers
//! then read again what they follow, as after a lag of their broadcast
//! receiver. A receiver that lags (more than [`NOTICE_BUFFER`] notices
//! behind) loses the oldest and learns it from `RecvError::Lagged`.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use subs_store::SessionKey;
use subs_store::shared::{Notice, Noticed};
use tokio::sync::{broadcast, watch};

/// The channel every node of a database notifies and listens on.
pub const NOTICE_CHANNEL: &str = "subs_notices";

/// The longest payload NOTIFY takes, in bytes ("shorter than 8000 bytes"
/// in PostgreSQL's default build).
pub const MAX_PAYLOAD: usize = 7999;

/// Notices a receiver of [`Shared::listen`](subs_store::shared::Shared::listen)
/// may fall behind by before it loses the oldest.
pub const NOTICE_BUFFER: usize = 16_384;

/// The `from` of the [`Notice::Missed`] sent after the listener
/// reconnected (see the module docs).
pub const MISSED: &str = "";

/// The payloads carrying `notices` from `node`: as few as fit under
/// [`MAX_PAYLOAD`] bytes each.
pub(crate) fn payloads<'a>(node: &str, notices: impl IntoIterator<Item = &'a Notice>) -> Vec<String> {
    let head = format!("{{\"f\":{},\"n\":[", Value::from(node));
    const TAIL: &str = "]}";
    let mut payloads = Vec::new();
    let mut current = head.clone();
    let mut count = 0;
    for notice in notices {
        let Some(item) = encode(notice) else { continue };
        let item = item.to_string();
        if head.len() + item.len() + TAIL.len() > MAX_PAYLOAD {
            // Only a key far beyond the id rules gets here.
            tracing::warn!(len = item.len(), "a notice too large for NOTIFY was not sent");
            continue;
        }
        if count > 0 && current.len() + 1 + item.len() + TAIL.len() > MAX_PAYLOAD {
            current.push_str(TAIL);
            payloads.push(std::mem::replace(&mut current, head.clone()));
            count = 0;
        }
        if count > 0 {
            current.push(',');
        }
        current.push_str(&item);
        count += 1;
    }
    if count > 0 {
        current.push_str(TAIL);
        payloads.push(current);
    }
    payloads
}

/// A notice as sent; `None` for [`Notice::Missed`], which each node's
/// listener tells its own receivers and no node sends.
fn encode(notice: &Notice) -> Option<Value> {
    Some(match notice {
        Notice::Events { key, first, last } => json!(["e", key.tenant, key.session, first, last]),
        Notice::Inbox { key } => json!(["i", key.tenant, key.session]),
        Notice::Reply { id } => json!(["r", id]),
        Notice::Records => json!(["R"]),
        Notice::Missed => return None,
    })
}

/// The node and notices of a payload; `None` for what no node of this
/// version sends.
pub(crate) fn parse(payload: &str) -> Option<(String, Vec<Notice>)> {
    let value: Value = serde_json::from_str(payload).ok()?;
    let from = value.get("f")?.as_str()?.to_owned();
    let mut notices = Vec::new();
    for item in value.get("n")?.as_array()? {
        let item = item.as_array()?;
        let text = |at: usize| item.get(at).and_then(Value::as_str).map(str::to_owned);
        let number = |at: usize| item.get(at).and_then(Value::as_u64);
        let notice = match item.first()?.as_str()? {
            "e" => Notice::Events { key: SessionKey::new(text(1)?, text(2)?), first: number(3)?, last: number(4)? },
            "i" => Notice::Inbox { key: SessionKey::new(text(1)?, text(2)?) },
            "r" => Notice::Reply { id: text(1)? },
            "R" => Notice::Records,
            // A newer node's kind of notice: skipped, the rest still count.
            _ => continue,
        };
        notices.push(notice);
    }
    Some((from, notices))
}

/// A listener on [`NOTICE_CHANNEL`], listening when this returns.
pub(crate) async fn connect(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // The store closes this pool itself, after stopping the listener.
    listener.ignore_pool_close_event(true);
    listener.listen(NOTICE_CHANNEL).await?;
    Ok(listener)
}

/// Hears the other nodes' notices and passes them to `sender`'s
/// receivers, until `stop`; reconnects when the connection is lost (see
/// the module docs for what receivers are told then).
pub(crate) async fn run(
    mut listener: PgListener,
    pool: PgPool,
    node: String,
    sender: broadcast::Sender<Noticed>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let received = tokio::select! {
            () = stopped(&mut stop) => return,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => forward(&node, notification.payload(), &sender),
            // Lost and connected again (sqlx reconnects and listens again
            // before it returns this).
            Ok(None) => missed(&sender),
            Err(error) => {
                tracing::warn!(%error, "the PostgreSQL store lost its notice listener; reconnecting");
                drop(listener);
                let mut backoff = Duration::from_millis(100);
                listener = loop {
                    // The database restarting or unreachable: connecting
                    // again at once would only fail again.
                    tokio::select! {
                        () = stopped(&mut stop) => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    match connect(&pool).await {
                        Ok(listener) => break listener,
                        Err(error) => {
                            tracing::warn!(%error, "the PostgreSQL store cannot listen for notices yet");
                            backoff = (backoff * 2).min(Duration::from_secs(5));
                        }
                    }
                };
                missed(&sender);
            }
        }
    }
}

fn forward(node: &str, payload: &str, sender: &broadcast::Sender<Noticed>) {
    let Some((from, notices)) = parse(payload) else {
        tracing::warn!(payload, "an unreadable notice was ignored");
        return;
    };
    if from == node {
        return;
    }
    for notice in notices {
        // No receiver: nobody listens, nothing to do.
        let _ = sender.send(Noticed { from: from.clone(), notice });
    }
}

fn missed(sender: &broadcast::Sender<Noticed>) {
    tracing::info!("the notice listener is back; notices sent meanwhile are read again from the store");
    let _ = sender.send(Noticed { from: MISSED.to_owned(), notice: Notice::Missed });
}

/// Resolves once `stop` says so (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back_and_stay_under_the_limit() {
        let key = |n: usize| SessionKey::new("tenant", format!("{n:0>200}"));
        let mut notices = vec![Notice::Records, Notice::Reply { id: "r\"1".to_owned() }];
        for n in 0..200 {
            notices.push(Notice::Events { key: key(n), first: n as u64, last: n as u64 + 3 });
            notices.push(Notice::Inbox { key: key(n) });
        }
        let payloads = payloads("node-ü", &notices);
        assert!(payloads.len() > 1, "{} notices in one payload", notices.len());
        let mut read = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= MAX_PAYLOAD, "{} bytes", payload.len());
            let (from, notices) = parse(payload).unwrap();
            assert_eq!(from, "node-ü");
            read.extend(notices);
        }
        assert_eq!(read, notices);
        assert!(super::payloads("n", []).is_empty());
    }

    #[test]
    fn unknown_notices_are_skipped_and_nonsense_refused() {
        let (from, notices) = parse(r#"{"f":"a","n":[["x",1],["R"]]}"#).unwrap();
        assert_eq!((from.as_str(), notices), ("a", vec![Notice::Records]));
        for bad in ["", "[]", r#"{"f":1,"n":[]}"#, r#"{"f":"a","n":[["e","t"]]}"#, r#"{"f":"a","n":[[]]}"#] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
