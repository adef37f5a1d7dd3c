"""The episode runner's throughput, CPU and memory, side by side in one run.

    python benchmarks/runner.py [--latency 0.2 1.0] [--turns 4] [--sizes 50 500 2000] [--no-ray] [--only PART]
                                [--profile]

Throughput: EvolIF-v1 episodes (rule judge, patience off, `--turns` turns) whose policy is a
ChatPolicy over HTTP (the openai SDK over its aiohttp transport, as every served model is called)
against tests/support/canned_server.py on 127.0.0.1, which answers every request after a fixed
latency: each of `--latency` in turn (0.2 s and 1 s by default). The server runs in a process of its
own (a fresh one per row), so its CPU is counted apart and it takes no GIL from the driver. One turn is
one policy call, so the ideal is concurrency / latency turns/s; the table gives turns/s, its ratio to that ideal, the
driver's CPU per turn (env + client; Ray workers' CPU is not in it), the server's, and the one over the
other: the server's CPU a turn is a fixed piece of work, so that quotient compares runs made while the
machine ran at different speeds. At concurrency
1, 8, 64 and 256 (4 rounds of episodes each, 16 at 64: its steady rate), two drivers side by side:
`run()` in-process (no episodes file), and `ifgym eval` as users run it, a command in a child process
(Hydra config, the episodes file, the summary, intervals and plots), whose episodes phase (`run()`
inside the command) gives its rate and CPU per turn, and whose phases (the whole command, episodes,
report, the report's intervals and plots) are timed apart, wall and CPU. Then: the same episodes at
concurrency 64 with an in-process CannedClient (no HTTP: the env and runner's own share of the
driver's CPU); Ray with 1 and 2 workers of concurrency 8 each (ideal: workers x 8 / latency; start-up
excluded). `--profile` adds a cProfile of `ifgym eval` at concurrency 64: where its CPU goes.
`--baseline PYTHONPATH` runs another checkout's `ifgym eval` at 64 beside this one's (a folder
holding `ifgym` -> that checkout).

Every row runs on the loop `ifgym.llm.loop.run_async` starts (uvloop where installed; printed).

Pause: the CPU of the same 4-turn EvolIF episode (env only) after a pause of 0, 2 or 10 ms, slept or spun,
the pauses shuffled: what the memory going cold between turns costs on this machine.

Transport: CPU per call of 2,048 chat calls at concurrency 64 (no env), at each latency, through ifgym's
LLMClient (the openai SDK's `chat.completions.create` over its aiohttp transport, and what ifgym adds:
validation, usage, the named errors), the SDK's `chat.completions.create` alone over the same transport,
the SDK over its default transport (httpx, or httpx2 from openai 3), and a bare aiohttp post of the
same request (what an HTTP client costs at the least); with uvloop installed, `LLMClient.achat` on
uvloop's and asyncio's loop, alternated 3 times.

Memory: peak RSS of a fresh process that runs N 10-turn scripted episodes (no server) into a JSONL, then
builds the run's summary as `ifgym eval` does (one pass over the file: strict and loose metrics, usage,
bootstrap intervals, chart data), for each N in `--sizes`. `--only throughput|pause|transport|memory` runs one part.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import gymnasium as gym  # noqa: E402
from support.canned_server import server_in_child  # noqa: E402

import ifgym  # noqa: E402, F401
from ifgym.llm import CannedClient, LLMConfig, make_client  # noqa: E402
from ifgym.llm.loop import event_loop_name, loop_factory, run_async  # noqa: E402
from ifgym.policies import ChatPolicy  # noqa: E402
from ifgym.runner.rollout import run  # noqa: E402

REPLY = "A short reply about it."


def server_process(latency: float) -> contextlib.AbstractContextManager[dict]:
    """A canned server in a child process; yields {"base_url": ...}, and on exit adds its serving CPU ("cpu_s")."""
    script = ROOT / "tests" / "support" / "canned_server.py"
    cmd = [sys.executable, str(script), "--delay", str(latency), "--reply", REPLY]
    return server_in_child(cmd)


def throughput(latency, turns, concurrency, episodes, executor="local", workers=1):
    with server_process(latency) as server:
        row = _play(server["base_url"], latency, turns, concurrency, episodes, executor, workers)
    row["server_cpu_ms_per_turn"] = 1000 * server["cpu_s"] / row["turns"]
    return row


def _play(base_url, latency, turns, concurrency, episodes, executor="local", workers=1):
    if base_url is None:  # no HTTP: the env and runner alone
        client = CannedClient([REPLY])
    else:
        client = make_client(LLMConfig(base_url=base_url, model="canned-model", concurrency=concurrency), "policy")

    def make_env():
        return gym.make("ifgym/EvolIF-v1", max_turns=turns, patience=None)

    def make_policy():
        return ChatPolicy(client)

    seeds = range(episodes)
    if executor == "ray":
        from ifgym.runner.ray_executor import run_ray, start_ray

        start_ray(2)  # one instance for both rows: 2 CPUs
        run_ray(make_env, make_policy, range(10_000, 10_000 + workers), num_workers=workers, progress=False)  # warm-up
        start = time.perf_counter()
        cpu = time.process_time()
        result = run_ray(make_env, make_policy, seeds, num_workers=workers, concurrency=concurrency, progress=False)
        ideal = workers * concurrency / latency
    else:
        start = time.perf_counter()
        cpu = time.process_time()
        result = run(make_env, make_policy, seeds, concurrency=concurrency, progress=False)
        ideal = concurrency / latency
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    done = sum(len(e.turns) for e in result.episodes)
    assert not result.failed, result.failures
    rate = done / wall
    return {
        "turns": done,
        "wall_s": wall,
        "turns_per_s": rate,
        "ideal": ideal,
        "ratio": rate / ideal,
        "cpu_ms_per_turn": 1000 * cpu / done,
    }


CLI_CHILD = """
import cProfile, importlib, json, sys, time
started = time.perf_counter()
# the modules themselves (`ifgym.runner` also exports a function named `rollout`)
cli, evaluate, summarize, rollout, report = map(
    importlib.import_module,
    ("ifgym.cli", "ifgym.runner.evaluate", "ifgym.runner.summarize", "ifgym.runner.rollout", "ifgym.runner.report"),
)

