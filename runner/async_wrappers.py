"""Reset and step an env asynchronously through every wrapper around it (what `arollout` drives).

gymnasium's wrappers are synchronous: each calls `self.env.step` inside its own `step`. Async,
each layer of the chain is applied in turn, from the outside in:

- a wrapper with its own `astep` and `areset` is awaited (they take the inner env's turn with
  `async_step(self.env, …)` / `async_reset(self.env, …)`, so the layers below are honoured too);
- a gymnasium wrapper that only checks or transforms what its inner env returns (`TimeLimit`,
  `OrderEnforcing`, `PassiveEnvChecker`, `ObservationWrapper`, `RewardWrapper`, and a plain
  `Wrapper`) has the inner call awaited, then runs its own `step`/`reset` over a stand-in that hands
  back that result, so its checks and transforms are gymnasium's own code; an `ActionWrapper`
  transforms the action before the inner call;
- anything else (a wrapper that overrides `step` or `reset` without an async twin) cannot be
  applied without blocking, and raises AsyncWrapperError naming it and the fix, rather than being
  skipped.

The base env's `areset`/`astep` run at the bottom. Everything stays in the caller's task, so
context variables (the episode's usage counter) see every call.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

from ifgym.errors import AsyncWrapperError

# gymnasium wrappers whose step/reset call the inner env once and then only check or transform its
# result (OrderEnforcing's check before the call is repeated here); gym.Wrapper passes it through.
_REPLAYED = (TimeLimit, OrderEnforcing, PassiveEnvChecker, gym.ObservationWrapper, gym.RewardWrapper, gym.Wrapper)


# Both walk the chain down in a loop and replay the wrappers on the way back up: one coroutine a call, not one a layer.


async def async_reset(env: gym.Env, *, seed: int | None = None, options: dict[str, Any] | None = None):
    """`env.reset(seed=seed, options=options)`, awaiting the base env's `areset`, every wrapper applied."""
    replayed = []
    while env is not env.unwrapped:
        if _kind(env) is None:
            result = await env.areset(seed=seed, options=options)
            break
        replayed.append(env)
        env = env.env
    else:
        result = await _base_method(env, "areset")(seed=seed, options=options)
    for wrapper in reversed(replayed):
        result = _replay(wrapper, result, "reset", seed=seed, options=options)
    return result


async def async_step(env: gym.Env, action: Any):
    """`env.step(action)`, awaiting the base env's `astep`, every wrapper applied."""
    replayed = []  # (wrapper, the action it was given)
    while env is not env.unwrapped:
        kind = _kind(env)
        if kind is None:
            result = await env.astep(action)
            break
        if kind is gym.ActionWrapper:
            action, env = env.action(action), env.env
            continue
        if kind is OrderEnforcing and not env.has_reset:
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        replayed.append((env, action))
        env = env.env
    else:
        result = await _base_method(env, "astep")(action)
    for wrapper, given in reversed(replayed):
        result = _replay(wrapper, result, "step", given)
    return result


def _base_method(env: gym.Env, name: str) -> Any:
    method = getattr(env, name, None)
    if method is None:
        raise AsyncWrapperError(
            f"{type(env).__name__} has no {name}: it cannot be played asynchronously; play it with rollout (sync)"
        )
    return method


# a wrapper class's kind, found once per class (it was looked up at every step of every layer)
_KINDS: dict[type, type | None] = {}


def _kind(wrapper: gym.Wrapper) -> type | None:
    """None for a wrapper with its own astep/areset, else the gymnasium class whose step/reset it runs unchanged."""
    cls = type(wrapper)
    if cls in _KINDS:
        return _KINDS[cls]
    own = [name for name in ("astep", "areset") if callable(getattr(cls, name, None))]
    if len(own) == 2:
        _KINDS[cls] = None
        return None
    if not own:  # a half-async wrapper is refused below: running its sync step would skip its astep
        for known in (gym.ActionWrapper, *_REPLAYED):
            if isinstance(wrapper, known) and cls.step is known.step and cls.reset is known.reset:
                _KINDS[cls] = known
                return known
    where = f"{cls.__module__}.{cls.__qualname__}"
    has = f"it defines only {own[0]}" if own else "it overrides step or reset without an async twin"
    raise AsyncWrapperError(
        f"arollout cannot apply the wrapper {where} asynchronously ({has}). Give it both "
        "`async def astep(self, action)` and `async def areset(self, *, seed=None, options=None)`, awaiting "
        "ifgym.envs.async_step(self.env, ...) / async_reset(self.env, ...) for the inner env, or play this env "
        "with rollout (sync)."
    )


class _Answered:
    """Stands in for a wrapper's inner env while the wrapper's own step/reset runs: hands back the awaited result."""

    def __init__(self, env: gym.Env, result: tuple):
        self._env = env
        self._result = result

    def step(self, action: Any) -> tuple:
        return self._result

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple:
        return self._result

    def __getattr__(self, name: str) -> Any:  # spaces, spec, np_random …: the inner env's
        return getattr(self._env, name)


def _replay(wrapper: gym.Wrapper, result: tuple, method: str, *args: Any, **kwargs: Any) -> tuple:
    inner = wrapper.env
    wrapper.env = _Answered(inner, result)
    try:  # no await in here: no other task sees the stand-in
        return getattr(wrapper, method)(*args, **kwargs)
    finally:
        wrapper.env = inner
