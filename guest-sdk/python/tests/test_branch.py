"""``request.messages`` read on demand: the lazy :class:`Messages` over a
fake of the engine's ``messages`` resource (subs:agent@0.2.0), recording
every call the SDK makes to it."""

import unittest

from tests.support import request_json

from componentize_py_types import Err
from wit_world.imports import branch as wb
from wit_world.imports import subs_agent_types as w

from subs_sdk import protocol as p
from subs_sdk import wit
from subs_sdk.agent import Agent
from subs_sdk.branch import BranchError, ClientView, Messages
from subs_sdk.component import decide_wit
from subs_sdk.testing import RecordingHost


def message(i):
    return p.Message(id=f"m{i}", role="user" if i % 2 == 0 else "assistant", content=f"text {i}")


class FakeResource:
    """The engine's resource as componentize-py binds it: WIT messages,
    ``Err(reason)`` once its decision is over; every call recorded."""

    def __init__(self, path):
        self.path = [wit.to_wit(m, w) for m in path]
        self.ids = [m.id for m in path]
        self.calls = []
        self.live = True

    def _call(self, what):
        self.calls.append(what)
        if not self.live:
            raise Err("this messages resource belongs to a decision that is over")

    def len(self):
        self._call("len")
        return len(self.path)

    def get(self, index):
        self._call(f"get {index}")
        return self.path[index] if index < len(self.path) else None

    def range(self, start, end):
        self._call(f"range {start}..{end}")
        return self.path[start:end]

    def last(self, n):
        self._call(f"last {n}")
        return self.path[-n:] if n else []

    def after(self, id):
        self._call(f"after {id}")
        i = self.position_of(id)
        return None if i is None else self.path[i + 1:]

    def position(self, id):
        self._call(f"position {id}")
        return self.position_of(id)

    def position_of(self, id):
        return self.ids.index(id) if id in self.ids else None

    def tree(self):
        self._call("tree")
        # The path, and one message an edit forked off after the first.
        nodes = [
            w.TreeNode(
                message=w.TreeMessage_Active(i),
                parent=w.TreeParent_Root() if i == 0 else w.TreeParent_Node(i - 1),
            )
            for i in range(len(self.path))
        ]
        other = wit.to_wit(p.Message(id="edited", role="user", content="forked"), w)
        nodes.append(w.TreeNode(message=w.TreeMessage_Other(other), parent=w.TreeParent_Node(0)))
        return w.MessageTree(nodes=nodes, head_id=self.ids[-1] if self.ids else None)


def lazy(n):
    resource = FakeResource([message(i) for i in range(n)])
    return Messages.lazy(wit.ResourceSource(resource)), resource


