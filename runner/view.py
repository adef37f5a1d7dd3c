"""`ifgym view`: one run, or two side by side, as a self-contained HTML report; `--serve` adds labelling.

`write_report(folders)` reads each run folder with the run's own readers (`summary.json`, the
episodes file through `ifgym.runner.rollout`, the PNG plots the run wrote, `labels.jsonl`) and writes
`report.html` into the first folder: one file, the data embedded as JSON (every `<` escaped, so no
reply can end the script element) and drawn by the page's own script with text nodes only (a reply
is never parsed as HTML). It works offline from `file://`: the results table with intervals and
the metric definitions, the plots, the judge's audit (and the agreement with human labels, once
`ifgym agreement` has run), and a transcript browser that draws an episode only when it is opened,
filterable by verdict, group, failed turns and failed episodes, linkable as `#seed=S&turn=T`.

`serve(folder)` serves that file on 127.0.0.1 with a small labelling API (`GET /labels`, `POST
/labels`, appended to `labels.jsonl` by `ifgym.runner.agreement.append_label`); it stops on Ctrl-C, after
`idle_seconds` without a request, or after `seconds`. `agreement_command` (`ifgym agreement RUN`) pairs
those labels with the run's verdicts (`ifgym.runner.agreement`) and writes the result into the run's summary
and, when the run's run.json stores a W&B run, its W&B summary (`ifgym.runner.tracking.log_agreement`).

`write_runs_page(folder)` writes `runs.html` into a folder of runs: one sortable line per run below it,
each linking the run's `report.html` (written by `write_report` when missing or older than the run's files).
"""

from __future__ import annotations

import base64
import html
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from ifgym.errors import ConfigError, DataFormatError
from ifgym.runner.agreement import LABELS_FILE, SAMPLE_SIZE, append_label, read_labels, sample_items, turn_items

REPORT_FILE = "report.html"
IDLE_SECONDS = 1800.0  # a served report stops after half an hour without a request
MAX_POST_BYTES = 65536

# What each metric measures, in one line, for a summary that does not carry the env's own definitions
# (`summary["definitions"]`, which win): the names the envs' `summarize` use; `pass_rate/<group>` by prefix.
METRIC_DEFINITIONS = {
    "CSR": "constraint success rate: share of all constraint checks, over all turns, that the replies met",
    "ISR": "instruction success rate: share of turns whose reply met every constraint of the turn",
    "EDR_len": "turns a dialogue lasted before the user ran out of patience (mean over dialogues)",
    "EDR_acc": "mean over dialogues of the constraints met before the dialogue ended",
    "EDR_succ": "mean over dialogues of the turns that met every constraint before the dialogue ended",
    "EDR_lss": "mean over dialogues of the longest run of consecutive fully met turns",
    "REC": "recovery: share of failed turns followed by a fully met turn",
    "STA": "stability: per-dialogue ISR averaged over dialogues",
    "ROB": "robustness (STA's earlier name): per-dialogue ISR averaged over dialogues",
    "DRFR": "decomposed requirements following ratio: share of checklist items met",
    "WCSR": "weighted constraint satisfaction: per turn, satisfied weight over weight, averaged over turns",
    "score": "FlexBench's score: share of the dimensions the call met",
    "pass_rate/": "share of this group's checks that the replies met",
    "episodes": "dialogues in the run (a count)",
    "turns": "turns played, over all dialogues (a count)",
    "items": "checklist items checked, over all turns (a count)",
    "failed_turns": "turns with a check not met (a count)",
    "undetermined_turns": "turns that neither passed nor failed: no check was no, some were unknown (a count)",
    "unknown": "checks left unknown: a judge answer that could not be read, or no verdict (a count)",
}


