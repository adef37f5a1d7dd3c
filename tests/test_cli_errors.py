"""Every mistake a user can make on the command line ends in one `ifgym: error:` line that names it, never a
traceback: unknown env ids, invalid values, typos, unknown keys and flags, and folders given where a file goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ifgym
from ifgym.cli import COMMANDS, compose, main

SCRIPTED = ["policy=scripted", "episodes=1", "progress=false", "plots=false"]
NTM_FILE = Path(__file__).parent / "data" / "ntm" / "made_up.jsonl"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder with a file in it, given where a file is expected; runs go to tmp_path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    path = tmp_path / "data"
    path.mkdir()
    (path / "inside.json").write_text("[]")
    return path


CASES = [
    # unknown env ids: gymnasium's own message (with its did-you-mean) and ifgym's ids
    (["env.id=ifgym/Nope-v0"], "Environment `Nope` doesn't exist"),
    (["env.id=ifgym/EvolF-v1"], "Did you mean: `EvolIF`?"),
    (["env.id=ifgym/EvolIF-v9"], "ifgym's ids: ifgym/EvolIF-v1"),
    # invalid values
    (["env.max_turns=0"], "env (ifgym/EvolIF-v1): max_turns must be a positive int"),
    (["env.patience=-1"], "patience must be a positive int or None"),
    (["env.reward=wcsr"], "unknown reward mode 'wcsr'"),
    (["episodes=many"], "could not be converted to Integer"),
    (["episodes=0"], "episodes must be >= 1"),
    (["concurrency=0"], "concurrency must be >= 1"),
    (["episode_timeout=0"], "episode_timeout must be > 0 seconds"),
    (["ci_level=2"], "ci_level must be a number between 0 and 1"),
    (["logger=wandb", "logger.mode=sometimes"], "unknown W&B mode"),
    (["policy=openai", "policy.llm.base_url=http://127.0.0.1:9/v1", "policy.llm.temperature=-1"], "temperature"),
    (["judge=llm", "judge.llm.base_url=ftp://x"], "an http(s) URL"),
    (  # a request field that has a named field of its own
        ["policy=openai", "policy.llm.base_url=http://127.0.0.1:9/v1", "++policy.llm.extra.temperature=0.5"],
        "LLMConfig.extra must not set temperature: use the field(s) of that name",
    ),
    (["policy=openai"], "OPENAI_BASE_URL"),  # no URL at all: where to put one
    # a judge that would score nothing: NTM's checkpoints need judge=llm (the default judge group is rules)
    (["env=ntm", f"env.dataset={NTM_FILE}"], "judge='rules' would score nothing"),
    # typos, unknown keys, options and flags
    (["episdes=3"], "Did you mean 'episodes'"),
    (["env.max_turn=3"], "Did you mean 'env.max_turns'"),
    (["policy=scriptd"], "Did you mean 'scripted'"),
    (["+experiment=foo"], "unknown config key 'experiment' (from '+experiment=foo')"),
    (["+policy.temprature=1"], "unknown config key 'policy.temprature'"),
    (["+env.patiense=2"], "Did you mean 'patience'"),
    (["env=structflow", "env.dataset=structflowbnch"], "Did you mean 'structflowbench'"),
    (["--frob"], "unrecognized arguments: --frob"),
    # folders given where a file goes (env.script takes a folder of dialogue files: an empty one is the mistake)
    (["output={folder}"], "is a folder; give the episodes file"),
    (["env=structflow", "env.dataset={folder}", "env.allow_unjudged=true"], "dataset '{folder}' is a folder"),
    (["env=structflow", "+env.templates={folder}"], "structure templates '{folder}' is a folder"),
    (["env=structflow", "+env.topics={folder}"], "topics '{folder}' is a folder"),
    (["env.script={folder}"], "{folder}: the folder holds no EvolIF dialogue file (*.jsonl)"),
    (["env=flexbench", "env.sop={folder}"], "SOP file '{folder}' is a folder"),
    (["env=flexbench", "env.dimensions={folder}"], "dimension file '{folder}' is a folder"),
]


@pytest.mark.parametrize(("overrides", "fragment"), CASES)
def test_every_mistake_is_one_clear_line(folder, capsys, overrides, fragment):
    args = [o.format(folder=folder) for o in overrides]
    assert main(["eval", *SCRIPTED, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ifgym: error:") and len(err.strip().splitlines()) == 1, err
    assert fragment.format(folder=folder) in err
    assert not (folder.parent / "runs").exists()  # nothing left behind


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["export", "prompts", "{folder}", "out.jsonl"], "episodes file '{folder}' is a folder"),
        (["export", "prompts", "{folder}/none.jsonl", "out.jsonl"], "no episodes there"),
        (["export", "promts", "{folder}/none.jsonl", "out.jsonl"], "Did you mean 'prompts'?"),
        (["export", "sft", "{folder}/none.jsonl", "out.jsonl", "min_reward=high"], "min_reward takes a number"),
        (["export", "sft", "{folder}/none.jsonl", "out.jsonl", "margin=0.2"], "sft takes min_reward"),
        (["evl"], "unknown command 'evl'. Did you mean 'eval'?"),
    ],
)
def test_other_commands_too(folder, capsys, args, fragment):
    assert main([a.format(folder=folder) for a in args]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("ifgym: error:") and len(err.strip().splitlines()) == 1 and fragment.format(folder=folder) in err
    )


def test_the_installed_command_prints_no_traceback(folder):
    for args in (["env.id=ifgym/Nope-v0"], ["env=structflow", f"env.dataset={folder}"]):
        done = subprocess.run(
            [sys.executable, "-m", "ifgym.cli", "eval", *SCRIPTED, *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=folder,
            env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
        )
        assert done.returncode == 2 and done.stderr.startswith("ifgym: error:") and "Traceback" not in done.stderr


def _eval_in(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "ifgym.cli", "eval", *SCRIPTED, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
    )


def test_a_failed_run_keeps_the_folders_it_did_not_make(tmp_path):
    # the case: mkdir -p work/mydir && cd work/mydir && ifgym eval ... hydra.run.dir=$PWD/run
    mydir = tmp_path / "work" / "mydir"
    mydir.mkdir(parents=True)
    done = _eval_in(mydir, "env.id=ifgym/EvolIF-v9", f"hydra.run.dir={mydir}/run")
    assert done.returncode == 2 and "ifgym's ids" in done.stderr, done.stderr
    assert mydir.is_dir() and list(mydir.iterdir()) == []  # its empty run folder went, mydir stays
    # a user's empty folder given as the run folder itself stays too
    done = _eval_in(mydir, "env.id=ifgym/EvolIF-v9", f"hydra.run.dir={mydir}")
    assert done.returncode == 2 and mydir.is_dir() and list(mydir.iterdir()) == []  # and what ifgym wrote in it went


def test_a_failed_run_removes_the_folders_it_made(tmp_path):
    done = _eval_in(tmp_path, "env.id=ifgym/EvolIF-v9", f"hydra.run.dir={tmp_path}/made/by/ifgym/run")
    assert done.returncode == 2 and list(tmp_path.iterdir()) == []  # made/by/ifgym/run, all of it made here


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_help_and_prints_its_own(capsys, command):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ifgym {command} ")
    others = [c for c in COMMANDS if c != command and not c.startswith(command)]
    assert not any(f"\n  {c} " in out for c in others)  # not every command's entry again


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ifgym {ifgym.__version__}"


@pytest.mark.parametrize(
    ("args", "fragment", "not_there"),
    [
        # a bad value beside a Hydra key blames the value, not hydra.run.dir
        (["eval", "episodes=abc", "hydra.run.dir={folder}/run"], "could not be converted to Integer", "hydra.run"),
        # a missing run names itself, not the folder it would be in
        (["compare", "{folder}/nope", "{folder}"], "{folder}/nope: no such run folder or episodes file", "in {folder}"),
    ],
)
def test_errors_name_what_is_wrong(folder, capsys, args, fragment, not_there):
    assert main([a.format(folder=folder) for a in args]) == 2
    err = capsys.readouterr().err
    assert fragment.format(folder=folder) in err and not_there.format(folder=folder) not in err, err


def test_an_unreadable_override_is_named_with_the_quoting_that_reads_it(capsys):
    url = "http://127.0.0.1:9/v1?q=1"
    assert main(["eval", f"policy.llm.base_url={url}"]) == 2
    err = capsys.readouterr().err
    assert f"the override 'policy.llm.base_url={url}' cannot be read (mismatched input '=' expecting <EOF>)" in err
    assert f"""'policy.llm.base_url="{url}"'""" in err
    # the quoting it suggests reads as the URL (the shell's single quotes gone, as the shell takes them)
    assert compose([f'policy.llm.base_url="{url}"']).policy.llm.base_url == url


def test_plots_without_matplotlib_stop_before_any_episode(tmp_path, monkeypatch, capsys):
    from ifgym.errors import ConfigError
    from ifgym.plotting import new_figure

    # matplotlib absent, as in `pip install ifgym` without the plot extra (None in sys.modules: not importable)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out = tmp_path / "e.jsonl"
    quick = ["eval", "policy=scripted", "episodes=1", "env.max_turns=1", f"output={out}", "progress=false"]
    assert main(quick) == 2
    err = capsys.readouterr().err
    assert "plots=true (the default) draws with matplotlib, which is not installed: pip install 'ifgym[plot]'" in err
    assert err.rstrip().endswith("; or plots=false") and not out.exists()
    with pytest.raises(
        ConfigError, match=r"^the comparison plot is drawn with matplotlib, .*pip install 'ifgym\[plot\]'"
    ):
        new_figure("the comparison plot")
    assert main([*quick, "plots=false"]) == 0  # the run itself needs no matplotlib