class LazyMessages(unittest.TestCase):
    def test_reads_only_what_is_asked_and_keeps_it(self):
        messages, resource = lazy(4000)
        self.assertEqual(messages[-1], message(3999))
        self.assertEqual(messages[-1], message(3999))
        self.assertEqual(len(messages), 4000)
        self.assertEqual(messages[7], message(7))
        self.assertEqual(messages.last(2), [message(3998), message(3999)])
        self.assertEqual(messages.after("m3997"), [message(3998), message(3999)])
        self.assertIsNone(messages.after("nope"))
        self.assertEqual(messages.position("m12"), 12)
        self.assertIsNone(messages.position("nope"))
        self.assertEqual(messages[10:13], [message(10), message(11), message(12)])
        self.assertEqual(messages[11:13], [message(11), message(12)], "a slice read once is kept")
        self.assertEqual(messages[-3:], [message(3997), message(3998), message(3999)])
        self.assertEqual(messages[10:16:2], [message(10), message(12), message(14)])
        self.assertEqual(messages[100:100], [])
        self.assertFalse(messages.is_read)
        self.assertEqual(resource.calls, [
            "len", "get 3999", "get 7", "range 3998..4000", "after m3997", "after nope", "position m12",
            "position nope", "range 10..13", "range 3997..4000", "range 10..15",
        ])

    def test_last_before_the_length_is_known_is_one_call(self):
        messages, resource = lazy(50)
        self.assertEqual(messages.last(1), [message(49)])
        self.assertEqual(messages.last(0), [])
        self.assertEqual(resource.calls, ["last 1"])

    def test_indices_outside_the_path_raise_index_error(self):
        messages, resource = lazy(3)
        for index in (3, -4, 100):
            with self.assertRaises(IndexError):
                messages[index]
        self.assertEqual(messages[-3], message(0))
        self.assertEqual(messages[5:], [])
        self.assertEqual(resource.calls, ["len", "get 0"])

    def test_iterating_reads_the_path_once(self):
        messages, resource = lazy(5)
        self.assertEqual(list(messages), [message(i) for i in range(5)])
        self.assertEqual([m.id for m in messages], [f"m{i}" for i in range(5)])
        self.assertEqual(messages[4], message(4))
        self.assertEqual(messages.last(2), [message(3), message(4)])
        self.assertEqual(messages.after("m2"), [message(3), message(4)])
        self.assertEqual(messages.position("m1"), 1)
        self.assertIn(message(2), messages)
        self.assertEqual(messages, [message(i) for i in range(5)])
        self.assertTrue(messages.is_read)
        self.assertEqual(resource.calls, ["len", "range 0..5"])

    def test_an_empty_branch_reads_only_its_length(self):
        messages, resource = lazy(0)
        self.assertEqual(list(messages), [])
        self.assertEqual(messages.last(3), [])
        self.assertEqual(resource.calls, ["len"])

    def test_the_tree_is_read_only_when_asked(self):
        messages, resource = lazy(3)
        self.assertEqual(messages[0], message(0))
        self.assertEqual(resource.calls, ["len", "get 0"])
        tree = messages.tree
        self.assertIs(messages.tree, tree, "read once")
        self.assertEqual([n.message.id for n in tree.nodes], ["m0", "m1", "m2", "edited"])
        self.assertEqual([n.parent_id for n in tree.nodes], [None, "m0", "m1", "m0"])
        self.assertEqual(tree.head_id, "m2")
        self.assertEqual(resource.calls, ["len", "get 0", "tree", "range 0..3"])
        self.assertFalse(messages.is_read, "the tree's messages are kept by index")
        self.assertEqual(messages.position("m2"), 2, "asked of the engine")
        self.assertEqual(list(messages), [message(i) for i in range(3)])
        self.assertEqual(resource.calls, ["len", "get 0", "tree", "range 0..3", "position m2"])

    def test_changing_it_reads_it_first(self):
        messages, resource = lazy(2)
        messages.append(message(9))
        self.assertEqual([m.id for m in messages], ["m0", "m1", "m9"])
        self.assertEqual(messages[-1], message(9))
        self.assertEqual(len(messages), 3)
        del messages[0]
        self.assertEqual(messages + [message(5)], [message(1), message(9), message(5)])
        self.assertEqual(resource.calls, ["len", "range 0..2"])

    def test_a_refused_read_raises_branch_error_with_the_reason(self):
        messages, resource = lazy(3)
        resource.live = False
        with self.assertRaises(BranchError) as e:
            len(messages)
        self.assertIn("decision that is over", str(e.exception))


def draft(i):
    """The draft a view holds of ``message(i)``, or of a new message."""
    return p.DraftMessage(id=f"m{i}", role="user" if i % 2 == 0 else "assistant", content=f"text {i}")


def client_messages(resource, shared, rest, new_from):
    """A ``client.messages`` request of subs:agent@0.2.0 whose view is the
    branch's first ``shared`` messages, then ``rest``."""
    request = wit.to_wit(p.DecisionRequest(trigger=p.SessionStart()), w)
    fields = dict(vars(request))
    del fields["messages"], fields["message_tree"]
    fields["trigger"] = wb.Trigger_ClientMessages(wb.ClientMessagesTrigger(
        shared=shared,
        rest=[wit.to_wit(m, w) for m in rest],
        new_from=new_from,
        client=wit.to_wit(p.ClientContext(state={"k": 1}), w),
    ))
    return wit.request_from_branch_wit(wb.DecisionRequest(**fields), resource)