phases = {}


def timed(name, fn):
    def wrapper(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            phases[name] = [time.perf_counter() - wall, time.process_time() - cpu]

    return wrapper


# evaluate() imports `run` and report_run() `write_plots` when called; evaluate calls report_run, and report_run
# run_intervals, by their modules' names: wrapping the attributes times each phase of the real command
rollout.run = timed("run", rollout.run)
evaluate.report_run = timed("report", evaluate.report_run)
summarize.run_intervals = timed("intervals", summarize.run_intervals)
report.write_plots = timed("plots", report.write_plots)
profile_to, argv = sys.argv[1], sys.argv[2:]
profiler = cProfile.Profile() if profile_to else None
if profiler:
    profiler.enable()
code = cli.main(["eval", *argv])
if profiler:
    profiler.disable()
    profiler.dump_stats(profile_to)
phases["total"] = [time.perf_counter() - started, time.process_time()]
print(json.dumps({"code": code, "phases": phases}))
"""


def cli_eval(base_url, latency, turns, concurrency, episodes, profile_to="", pythonpath=None):
    """`ifgym eval` in a child process against the canned server: its phases' wall and CPU seconds, and turns.

    `pythonpath`: the child's PYTHONPATH (another checkout's ifgym, to compare); by default this process's.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "episodes.jsonl"
        argv = [
            "env=evolif",
            f"env.max_turns={turns}",
            "env.patience=null",
            "policy=openai",
            f"policy.llm.base_url={base_url}",
            "policy.llm.model=canned-model",
            "policy.llm.api_key_env=null",
            f"concurrency={concurrency}",
            f"episodes={episodes}",
            "progress=false",
            f"output={out}",
        ]
        child = subprocess.run(
            [sys.executable, "-c", CLI_CHILD, profile_to, *argv],
            capture_output=True,
            text=True,
            cwd=tmp,
            check=False,
            env=os.environ | ({"PYTHONPATH": pythonpath} if pythonpath else {}),
        )
        if child.returncode != 0:
            raise RuntimeError(f"ifgym eval failed ({child.returncode}):\n{child.stderr[-3000:]}")
        data = json.loads(child.stdout.strip().splitlines()[-1])
        summary = json.loads((out.parent / "summary.json").read_text())
    data["turns"] = int(summary["strict"]["turns"])
    return data


