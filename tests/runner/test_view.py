"""`ifgym view`: the report in a real headless chromium: loads, shows the summary's numbers, filters, links, labels."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from support.browser import Browser
from support.made_up_run import write_made_up_run

from ifgym.cli import main
from ifgym.runner.agreement import LABELS_FILE
from ifgym.runner.view import write_report

INJECTED = '<script>window.injected = 1</script><img src="x" onerror="window.injected = 2"> & </script>'


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run") / "made-up"
    summary = write_made_up_run(folder, 30, reply=INJECTED, failed_seed=99)
    return folder, summary


def url(path, fragment=""):
    return path.resolve().as_uri() + fragment


def test_view_prints_the_report_path_and_the_page_has_the_summary_numbers(run, browser, capsys):
    folder, summary = run
    assert main(["view", str(folder)]) == 0
    report = folder / "report.html"
    assert capsys.readouterr().out.strip() == str(report)
    browser.open(url(report))
    cells = browser.evaluate(
        "[...document.querySelectorAll('table.results tr[data-metric]')]"
        ".map(r => [r.dataset.metric, ...[...r.cells].map(c => c.textContent)])"
    )
    shown = {row[0]: row[1:] for row in cells}
    assert set(shown) == set(summary["strict"]) - {"ROB"}  # STA's earlier name is not a row of its own
    turns = summary["strict"]["turns"]
    assert shown["turns"][1] == shown["turns"][3] == str(int(turns)) and turns > 30  # a count: a whole number
    for metric, value in summary["strict"].items():
        if metric in ("ROB", "turns"):
            continue
        row = shown[metric]
        assert row[1] == f"{value:.3f}"
        bounds = summary["ci"]["strict"].get(metric)
        assert row[2] == (f"[{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")
        assert row[3] == f"{summary['loose'][metric]:.3f}"
    assert shown["CSR"][0] == "CSR *" and shown["ISR"][0] == "ISR"  # the headline metric is starred
    assert "* headline metric: CSR" in browser.evaluate("document.getElementById('results').textContent")
    assert "constraint success rate" in shown["CSR"][5]  # the metric's definition
    assert shown["ISR"][5] == "the env's own words for ISR"  # the summary's own definition wins
    # the plots the run wrote, embedded: decoded by the browser
    sizes = browser.evaluate("[...document.querySelectorAll('#plots img')].map(i => i.naturalWidth)")
    assert len(sizes) == 2 and all(w > 100 for w in sizes)
    assert "accuracy" in browser.evaluate("document.getElementById('judge').textContent")
    assert browser.evaluate("document.getElementById('count').textContent").startswith("31 of 31 episodes")


def test_the_protocols_differences_are_shown_not_folded(run, browser, tmp_path):
    folder, summary = run
    write_report([folder])
    browser.open(url(folder / "report.html"))
    block = browser.evaluate(
        "(() => { const b = document.querySelector('#results .protocol .block');"
        " return {line: b.querySelector('.line').textContent, note: b.querySelector('.differs').textContent,"
        " items: [...b.querySelectorAll('li')].map(li => li.textContent), folded: !!b.closest('details'),"
        " height: b.getBoundingClientRect().height}; })()"
    )
    assert block["line"] == "protocol: three envs (made up) (max_turns=4)"
    assert block["note"] == "not EvolIF's protocol:" and block["items"] == summary["protocol"]["deviations"]
    assert not block["folded"] and block["height"] > 40  # on the page as it opens, not in a collapsed block
    browser.screenshot(tmp_path / "results.png")


def test_the_transcript_list_shows_each_episodes_score(run, browser):
    folder, _ = run
    write_report([folder])
    browser.open(url(folder / "report.html"))
    browser.evaluate("document.getElementById('tab-transcripts').click()")
    heads = dict(
        browser.evaluate(
            "[...document.querySelectorAll('.ep')].map(e => [e.dataset.seed, e.querySelector('.score')?.textContent])"
        )
    )
    checked = 0
    for line in (folder / "episodes.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("failed"):
            assert heads[str(e["seed"])] is None  # a failed episode has no score, its error shows
            continue
        labels = [v["label"] for t in e["turns"] for v in t["verdicts"]]
        met = f"{labels.count('yes')}/{len(labels)} checks met"
        if e["env_id"] == "ifgym/EvolIF-v1" and "unknown" not in labels:
            # EvolIF's CSR over one dialogue: the mean of its turns' shares of constraints met; each made-up
            # turn checks three, so that is the constraints met over the constraints checked
            assert heads[str(e["seed"])] == f"CSR {labels.count('yes') / len(labels):.3f} · {met}"
            checked += 1
        else:
            assert heads[str(e["seed"])].endswith(" · " + met)
    assert checked >= 3


def expected(folder, predicate):
    """Seeds of the episodes-file lines that `predicate(episode_json)` accepts."""
    lines = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    return sorted(str(e["seed"]) for e in lines if predicate(e))


def turns(e):
    return [] if e.get("failed") else e["turns"]  # a failed episode's line counts the turns it reached


def shown_seeds(browser):
    browser.evaluate(
        "while (!document.getElementById('more').classList.contains('hidden')) document.getElementById('more').click()"
    )
    return sorted(browser.evaluate("[...document.querySelectorAll('.ep')].map(e => e.dataset.seed)"))


def set_filter(browser, element, value):
    prop = "checked" if isinstance(value, bool) else "value"
    browser.evaluate(
        f"(() => {{ const e = document.getElementById('{element}'); e.{prop} = {json.dumps(value)};"
        " e.dispatchEvent(new Event(e.type === 'number' ? 'input' : 'change')); })()"
    )


def test_filters_by_verdict_group_failed_turns_and_failed_episodes(run, browser):
    folder, _ = run
    write_report([folder])
    browser.open(url(folder / "report.html"))

    def items(e):
        return [v for t in turns(e) for v in t["verdicts"]]

    set_filter(browser, "f-verdict", "unknown")
    assert shown_seeds(browser) == expected(folder, lambda e: any(v["label"] == "unknown" for v in items(e)))
    set_filter(browser, "f-verdict", "any")
    set_filter(browser, "f-group", "greeting")  # FlexBench's dimension: every FlexBench episode has it
    assert shown_seeds(browser) == expected(folder, lambda e: e["env_id"] == "ifgym/FlexBench-v0")
    set_filter(browser, "f-verdict", "no")  # and the greeting was judged "no" in some turn
    want = expected(
        folder,
        lambda e: any(t["verdicts"][0]["label"] == "no" for t in turns(e) if e["env_id"].startswith("ifgym/F")),
    )
    assert shown_seeds(browser) == want and want
    set_filter(browser, "f-verdict", "any")
    set_filter(browser, "f-group", "all")
    set_filter(browser, "f-failed-turns", True)
    assert shown_seeds(browser) == expected(folder, lambda e: any(v["label"] == "no" for v in items(e)))
    # an opened episode shows only its failed turns
    seed = shown_seeds(browser)[0]
    browser.evaluate(f"document.querySelector('.ep[data-seed=\"{seed}\"] .head').click()")
    drawn = browser.evaluate(f"[...document.querySelectorAll('.ep[data-seed=\"{seed}\"] .turn')].length")
    episode = next(
        e for e in map(json.loads, (folder / "episodes.jsonl").read_text().splitlines()) if str(e["seed"]) == seed
    )
    assert drawn == sum(any(v["label"] == "no" for v in t["verdicts"]) for t in episode["turns"])
    set_filter(browser, "f-failed-turns", False)
    set_filter(browser, "f-failed-episodes", True)
    assert shown_seeds(browser) == ["99"]
    browser.evaluate("document.querySelector('.ep .head').click()")
    assert "BackendError: the model went away" in browser.evaluate("document.querySelector('.ep .body').textContent")


def test_a_link_names_a_seed_and_turn(run, browser):
    folder, _ = run
    write_report([folder])
    browser.open(url(folder / "report.html", "#seed=4&turn=2"))
    episode = next(e for e in map(json.loads, (folder / "episodes.jsonl").read_text().splitlines()) if e["seed"] == 4)
    assert len(episode["turns"]) >= 2
    target = browser.evaluate("document.querySelector('.turn.target').id")
    assert target == "r0-s4-t2"
    text = browser.evaluate("document.querySelector('.turn.target .reply').textContent")
    assert text == episode["turns"][1]["reply"]
    assert browser.evaluate("document.getElementById('transcripts').classList.contains('on')")
    # the turn's own link is the same address
    assert browser.evaluate("document.querySelector('.turn.target a').getAttribute('href')") == "#seed=4&turn=2"


def test_a_reply_with_html_shows_as_text(run, browser):
    folder, _ = run
    write_report([folder])
    browser.open(url(folder / "report.html", "#seed=0&turn=1"))
    assert browser.evaluate("document.querySelector('#r0-s0-t1 .reply').textContent") == INJECTED
    assert browser.evaluate("typeof window.injected") == "undefined"
    assert browser.evaluate("document.querySelectorAll('#transcripts img').length") == 0


def test_two_runs_side_by_side_by_seed(tmp_path, browser):
    a, b = tmp_path / "a", tmp_path / "b"
    write_made_up_run(a, 12)
    write_made_up_run(b, 12, tag="B ")
    assert main(["view", str(a), str(b)]) == 0
    browser.open(url(a / "report.html", "#seed=5"))
    columns = browser.evaluate(
        "[...document.querySelectorAll('.ep.open .episode')].map(e => e.querySelector('.reply').textContent)"
    )
    assert columns == [
        "reply of seed 5 turn 1 in ifgym/FlexBench-v0.\nA second line.",
        "B reply of seed 5 turn 1 in ifgym/FlexBench-v0.\nA second line.",
    ]
    assert browser.evaluate("document.querySelectorAll('table.results').length") == 2  # strict and loose


def test_the_pair_view_has_a_b_minus_a_column(tmp_path, browser):
    a, b = tmp_path / "a", tmp_path / "b"
    write_made_up_run(a, 12)
    write_made_up_run(b, 12, tag="B ")
    summary = json.loads((b / "summary.json").read_text())
    summary["strict"]["CSR"], summary["strict"]["ISR"] = 0.6, 0.125  # B - A: 0.6 - 0.51234, 0.125 - 0.25
    (b / "summary.json").write_text(json.dumps(summary))
    write_report([a, b])
    browser.open(url(a / "report.html"))
    strict = "table.pair[data-mode=strict]"
    head = browser.evaluate(f"[...document.querySelectorAll('{strict} th')].map(c => c.textContent)")
    assert head == ["strict", "A", "95% CI", "B", "95% CI", "B \u2212 A", "definition"]
    rows = dict(
        browser.evaluate(
            f"[...document.querySelectorAll('{strict} tr[data-metric]')]"
            ".map(r => [r.dataset.metric, [...r.cells].map(c => c.textContent)])"
        )
    )
    assert rows["CSR"][:6] == ["CSR *", "0.512", "[0.450, 0.575]", "0.600", "[0.450, 0.575]", "+0.088"]
    assert rows["ISR"][5] == "\u22120.125" and rows["pass_rate/emotion"][5] == "0.000"
    assert rows["turns"][1] == rows["turns"][3] and rows["turns"][5] == "0"  # a count's difference: a whole number
    assert "ROB" not in rows
    # each seed's line: both runs' scores and the difference of their headline metric (the same verdicts: 0)
    browser.evaluate("document.getElementById('tab-transcripts').click()")
    line = browser.evaluate("document.querySelector('.ep[data-seed=\"3\"] .head').textContent")
    assert line.startswith("seed 3  |  A CSR ") and "  |  B CSR " in line and line.endswith("B \u2212 A 0.000")
    browser.screenshot(tmp_path / "pair.png")


def served(folder, seconds=120):
    """`ifgym view RUN --serve` in a subprocess; (process, url)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ifgym.cli", "view", str(folder), "--serve", "--serve-seconds", str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_PROXY": "127.0.0.1"},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        if found:
            return process, found.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"the server did not start: {process.stderr.read()}")


