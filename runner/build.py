"""A run's env, policy and model clients, built from its resolved config (the env, policy and judge groups).

One client per model role for the whole run (`clients`, shared by every episode); `ifgym eval`, `ifgym merge`,
`ifgym rescore` and `ifgym train` build through here.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Any

# Where each role's model settings are given (env roles: env.<role>_llm), for messages that name them.
ROLE_CONFIG_KEYS = {
    "policy": "policy.llm",
    "light": "policy.light_llm",
    "summary": "policy.summary_llm",
    "judge": "judge.llm",
}


def role_config_key(role: str) -> str:
    """Where a model role's settings are given: `policy.llm`, `judge.llm`, … (an env's role: `env.<role>_llm`)."""
    return ROLE_CONFIG_KEYS.get(role, f"env.{role}_llm")


def _client_for(role: str, settings: Any, clients: dict[str, Any], config_key: str | None = None) -> Any:
    """One client per role for the whole run (shared by every episode: one semaphore, one usage counter).

    `config_key` is where the settings were given, when not the role's own key (a light model that
    takes policy.llm's settings).
    """
    from ifgym.llm import make_client

    clients[role] = make_client(settings, role, config_key or role_config_key(role))
    return clients[role]


def use_cache(clients: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Give every client of the run the call cache `cache=DIR` names (one cache for every role); nothing when off."""
    from ifgym.llm import CallCache

    if resolved.get("cache"):
        cache = CallCache(resolved["cache"], nondeterministic=bool(resolved.get("cache_nondeterministic")))
        for client in clients.values():
            client.cache = cache


def check_model_servers(resolved: dict[str, Any], clients: dict[str, Any]) -> None:
    """Ask each role's server once (`ifgym.llm.check_servers`) and print its notes.

    A model the check filled in goes into the config: the judge audit uses it, `run.json` records it.
    """
    from ifgym.llm import check_servers

    for note in check_servers(clients.values()):
        print(note, file=sys.stderr)
    for client in clients.values():
        group, _, name = (getattr(client, "config_key", None) or "").partition(".")
        settings = resolved.get(group, {}).get(name)
        if isinstance(settings, dict) and settings.get("base_url"):
            settings["model"] = client.config.model


def fill_request_limits(resolved: dict[str, Any], concurrency: int) -> None:
    """Give every model setting without its own `concurrency` (policy.llm, judge.llm, env.*_llm …) the run's."""
    groups = [resolved["policy"], resolved["judge"], resolved["env"]]
    for group in groups:
        for key, value in group.items():
            if (key == "llm" or key.endswith("_llm")) and isinstance(value, dict) and value.get("concurrency") is None:
                value["concurrency"] = concurrency


