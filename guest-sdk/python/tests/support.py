"""Shared by the tests: the SDK's source and the generated bindings on the
path, the repository's protocol fixtures, and requests to decide."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE / "bindings"))

FIXTURES = HERE.parents[2] / "tests" / "fixtures" / "protocol"


def fixtures():
    """(type directory, file name, text) of every protocol fixture."""
    for path in sorted(FIXTURES.glob("*/*.json")):
        yield path.parent.name, path.name, path.read_text(encoding="utf-8")


def canonical(value):
    """JSON text with sorted keys: equal exactly when the values are."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_json(trigger, **fields):
    """A minimal request as protocol JSON."""
    request = {
        "session_id": "session",
        "decision_id": "decision",
        "agent_id": "agent",
        "identity": {},
        "trigger": trigger,
        "proposed": {},
        "state": None,
        "agent": None,
        "calls": [],
        "pending_calls": 0,
        "messages": [],
        "message_tree": {"nodes": []},
        "ancestry": [],
        "attempts": 1,
        "deadline": None,
        "turn_id": None,
    }
    request.update(fields)
    return request