class ClientViews(unittest.TestCase):
    """A ``client.messages`` trigger's view in a component built against
    0.2.0: the branch's first ``shared`` messages, then the rest."""

    def view(self, branch=10, shared=8, rest=(8, 9)):
        resource = FakeResource([message(i) for i in range(branch)])
        request = client_messages(resource, shared, [draft(i) for i in rest], new_from=shared)
        return request, request.trigger.messages, resource

    def test_the_view_reads_the_branch_only_for_indexes_below_shared(self):
        request, view, resource = self.view()
        self.assertIsInstance(view, ClientView)
        self.assertEqual(len(view), 10)
        self.assertEqual(view[-1], draft(9))
        self.assertEqual(view[8], draft(8))
        self.assertEqual(view.last(2), [draft(8), draft(9)])
        self.assertEqual(resource.calls, [], "the rest is the trigger's own")
        self.assertEqual(view[3], draft(3))
        self.assertIsInstance(view[3], p.DraftMessage)
        self.assertEqual(resource.calls, ["len", "get 3"])
        self.assertEqual(request.messages[3], message(3), "read once, for both")
        self.assertEqual(view[6:9], [draft(6), draft(7), draft(8)])
        self.assertEqual(view[-5:-3], [draft(5), draft(6)])
        self.assertEqual(resource.calls, ["len", "get 3", "range 6..8", "range 5..7"])
        self.assertFalse(view.is_read)
        self.assertFalse(request.messages.is_read)

    def test_a_new_from_slice_reads_nothing_of_the_branch_when_shared_is_new_from(self):
        request, view, resource = self.view(branch=4000, shared=4000, rest=(4000, 4001))
        trigger = request.trigger
        self.assertEqual(view[trigger.new_from:], [draft(4000), draft(4001)])
        self.assertEqual([m.text() for m in view[trigger.new_from:]], ["text 4000", "text 4001"])
        self.assertEqual(len(view), 4002)
        self.assertTrue(view)
        self.assertEqual(resource.calls, [])
        self.assertFalse(view.is_read)

    def test_iterated_the_view_is_the_whole_view_read_once(self):
        request, view, resource = self.view()
        whole = [draft(i) for i in range(10)]
        self.assertEqual(list(view), whole)
        self.assertEqual([m.id for m in view], [f"m{i}" for i in range(10)])
        self.assertEqual(view, whole)
        self.assertTrue(view.is_read)
        self.assertEqual(view[2], draft(2))
        self.assertEqual(resource.calls, ["len", "range 0..8"])
        # As JSON, the trigger of 0.1.0: the whole view, no `shared`.
        self.assertEqual(p.to_value(request.trigger), {
            "type": "client.messages",
            "messages": p.to_value(whole),
            "new_from": 8,
            "client": {"state": {"k": 1}},
        })
        self.assertFalse(request.messages.is_read, "the branch's first messages, read as a slice")

    def test_json_of_the_trigger_reads_the_branch_once(self):
        request, view, resource = self.view(branch=3, shared=3, rest=(3,))
        self.assertEqual(p.to_value(request.trigger)["messages"], p.to_value([draft(i) for i in range(4)]))
        self.assertEqual(p.to_value(request.trigger)["messages"], p.to_value([draft(i) for i in range(4)]))
        self.assertEqual(resource.calls, ["len", "range 0..3"])

    def test_position_and_after_ask_the_branch_only_for_its_part(self):
        request, view, resource = self.view()
        self.assertEqual(view.position("m2"), 2)
        self.assertEqual(view.position("m9"), 9)
        self.assertIsNone(view.position("nope"))
        self.assertEqual(view.after("m7"), [draft(8), draft(9)])
        self.assertEqual(view.after("m5"), [draft(i) for i in range(6, 10)])
        self.assertEqual(resource.calls, [
            "position m2", "position m9", "position nope", "position m7", "position m5", "len", "range 6..8",
        ])

    def test_a_message_the_branch_holds_past_shared_is_found_in_the_rest(self):
        # The new messages are on the branch too, after the shared ones.
        request, view, resource = self.view(branch=10, shared=8, rest=(8, 9))
        self.assertEqual(view.position("m8"), 8)
        self.assertEqual(view.after("m8"), [draft(9)])

    def test_a_view_sharing_nothing_holds_its_messages(self):
        request, view, resource = self.view(branch=3, shared=0, rest=(0, 1))
        self.assertTrue(view.is_read)
        self.assertEqual(view, [draft(0), draft(1)])
        self.assertEqual(resource.calls, [])

    def test_a_view_kept_past_its_decision_raises_branch_error(self):
        request, view, resource = self.view()
        resource.live = False
        self.assertEqual(view[-1], draft(9), "the rest is held")
        with self.assertRaises(BranchError) as e:
            view[0]
        self.assertIn("decision that is over", str(e.exception))
        with self.assertRaises(BranchError):
            list(view)

    def test_changing_the_view_reads_it_first(self):
        request, view, resource = self.view(branch=3, shared=2, rest=(2,))
        view.append(draft(7))
        self.assertEqual(view, [draft(0), draft(1), draft(2), draft(7)])
        self.assertEqual(resource.calls, ["len", "range 0..2"])

    def test_an_agent_reading_the_new_messages_reads_nothing_of_the_branch(self):
        class New(Agent):
            def decide(self, request, ctx):
                trigger = request.trigger
                assert isinstance(trigger, p.ClientMessages)
                new = trigger.messages[trigger.new_from:]
                return p.DecisionResponse(state={"len": len(trigger.messages), "new": [m.text() for m in new]})

        resource = FakeResource([message(i) for i in range(4000)])
        request = wit.to_wit(p.DecisionRequest(trigger=p.SessionStart()), w)
        fields = dict(vars(request))
        del fields["messages"], fields["message_tree"]
        fields["trigger"] = wb.Trigger_ClientMessages(wb.ClientMessagesTrigger(
            shared=3999, rest=[wit.to_wit(draft(3999), w)], new_from=3999, client=wit.to_wit(p.ClientContext(), w)))
        decision = decide_wit(New(), wb.DecisionRequest(**fields), RecordingHost(), w, messages=resource)
        self.assertEqual(wit.from_wit(p.DecisionResponse, decision).state, {"len": 4000, "new": ["text 3999"]})
        self.assertEqual(resource.calls, [])


