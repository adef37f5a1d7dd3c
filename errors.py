"""Every exception ifgym raises on purpose. Each message names what was wrong and how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(value: object, allowed: Iterable[str]) -> str:
    """' Did you mean 'x'?' for the closest allowed string, or '' when nothing is close."""
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


class IfgymError(Exception):
    """Base class of ifgym's own errors."""


class UnknownNameError(IfgymError, KeyError):
    """A name (constraint id, env option, policy …) is not one of the allowed values."""

    def __init__(self, kind: str, name: object, allowed: Iterable[str]):
        allowed = sorted(allowed)
        super().__init__(f"unknown {kind} {name!r}.{did_you_mean(name, allowed)} Allowed: {', '.join(allowed)}")
        self.kind, self.name, self.allowed = kind, name, allowed

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])

    @classmethod
    def check(cls, *names: tuple[str, object, Iterable[str]]) -> None:
        """Raise for the first (kind, name, allowed) whose name is not allowed, in the order given."""
        for kind, name, allowed in names:
            if name not in tuple(allowed):
                raise cls(kind, name, allowed)


class ConstraintParamsError(IfgymError, ValueError):
    """A constraint's params are missing, extra, or out of range."""


class JudgeRequiredError(IfgymError, RuntimeError):
    """A judged constraint (emotion, style, reader age) was asked to check itself by rule."""


class ActionError(IfgymError, ValueError):
    """The action passed to env.step is not a reply string the env can score."""


class ConfigError(IfgymError, ValueError):
    """A configuration value is missing or wrong."""


class AsyncWrapperError(ConfigError):
    """`arollout` met an env wrapper it cannot apply asynchronously (no astep/areset, no gymnasium wrapper it knows)."""


class BackendError(IfgymError, RuntimeError):
    """A model backend is missing, unreachable, or does not serve the requested model; subclasses name the cause.

    `status` is the HTTP status the server answered (None when it answered none).
    """

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class RateLimitError(BackendError):
    """The server answered 429 (too many requests or tokens for the key) on every attempt."""


class ServerError(BackendError):
    """The server answered a 5xx status (it failed, or is overloaded or restarting) on every attempt."""


class BackendTimeoutError(BackendError):
    """The server did not answer within the client's `timeout` (not sent again: the server may still be busy)."""


class AuthenticationError(BackendError):
    """The server refused the key (401 or 403)."""


class UnreachableError(BackendError):
    """No answer at all: the connection was refused, the host not found, or the connection closed before any byte."""


class ConnectionDroppedError(BackendError):
    """The server began to answer but closed or reset the connection before the answer was complete."""


class NotFoundError(BackendError):
    """The server answered 404: it does not serve the model, or base_url lacks the API prefix (usually /v1)."""


class BadRequestError(BackendError):
    """The server refused the request as malformed (400, 413 or 422); its message says which part."""


class ContextLengthError(BadRequestError):
    """The conversation (prompt plus `max_tokens`) is longer than the server's context window for the model."""


class ReplyError(BackendError):
    """A model server answered, but not with a usable chat completion; subclasses name what was wrong."""


class NonJSONReplyError(ReplyError):
    """The body of a 200 answer is not JSON."""


class HTMLReplyError(ReplyError):
    """The server answered an HTML page (a proxy's or gateway's error page) instead of JSON."""


class NoChoicesError(ReplyError):
    """The completion has no `choices`."""


class NullContentError(ReplyError):
    """The completion's message has `content: null` (no text; e.g. a refusal or a tool call)."""


class ReplyTooLongError(ReplyError):
    """A reply is longer than `max_reply_chars` and `long_reply` is `fail`."""


class GenerationError(IfgymError, RuntimeError):
    """A model's answers could not be turned into valid generated data (a dialogue, dimensions) within the re-asks."""


class DataFormatError(IfgymError, ValueError):
    """An input file (replay script, dataset, episodes JSONL) is malformed; the message names where."""


class IncompleteDimensionsError(DataFormatError):
    """FlexBench's paper pipeline: the verifier never found the criteria complete within the bounded rounds."""


class EpisodeTimeoutError(IfgymError, TimeoutError):
    """An episode did not finish within its deadline (`episode_timeout`); recorded as a failed episode."""


class RunStoppedError(IfgymError, RuntimeError):
    """Too many of the episodes a run attempted failed (`max_failure_rate`): it stopped; names the commonest error."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM ended a run once its summary and record were written; the message says where.

    A KeyboardInterrupt, so that it ends a whole sweep and no `except Exception` keeps it.
    """

    def __init__(self, message: str, signal_name: str = "SIGINT"):
        super().__init__(message)
        self.signal_name = signal_name