def test_labels_are_saved_and_read_back_after_a_reload(tmp_path, browser):
    folder = tmp_path / "run"
    write_made_up_run(folder, 12)
    process, address = served(folder)
    try:
        browser.open(address)
        browser.evaluate("document.getElementById('tab-label').click()")
        first = browser.evaluate("document.getElementById('label-card').dataset.key")
        assert browser.evaluate("document.getElementById('revealed')") is None  # the judge's answer is hidden
        assert "the judge:" not in browser.evaluate("document.getElementById('label').textContent")
        browser.evaluate("document.getElementById('label-no').click()")
        browser.wait_for("document.getElementById('revealed') !== null")
        revealed = browser.evaluate("document.getElementById('revealed').textContent")
        assert "you: no" in revealed and "the judge:" in revealed
        browser.evaluate("document.getElementById('next').click()")
        second = browser.evaluate("document.getElementById('label-card').dataset.key")
        assert second != first
        browser.evaluate("document.getElementById('label-yes').click()")
        browser.wait_for("document.getElementById('revealed') !== null")
        saved = [json.loads(x) for x in (folder / LABELS_FILE).read_text().splitlines()]
        assert [(x["key"], x["human"]) for x in saved] == [(first, "no"), (second, "yes")]
        browser.open(address)  # a reload: the labels come back from the file
        browser.evaluate("document.getElementById('tab-label').click()")
        heading = browser.evaluate("document.querySelector('#label h2').textContent")
        assert re.search(r": 2 of \d+ labelled", heading)
        rows = browser.evaluate(
            "[...document.querySelectorAll('table.labelled tr[data-key]')]"
            ".map(r => [r.dataset.key, r.cells[2].textContent])"
        )
        assert sorted(rows) == sorted([[first, "no"], [second, "yes"]])  # the table lists them in sample order
        assert browser.evaluate("document.getElementById('label-card').dataset.key") not in (first, second)
    finally:
        process.terminate()
        process.wait(timeout=30)
    # the static file: the saved labels, and a note that labelling needs --serve
    write_report([folder])
    browser.open(url(folder / "report.html"))
    assert "needs the report served" in browser.evaluate("document.getElementById('label-static').textContent")
    assert browser.evaluate("document.querySelectorAll('table.labelled tr[data-key]').length") == 2
    # ifgym agreement's result shows in the Judge tab
    assert main(["agreement", str(folder), "resamples=20"]) == 0
    write_report([folder])
    browser.open(url(folder / "report.html"))
    rows = browser.evaluate("[...document.querySelectorAll('table.agreement tr')].map(r => r.cells[0].textContent)")
    assert rows[:2] == ["group", "all"]
    assert browser.evaluate("document.querySelector('table.agreement tr:nth-child(2)').cells[1].textContent") == "2"