def build_policy(policy_cfg: dict[str, Any], clients: dict[str, Any]) -> Callable[[], Any]:
    """A factory of fresh policies (one per episode: policies keep per-episode state).

    Wrapper kinds (truncation, graphif, context_agent, self_refine) wrap a fresh base policy (`policy.base`:
    chat, scripted or transformers, or a policy of your own: a node with `_target_`, see `plugged_policy`);
    graphif and context_agent share one light-model client (role "light").
    Context_agent's decision and summary models each default to the other: of `policy.light_llm` and
    `policy.summary_llm`, one left equal to `policy.llm` takes the other's settings; the summaries go
    to a client of their own (role "summary") only when the two differ.
    Kinds chat (policy=embedded, openai) and transformers are the full-history baseline: they run through
    `Truncation(k=None)`, which sends the transcript unchanged and keeps the same per-turn cost
    records as the wrappers (calls, tokens, context tokens), so its calls/turn and ACT are reported.
    Kind custom (policy=custom) is `policy._target_` built with the keys under policy that are not ifgym's own.
    """
    from ifgym.errors import ConfigError, UnknownNameError
    from ifgym.policies import ChatPolicy, ContextAgent, GraphIF, ScriptedPolicy, SelfRefine, Truncation
    from ifgym.policies.embeddings import make_embedder

    kind = policy_cfg["kind"]
    if kind not in POLICY_KINDS:
        raise UnknownNameError("policy kind", kind, POLICY_KINDS)
    if kind == "custom":
        return plugged_policy(policy_cfg, "policy", own_keys=policy_keys())
    if policy_cfg.get("_target_") is not None:
        where = "policy.base._target_" if kind not in BASE_KINDS else "policy=custom policy._target_"
        raise ConfigError(
            f"policy._target_={policy_cfg['_target_']} is read with policy=custom only (policy.kind is {kind!r}): "
            f"give your policy as {where}=pkg.module.Name"
        )
    if kind in BASE_KINDS and isinstance(policy_cfg.get("base"), dict):
        raise ConfigError(
            f"policy.base (a policy of your own to wrap) is read by the wrappers only, not by policy.kind={kind}: "
            "choose one (policy=truncation, graphif, context_agent, self_refine), or run your policy alone with "
            "policy=custom policy._target_=pkg.module.Name"
        )
    base = kind if kind in BASE_KINDS else policy_cfg.get("base", "chat")
    if isinstance(base, dict):
        make_base = plugged_policy(base, "policy.base")
    elif base not in BASE_KINDS:
        raise UnknownNameError(
            "policy.base (the policy a wrapper wraps; your own: policy.base._target_=pkg.module.Name)", base, BASE_KINDS
        )
    elif base == "chat":
        if policy_cfg.get("require_server") and not policy_cfg["llm"]["base_url"]:
            raise ConfigError(
                "policy=openai needs the server: policy.llm.base_url=http://HOST:PORT/v1 (https://api.openai.com/v1 "
                "for OpenAI; ifgym reads no OPENAI_BASE_URL) and policy.llm.model=NAME"
            )
        client = _client_for("policy", policy_cfg["llm"], clients)

        def make_base() -> Any:
            return ChatPolicy(client, system_prompt=policy_cfg["system_prompt"])
    elif base == "transformers":
        from ifgym.policies.transformers import TransformersPolicy, load_pretrained, set_threads

        settings = dict(policy_cfg["transformers"])
        set_threads(settings.pop("threads"))
        # one model for the run (episodes take turns on it); each episode gets its own policy object
        model, tokenizer = load_pretrained(settings.pop("model"), settings.pop("device"))

        def make_base() -> Any:
            return TransformersPolicy(model, tokenizer, system_prompt=policy_cfg["system_prompt"], **settings)
    else:
        if not policy_cfg["replies"]:
            where = "policy=scripted" if kind == "scripted" else f"policy={kind} with policy.base=scripted"
            raise ConfigError(f"{where} needs policy.replies=[...] (at least one reply)")

        def make_base() -> Any:
            return ScriptedPolicy(policy_cfg["replies"])

    if kind in ("chat", "transformers"):
        return lambda: Truncation(make_base(), k=None)
    if kind in BASE_KINDS:
        return make_base
    if kind == "truncation":
        k = policy_cfg["truncation"]["k"]
        Truncation(make_base(), k=k)  # a bad k fails now, before any episode
        return lambda: Truncation(make_base(), k=k)
    if kind == "self_refine":
        rounds = policy_cfg["self_refine"]["rounds"]
        SelfRefine(make_base(), rounds=rounds)  # a bad setting fails now, before any episode
        return lambda: SelfRefine(make_base(), rounds=rounds)
    light_key, light_cfg = "policy.light_llm", policy_cfg["light_llm"]
    summary_cfg = policy_cfg.get("summary_llm") if kind == "context_agent" else None
    if summary_cfg is not None:  # a decision or summary model left as the backbone takes the other's settings
        if light_cfg == policy_cfg["llm"] and summary_cfg != policy_cfg["llm"]:
            light_key, light_cfg = "policy.summary_llm", summary_cfg
        elif summary_cfg == policy_cfg["llm"]:
            summary_cfg = light_cfg
    light = _client_for("light", light_cfg, clients, light_key)
    if kind == "graphif":
        settings = dict(policy_cfg["graphif"])
        GraphIF(make_base(), light, **settings)
        return lambda: GraphIF(make_base(), light, **settings)
    summary = _client_for("summary", summary_cfg, clients) if summary_cfg not in (None, light_cfg) else None
    settings = dict(policy_cfg["context_agent"])
    # one embedder (and loaded model) for the whole run
    embedder = make_embedder(settings.pop("embedder"), settings.pop("embedder_model", None))
    probe = ContextAgent(make_base(), light, summary=summary, embedder=embedder, **settings)
    note = next((d for d in probe.protocol()["deviations"] if d.startswith("embedder ")), None)
    if note is not None:  # θ was set for the paper's embedder: say so before the run, once
        print(f"ifgym: note: Context-Agent's {note}", file=sys.stderr)
    return lambda: ContextAgent(make_base(), light, summary=summary, embedder=embedder, **settings)