def cli_throughput(latency, turns, concurrency, episodes, profile_to="", pythonpath=None):
    """`throughput`'s row for `ifgym eval` run as a command: the run phase's rate and CPU, and the report's cost."""
    with server_process(latency) as server:
        data = cli_eval(server["base_url"], latency, turns, concurrency, episodes, profile_to, pythonpath)
    (run_wall, run_cpu), done = data["phases"]["run"], data["turns"]
    rate, ideal = done / run_wall, concurrency / latency
    return {
        "turns": done,
        "wall_s": run_wall,
        "turns_per_s": rate,
        "ideal": ideal,
        "ratio": rate / ideal,
        "cpu_ms_per_turn": 1000 * run_cpu / done,
        "server_cpu_ms_per_turn": 1000 * server["cpu_s"] / done,
        "phases": data["phases"],
    }


MEMORY_CHILD = """
import json, resource, sys
import gymnasium as gym
import ifgym
from ifgym.runner.summarize import run_intervals
from ifgym.runner.rollout import run, usage_totals
from ifgym.policies import ScriptedPolicy
from ifgym.runner.report import RunTally, chart_data
from ifgym.core.stats import CISettings
n, out = int(sys.argv[1]), sys.argv[2]
make_env = lambda: gym.make("ifgym/EvolIF-v1", max_turns=10, patience=None)
result = run(make_env, lambda: ScriptedPolicy(["A reply."]), range(n), output=out, progress=False, concurrency=8)
env = make_env().unwrapped
tally = RunTally.of(result.episodes, env.task, loose=True)
summary = {"strict": env.task.summarize_rows(tally.strict), "loose": env.task.summarize_rows(tally.loose, loose=True)}
summary["usage"] = usage_totals(out, "run")
summary.update(run_intervals(tally, summary, env, CISettings()))
charts = chart_data(tally, summary)
# VmHWM: this process's own peak; ru_maxrss keeps the parent's across fork and exec on Linux, so after the
# throughput rows every size read the parent's peak (161.7 MB, three times over)
try:
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
print(json.dumps({"episodes": len(result.episodes), "peak_rss_mb": peak}))
"""


def peak_rss(n):
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, str(n), os.path.join(tmp, "e.jsonl")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.2, 1.0], help="server latencies, s")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--sizes", type=int, nargs="*", default=[50, 500, 2000])
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument(
        "--only", choices=("throughput", "pause", "transport", "memory"), help="run one part of the benchmark"
    )
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of ifgym eval at 64")
    parser.add_argument(
        "--baseline",
        metavar="PYTHONPATH",
        help="a PYTHONPATH whose ifgym is other code (e.g. a checkout of main): its `ifgym eval` at 64 runs beside",
    )
    args = parser.parse_args()
    if args.only in (None, "throughput"):
        for latency in args.latency:
            print_throughput(args, latency)
    if args.only in (None, "pause"):
        print_pause()
    if args.only in (None, "transport"):
        for latency in args.latency:
            print_transport(latency)
    if args.only in (None, "memory"):
        print_memory(args.sizes)


MESSAGES = [{"role": "user", "content": "Write two sentences about rivers. " * 8}]
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer x"}


def transport_calls(base_url):
    """{name: (async call, async close)}: one chat request each way, the same body."""
    import aiohttp
    import openai

    calls = {}
    client = make_client(LLMConfig(base_url=base_url, model="canned-model", concurrency=64, api_key_env=None))
    calls["ifgym LLMClient.achat"] = (lambda: client.achat(MESSAGES), _nothing)
    payload = {"model": "canned-model", "messages": MESSAGES, "temperature": 0.0, "max_tokens": 512}
    for name, http_client in (
        ("SDK create, aiohttp", openai.DefaultAioHttpClient()),
        ("SDK create, its default", openai.DefaultAsyncHttpxClient()),  # httpx (openai 2) or httpx2 (openai 3)
    ):
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="x", http_client=http_client)
        calls[name] = (lambda sdk=sdk: sdk.chat.completions.create(**payload), sdk.close)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))

    async def bare():
        body = json.dumps(payload).encode()
        async with session.post(base_url + "/chat/completions", data=body, headers=HEADERS) as resp:
            return json.loads(await resp.read())

    calls["bare aiohttp post"] = (bare, session.close)
    return calls


