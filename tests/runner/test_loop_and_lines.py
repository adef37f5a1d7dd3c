"""The runner's event loop (uvloop where installed, asyncio's own when not) and the episodes file's lines (orjson).

A run records the loop it ran on in run.json; an episode written through orjson reads back as the
json module wrote it before, non-ASCII text and floats included, and data orjson would read back
otherwise (NaN, keys that are not strings) is still written by json. The lines waiting for the log's thread
are bounded (a disk slower than the episodes makes `append` wait).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
from dataclasses import replace

import gymnasium as gym
import pytest

import ifgym  # noqa: F401
from ifgym.core import turns
from ifgym.core.turns import json_line, read_json_line
from ifgym.llm.loop import event_loop_name
from ifgym.policies import ScriptedPolicy
from ifgym.runner.records import RunRecord
from ifgym.runner.rollout import read_episodes, run


def make_env():
    return gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None)


def loop_of_a_run() -> asyncio.AbstractEventLoop:
    """The loop `run` played its episodes on (seen from its on_episode callback, which runs inside it)."""
    loops = []
    run(
        make_env,
        lambda: ScriptedPolicy(["A reply."]),
        [0],
        progress=False,
        on_episode=lambda e: loops.append(asyncio.get_running_loop()),
    )
    return loops[0]


def test_a_run_plays_on_uvloop_when_it_is_installed(tmp_path):
    uvloop = pytest.importorskip("uvloop")
    assert isinstance(loop_of_a_run(), uvloop.Loop)
    assert event_loop_name() == "uvloop"
    assert RunRecord(tmp_path, config={}, key="k", command=["ifgym", "eval"]).data["event_loop"] == "uvloop"


def test_a_run_plays_on_asyncios_loop_when_uvloop_is_absent(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError, as when not installed
    loop = loop_of_a_run()
    assert type(loop).__module__.startswith("asyncio.") and isinstance(loop, asyncio.BaseEventLoop)
    assert event_loop_name() == "asyncio"
    assert RunRecord(tmp_path, config={}, key="k", command=["ifgym", "eval"]).data["event_loop"] == "asyncio"


def test_a_line_is_compact_utf8_json_with_floats_as_python_writes_them():
    data = {"reply": "Ça va — 日本語 ✓", "score": 0.1, "tiny": 1e-07, "n": 3, "ok": True, "end": None, "turns": [1.5]}
    line = json_line(data)
    assert line == '{"reply":"Ça va — 日本語 ✓","score":0.1,"tiny":1e-7,"n":3,"ok":true,"end":null,"turns":[1.5]}'
    assert json.loads(line) == data == json.loads(json.dumps(data, ensure_ascii=False))


def test_what_orjson_would_read_back_otherwise_is_written_by_json():
    assert json_line({"x": math.nan}) == '{"x": NaN}'  # orjson would write null
    assert json_line({"x": -math.inf}) == '{"x": -Infinity}'
    assert json_line({1: "a"}) == '{"1": "a"}'  # orjson refuses keys that are not strings
    assert json_line({"pair": (1, 2)}) == '{"pair": [1, 2]}'
    assert json_line({"big": 2**70}) == '{"big": 1180591620717411303424}'


def test_an_episode_written_through_orjson_reads_back_as_it_was_played(tmp_path):
    reply = "Voilà : « deux » — 二つ. Score 0.25 ✓"
    played = run(make_env, lambda: ScriptedPolicy([reply]), [4, 5], progress=False).episodes
    out = tmp_path / "episodes.jsonl"
    run(make_env, lambda: ScriptedPolicy([reply]), [4, 5], output=out, progress=False)
    read = read_episodes(out)
    assert [e.to_json() for e in read] == [e.to_json() for e in played]
    assert all(t.reply == reply for e in read for t in e.turns)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines == [e.to_jsonl() for e in played]
    assert "二つ" in lines[0] and "\\u" not in lines[0]  # UTF-8 text, not escapes
    # the line of a played episode holds floats (rewards, scores): they read back as the same floats
    floats = [t.reward for e in read for t in e.turns]
    assert floats == [t.reward for e in played for t in e.turns] and all(isinstance(f, float) for f in floats)


def test_a_line_reads_as_json_reads_it_whatever_wrote_it():
    # what json_line's fallback writes, which orjson reads otherwise or refuses, reads as json reads it
    assert read_json_line(b'{"big": 1180591620717411303424}\n') == {"big": 2**70}
    assert read_json_line(b"[-9999999999999999999, 9999999999999999999]") == [-(10**19) + 1, 10**19 - 1]
    assert all(type(n) is int for n in read_json_line(b"[-9999999999999999999, 18446744073709551616]"))
    nan, inf = read_json_line(b"[NaN, -Infinity]")
    assert math.isnan(nan) and inf == -math.inf
    assert read_json_line(b'{"x": "\\ud800"}') == {"x": "\ud800"}  # a lone surrogate's escape
    assert read_json_line('{"x": "\u00e9"}'.encode("utf-16")) == {"x": "é"}
    # digits in a row inside a string are read by json too, to the same text
    assert read_json_line(b'{"reply": "call 00000000000000000000"}') == {"reply": "call 00000000000000000000"}
    with pytest.raises(json.JSONDecodeError):
        read_json_line(b'{"cut": ')


def test_an_ordinary_line_is_read_by_orjson(monkeypatch):
    def json_loads(*_):
        raise AssertionError("read by json")

    monkeypatch.setattr(turns.json, "loads", json_loads)
    assert read_json_line(b'{"n": 123456789012345678, "x": -0.0, "f": 5e-324, "s": "\\u00e9"}') == {
        "n": 123456789012345678,
        "x": -0.0,
        "f": 5e-324,
        "s": "é",
    }


def drawn_value(rng: random.Random, depth: int = 0):
    """A JSON value with integers around 64 bits, floats of any magnitude, and strings holding runs of digits."""
    kind = rng.randrange(6 if depth < 3 else 4)
    if kind == 0:
        bits = rng.choice([8, 53, 62, 63, 64, 65, 70])
        return rng.choice([-1, 1]) * rng.randrange(2**bits) + rng.choice([0, -1, 1])
    if kind == 1:
        return rng.choice([-1, 1]) * rng.randrange(10 ** rng.randrange(17, 21))
    if kind == 2:
        return rng.choice([rng.random() * 10 ** rng.randrange(-320, 309), -rng.random(), 0.1, 1e16, math.nan, math.inf])
    if kind == 3:
        return "n" + str(rng.randrange(10 ** rng.randrange(1, 22))) + rng.choice(["", " é", "\n"])
    if kind == 4:
        return [drawn_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": drawn_value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_drawn_lines_read_as_json_reads_them():
    rng = random.Random(7)
    for _ in range(3000):
        value = {"meta": drawn_value(rng)}
        for line in (json.dumps(value).encode(), json_line(value).encode()):
            # repr: the same types (an integer is not a float) and NaN compared as text
            assert repr(read_json_line(line)) == repr(json.loads(line)), line


def test_appends_wait_for_the_disk_past_a_bound_of_lines_waiting(tmp_path, monkeypatch):
    # a disk slower than the episodes: the lines waiting for the log's thread stay bounded (memory stays flat),
    # and every line is written, in order
    import time

    from ifgym.runner.rollout import PENDING_LINES, EpisodeLog, StoredEpisodes

    written = []
    real_write = EpisodeLog._write

    def slow_write(self, lines):  # the thread writes the lines waiting for it at once
        time.sleep(0.002)
        real_write(self, lines)
        written.extend(lines)

    monkeypatch.setattr(EpisodeLog, "_write", slow_write)
    (episode,) = run(make_env, lambda: ScriptedPolicy(["A reply."]), [0], progress=False).episodes
    log = EpisodeLog(tmp_path / "e.jsonl", "k")
    waiting = []
    offsets = []
    for seed in range(3 * PENDING_LINES):
        offsets.append(log.append(replace(episode, seed=seed)))
        waiting.append(len(offsets) - len(written))
    log.close()
    assert max(waiting) <= PENDING_LINES and max(waiting) > PENDING_LINES // 2  # the bound was reached, not passed
    assert [e.seed for e in StoredEpisodes(log.path, offsets)] == list(range(3 * PENDING_LINES))


def test_a_runs_envs_carry_gymnasiums_checker_until_one_has_passed_its_checks():
    # `ifgym eval`'s env factory: gymnasium's passive checker wraps its envs until one has been through its
    # reset, first and second steps; the envs after it go without (same episodes, less CPU a turn)
    from gymnasium.wrappers import PassiveEnvChecker

    from ifgym.runner.build import build_env

    def checked(env):
        while isinstance(env, gym.Wrapper):
            if isinstance(env, PassiveEnvChecker):
                return True
            env = env.env
        return False

    settings = {"id": "ifgym/EvolIF-v1", "max_turns": 3, "patience": None}
    make_run_env = build_env(settings, {"kind": "rules"}, {})
    assert checked(make_run_env())  # no env of the run has played yet
    played = run(make_run_env, lambda: ScriptedPolicy(["A reply."]), range(3), concurrency=1, progress=False)
    assert not checked(make_run_env())
    assert checked(build_env(settings, {"kind": "rules"}, {})())  # another run's factory checks its own envs
    # the episodes read as those of envs checked throughout
    every_env_checked = run(make_env, lambda: ScriptedPolicy(["A reply."]), range(3), progress=False)
    assert [e.to_json() for e in played.episodes] == [e.to_json() for e in every_env_checked.episodes]
    # a setting of the config's own is followed
    unchecked = build_env({**settings, "disable_env_checker": True}, {"kind": "rules"}, {})
    assert not checked(unchecked())


@pytest.mark.parametrize("env_id", ["ifgym/EvolIF-v1", "ifgym/EvolIF", "ifgym.envs:ifgym/EvolIF-v1"])
@pytest.mark.filterwarnings("ignore:.*Using the latest versioned environment")
def test_a_runs_later_envs_are_made_as_its_first_was(env_id):
    # after its first env the factory passes gym.make the registered spec, not the id (no registry search an env);
    # an id only gym.make resolves (no version, or "module:id") is passed as it is
    from ifgym.runner.build import build_env

    make_run_env = build_env({"id": env_id, "max_turns": 3, "patience": None}, {"kind": "rules"}, {})
    specs = [make_run_env().unwrapped.spec for _ in range(3)]
    assert (
        specs[0]
        == specs[1]
        == specs[2]
        == gym.make("ifgym/EvolIF-v1", max_turns=3, patience=None, judge="rules").unwrapped.spec
    )
