//! The endpoint, driven through `tower::ServiceExt::oneshot`.

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use subs_sdk::prelude::*;
use subs_sdk::trigger::LlmExecute;
use tower::ServiceExt;

use super::*;

/// Answers by the request's state: a test says what it wants there.
struct Scripted;

impl Agent for Scripted {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        cx.info("deciding");
        match request.state.as_str().unwrap_or_default() {
            "retryable" => Err(DecideError::retryable("the database is down")),
            "terminal" => Err("cannot do that".into()),
            "panic" => panic!("boom"),
            "emit" => {
                cx.emit_text("x")?;
                Ok(request.proposed)
            }
            "stream" => {
                cx.emit_text("hel")?;
                cx.emit_text("lo")?;
                Ok(DecisionResponse::new().with_action(Action::llm_result(json!({"model": "m", "content": "hello"}))))
            }
            "stream then fail" => {
                cx.emit_text("hel")?;
                Err(DecideError::terminal("lost the model"))
            }
            _ => Ok(request.proposed.with_action(Action::done())),
        }
    }
}

fn request(state: &str, trigger: Trigger) -> String {
    let mut request = DecisionRequest::for_trigger(trigger);
    request.state = json!(state);
    subs_sdk::to_json(&request)
}

fn llm_execute(stream: bool) -> Trigger {
    Trigger::LlmExecute(LlmExecute {
        id: "llm_1".to_owned(),
        request: json!({"model": "m", "messages": []}),
        format: None,
        stream,
        attempt: 1,
        deadline: None,
    })
}

async fn post(app: axum::Router, body: String, accept: Option<&str>) -> Response {
    let mut request = Request::post("/");
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    app.oneshot(request.body(Body::from(body)).unwrap()).await.unwrap()
}

