//! Storage grows linearly with the conversation: each step stores its
//! trigger, its decision and the ids of the messages it recorded, never a
//! copy of the conversation so far.

use subs_tests::TestEngine;

#[tokio::test]
async fn storage_per_message_stays_constant_over_200_messages() {
    let t = TestEngine::start().await;
    let stored = async || t.engine.admin().stored_bytes().await.unwrap();
    // Each turn records two messages (the user's and the reply). The
    // messages are all the same size, so a linear store adds the same
    // bytes per turn however long the conversation already is.
    let text = "a message of a fixed length, long enough to matter: ".repeat(4);
    let mut marks = vec![(0usize, stored().await)];
    for turn in 1..=100 {
        t.chat("long", "helper", &text).await;
        if [25, 50, 100].contains(&turn) {
            marks.push((turn * 2, stored().await));
        }
    }
    assert_eq!(t.snapshot("long").await.messages.len(), 200);

    let per_message: Vec<f64> = marks.windows(2).map(|w| (w[1].1 - w[0].1) as f64 / (w[1].0 - w[0].0) as f64).collect();
    eprintln!("bytes per message at 0-50, 50-100, 100-200 messages: {per_message:?}");
    let (min, max) = per_message.iter().fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    // A store that copied the conversation into each step would add
    // bytes in proportion to its length: the last interval would cost
    // several times the first.
    assert!(max / min < 1.5, "bytes per message grew: {per_message:?}");
}