def test_the_server_refuses_a_bad_label(tmp_path):
    import urllib.error
    import urllib.request

    folder = tmp_path / "run"
    write_made_up_run(folder, 3)
    process, address = served(folder)
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def post(body, **headers):
            request = urllib.request.Request(address + "labels", data=body, headers=headers)
            with pytest.raises(urllib.error.HTTPError) as error:
                opener.open(request, timeout=30)
            return error.value.code, json.loads(error.value.read())["error"]

        json_type = {"Content-Type": "application/json"}
        code, message = post(b'{"key": "ep-0/0/1", "human": "maybe"}', **json_type)
        assert code == 400 and "human" in message
        good = b'{"key": "ep-0/0/1", "human": "yes"}'
        assert post(b"{not json", **json_type)[0] == 400
        assert post(good, **{"Content-Type": "text/plain"})[0] == 403  # what a cross-site form could send
        assert post(good, **json_type, Origin="http://evil.example")[0] == 403
        assert not (folder / LABELS_FILE).exists()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_serving_stops_after_the_idle_time(tmp_path, capsys):
    from ifgym.runner.view import serve

    write_made_up_run(tmp_path, 2)
    write_report([tmp_path])
    serve(tmp_path, idle_seconds=0.5)  # nobody asks: it returns on its own
    assert "no request for 0.5 s: stopped serving" in capsys.readouterr().out