def metric_definition(name: str) -> str:
    """The one-line definition of a metric name ('' when none is known); `checklist/CSR` reads as CSR."""
    for candidate in (name, name.rsplit("/", 1)[-1]):
        if candidate in METRIC_DEFINITIONS:
            return METRIC_DEFINITIONS[candidate]
    prefixes = [p for p in METRIC_DEFINITIONS if p.endswith("/") and name.startswith(p)]
    return METRIC_DEFINITIONS[prefixes[0]] if prefixes else ""


def _fmt(value: Any, name: str = "") -> str:
    from ifgym.runner.report import metric_text

    return "n/a" if value is None else metric_text(value, name)


def _ci(bounds: Any) -> str:
    return f"[{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else ""


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The results table's rows: metric, strict and loose values with their intervals, and the definition.

    A metric's earlier name (`aliases`, e.g. EvolIF's ROB for STA) is left out, as in the printed table;
    `value` and `loose_value` are the numbers (None for n/a), for the two-run view's B - A.
    """
    from ifgym.runner.report import COUNTS

    ci = summary.get("ci") or {}
    strict, loose = summary.get("strict") or {}, summary.get("loose") or {}
    own = summary.get("definitions") or {}  # the env's one-line definitions, when the summary has them
    aliases = summary.get("aliases") or {}
    return [
        {
            "metric": name,
            "strict": _fmt(strict[name], name),
            "strict_ci": _ci(ci.get("strict", {}).get(name)),
            "loose": _fmt(loose[name], name) if name in loose else "",
            "loose_ci": _ci(ci.get("loose", {}).get(name)),
            "count": name in COUNTS,
            "value": _number(strict[name]),
            "loose_value": _number(loose.get(name)),
            "definition": own.get(name) or metric_definition(name),
        }
        for name in strict
        if name not in aliases
    ]


def protocol_blocks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The env's protocol and the policy's setup as the results table prints them: a line, a note, each difference.

    E.g. {"line": "protocol: ifgym/EvolIF-v1 (…)", "note": "not EvolIF's protocol", "differences": [...]}.
    """
    from ifgym.runner.report import policy_protocol_lines, protocol_lines

    blocks = []
    for lines in (
        protocol_lines(summary.get("protocol") or {}),
        policy_protocol_lines(summary.get("policy_protocol"), summary.get("protocol")),
    ):
        if lines:  # the line, then "not <paper>'s protocol:" and its "  - " items, or "<paper>'s protocol"
            first, *rest = lines
            note = rest[0].removesuffix(":") if rest else ""
            blocks.append({"line": first, "note": note, "differences": [d.removeprefix("  - ") for d in rest[1:]]})
    return blocks


def episode_score(episode: Any, metric: str | None) -> float | None:
    """The run's headline metric over this one episode (None when it has no value there, e.g. REC without a failure)."""
    from ifgym.core.tasks import task_of

    task = task_of(episode)
    if metric not in task.headline:  # a metric this episode's task does not report
        return None
    return _number(task.summarize([episode]).get(metric))


def _turn_json(turn: Any) -> dict[str, Any]:
    items = []
    loose = turn.loose_verdicts if len(turn.loose_verdicts) == len(turn.verdicts) else turn.verdicts
    for (name, group, question), v, lv in zip(turn_items(turn), turn.verdicts, loose, strict=True):
        items.append([name, group, v.label, lv.label, v.source, v.reason, lv.reason, question])
    return {
        "n": turn.index,
        "user": turn.user,
        "reply": turn.reply,
        "patience": turn.patience,
        "reward": turn.reward,
        "items": items,
    }