async def _nothing():
    return None


def print_transport(latency, n=2048, concurrency=64, pairs=3):
    """CPU per call of each client (on the runner's loop); with uvloop installed, `LLMClient.achat` on both loops.

    The loop comparison alternates uvloop's and asyncio's loop `pairs` times in this process (each a fresh loop
    and client): a difference of a few hundredths of a ms needs the pairs side by side on a shared machine.
    """
    print(
        f"\ntransport: {n} chat calls at concurrency {concurrency}, server latency {latency}s, no env, "
        f"{event_loop_name()} loop, load average {os.getloadavg()[0]:.2f}"
    )
    with server_process(latency) as server:

        async def measure(only=None):
            rows = []
            limit = asyncio.Semaphore(concurrency)

            async def one(call):
                async with limit:
                    await call()

            for name, (call, close) in transport_calls(server["base_url"]).items():
                if only and name != only:
                    await close()
                    continue
                await asyncio.gather(*(one(call) for _ in range(concurrency)))  # warm-up: the connections
                start, cpu = time.perf_counter(), time.process_time()
                await asyncio.gather(*(one(call) for _ in range(n)))
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                rows.append((name, 1000 * cpu / n, n / wall / (concurrency / latency)))
                await close()
            return rows

        rows = run_async(measure())
        by_loop = {"uvloop": [], "asyncio": []}
        if loop_factory() is not None:
            for _ in range(pairs):
                for name, factory in (("uvloop", loop_factory()), ("asyncio", None)):
                    with asyncio.Runner(loop_factory=factory) as runner:
                        by_loop[name] += runner.run(measure(only="ifgym LLMClient.achat"))
    print(f"  {'client':<24} {'CPU ms/call':>11} {'ratio to ideal':>15}")
    for name, cpu, ratio in rows:
        print(f"  {name:<24} {cpu:>11.2f} {ratio:>15.2f}")
    if by_loop["uvloop"]:
        print(f"  LLMClient.achat, {pairs} pairs alternated, CPU ms/call (ratio to ideal):")
        for name, got in by_loop.items():
            print(f"    {name:<8} " + "  ".join(f"{cpu:.3f} ({ratio:.2f})" for _, cpu, ratio in got))
    else:
        print("  (uvloop not installed: `pip install 'ifgym[uvloop]'` to compare the loops)")


def print_throughput(args, latency):
    rows = []
    throughput(latency, args.turns, 2, 2)  # warm-up: imports, the first connections
    # rounds of `concurrency` episodes: at 64, 16 rounds (1,024 episodes: ramp-up and tail are a small share)
    settings = [(1, 4), (8, 4), (64, 16), (256, 4)]
    reports = []
    for c, rounds in settings:
        label = f"concurrency {c}" + (f", {rounds} rounds" if rounds != 4 else "")
        rows.append(("in-process", label, throughput(latency, args.turns, c, rounds * c)))
        cli_row = cli_throughput(latency, args.turns, c, rounds * c)
        rows.append(("ifgym eval", label, cli_row))
        reports.append((f"{c * rounds} episodes", cli_row))
        if args.baseline and c == 64:  # the other checkout's command beside this one's
            base_row = cli_throughput(latency, args.turns, c, rounds * c, pythonpath=args.baseline)
            rows.append(("baseline", label, base_row))
            reports.append((f"{c * rounds}, baseline", base_row))
    no_http = _play(None, latency, args.turns, 64, 256)
    rows.append(("in-process", "64, no HTTP", {**no_http, "turns_per_s": None, "server_cpu_ms_per_turn": None}))
    if not args.no_ray:
        for w in (1, 2):
            rows.append(("ray", f"{w} worker(s) x 8", throughput(latency, args.turns, 8, 32 * w, "ray", w)))
    print(
        f"\nthroughput: {args.turns}-turn episodes, server latency {latency}s, {event_loop_name()} loop, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{'driver':<10} {'setting':<22} {'turns':>6} {'turns/s':>8} {'ideal':>7} {'ratio':>6} "
        f"{'driver CPU ms/turn':>19} {'server CPU ms/turn':>19} {'driver/server':>14}"
    )
    for kind, label, r in rows:
        rate, server = r["turns_per_s"], r["server_cpu_ms_per_turn"]
        rate_cells = f"{rate:>8.1f} {r['ideal']:>7.0f} {r['ratio']:>6.2f}" if rate else f"{'-':>8} {'-':>7} {'-':>6}"
        # the server's CPU a turn is a fixed piece of Python in its own process: it moves with the machine's speed,
        # which swings here by up to 1.7x within minutes, and the driver's CPU over it does not
        server_cells = f"{server:>19.2f} {r['cpu_ms_per_turn'] / server:>14.2f}" if server else f"{'-':>19} {'-':>14}"
        print(f"{kind:<10} {label:<22} {r['turns']:>6} {rate_cells} {r['cpu_ms_per_turn']:>19.2f} {server_cells}")
    print("\nifgym eval's phases, wall s (CPU s): the whole command, episodes (run), report (intervals, plots)")
    for what, r in reports:
        p = r["phases"]
        cells = "  ".join(f"{name} {p[name][0]:.2f} ({p[name][1]:.2f})" for name in PHASES if name in p)
        print(f"  {what:>16}: {cells}")
    if args.profile:
        profile_cli(args, latency)