async fn text(response: Response) -> String {
    String::from_utf8(to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap()
}

async fn json_body(response: Response) -> Value {
    serde_json::from_str(&text(response).await).unwrap()
}

const ENGINE_ACCEPT: Option<&str> = Some("application/json, text/event-stream");

#[tokio::test]
async fn decisions_are_json_by_default() {
    let reply = post(router(Scripted), request("", Trigger::SessionStart), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::OK);
    assert_eq!(reply.headers()["content-type"], "application/json");
    assert_eq!(json_body(reply).await, json!({"actions": [{"type": "done"}]}));
}

#[tokio::test]
async fn agent_errors_map_to_statuses_by_retryability() {
    let reply = post(router(Scripted), request("retryable", Trigger::SessionStart), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json_body(reply).await, json!({"error": "the database is down"}));
    let reply = post(router(Scripted), request("terminal", Trigger::SessionStart), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json_body(reply).await, json!({"error": "cannot do that"}));
}

#[tokio::test]
async fn a_panicking_agent_is_a_500_and_the_server_lives_on() {
    let app = router(Scripted);
    let reply = post(app.clone(), request("panic", Trigger::SessionStart), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(json_body(reply).await["error"], "the agent panicked while deciding");
    let reply = post(app, request("", Trigger::SessionStart), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::OK);
}

#[tokio::test]
async fn bodies_that_are_not_requests_are_400_naming_the_field() {
    let mut body: Value = serde_json::from_str(&request("", Trigger::SessionStart)).unwrap();
    body["trigger"] = json!({"type": "tool.execute", "id": "c", "name": 5});
    let reply = post(router(Scripted), body.to_string(), None).await;
    assert_eq!(reply.status(), StatusCode::BAD_REQUEST);
    let body = json_body(reply).await;
    assert_eq!(body["field"], "trigger.name", "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("the body is not a DecisionRequest: trigger.name:"), "{body}");

    let reply = post(router(Scripted), "not json".to_owned(), None).await;
    assert_eq!(reply.status(), StatusCode::BAD_REQUEST);
    assert!(json_body(reply).await.get("field").is_none());
}

#[tokio::test]
async fn streaming_llm_execute_answers_with_events() {
    let reply = post(router(Scripted), request("stream", llm_execute(true)), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::OK);
    assert_eq!(reply.headers()["content-type"], "text/event-stream");
    assert_eq!(
        text(reply).await,
        "event: llm.token.delta\ndata: {\"text\":\"hel\"}\n\n\
         event: llm.token.delta\ndata: {\"text\":\"lo\"}\n\n\
         event: decision.result\n\
         data: {\"actions\":[{\"type\":\"llm.result\",\"response\":{\"model\":\"m\",\"content\":\"hello\"}}]}\n\n"
    );
}

#[tokio::test]
async fn a_client_that_wants_json_gets_json_and_no_deltas() {
    let reply = post(router(Scripted), request("stream", llm_execute(true)), Some("application/json")).await;
    assert_eq!(reply.headers()["content-type"], "application/json");
    assert_eq!(json_body(reply).await["actions"][0]["response"]["content"], "hello");
}

#[tokio::test]
async fn deltas_are_refused_unless_the_trigger_streams() {
    for trigger in [Trigger::SessionStart, llm_execute(false)] {
        let reply = post(router(Scripted), request("emit", trigger), ENGINE_ACCEPT).await;
        assert_eq!(reply.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(json_body(reply).await["error"].as_str().unwrap().contains("stream: true"));
    }
}

#[tokio::test]
async fn a_failure_after_the_stream_began_is_an_error_event() {
    let reply = post(router(Scripted), request("stream then fail", llm_execute(true)), ENGINE_ACCEPT).await;
    assert_eq!(reply.status(), StatusCode::OK);
    assert_eq!(
        text(reply).await,
        "event: llm.token.delta\ndata: {\"text\":\"hel\"}\n\n\
         event: error\ndata: {\"error\":\"lost the model\",\"retryable\":false}\n\n"
    );
}

#[tokio::test]
async fn a_client_that_accepts_only_streams_gets_one_for_any_trigger() {
    let reply = post(router(Scripted), request("", Trigger::SessionStart), Some("text/event-stream")).await;
    assert_eq!(reply.headers()["content-type"], "text/event-stream");
    assert_eq!(text(reply).await, "event: decision.result\ndata: {\"actions\":[{\"type\":\"done\"}]}\n\n");
}

#[tokio::test]
async fn signatures_are_required_when_configured() {
    let app = router_with(Scripted, WorkerOptions::new().require_signature("s3cret").path("decide"));
    let body = request("", Trigger::SessionStart);
    let send = |signature: Option<String>| {
        let app = app.clone();
        let body = body.clone();
        async move {
            let mut request = Request::post("/decide");
            if let Some(signature) = signature {
                request = request.header(SIGNATURE_HEADER, signature);
            }
            app.oneshot(request.body(Body::from(body)).unwrap()).await.unwrap()
        }
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();

    let reply = send(None).await;
    assert_eq!(reply.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(json_body(reply).await["error"], "signature refused: the request has no Subs-Signature header");

    let reply = send(Some(sign(b"wrong", now, body.as_bytes()))).await;
    assert_eq!(reply.status(), StatusCode::UNAUTHORIZED);
    assert!(json_body(reply).await["error"].as_str().unwrap().contains("does not match"));

    let reply = send(Some(sign(b"s3cret", now - 3600, body.as_bytes()))).await;
    assert_eq!(reply.status(), StatusCode::UNAUTHORIZED);
    let error = json_body(reply).await["error"].as_str().unwrap().to_owned();
    assert!(error.contains("s old; at most 300 s"), "{error}");

    let reply = send(Some("t=1,v1=zz".to_owned())).await;
    assert!(json_body(reply).await["error"].as_str().unwrap().contains("malformed"));

    assert_eq!(send(Some(sign(b"s3cret", now, body.as_bytes()))).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn only_post_is_served() {
    let reply = router(Scripted).oneshot(Request::get("/").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(reply.status(), StatusCode::METHOD_NOT_ALLOWED);
}