def _episodes(path: Path, metric: str | None = None) -> tuple[list[dict[str, Any]], list[Any]]:
    """The page's episodes (finished and failed, each seed's last line, in file order) and the finished Episodes.

    Each finished episode carries its score: the headline `metric` over that episode alone, and its checks met.
    """
    from ifgym.runner.rollout import StoredEpisodes, latest_lines

    refs = list(latest_lines(path).values())
    finished = iter(StoredEpisodes(path, [r.offset for r in refs if r.failed is None]))
    page, episodes = [], []
    for ref in refs:
        if ref.failed is not None:
            f = ref.failed
            error = f"{f.error.get('type', 'Error')}: {f.error.get('message', '')}"
            page.append(
                {"id": f.episode_id, "seed": f.seed, "env": f.env_id, "done": "failed", "error": error, "turns": []}
            )
            continue
        episode = next(finished)
        episodes.append(episode)
        page.append(
            {
                "id": episode.episode_id,
                "seed": episode.seed,
                "env": episode.env_id,
                "done": episode.done_reason,
                "error": None,
                "system": episode.system_prompt,
                "score": episode_score(episode, metric),
                "met": sum(v.label == "yes" for t in episode.turns for v in t.verdicts),
                "checks": sum(len(t.verdicts) for t in episode.turns),
                "turns": [_turn_json(t) for t in episode.turns],
            }
        )
    return page, episodes


def run_folder(arg: str | Path) -> Path:
    """The run folder a `view`/`agreement` argument names (the folder, or a file in it); a ConfigError if not a run."""
    path = Path(arg).expanduser()
    folder = path if path.is_dir() else path.parent
    if not (folder / "summary.json").is_file():
        raise ConfigError(
            f"{arg}: no summary.json in {folder}; give a finished run's folder (ifgym eval output=...), or to "
            "`ifgym view` alone a folder of runs (e.g. runs/) to browse them"
        )
    return folder


def folder_notes(folder: Path) -> list[str]:
    """What the page and `ifgym view` say of the folder's records: a run still going, or killed; a stale summary."""
    from ifgym.runner.records import record_notes
    from ifgym.runner.rollout import writer_alive

    summary = read_summary(folder)
    return record_notes(folder, writer_alive=writer_alive(episodes_path(folder, summary)))


def run_folders(folder: Path) -> list[Path]:
    """The finished runs under `folder` (every folder below it holding a summary.json), by path."""
    return sorted(p.parent for p in folder.rglob("summary.json") if p.parent != folder)


def episodes_path(folder: Path, summary: dict[str, Any]) -> Path:
    """The run's episodes file: the one its summary names (`output`), in its folder."""
    return folder / Path(summary.get("output") or "episodes.jsonl").name


def read_summary(folder: Path) -> dict[str, Any]:
    """The run's summary.json."""
    from ifgym.files import read_json_file

    return read_json_file(folder / "summary.json", "run summary")


