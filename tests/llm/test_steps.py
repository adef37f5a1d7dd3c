"""`twin`, `Call`, `steps_of` and `asking`: a step written once runs the same blocking and awaited."""

import asyncio
import inspect
import threading

import pytest

from ifgym.llm.conversation import Call, CannedClient, asking, chat_call, run_steps, steps_of, twin


class Echo:
    """A judge-shaped object: one model call per step, through a canned client (stands in for a model)."""

    def __init__(self, client):
        self.client = client

    @twin
    def judge(self, reply: str, *, upper: bool = False):
        """Ask the model about `reply`."""
        completion = yield Call(self.client.chat, self.client.achat, ([{"role": "user", "content": reply}],))
        return completion.text.upper() if upper else completion.text

    @twin
    def judge_twice(self, reply: str):
        first = yield from steps_of(self, "judge", reply)
        second = yield from steps_of(self, "judge", reply, upper=True)
        return [first, second]


class HandWritten:
    """An object with a plain `score`/`ascore` pair (a user's own scorer), not written with twin."""

    def __init__(self):
        self.calls = []

    def score(self, x):
        self.calls.append(("score", x))
        return x + 1

    async def ascore(self, x):
        self.calls.append(("ascore", x))
        return x + 2


def test_twin_gives_a_blocking_and_an_awaited_method_with_the_same_result():
    echo = Echo(CannedClient(["yes", "no"]))
    assert echo.judge("a") == "yes"
    assert asyncio.run(echo.ajudge("b", upper=True)) == "NO"
    assert echo.client.requests == [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    assert Echo.ajudge.__name__ == "ajudge" and "Async twin of `judge`" in Echo.ajudge.__doc__
    assert Echo.judge.__doc__ == "Ask the model about `reply`."


def test_twin_methods_have_the_signature_of_their_steps():
    # what help() and gymnasium's env checker (it reads reset's seed and options) see
    echo = Echo(CannedClient(["yes"]))
    assert (
        str(inspect.signature(echo.judge))
        == str(inspect.signature(echo.ajudge))
        == "(reply: str, *, upper: bool = False)"
    )
    assert list(inspect.signature(Echo.judge).parameters) == ["self", "reply", "upper"]


def test_steps_compose_with_yield_from():
    echo = Echo(CannedClient(["yes", "no"]))
    assert echo.judge_twice("a") == ["yes", "NO"]
    assert asyncio.run(echo.ajudge_twice("a")) == ["yes", "NO"]
    assert len(echo.client.requests) == 4


def test_a_subclass_that_writes_the_blocking_form_plainly_is_awaited_as_written():
    class Plain(Echo):
        def judge(self, reply, *, upper=False):
            return f"plain {reply}"

    plain = Plain(CannedClient(["never asked"]))
    assert plain.judge("a") == "plain a"
    assert asyncio.run(plain.ajudge("b")) == "plain b"  # not the parent's steps
    assert asyncio.run(_arun(steps_of(plain, "judge", "c"))) == "plain c"
    assert plain.client.requests == []


def test_steps_of_an_object_without_twin_calls_its_pair():
    scorer = HandWritten()
    assert run_steps(steps_of(scorer, "score", 1)) == 2
    assert asyncio.run(_arun(steps_of(scorer, "score", 1))) == 3
    assert scorer.calls == [("score", 1), ("ascore", 1)]


async def _arun(steps):
    from ifgym.llm.conversation import arun_steps

    return await arun_steps(steps)


def test_an_object_with_only_the_blocking_form_is_awaited_in_a_thread():
    class OnlyScore:  # duck-typed, no ascore
        def score(self, x):
            return (x, threading.current_thread() is threading.main_thread())

    assert run_steps(steps_of(OnlyScore(), "score", 1)) == (1, True)
    assert asyncio.run(_arun(steps_of(OnlyScore(), "score", 2))) == (2, False)


def test_asking_turns_a_conversation_into_calls_and_reads_each_answer():
    def conversation():
        first = yield [{"role": "user", "content": "one"}]
        second = yield [{"role": "user", "content": "two"}]
        return first + "|" + second

    client = CannedClient(["a", "b"])
    steps = asking(conversation(), chat_call(client, temperature=0.0), read=lambda c: c.text)
    assert run_steps(steps) == "a|b"
    assert [m[0]["content"] for m in client.requests] == ["one", "two"]


def test_a_stop_iteration_escaping_a_call_is_not_the_steps_end():
    def broken(_messages):
        raise StopIteration("from the client")

    class Broken:
        @twin
        def ask(self):
            yield Call(broken, broken, ([],))
            return "finished"

    with pytest.raises(StopIteration, match="from the client"):  # not taken for the steps' return
        Broken().ask()


def test_twin_refuses_a_function_that_is_not_a_generator():
    with pytest.raises(TypeError, match="generator function that yields Calls"):

        class Bad:
            @twin
            def judge(self):
                return 1


def test_steps_of_calls_a_method_set_on_the_instance():
    # a spy set on one object (monkeypatch.setattr(user, "anext", spy)) is called, not passed by for the class's steps
    echo = Echo(CannedClient(["yes"]))
    seen = []

    async def spy(reply, **kwargs):
        seen.append(reply)
        return "spied"

    echo.ajudge = spy
    assert asyncio.run(_arun(steps_of(echo, "judge", "a"))) == "spied"
    assert run_steps(steps_of(echo, "judge", "b")) == "yes"  # its blocking half is still the class's
    assert seen == ["a"] and len(echo.client.requests) == 1