def test_view_of_a_scripted_eval_run(tmp_path, browser):
    out = tmp_path / "run" / "episodes.jsonl"
    args = ["eval", "policy=scripted", "episodes=3", "env.max_turns=3", f"output={out}", "progress=false"]
    assert main(args) == 0
    assert main(["view", str(out.parent)]) == 0
    summary = json.loads((out.parent / "summary.json").read_text())
    browser.open(url(out.parent / "report.html"))
    shown = dict(
        browser.evaluate(
            "[...document.querySelectorAll('table.results tr[data-metric]')]"
            ".map(r => [r.cells[0].textContent, r.cells[1].textContent])"
        )
    )
    counts = ("episodes", "turns", "failed_turns", "undetermined_turns", "unknown")  # whole numbers
    assert summary["aliases"] == {"ROB": "STA"} and summary["headline_metric"] == "STA"
    expected = {
        k + (" *" if k == "STA" else ""): "n/a" if v is None else str(int(v)) if k in counts else f"{v:.3f}"
        for k, v in summary["strict"].items()
        if k != "ROB"  # STA's earlier name: no row of its own
    }
    assert shown == expected and shown["turns"] == "9"
    assert "rules decide every verdict" in browser.evaluate("document.getElementById('judge').textContent")
    assert "nothing to label" in browser.evaluate("document.getElementById('label').textContent")