def run_data(folder: Path, *, sample_size: int = SAMPLE_SIZE) -> dict[str, Any]:
    """Everything the page shows of one run, as JSON-ready data."""
    from ifgym.runner.report import results_table, run_title

    summary = read_summary(folder)
    headline = summary.get("headline_metric")
    scored = headline if headline in (summary.get("strict") or {}) else None
    page, episodes = _episodes(episodes_path(folder, summary), scored)
    plots = [
        {"name": p.stem, "png": base64.b64encode(p.read_bytes()).decode("ascii")} for p in sorted(folder.glob("*.png"))
    ]
    level = (summary.get("ci_settings") or {}).get("level")
    return {
        "name": folder.name,
        "path": str(folder),
        "title": run_title(summary) if summary.get("run") else f"{summary.get('episodes', '?')} episodes",
        "level": level,
        "headline": headline,
        "protocol": protocol_blocks(summary),
        "rows": summary_rows(summary),
        "table": results_table(summary) if "strict" in summary else "",
        "judge": summary.get("judge") or {},
        "agreement": summary.get("agreement"),
        "plots": plots,
        "episodes": page,
        "sample": sample_items(episodes, sample_size),
        "labels": read_labels(folder),
        "notes": folder_notes(folder),
    }


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element: `<`, `>` and `&` escaped, so no text in it can close the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _clean(value: Any) -> Any:
    """NaN as None, everywhere in the data (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def render_report(folders: Sequence[Path], *, sample_size: int = SAMPLE_SIZE) -> str:
    """The report page of one run (or two side by side, the first one's labels) as one HTML string."""
    runs = [run_data(f, sample_size=sample_size) for f in folders]
    template = resources.files("ifgym").joinpath("assets/view.html").read_text(encoding="utf-8")
    title = " vs ".join(r["name"] for r in runs)
    head, tail = template.split("{{DATA}}")  # one substitution each: no text of the data is read as a placeholder
    head = head.replace("{{TITLE}}", html.escape(f"ifgym: {title}"))
    return head + _script_json(_clean({"runs": runs, "report": REPORT_FILE})) + tail


def write_report(args: Sequence[str | Path], *, sample_size: int = SAMPLE_SIZE) -> Path:
    """Write `report.html` for one run (or two: `args` = [RUN, RUN_B]) into the first run's folder; returns its path."""
    if not 1 <= len(args) <= 2:
        raise ConfigError(f"view takes one run folder, or two to compare; got {len(args)}")
    folders = [run_folder(a) for a in args]
    path = folders[0] / REPORT_FILE
    path.write_text(render_report(folders, sample_size=sample_size), encoding="utf-8")
    return path


RUNS_FILE = "runs.html"
GENERATOR = '<meta name="generator" content="ifgym view">'  # marks a page ifgym wrote, so it may rewrite it


def run_row(folder: Path, root: Path) -> dict[str, Any]:
    """One line of the run browser: where the run is, its env, models, episodes, headline with interval, date."""
    from ifgym.runner.report import judge_label, policy_label

    summary = read_summary(folder)
    run = summary.get("run") or {}
    headline = summary.get("headline_metric")
    strict = summary.get("strict") or {}
    return {
        "path": folder.relative_to(root).as_posix(),
        "report": (folder.relative_to(root) / REPORT_FILE).as_posix(),
        "env": run.get("env") or (summary.get("protocol") or {}).get("env_id"),
        "policy": policy_label(run) if run else None,
        "judge": judge_label(run) if run else None,
        "episodes": summary.get("episodes"),
        "headline": headline if headline in strict else None,
        "value": _number(strict.get(headline)),
        "ci": ((summary.get("ci") or {}).get("strict") or {}).get(headline),
        "started": run.get("started"),
        "status": (summary.get("ending") or {}).get("status", "finished"),
    }


def _stale(folder: Path) -> bool:
    """Whether the run's report.html is missing or older than a file it is drawn from."""
    report = folder / REPORT_FILE
    if not report.is_file():
        return True
    sources = [folder / "summary.json", folder / LABELS_FILE, *folder.glob("*.png")]
    summary = read_summary(folder)
    sources.append(episodes_path(folder, summary))
    drawn = report.stat().st_mtime
    return any(p.is_file() and p.stat().st_mtime > drawn for p in sources)


def write_runs_page(folder: Path, *, sample_size: int = SAMPLE_SIZE) -> Path:
    """Write `runs.html` into a folder of runs, a sortable table linking each run's report (written when stale).

    A `runs.html` that ifgym did not write is never overwritten (a ConfigError says so).
    """
    folders = run_folders(folder)
    if not folders:
        raise ConfigError(
            f"{folder}: no summary.json in it or in any folder below it; give a finished run's folder or a folder "
            "of runs (ifgym eval writes runs/<env>-<key>/ by default)"
        )
    path = folder / RUNS_FILE
    if path.exists() and GENERATOR not in path.read_text(encoding="utf-8", errors="replace")[:4096]:
        raise ConfigError(f"{path} exists and ifgym did not write it: move it away, then run ifgym view {folder} again")
    for run in folders:
        if _stale(run):
            write_report([run], sample_size=sample_size)
    rows = [run_row(run, folder) for run in folders]
    template = resources.files("ifgym").joinpath("assets/runs.html").read_text(encoding="utf-8")
    head, tail = template.split("{{DATA}}")
    head = head.replace("{{TITLE}}", html.escape(f"ifgym: runs in {folder}"))
    data = {"folder": str(folder), "runs": rows}
    path.write_text(head + _script_json(_clean(data)) + tail, encoding="utf-8")
    return path


class _Handler(BaseHTTPRequestHandler):
    server: _ReportServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass  # no line per request on the terminal

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode("utf-8"), "application/json")

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.server.touch()
        route = self.path.split("?", 1)[0].split("#", 1)[0]
        if route in ("/", f"/{REPORT_FILE}"):
            self._send(200, (self.server.folder / REPORT_FILE).read_bytes(), "text/html; charset=utf-8")
        elif route == "/labels":
            self._json(200, read_labels(self.server.folder))
        else:
            self._json(404, {"error": f"no such page: {route}"})

    def do_POST(self) -> None:  # noqa: N802
        self.server.touch()
        if self.path != "/labels":
            self._json(404, {"error": f"no such endpoint: {self.path}"})
            return
        # only the page itself posts: JSON (a cross-site form or no-cors request cannot send that type) from
        # this server's own origin
        origin = self.headers.get("Origin")
        own = f"http://127.0.0.1:{self.server.server_address[1]}"
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json" or origin not in (
            None,
            own,
        ):
            self._json(403, {"error": f"labels are posted as application/json by the page served at {own}/"})
            return
        size = int(self.headers.get("Content-Length") or 0)
        if not 0 < size <= MAX_POST_BYTES:
            self._json(400, {"error": f"a label is a JSON object of at most {MAX_POST_BYTES} bytes"})
            return
        try:
            line = append_label(self.server.folder, json.loads(self.rfile.read(size)))
        except (json.JSONDecodeError, UnicodeDecodeError, DataFormatError) as exc:
            self._json(400, {"error": str(exc)})
            return
        self._json(200, line)