class HeldViews(unittest.TestCase):
    def test_a_trigger_made_in_a_test_from_json_or_from_0_1_0_holds_a_view(self):
        drafts = [draft(0), p.DraftMessage.user("hi")]
        as_json = {"type": "client.messages", "messages": p.to_value(drafts), "new_from": 1, "client": {}}
        for trigger in (
            p.ClientMessages(messages=list(drafts), new_from=1),
            p.from_json(p.Trigger, as_json),
            wit.from_wit(p.Trigger, wit.to_wit(p.ClientMessages(messages=list(drafts), new_from=1), w)),
        ):
            self.assertIsInstance(trigger.messages, ClientView)
            self.assertTrue(trigger.messages.is_read)
            self.assertEqual(trigger.messages, drafts)
            self.assertEqual(trigger.messages[trigger.new_from:], drafts[1:])
            self.assertEqual(p.to_value(trigger), as_json)
            self.assertEqual(p.to_value(trigger.messages), as_json["messages"])
            self.assertEqual(p.jsonable({"view": trigger.messages}), {"view": as_json["messages"]})


class HeldMessages(unittest.TestCase):
    def test_a_request_made_in_a_test_or_from_json_has_the_same_accessor(self):
        path = [message(i) for i in range(4)]
        for request in (
            p.DecisionRequest(trigger=p.SessionStart(), messages=list(path)),
            p.from_json(p.DecisionRequest, request_json({"type": "session.start"}, messages=p.to_value(path))),
        ):
            messages = Messages.of(request)
            self.assertIs(messages, request.messages)
            self.assertEqual(messages[-1], path[-1])
            self.assertEqual(messages.last(2), path[2:])
            self.assertEqual(messages.after("m1"), path[2:])
            self.assertEqual(messages.position("m3"), 3)
            self.assertEqual(messages[1:3], path[1:3])
            self.assertEqual(request.messages, path)
            self.assertEqual(p.to_value(request)["messages"], p.to_value(path))


class Agents(unittest.TestCase):
    """``decide_wit`` with a resource, as a component built against 0.2.0
    runs it."""

    def decide(self, agent, resource, trigger=None):
        request = wit.to_wit(p.DecisionRequest(trigger=trigger or p.SessionStart(), state={"n": 1}), w)
        fields = dict(vars(request))
        del fields["messages"], fields["message_tree"]
        decision = decide_wit(agent, wb.DecisionRequest(**fields), RecordingHost(), w, messages=resource)
        return wit.from_wit(p.DecisionResponse, decision)

    def test_an_agent_reading_the_newest_message_reads_only_it(self):
        class Newest(Agent):
            def decide(self, request, ctx):
                assert request.state == {"n": 1}
                return p.DecisionResponse(state={"newest": request.messages[-1].id})

        resource = FakeResource([message(i) for i in range(4000)])
        self.assertEqual(self.decide(Newest(), resource).state, {"newest": "m3999"})
        self.assertEqual(resource.calls, ["len", "get 3999"])

    def test_an_agent_reading_the_whole_branch_and_tree_gets_both(self):
        class Whole(Agent):
            def decide(self, request, ctx):
                return p.DecisionResponse(state={
                    "path": [m.id for m in request.messages],
                    "tree": [n.message.id for n in request.message_tree.nodes],
                })

        resource = FakeResource([message(i) for i in range(3)])
        self.assertEqual(self.decide(Whole(), resource).state,
                         {"path": ["m0", "m1", "m2"], "tree": ["m0", "m1", "m2", "edited"]})
        self.assertEqual(resource.calls, ["len", "range 0..3", "tree"])

    def test_an_agent_reading_nothing_reads_nothing(self):
        class Nothing(Agent):
            def decide(self, request, ctx):
                return p.DecisionResponse()

        resource = FakeResource([message(i) for i in range(3)])
        self.decide(Nothing(), resource)
        self.assertEqual(resource.calls, [])

    def test_a_refused_read_fails_the_delivery_with_the_reason(self):
        class Newest(Agent):
            def decide(self, request, ctx):
                return p.DecisionResponse(state={"newest": request.messages[-1].id})

        resource = FakeResource([message(0)])
        resource.live = False
        with self.assertRaises(Err) as e:
            self.decide(Newest(), resource)
        self.assertIn("decision that is over", e.exception.value.message)
        self.assertFalse(e.exception.value.retryable)


if __name__ == "__main__":
    unittest.main()