def test_view_errors_name_the_fix(tmp_path, capsys):
    assert main(["view", str(tmp_path)]) == 2
    assert "no summary.json" in capsys.readouterr().err
    assert main(["view", str(tmp_path), "--bogus"]) == 2
    assert "unknown option '--bogus'" in capsys.readouterr().err


def test_a_folder_of_runs_is_browsed_sorted_and_each_run_opens(tmp_path, browser, capsys):
    runs = tmp_path / "runs"
    # two made-up runs (one nested, as a sweep's job) and one real eval run of the scripted policy
    write_made_up_run(runs / "made-up-a", 6)
    write_made_up_run(runs / "sweep-1" / "0", 9)
    nested = json.loads((runs / "sweep-1" / "0" / "summary.json").read_text())
    nested["strict"]["CSR"], nested["ci"]["strict"]["CSR"] = 0.75, [0.6, 0.9]
    nested["run"]["started"] = "2026-11-27T09:30:00+00:00"
    (runs / "sweep-1" / "0" / "summary.json").write_text(json.dumps(nested))
    out = runs / "scripted" / "episodes.jsonl"
    assert main(["eval", "policy=scripted", "episodes=3", "env.max_turns=2", f"output={out}", "progress=false"]) == 0
    real = json.loads((out.parent / "summary.json").read_text())
    capsys.readouterr()
    assert main(["view", str(runs)]) == 0
    page = runs / "runs.html"
    assert capsys.readouterr().out.strip() == str(page)
    assert all((runs / p / "report.html").is_file() for p in ("made-up-a", "sweep-1/0", "scripted"))
    browser.open(url(page))

    def table():
        return browser.evaluate(
            "[...document.querySelectorAll('#rows tr')].map(r => [...r.cells].map(c => c.textContent))"
        )

    rows = {r[0]: r for r in table()}
    assert set(rows) == {"made-up-a", "sweep-1/0", "scripted"}
    assert rows["made-up-a"][1:] == [
        "three envs (made up)",
        "made-up-model (openai 127.0.0.1)",
        "canned-judge (openai 127.0.0.1)",
        "6",
        "CSR 0.512 [0.450, 0.575]",
        "2026-11-26 16:18",
        "finished",
    ]
    assert rows["sweep-1/0"][4:6] == ["9", "CSR 0.750 [0.600, 0.900]"]
    headline = real["headline_metric"]
    value, bounds = real["strict"][headline], real["ci"]["strict"][headline]
    shown = "n/a" if value is None else f"{value:.3f}" + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")
    assert rows["scripted"][1:6] == ["ifgym/EvolIF-v1", "scripted", "rules", "3", f"{headline} {shown}"]
    assert rows["scripted"][6] == real["run"]["started"][:16].replace("T", " ")
    # the newest first; a click on a column sorts by it, a second click reverses
    assert [r[0] for r in table()] == ["scripted", "sweep-1/0", "made-up-a"]
    browser.evaluate("document.querySelector('th[data-column=episodes]').click()")
    assert [r[4] for r in table()] == ["3", "6", "9"]
    browser.evaluate("document.querySelector('th[data-column=episodes]').click()")
    assert [r[4] for r in table()] == ["9", "6", "3"]
    browser.evaluate("document.querySelector('th[data-column=headline]').click()")
    assert [r[0] for r in table()][-2:] == ["made-up-a", "sweep-1/0"]  # by value: 0.512, then 0.750
    browser.screenshot(tmp_path / "runs.png")
    # a run opens its report
    browser.evaluate("document.querySelector('#rows tr[data-path=\"sweep-1/0\"] td:nth-child(2)').click()")
    browser.wait_for("location.href.endsWith('sweep-1/0/report.html') && window.ifgymReady === true")
    assert browser.evaluate("document.getElementById('title').textContent") == "0"
    cells = browser.evaluate("[...document.querySelectorAll('tr[data-metric=CSR] td')].map(c => c.textContent)")
    assert cells[:3] == ["CSR *", "0.750", "[0.600, 0.900]"]