PHASES = ("total", "run", "report", "intervals", "plots")


def profile_cli(args, latency, concurrency=64, rounds=16):
    """cProfile of `ifgym eval` at `concurrency` (its episodes and report): the top functions by own time."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "eval.prof")
        row = cli_throughput(latency, args.turns, concurrency, rounds * concurrency, profile_to=path)
        print(
            f"\nprofile of ifgym eval at concurrency {concurrency}, {rounds * concurrency} episodes "
            f"(cProfile slows it; ratio {row['ratio']:.2f}, load {os.getloadavg()[0]:.2f}); top 30 by own time:"
        )
        pstats.Stats(path).sort_stats("tottime").print_stats(30)


PAUSES_MS = (0, 2, 10)


def print_pause(episodes_per_pause=300):
    """The CPU of one 4-turn EvolIF episode (env only, hot: the same env, a fixed reply) after a pause.

    Episodes after a pause of each length, shuffled (seeded) so a drift of the machine spreads over all,
    the pause slept or spun (a busy loop that touches almost no memory). What a pause costs the next turn
    is what a driver at concurrency 64 pays between waves of answers: its turns run after the loop idled.
    """
    import random
    import statistics

    env = gym.make("ifgym/EvolIF-v1", max_turns=4, patience=None)

    def episode(seed):
        env.reset(seed=seed)
        for _ in range(4):
            _, _, terminated, truncated, _ = env.step(REPLY)
            if terminated or truncated:
                return

    for seed in range(300):  # warm: imports, patterns, caches
        episode(seed)
    print(f"\nCPU of one 4-turn EvolIF episode (env only) after a pause, ms a turn; load {os.getloadavg()[0]:.2f}")
    for how in ("slept", "spun"):
        pauses = [ms / 1000 for ms in PAUSES_MS] * episodes_per_pause
        random.Random(0).shuffle(pauses)
        cpu: dict[float, list[float]] = {p: [] for p in set(pauses)}
        for i, pause in enumerate(pauses):
            if how == "slept":
                time.sleep(pause)
            else:
                end = time.perf_counter() + pause
                while time.perf_counter() < end:
                    pass
            start = time.thread_time()
            episode(i % 256)
            cpu[pause].append(time.thread_time() - start)
        cells = "  ".join(f"{1000 * p:g} ms: {1000 * statistics.median(cpu[p]) / 4:.3f}" for p in sorted(cpu))
        print(f"  pause {how}: median {cells}")


def print_memory(sizes):
    print("\npeak RSS (scripted policy, 10-turn episodes, summary built):")
    base = None
    for n in sizes:
        m = peak_rss(n)
        base = base or m["peak_rss_mb"]
        print(f"  {n:>5} episodes: {m['peak_rss_mb']:.1f} MB ({m['peak_rss_mb'] / base:.3f}x of {sizes[0]})")


if __name__ == "__main__":
    main()
