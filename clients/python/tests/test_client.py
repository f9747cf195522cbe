"""The client against a real ``subs serve`` (see conftest.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, List

import pytest

from subs_client import (
    AdminClient,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    Event,
    NotFoundError,
    PermissionDeniedError,
    user_message,
)

from conftest import ADD, CuttingProxy, Server, settled


def session() -> str:
    """A fresh session id, with characters that need encoding in a path."""
    return f"py/{uuid.uuid4().hex[:8]} ü"


def names(events: List[Event]) -> List[str]:
    return [e.event for e in events]


def stored(events: List[Event]) -> List[int]:
    return [e.id for e in events if e.id is not None]


def test_a_tool_turn_streams_from_start_to_end(server: Server) -> None:
    with server.client() as subs:
        chat = session()
        events = list(subs.stream_message(chat, "tools", ADD))
        assert events[0].event == "turn.started" and events[-1].event == "turn.done", names(events)
        turn = events[0].turn_id
        assert turn and events[-1].turn_id == turn
        messages = [e.data["message"] for e in events if e.event == "message"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"], messages
        assert json.loads(messages[2]["content"]) == {"sum": 3}
        ids = stored(events)
        assert ids == sorted(set(ids)), ids
        view = subs.get_session(chat)
        assert view["status"] == "idle" and view["last_event_id"] == ids[-1]
        assert view["messages"][-1]["role"] == "assistant"
        # Its decisions, a page of one at a time.
        steps = list(subs.decisions(chat, limit=1))
        assert [s["seq"] for s in steps] == list(range(len(steps))) and len(steps) >= 3, steps
        assert {s["status"] for s in steps} == {"applied"} and steps[0]["turn_id"] == turn


def test_a_stream_cut_mid_turn_resumes_and_yields_every_event_once(server: Server) -> None:
    proxy = CuttingProxy(server.url, cut_after=2)
    try:
        with server.client(url=proxy.url) as subs:
            chat = session()
            events = list(subs.stream_message(chat, "tools", ADD))
        assert proxy.cuts == 1, "the first stream was cut"
        assert proxy.connections >= 2, "the client reconnected"
    finally:
        proxy.close()
    with server.client() as subs:
        # What the session stored, read whole from the start.
        everything: List[Event] = []
        for event in subs.events(chat):
            everything.append(event)
            if event.event == "turn.done":
                break
    assert stored(events) == stored(everything), (names(events), names(everything))
    assert [(e.event, e.data) for e in events if e.id is not None] == [(e.event, e.data) for e in everything]
    assert events[-1].event == "turn.done"


def test_the_async_client_resumes_a_cut_stream_too(server: Server) -> None:
    proxy = CuttingProxy(server.url, cut_after=3)

    async def run() -> List[Event]:
        async with AsyncClient(proxy.url, key=server.key) as subs:
            return [e async for e in subs.stream_message(chat, "tools", ADD)]

    chat = session()
    try:
        events = asyncio.run(run())
        assert proxy.cuts == 1 and proxy.connections >= 2
    finally:
        proxy.close()
    with server.client() as subs:
        everything = []
        for event in subs.events(chat):
            everything.append(event)
            if event.event == "turn.done":
                break
    assert [(e.event, e.data) for e in events if e.id is not None] == [(e.event, e.data) for e in everything]


def test_a_turn_resent_after_a_cut_before_any_event_is_the_same_turn(server: Server) -> None:
    with server.client() as subs:
        chat = session()
        first = list(subs.stream(chat, user_message("tools", ADD, turn_id="t-1")))
        again = list(subs.stream(chat, user_message("tools", ADD, turn_id="t-1")))
        # The same stored events; token deltas are live only, so the
        # replayed turn has none.
        assert [(e.event, e.data) for e in again] == [(e.event, e.data) for e in first if e.id is not None]
        assert again[-1].event == "turn.done"
        assert len(subs.get_session(chat)["message_tree"]["nodes"]) == 4, "one turn's messages"


def test_an_interrupt_is_listed_refused_with_its_field_and_resumed(server: Server) -> None:
    with server.client() as subs:
        chat = session()
        accepted = subs.send_message(chat, "scenario", "interrupt with schema")
        assert accepted["existing"] is False and "turn_id" in accepted
        settled(subs, chat, "waiting")
        [interrupt] = subs.interrupts(chat)
        assert interrupt["interrupt_id"] == "approval" and interrupt["reason"] == "needs approval"
        assert interrupt["resume_schema"]["required"] == ["approved"]
        after = subs.get_session(chat)["last_event_id"]

        with pytest.raises(BadRequestError) as refused:
            subs.resume(chat, "approval", {"approved": "yes"})
        assert (refused.value.status, refused.value.code, refused.value.field) == (400, "invalid_input", "payload.approved")
        assert subs.interrupts(chat), "still open"

        subs.resume(chat, "approval", {"approved": True})
        with pytest.raises(ConflictError):
            subs.resume(chat, "approval", {"approved": True})
        seen = []
        for event in subs.events(chat, after=after):
            seen.append(event)
            if event.event == "turn.done":
                break
        assert seen[0].event == "interrupt.resumed" and seen[0].data["payload"] == {"approved": True}
        replies = [e.data["message"]["content"] for e in seen if e.event == "message"]
        assert replies == ['resumed with {"approved":true}'], replies
        assert subs.interrupts(chat) == []


def test_a_client_tool_is_answered_while_the_turn_streams(server: Server) -> None:
    confirm = {
        "name": "confirm",
        "description": "Asks the user.",
        "input": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    }
    ask: Any = {
        "type": "client.messages",
        "agent_id": "tools",
        "client": {"tools": [confirm]},
        "messages": [{"role": "user", "content": 'use tool confirm with {"ok": true}'}],
    }
    with server.client() as subs:
        chat = session()
        events = []
        for event in subs.stream(chat, ask):
            events.append(event)
            if event.event == "tool.call":
                assert event.data["name"] == "confirm" and json.loads(event.data["arguments"]) == {"ok": True}
                assert subs.get_session(chat)["status"] == "waiting"
                subs.tool_result(chat, event.data["id"], {"confirmed": "yes"})
        assert "tool.call" in names(events) and events[-1].event == "turn.done", names(events)
        tool = [e.data["message"] for e in events if e.event == "message" and e.data["message"]["role"] == "tool"]
        assert json.loads(tool[0]["content"]) == {"confirmed": "yes"}
        with pytest.raises(ConflictError):
            subs.tool_result(chat, "no-such-call", 1)


def test_an_agent_is_uploaded_inactive_then_activated(server: Server, tools_wasm: bytes, scenario_wasm: bytes) -> None:
    with server.client() as subs:
        agent = f"agent-{uuid.uuid4().hex[:6]}"
        with pytest.raises(ConflictError) as first:
            subs.upload_agent(agent, tools_wasm, activate=False)
        assert first.value.code == "no_active_version"
        v1 = subs.upload_agent(agent, tools_wasm)["version"]
        stored_only = subs.upload_agent(agent, scenario_wasm, activate=False)
        assert stored_only["version"] == v1, "the current version stays"
        versions = subs.agent_versions(agent)
        assert [v["active"] for v in versions] == [True, False]
        v2 = versions[1]["version"]
        assert subs.activate(agent, v2)["version"] == v2
        assert subs.get_agent(agent)["version"] == v2
        assert agent in [a["agent_id"] for a in subs.list_agents()]
        # The new version decides: the scenario agent counts turns in its state.
        chat = session()
        done = list(subs.stream(chat, {"type": "client.messages", "agent_id": agent, "messages": [{"role": "user", "content": "count"}]}))
        assert done[-1].event == "turn.done"
        report = subs.replay(agent, v2, sessions=[chat])
        assert report["version"] == v2 and report["decisions"] == report["same"] + report["different"] + report["failed"]
        assert report["sessions"] == 1
        # Rolling back, then dropping the version no longer current.
        subs.activate(agent, v1)
        assert [v["version"] for v in subs.delete_version(agent, v2)["versions"]] == [v1]
        with pytest.raises(NotFoundError) as missing:
            subs.activate(agent, v2)
        assert missing.value.field == "version"
        subs.delete_agent(agent)
        with pytest.raises(NotFoundError):
            subs.get_agent(agent)


def test_an_end_user_token_reaches_only_its_own_sessions(server: Server) -> None:
    with server.client() as subs:
        theirs = session()
        subs.send_message(theirs, "tools", "hello")
        token = subs.end_user_token("user-42", metadata={"plan": "pro"}, ttl_secs=60)
        assert token["identity"]["id"] == "user-42" and token["expires_at"] > 0
        bound = subs.end_user_token("user-42", session_id="only-this")
    with server.client(key=token["token"]) as user:
        mine = session()
        events = list(user.stream_message(mine, "tools", ADD, identity={"id": "someone-else"}))
        assert events[-1].event == "turn.done"
        view = user.get_session(mine)
        assert view["identity"]["id"] == "user-42", "the token's identity, whatever the body says"
        assert [s["session_id"] for s in user.list_sessions()] == [mine]
        with pytest.raises(NotFoundError):
            user.get_session(theirs)
        with pytest.raises(NotFoundError):
            list(user.events(theirs))
        with pytest.raises(PermissionDeniedError) as forbidden:
            user.list_agents()
        assert forbidden.value.code == "forbidden"
        with pytest.raises(PermissionDeniedError):
            user.end_user_token("user-43")
    with server.client(key=bound["token"]) as user:
        with pytest.raises(NotFoundError):
            user.send_message(mine, "tools", "hello")
    with server.client(key="subs_not_a_key") as stranger:
        with pytest.raises(AuthenticationError) as unknown:
            stranger.get_session(mine)
        assert unknown.value.code == "unauthorized"


def test_a_4xx_is_raised_as_the_typed_error_with_its_field(server: Server) -> None:
    with server.client() as subs:
        with pytest.raises(BadRequestError) as typo:
            subs.send(session(), {"type": "client.message", "agent_id": "tools", "message": {"role": "user", "content": "x"}, "paylod": 1})
        error = typo.value
        assert (error.status, error.code, error.field) == (400, "invalid_input", "paylod")
        assert "paylod" in error.message and "paylod" in str(error)
        with pytest.raises(NotFoundError) as nobody:
            subs.send_message(session(), "nobody", "hi")
        assert (nobody.value.code, nobody.value.field) == ("unknown_agent", "agent_id")
        with pytest.raises(BadRequestError) as bad_id:
            subs.get_session("bad\u0001id")
        assert bad_id.value.field == "session_id"


def test_sessions_are_listed_by_filter_page_by_page_and_cancelled(server: Server) -> None:
    with server.client() as subs:
        prefix = uuid.uuid4().hex[:6]
        waiting = f"{prefix}-wait"
        subs.send_message(waiting, "scenario", "interrupt")
        settled(subs, waiting, "waiting")
        for n in range(3):
            list(subs.stream_message(f"{prefix}-{n}", "tools", "hi"))
        listed = [s["session_id"] for s in subs.list_sessions(limit=2) if s["session_id"].startswith(prefix)]
        assert listed == sorted(listed) and len(listed) == 4, listed
        assert waiting in [s["session_id"] for s in subs.list_sessions(status="waiting", agent="scenario")]
        assert waiting not in [s["session_id"] for s in subs.list_sessions(status="idle")]
        assert subs.cancel(waiting) is True
        settled(subs, waiting, "idle")
        assert subs.cancel(waiting) is False


def test_the_async_client_streams_lists_and_follows(server: Server) -> None:
    async def run() -> None:
        async with AsyncClient(server.url, key=server.key) as subs:
            chat = session()
            events = [e async for e in subs.stream_message(chat, "tools", ADD)]
            assert events[0].event == "turn.started" and events[-1].event == "turn.done"
            assert (await subs.get_session(chat))["status"] == "idle"
            found = [s["session_id"] async for s in subs.list_sessions(agent="tools")]
            assert chat in found
            steps = [s async for s in subs.decisions(chat, after=0)]
            assert steps and steps[0]["seq"] == 1
            replayed = []
            async with subs.events(chat) as follow:
                async for event in follow:
                    replayed.append(event)
                    if event.event == "turn.done":
                        break
            assert stored(replayed) == stored(events)
            with pytest.raises(ConflictError) as error:
                await subs.resume(chat, "nothing", None)
            assert (error.value.status, error.value.code) == (409, "conflict")

    asyncio.run(run())


def test_the_admin_api_makes_tenants_and_keys(server: Server) -> None:
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    with server.admin() as admin:
        made = admin.put_tenant(tenant, limits={"max_sessions": 5})
        assert made["tenant"] == tenant and made["overrides"] == {"max_sessions": 5}
        assert tenant in [t["tenant"] for t in admin.list_tenants()]
        assert admin.get_limits(tenant)["limits"]["max_sessions"] == 5
        assert admin.set_limits(tenant, {})["overrides"] == {}
        key = admin.create_key(tenant, name="ci")
        assert [k["prefix"] for k in admin.list_keys(tenant)] == [key["prefix"]]
        with server.client(key=key["key"]) as subs:
            assert subs.list_agents() == []
            admin.revoke_key(key["hash"])
            with pytest.raises(AuthenticationError):
                subs.list_agents()
        deleted = admin.delete_tenant(tenant)
        assert deleted["deleted"] is True
        with pytest.raises(NotFoundError):
            admin.get_tenant(tenant)
        with pytest.raises(BadRequestError) as bad:
            admin.set_limits("acme", {"max_sessions": "many"})
        assert bad.value.field == "max_sessions"
    # A tenant's key is not the operator's.
    with AdminClient(server.url, server.key) as not_admin:
        with pytest.raises(PermissionDeniedError) as forbidden:
            not_admin.list_tenants()
        assert forbidden.value.code == "forbidden"