def test_a_runs_page_ifgym_did_not_write_is_kept(tmp_path, capsys):
    write_made_up_run(tmp_path / "runs" / "a", 2)
    mine = tmp_path / "runs" / "runs.html"
    mine.write_text("<html>my own notes</html>")
    assert main(["view", str(tmp_path / "runs")]) == 2
    assert "ifgym did not write it" in capsys.readouterr().err
    assert mine.read_text() == "<html>my own notes</html>"
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "no summary.json in it or in any folder below it" in capsys.readouterr().err


def test_the_run_browser_rewrites_only_stale_reports(tmp_path, capsys):
    import os

    from ifgym.runner.view import write_runs_page

    fresh, stale = tmp_path / "runs" / "fresh", tmp_path / "runs" / "stale"
    for folder in (fresh, stale):
        write_made_up_run(folder, 3)
        write_report([folder])
        os.utime(folder / "report.html", (1_000_000_000, 1_000_000_000))  # drawn long ago ...
    for name in os.listdir(fresh):  # ... after every file of the fresh run
        if name != "report.html":
            os.utime(fresh / name, (999_999_999, 999_999_999))
    write_runs_page(tmp_path / "runs")
    assert (fresh / "report.html").stat().st_mtime == 1_000_000_000  # kept
    assert (stale / "report.html").stat().st_mtime > 1_000_000_000  # its summary is newer: drawn again
    assert main(["view", str(tmp_path / "runs"), "--serve"]) == 2
    assert "--serve serves one run's report" in capsys.readouterr().err