class _ReportServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder: Path, port: int):
        super().__init__(("127.0.0.1", port), _Handler)
        self.folder = folder
        self.last_request = time.monotonic()
        self._lock = threading.Lock()

    def touch(self) -> None:
        with self._lock:
            self.last_request = time.monotonic()


def serve(
    folder: Path, *, port: int = 0, seconds: float | None = None, idle_seconds: float = IDLE_SECONDS, ready: Any = None
) -> None:
    """Serve the run's `report.html` and its labelling API on 127.0.0.1 until Ctrl-C, idle or `seconds`.

    `port` 0 takes a free port; the URL is printed (and passed to `ready(url)` when given).
    """
    try:
        server = _ReportServer(folder, port)
    except OSError as exc:
        raise ConfigError(f"cannot serve on 127.0.0.1:{port} ({exc.strerror}); pick another --port") from None
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    print(f"serving {folder / REPORT_FILE} at {url} (labels go to {folder / LABELS_FILE}); Ctrl-C stops", flush=True)
    if ready is not None:
        ready(url)
    start = time.monotonic()
    server.timeout = 0.2
    try:
        while True:
            server.handle_request()
            now = time.monotonic()
            if seconds is not None and now - start >= seconds:
                break
            if now - server.last_request >= idle_seconds:
                print(f"no request for {idle_seconds:g} s: stopped serving", flush=True)
                break
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def view_command(args: list[str]) -> int:
    """`ifgym view RUN [RUN_B] [--serve] [--port N] [--serve-seconds S] [--idle-seconds S] [--sample N]`, or RUNS/."""
    usage = (
        "usage: ifgym view RUN [RUN_B] [--serve] [--port N] [--serve-seconds S] [--idle-seconds S] [--sample N]\n"
        "       ifgym view FOLDER_OF_RUNS  (runs.html: every run below it, sortable, each opening its report)"
    )
    runs: list[str] = []
    options: dict[str, str] = {}
    flags = ("--port", "--serve-seconds", "--idle-seconds", "--sample")
    rest = list(args)
    serve_it = False
    while rest:
        arg = rest.pop(0)
        if arg == "--serve":
            serve_it = True
        elif arg.split("=", 1)[0] in flags:
            name, eq, value = arg.partition("=")
            if not eq:
                if not rest:
                    raise ConfigError(f"view: {name} needs a value ({usage})")
                value = rest.pop(0)
            options[name] = value
        elif arg.startswith("-"):
            raise ConfigError(f"view: unknown option {arg!r} ({usage})")
        else:
            runs.append(arg)
    if not 1 <= len(runs) <= 2:
        print(usage, file=sys.stderr)
        return 2
    try:
        port = int(options.get("--port", 0))
        sample = int(options.get("--sample", SAMPLE_SIZE))
        seconds = float(options["--serve-seconds"]) if "--serve-seconds" in options else None
        idle = float(options.get("--idle-seconds", IDLE_SECONDS))
    except ValueError as exc:
        raise ConfigError(f"view: --port and --sample take integers, the seconds numbers ({exc})") from None
    browse = Path(runs[0]).expanduser()
    if len(runs) == 1 and browse.is_dir() and not (browse / "summary.json").is_file():  # a folder of runs
        if serve_it:
            raise ConfigError(f"view: --serve serves one run's report; give one run folder of {browse}")
        print(write_runs_page(browse, sample_size=sample), flush=True)
        return 0
    path = write_report(runs, sample_size=sample)
    for run in runs:
        for note in folder_notes(run_folder(run)):
            print(f"ifgym: {note}", file=sys.stderr)
    print(path, flush=True)
    if serve_it:
        serve(path.parent, port=port, seconds=seconds, idle_seconds=idle)
    return 0


