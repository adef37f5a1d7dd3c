"""The viewer on a large run: `python benchmarks/view.py [--episodes 2000] [--repeat 3]`.

Writes a made-up run of N episodes (tests/support/made_up_run.py: three envs, 1-4 turns each, judged
and rule verdicts, replies padded to `--reply-chars`), times `ifgym view` writing report.html, then
opens it in headless chromium (Debian's, over the DevTools protocol: tests/support/browser.py) and
measures in the page, with
`performance.now()`: the load until the viewer is ready (navigation start to `window.ifgymReady`), a
filter over every episode (verdict = no), and opening one episode. Medians of `--repeat` loads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the made-up run and the browser driver

from support.browser import Browser  # noqa: E402
from support.made_up_run import write_made_up_run  # noqa: E402

from ifgym.runner.view import write_report  # noqa: E402

FILTER = """(() => { const t = performance.now(); const e = document.getElementById('f-verdict');
  e.value = 'no'; e.dispatchEvent(new Event('change')); return performance.now() - t; })()"""
OPEN = """(() => { const t = performance.now(); document.querySelector('.ep .head').click();
  return performance.now() - t; })()"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reply-chars", type=int, default=1500, help="each reply padded to about this length")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        write_made_up_run(folder, args.episodes, reply_chars=args.reply_chars)
        start = time.perf_counter()
        report = write_report([folder])
        write_seconds = time.perf_counter() - start
        loads, filters, opens = [], [], []
        with Browser() as browser:
            for _ in range(args.repeat):
                browser.open(report.resolve().as_uri())
                loads.append(browser.evaluate("window.ifgymReadyAt"))
                filters.append(browser.evaluate(FILTER))
                opens.append(browser.evaluate(OPEN))
            shown = browser.evaluate("document.getElementById('count').textContent")
        size = report.stat().st_size / 1e6
    print(
        f"{args.episodes} episodes, replies of ~{args.reply_chars} characters, "
        f"report.html {size:.1f} MB, written in {write_seconds:.2f} s; {shown}"
    )
    print("| step (headless chromium) | median ms | all (ms) |")
    print("|---|---|---|")
    for name, values in (("load until ready", loads), ("filter verdict=no", filters), ("open an episode", opens)):
        print(f"| {name} | {statistics.median(values):.0f} | {', '.join(f'{v:.0f}' for v in values)} |")


if __name__ == "__main__":
    main()