BASE_KINDS = ("chat", "scripted", "transformers")


POLICY_KINDS = (*BASE_KINDS, "truncation", "graphif", "context_agent", "self_refine", "custom")


def policy_keys() -> tuple[str, ...]:
    """The keys under `policy` that are ifgym's own (the schema's); the others beside its `_target_` are arguments."""
    from dataclasses import fields

    from ifgym.conf.schema import PolicyConf

    return tuple(f.name for f in fields(PolicyConf))


def plugged_policy(node: dict[str, Any], key: str, own_keys: tuple[str, ...] = ()) -> Callable[[], Any]:
    """A factory of `PluggedPolicy`s from the config node at `key`: its `_target_` called with its other keys.

    Hydra's `instantiate` builds the object (nested `_target_`s, `_partial_` and `_args_` as Hydra reads them;
    arguments as plain dicts and lists) once per episode, and once now, so a bad target or argument fails
    before any episode with a message naming `key`. `own_keys` are keys of the node that are not arguments.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from ifgym.errors import ConfigError
    from ifgym.policies import PluggedPolicy
    from ifgym.policies.plugged import qualified_name

    target = node.get("_target_")
    if not isinstance(target, str) or not target:
        raise ConfigError(
            f"{key} needs {key}._target_=pkg.module.Name (a class or function of yours; its arguments as keys beside "
            f"it, e.g. {key}.temperature=0.3); got {key}={node!r:.200}"
        )
    located = locate(target, f"{key}._target_")
    arguments = {k: v for k, v in node.items() if k not in own_keys or k == "_target_"}
    spec = {"_convert_": "all", **arguments}
    given = ", ".join(f"{key}.{k}" for k in arguments if k != "_target_") or "none"

    def make() -> Any:
        try:
            built = instantiate(spec)
        except InstantiationException as exc:
            cause = exc.__cause__ or exc
            hint = ""
            if not isinstance(located, type) and isinstance(cause, TypeError) and "missing" in str(cause):
                hint = f" (a function messages -> str is the policy itself: add {key}._partial_=true)"
            raise ConfigError(
                f"{key}._target_={target}: calling it with its arguments ({given}) failed: "
                f"{type(cause).__name__}: {cause}{hint}"
            ) from None
        try:
            return PluggedPolicy(built, qualified_name(located))
        except ConfigError as exc:
            raise ConfigError(f"{key}._target_={target}: {exc}") from None

    make()
    return make


def locate(path: str, key: str) -> Any:
    """The object at the dotted `path` (`pkg.module.Name`), importing its module; a ConfigError naming `key` if not.

    The message says which part is missing, with the closest name the module or package has.
    """
    import importlib
    import pkgutil

    from ifgym.errors import ConfigError, did_you_mean

    parts = path.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ConfigError(f"{key}={path} is not a dotted name pkg.module.Name")
    module, found = None, 0
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            module, found = importlib.import_module(name), i
            break
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this module (or its package) does not exist: try the shorter name
            raise ConfigError(f"{key}={path}: importing {name} failed: ModuleNotFoundError: {exc}") from None
        except Exception as exc:  # the module exists but raised while importing: its own error, shown
            raise ConfigError(f"{key}={path}: importing {name} failed: {type(exc).__name__}: {exc}") from None
    if module is None:
        raise ConfigError(
            f"{key}={path}: no module named {parts[0]!r} (is its package installed in this environment, or its "
            "folder on PYTHONPATH?)"
        )
    obj = module
    for i in range(found, len(parts)):
        if not hasattr(obj, parts[i]):
            names = set(dir(obj))
            if hasattr(obj, "__path__"):  # a package: its submodules too
                names |= {m.name for m in pkgutil.iter_modules(obj.__path__)}
            where = ".".join(parts[:i])
            close = did_you_mean(parts[i], sorted(n for n in names if not n.startswith("_")))
            close = close.replace("'", f"'{where}.", 1) if close else ""
            raise ConfigError(f"{key}={path}: {where} has no {parts[i]!r}.{close}")
        obj = getattr(obj, parts[i])
    return obj


def policy_protocol(policy: Any) -> dict[str, Any] | None:
    """What the results table says of the policy (its `protocol()`), naming a base of your own; None without one."""
    from ifgym.policies import PluggedPolicy

    setup = getattr(policy, "protocol", None)
    if not callable(setup):
        return None
    base = getattr(policy, "base", None)
    return setup() | ({"base": base.name} if isinstance(base, PluggedPolicy) else {})


def build_env(env_cfg: dict[str, Any], judge_cfg: dict[str, Any], clients: dict[str, Any]) -> Callable[[], Any]:
    """A factory of envs from the env and judge groups; model settings (`*_llm`) become shared clients."""
    import gymnasium as gym

    from ifgym.errors import ConfigError, IfgymError

    env_id = env_cfg["id"]
    kwargs: dict[str, Any] = {}
    for key, value in env_cfg.items():
        if key == "id":
            continue
        kwargs[key] = _client_for(key[: -len("_llm")], value, clients) if key.endswith("_llm") else value
    kwargs["judge"] = judge_cfg["kind"]
    if judge_cfg["kind"] == "llm":
        kwargs["judge_llm"] = _client_for("judge", judge_cfg["llm"], clients)
        if judge_cfg.get("mode") is not None:
            kwargs["judge_mode"] = judge_cfg["mode"]
        if judge_cfg.get("threshold") is not None:
            if judge_cfg.get("mode") != "probability":
                raise ConfigError(
                    f"judge.threshold={judge_cfg['threshold']} is read in probability mode only: "
                    "add judge.mode=probability, or drop judge.threshold"
                )
            kwargs["judge_threshold"] = judge_cfg["threshold"]
    elif judge_cfg["kind"] == "learned" and judge_cfg.get("threshold") is not None:
        kwargs["judge_threshold"] = judge_cfg["threshold"]

    checks = _EnvChecks()

    def make_env() -> Any:
        return checks.make(env_id, kwargs)

    try:  # fail on a bad env config (misspelt arguments get a did-you-mean) before any model call
        make_env().close()
    except gym.error.Error as exc:  # gymnasium's own: an unknown id, with its did-you-mean
        raise ConfigError(f"env.id={env_id}: {exc} ({known_env_ids()})") from None
    except IfgymError as exc:  # the env refused an argument: say which env it was
        raise ConfigError(f"env ({env_id}): {exc}") from None
    return make_env


def known_env_ids() -> str:
    """The env ids there are, in words: ifgym's, and the installed task packages (`ifgym.tasks` entry points)."""
    import gymnasium as gym

    from ifgym.core.tasks import load_plugins

    packages = sorted(set(load_plugins().values()))
    ours = ", ".join(i for i in gym.registry if i.startswith("ifgym/"))
    return f"ifgym's ids: {ours}" + (f"; task packages installed: {', '.join(packages)}" if packages else "")


