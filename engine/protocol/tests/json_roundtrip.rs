//! Every protocol value survives a trip through JSON text unchanged, and
//! writing it again gives the same bytes.
//!
//! Needs the crate's `proptest` feature for its strategies:
//! `cargo test -p subs-protocol --features proptest`.
#![cfg(feature = "proptest")]

use std::fmt::Debug;

use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use subs_protocol::{
    DecisionRequest, RequestTree, SessionEvent, Trigger, arbitrary, from_json, from_value, to_json, to_value,
};

/// Checks the text round trip, the `Value` round trip, and that a second
/// write is byte-identical to the first (what a worker reads is what the
/// engine wrote).
fn round_trip<T>(value: &T) -> Result<(), TestCaseError>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let json = to_json(value);
    let back: T = from_json(&json).map_err(|e| TestCaseError::fail(format!("{e}\nin {json}")))?;
    prop_assert_eq!(&back, value, "text round trip of {}", json);
    prop_assert_eq!(to_json(&back), json.as_str(), "second write differs");

    let via_value: T = from_value(to_value(value)).map_err(|e| TestCaseError::fail(format!("{e}\nin {json}")))?;
    prop_assert_eq!(&via_value, value, "value round trip of {}", json);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decision_request(v in arbitrary::decision_request()) {
        round_trip(&v)?;
    }

    /// A request's compact tree stands for exactly the tree it was made
    /// from, whatever the path, in memory and in the request's JSON.
    #[test]
    fn request_tree_gives_the_tree_back((tree, path) in arbitrary::tree_and_path()) {
        let compact = RequestTree::new(tree.clone(), &path);
        prop_assert_eq!(compact.to_tree(&path).unwrap(), tree.clone());
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        request.messages = subs_protocol::Messages::new(path, compact);
        prop_assert_eq!(&to_value(&request)["message_tree"], &to_value(&tree));
    }

    #[test]
    fn decision_response(v in arbitrary::decision_response()) {
        round_trip(&v)?;
    }

    #[test]
    fn trigger(v in arbitrary::trigger()) {
        round_trip(&v)?;
    }

    #[test]
    fn action(v in arbitrary::action()) {
        round_trip(&v)?;
    }

    #[test]
    fn client_input(v in arbitrary::client_input()) {
        round_trip(&v)?;
    }

    #[test]
    fn posted_input(v in arbitrary::posted_input()) {
        round_trip(&v)?;
    }

    #[test]
    fn stream_delta(v in arbitrary::stream_delta()) {
        round_trip(&v)?;
    }

    /// A session event's name and data read back as the same event, and
    /// give the same name and the same data, text byte for byte.
    #[test]
    fn session_event(v in arbitrary::session_event()) {
        let (name, data) = v.clone().into_parts();
        let text = to_json(&data);
        prop_assert_eq!(v.data_json(), text.as_str());
        let back = SessionEvent::from_parts(name, data.clone())
            .map_err(|e| TestCaseError::fail(format!("{e}\nin {text}")))?;
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(back.into_parts(), (name, data));
        let reread: serde_json::Value = from_json(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(to_json(&SessionEvent::from_parts(name, reread).unwrap().data()), text);
    }

    #[test]
    fn message(v in arbitrary::message()) {
        round_trip(&v)?;
    }

    #[test]
    fn draft_message(v in arbitrary::draft_message()) {
        round_trip(&v)?;
    }

    #[test]
    fn agent_config(v in arbitrary::agent_config()) {
        round_trip(&v)?;
    }

    #[test]
    fn llm_request(v in arbitrary::llm_request()) {
        round_trip(&v)?;
    }

    #[test]
    fn llm_response(v in arbitrary::llm_response()) {
        round_trip(&v)?;
    }

    #[test]
    fn json_value(v in arbitrary::json_value()) {
        round_trip(&v)?;
    }

    /// `f64` fields are written the way JavaScript prints numbers, so a
    /// whole number never carries a fraction on the wire.
    #[test]
    fn whole_seconds_are_written_without_a_fraction(v in arbitrary::retry_policy()) {
        let json = to_json(&v);
        for (name, secs) in [
            ("backoff_base_secs", Some(v.backoff_base_secs)),
            ("backoff_max_secs", Some(v.backoff_max_secs)),
            ("timeout_secs", v.timeout_secs),
        ] {
            if let Some(secs) = secs.filter(|s| s.fract() == 0.0 && s.abs() < 1e15 && *s != 0.0) {
                let expected = format!("\"{name}\":{secs:.0}");
                prop_assert!(json.contains(&expected), "{} not in {}", expected, json);
            }
        }
        round_trip(&v)?;
    }
}