def agreement_command(args: list[str]) -> int:
    """`ifgym agreement RUN [resamples=1000 level=0.95 seed=0]`: the judge against the run's human labels."""
    from ifgym.core.stats import CISettings
    from ifgym.runner.agreement import agreement, agreement_lines
    from ifgym.runner.report import write_summary
    from ifgym.runner.rollout import stored_episodes
    from ifgym.runner.tracking import log_agreement

    positional = [a for a in args if "=" not in a]
    if len(positional) != 1:
        print("usage: ifgym agreement RUN [resamples=1000 level=0.95 seed=0]", file=sys.stderr)
        return 2
    options = dict(a.split("=", 1) for a in args if "=" in a)
    unknown = sorted(set(options) - {"resamples", "level", "seed"})
    if unknown:
        raise ConfigError(f"agreement: unknown option(s) {', '.join(unknown)}; options: resamples, level, seed")
    try:
        settings = CISettings(
            int(options.get("resamples", 1000)), float(options.get("level", 0.95)), int(options.get("seed", 0))
        )
    except ValueError as exc:
        raise ConfigError(f"agreement: resamples and seed take integers, level a number ({exc})") from None
    folder = run_folder(positional[0])
    labels = read_labels(folder)
    if not labels:
        raise ConfigError(
            f"{folder}: no {LABELS_FILE} yet; label a sample of the judge's verdicts first: ifgym view {folder} --serve"
        )
    summary = read_summary(folder)
    result = agreement(stored_episodes(episodes_path(folder, summary)), labels, settings)
    summary["agreement"] = result
    write_summary(summary, folder / "summary.json")
    print("\n".join(agreement_lines(result)))
    print(f"\nsummary: {folder / 'summary.json'} (agreement)")
    mode = log_agreement(folder, result)
    if mode is not None:
        print(f"W&B: agreement added to the run's summary ({mode})")
    return 0


__all__ = [
    "REPORT_FILE",
    "RUNS_FILE",
    "agreement_command",
    "render_report",
    "run_data",
    "serve",
    "view_command",
    "write_report",
    "write_runs_page",
]