# Envs whose checks `_EnvChecks` watches at once (it holds them: a run of one-turn episodes never passes the checks)
ENVS_WATCHED = 8


class _EnvChecks:
    """gymnasium's passive env checker on a run's envs until one of them has been through all of its checks.

    `gym.make` wraps each env in a `PassiveEnvChecker` that checks its first reset, first step and second step
    (that they do not reuse their observations): once an env of the run has passed them, the run's next envs
    are made without it (checked on every episode's env, it cost about 0.04 ms a turn of a 4-turn episode). A
    config that sets `disable_env_checker` itself is followed; a copy (a Ray worker's) checks its own envs anew.
    """

    def __init__(self) -> None:
        self.passed = False
        # the checkers of the last envs made with one (a few: the envs of finished episodes are kept until one passes)
        self._checkers: deque[Any] = deque(maxlen=ENVS_WATCHED)

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return _EnvChecks, ()

    def make(self, env_id: str, kwargs: dict[str, Any]) -> Any:
        import gymnasium as gym
        from gymnasium.wrappers import PassiveEnvChecker

        from ifgym.core.tasks import load_plugins

        if env_id not in gym.registry:  # an installed task package's id, perhaps (in a Ray worker too)
            load_plugins()
        if "disable_env_checker" in kwargs:
            return gym.make(env_id, **kwargs)
        if not self.passed and any(checker.checked_data_reuse for checker in self._checkers):
            self.passed = True
            self._checkers.clear()
        if self.passed:
            return gym.make(env_id, disable_env_checker=True, **kwargs)
        env = layer = gym.make(env_id, **kwargs)
        while isinstance(layer, gym.Wrapper) and not isinstance(layer, PassiveEnvChecker):
            layer = layer.env
        if isinstance(layer, PassiveEnvChecker):
            self._checkers.append(layer)
        return env
