"""The import graph: no cycles (imports in functions and TYPE_CHECKING blocks included), and the rooms' rules.

The graph is read from the source with `ast`: every `import` and `from … import` anywhere in a
module, relative ones included, is an edge to the module it names (`from ifgym.a import b` points at
`ifgym.a.b` when that is a module, else at `ifgym.a`). Executing a submodule also runs its package's
`__init__`, but that implicit step is not an edge: a package `__init__` that gathers its submodules
is not a cycle.

Rooms (see each folder's `__init__` docstring): `core/`, `model_answers.py` and `llm/` (the model client
every room uses, with the one `ChatClient` protocol) are neutral (they use no room); `rewards/` uses
nothing of `simulators/` (scoring does not depend on the user simulator); `policies/` nothing of
`simulators/`, `rewards/` or `envs/` (the model under test sees only chat messages); `simulators/`
and `rewards/` nothing of `envs/` or `policies/`; `envs/` (the envs only) nothing of `runner/` (the run
machinery plays envs, never the reverse), nor do `core/`, `llm/`, `simulators/`, `rewards/` and `policies/`. The
rules hold for everything a room reaches, not only its own import lines. No room imports the root
package `ifgym` (upward), and nothing imports `ifgym.cli` (the command line parses and dispatches to
`ifgym.runner`; only the console script in pyproject.toml and `python -m ifgym.cli` enter it).

One plan per task: no module reads a task's meta key (`meta["flexbench"]` …) outside that task's own
modules, and none probes an env (`getattr`/`hasattr`) for what its task says; they read the task
(`env.task`, `ifgym.core.tasks.task_of(episode)`).

One way to be sync and async: in the rooms of `TWIN_ROOMS`, no module or class writes both `x` and `ax` (or
`_x` and `_ax`) by hand; the step is written once with `ifgym.llm.conversation.twin`, or the blocking form
only runs the awaited one.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", "benchmarks", "build", "runs", "outputs"}

# room -> rooms it must never reach
RULES = {
    "ifgym.core": ("ifgym.envs", "ifgym.simulators", "ifgym.rewards", "ifgym.policies", "ifgym.runner"),
    "ifgym.model_answers": ("ifgym.envs", "ifgym.simulators", "ifgym.rewards", "ifgym.policies", "ifgym.runner"),
    "ifgym.llm": ("ifgym.envs", "ifgym.simulators", "ifgym.rewards", "ifgym.policies", "ifgym.runner"),
    "ifgym.rewards": ("ifgym.simulators", "ifgym.envs", "ifgym.policies", "ifgym.runner"),
    "ifgym.simulators": ("ifgym.envs", "ifgym.policies", "ifgym.runner"),
    "ifgym.policies": ("ifgym.simulators", "ifgym.rewards", "ifgym.envs", "ifgym.runner"),
    "ifgym.envs": ("ifgym.runner",),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["ifgym", *parts])


def package_modules() -> dict[str, Path]:
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.startswith(".") and d != "__pycache__"]
        files += [Path(folder) / n for n in names if n.endswith(".py")]
    return {module_name(p): p for p in files}


def absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The module a `from … import` names, a relative one (`from ..a import b`) resolved against `module`."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = absolute(node, name, path)
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def in_room(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_the_graph_sees_package_and_lazy_imports():
    graph = import_graph()
    assert "ifgym.envs.base" in graph["ifgym.envs"]  # a package gathering its submodules
    assert "ifgym.rewards.evolif.judge" in graph["ifgym.envs.evolif"]  # imported inside EvolIFEnv.__init__
    assert len(graph) > 40 and sum(map(len, graph.values())) > 100


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


@pytest.mark.parametrize("room", sorted(RULES))
def test_rooms_reach_only_what_they_may(room):
    graph = import_graph()
    leaks = {
        (module, target)
        for module in graph
        if in_room(module, room)
        for target in reachable(graph, module)
        if any(in_room(target, banned) for banned in RULES[room])
    }
    assert not leaks, f"{room} reaches {sorted(leaks)[:10]}"


def test_no_room_imports_the_root_package():
    # the root package gathers the rooms and registers the env ids; a room importing it would point upward
    # (importing any ifgym module runs the root __init__ first, so no room needs to name it to register)
    graph, modules = import_graph(), package_modules()
    in_a_room = {m for m, path in modules.items() if len(path.relative_to(ROOT).parts) > 1}
    upward = sorted(m for m in in_a_room if "ifgym" in graph[m])
    assert len(in_a_room) > 40
    assert not upward, f"{upward} import the root package ifgym; import the module that holds the name instead"


def test_nothing_imports_the_command_line():
    # cli.py parses and dispatches; what it runs lives in the rooms (ifgym.runner), so nothing needs to import it.
    # Its only ways in are the console script and `python -m ifgym.cli` (whose __main__ block names itself)
    import tomllib

    graph = import_graph()
    importers = sorted(m for m, edges in graph.items() if "ifgym.cli" in edges and m != "ifgym.cli")
    assert not importers, f"{importers} import ifgym.cli; import what it calls from ifgym.runner instead"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"ifgym": "ifgym.cli:main"}


def test_find_cycle_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_relative_imports_are_resolved(tmp_path):
    sample = tmp_path / "x.py"
    cases = {
        "from . import b": ("ifgym.envs.a", "ifgym.envs"),
        "from .b import c": ("ifgym.envs.a", "ifgym.envs.b"),
        "from ..llm import c": ("ifgym.envs.a", "ifgym.llm"),
        "from .client import c": ("ifgym.llm", "ifgym.llm.client"),  # inside a package __init__
    }
    for source, (module, expected) in cases.items():
        node = ast.parse(source).body[0]
        where = Path("__init__.py") if module == "ifgym.llm" else sample
        assert absolute(node, module, where) == expected, source


@pytest.mark.parametrize("name", ["ChatClient", "resolve_client"])
def test_one_definition_in_the_llm_package(name):
    # every room takes a chat client the same way: one protocol, one resolver, in the neutral ifgym.llm
    defined = sorted(
        module
        for module, path in package_modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name
    )
    assert len(defined) == 1 and in_room(defined[0], "ifgym.llm"), defined


TASK_NAMES = ("evolif", "structflow", "flexbench", "composite", "ntm")


def _meta_key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, task) where a task's name is looked up in a meta mapping: `"x" in meta`, `meta["x"]`, `meta.get("x")`."""

    def is_meta(node: ast.AST) -> bool:
        return "meta" in ast.unparse(node).rpartition(".")[2]

    def task(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and node.value in TASK_NAMES else None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and task(node.left) and isinstance(node.ops[0], ast.In | ast.NotIn):
            if is_meta(node.comparators[0]):
                found.append((node.lineno, task(node.left)))
        elif isinstance(node, ast.Subscript) and task(node.slice) and is_meta(node.value):
            found.append((node.lineno, task(node.slice)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and task(node.args[0])
            and is_meta(node.func.value)
        ):
            found.append((node.lineno, task(node.args[0])))
    return found


def test_the_meta_key_check_finds_sniffing():
    source = (
        'if "flexbench" in episode.meta: pass\n'
        'x = episode.meta["evolif"]\n'
        'y = e.meta.get("composite", {})\n'
        'z = episode.meta.get("dialogue")\n'
        'ok = "flexbench" in suites\n'
    )
    assert _meta_key_reads(ast.parse(source)) == [(1, "flexbench"), (2, "evolif"), (3, "composite")]


def test_no_module_sniffs_a_task_from_meta_keys():
    # a task's episodes carry its own meta (meta["flexbench"], meta["evolif"] …) for its own modules to read; every
    # other reader dispatches on the task (`ifgym.core.tasks.task_of(episode)`), never on which keys are there
    sniffing = sorted(
        f"{path.relative_to(ROOT)}:{line} ({task})"
        for module, path in package_modules().items()
        for line, task in _meta_key_reads(ast.parse(path.read_text(encoding="utf-8")))
        if task not in module
    )
    assert not sniffing, f"these read a task's meta key outside its own modules: {sniffing}"


# what a task says (ifgym.core.tasks.Task) under the env attributes it replaced: read `env.task`, never probe the env
TASK_ATTRIBUTES = frozenset(
    {
        "headline_metrics",
        "headline_metric",
        "metric_definitions",
        "metric_aliases",
        "episode_row",
        "summarize_rows",
        "summary_ratios",
        "judge_suite",
        "loose_metrics",
        "write_report",
        "report_sections",
    }
)


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, attribute) of each `getattr(x, "a", …)` / `hasattr(x, "a")` of a task attribute."""
    return [
        (node.lineno, node.args[1].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in TASK_ATTRIBUTES
    ]


def test_the_probe_check_finds_probes():
    source = 'getattr(env, "loose_metrics", True)\nhasattr(env, "write_report")\ngetattr(env, "checker_semantics")\n'
    assert _probes(ast.parse(source)) == [(1, "loose_metrics"), (2, "write_report")]


def test_no_module_probes_an_env_for_what_its_task_says():
    probing = sorted(
        f"{path.relative_to(ROOT)}:{line} ({attribute})"
        for path in package_modules().values()
        for line, attribute in _probes(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert not probing, f"these probe an env for what its task says (read env.task instead): {probing}"


# One way to be sync and async (issue 22 item 3): a step that needs the outside is written once with
# `ifgym.llm.conversation.twin` (a generator of Calls), which gives both `x` and `ax`. Rooms checked so far:
TWIN_ROOMS = ["ifgym.simulators", "ifgym.envs", "ifgym.runner", "ifgym.rewards", "ifgym.policies"]
# "path:scope.x" -> why that pair stays written by hand
TWIN_EXCEPTIONS: dict[str, str] = {
    "rewards/audit.py:_OnceClient.chat": "a client, whose awaited form lets duplicate concurrent requests share one "
    "in-flight call, which a blocking call cannot",
}


def _body(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """The statements of a function after its docstring."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body


def _returned_call(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Call | None:
    """The call a one-statement function returns (`return f(…)` or `return await f(…)`), else None."""
    body = _body(function)
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    value = body[0].value
    value = value.value if isinstance(value, ast.Await) else value
    return value if isinstance(value, ast.Call) else None


def _one_body(blocking: ast.FunctionDef, awaited: ast.AsyncFunctionDef) -> bool:
    """A pair written once: the blocking half runs the awaited one, or both halves drive the same Steps.

    (`return asyncio.run(ax(…))` or `return run_async(ax(…))`; `return run_steps(s(…))` and
    `return await arun_steps(s(…))`.)
    """
    sync, other = _returned_call(blocking), _returned_call(awaited)
    if sync is None:
        return False
    called = ast.unparse(sync.func)
    if called in ("asyncio.run", "run_async") and sync.args and isinstance(sync.args[0], ast.Call):
        return ast.unparse(sync.args[0].func).rpartition(".")[2] == awaited.name
    return (
        called == "run_steps"
        and other is not None
        and ast.unparse(other.func) == "arun_steps"
        and ast.unparse(sync.args) == ast.unparse(other.args)
    )


def _hand_written_twins(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, "scope.x") for each module or class that defines both `x` and `ax` (or `_x` and `_ax`) by hand."""
    scopes = [("", tree.body)] + [
        (node.name + ".", node.body) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    ]
    found = []
    for scope, body in scopes:
        defs = {node.name: node for node in body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
        for name, node in defs.items():
            bare = name.lstrip("_")
            awaited = defs.get(name[: len(name) - len(bare)] + "a" + bare)
            if awaited is not None and not (isinstance(node, ast.FunctionDef) and _one_body(node, awaited)):
                found.append((node.lineno, scope + name))
    return sorted(found)


def test_the_twin_check_finds_hand_written_pairs():
    source = (
        "class User:\n"
        "    def next(self, h): return self.client.chat(h)\n"
        "    async def anext(self, h): return await self.client.achat(h)\n"
        "    def _call(self, m): return 1\n"
        "    async def _acall(self, m): return 1\n"
        "    def reset(self): return run_steps(self._steps())\n"  # one body: the same Steps driven both ways
        "    async def areset(self): return await arun_steps(self._steps())\n"
        "def run(seeds): return asyncio.run(arun(seeds))\n"  # one body: the blocking form runs the awaited one
        "async def arun(seeds): pass\n"
        "def step(a): return run_steps(one(a))\n"  # not the same Steps
        "async def astep(a): return await arun_steps(other(a))\n"
    )
    assert _hand_written_twins(ast.parse(source)) == [(2, "User.next"), (4, "User._call"), (10, "step")]


def test_no_hand_written_sync_async_twins():
    # write the step once with `twin` (or derive the blocking form from the awaited one); a protocol base gives
    # plainly written subclasses their awaited form with `ifgym.llm.conversation.awaits_blocking`
    twins = sorted(
        f"{path.relative_to(ROOT)}:{name}"
        for module, path in package_modules().items()
        if any(in_room(module, room) for room in TWIN_ROOMS)
        for _, name in _hand_written_twins(ast.parse(path.read_text(encoding="utf-8")))
        if f"{path.relative_to(ROOT)}:{name}" not in TWIN_EXCEPTIONS
    )
    assert not twins, f"these write a sync/async pair twice (write it once with twin): {twins}"


# What frames HTTP by hand or opens sockets to speak it: the package talks to models only through `openai`.
HTTP_BY_HAND_MODULES = ("httptools", "h11", "h2", "socket", "http.client", "urllib.request", "urllib3", "ssl")
HTTP_BY_HAND_CALLS = ("open_connection", "create_connection", "Protocol", "BaseProtocol", "sock_connect")


def _http_by_hand(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each import of an HTTP parser or socket module, and each asyncio transport call."""
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found += [(node.lineno, n) for n in names if n in HTTP_BY_HAND_MODULES or n.split(".")[0] == "httptools"]
        if isinstance(node, ast.Attribute) and node.attr in HTTP_BY_HAND_CALLS:
            owner = ast.unparse(node.value)
            if owner in ("asyncio", "loop") or owner.endswith("_loop()") or owner.endswith(".loop"):
                found.append((node.lineno, f"{owner}.{node.attr}"))
    return sorted(set(found))


def test_the_http_by_hand_check_finds_it():
    source = (
        "import httptools\n"
        "import socket\n"
        "from http.client import HTTPConnection\n"
        "async def f(loop):\n"
        "    r, w = await asyncio.open_connection('h', 80)\n"
        "    await loop.create_connection(P, 'h', 80)\n"
        "class P(asyncio.Protocol): pass\n"
        "from http.server import ThreadingHTTPServer\n"  # serving a page (ifgym view) is not a model client
        "import openai\n"
    )
    assert _http_by_hand(ast.parse(source)) == [
        (1, "httptools"),
        (2, "socket"),
        (3, "http.client"),
        (5, "asyncio.open_connection"),
        (6, "loop.create_connection"),
        (7, "asyncio.Protocol"),
    ]


def test_no_http_of_our_own():
    # every model call goes through the `openai` SDK (ifgym.llm.served); none frames HTTP or opens a socket itself
    found = sorted(
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in package_modules().values()
        for line, what in _http_by_hand(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert not found, f"HTTP or sockets by hand in the package (use the openai SDK): {found}"
