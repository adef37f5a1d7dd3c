"""executor=ray joining an existing cluster by address (`executor.address`): a head node started with the venv's
`ray start --head` (2 CPUs, its own port, on 127.0.0.1) plays the same episodes as the local executor.

The cluster's workers are processes of the `ray start` node, not of this test: they import ifgym
themselves and reach nothing but the node.
"""

from __future__ import annotations

import json
import sys

import pytest
from support.ray_cluster import RayHead, import_ray

from ifgym.cli import main

ray = import_ray()


@pytest.fixture
def cluster():
    if ray.is_initialized():  # a driver joins one cluster at a time
        ray.shutdown()
    with RayHead(num_cpus=2) as head:
        try:
            yield head
        finally:
            ray.shutdown()


def test_executor_address_runs_the_episodes_on_an_existing_cluster(tmp_path, cluster):
    args = ["eval", "policy=scripted", "episodes=6", "env.max_turns=2", "progress=false", "plots=false", "ci=false"]
    remote, local = tmp_path / "ray" / "e.jsonl", tmp_path / "local" / "e.jsonl"
    ray_args = ["executor=ray", "executor.num_workers=2", f"executor.address={cluster.address}"]
    assert main([*args, *ray_args, f"output={remote}"]) == 0
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == cluster.address  # it joined that one
    assert main([*args, f"output={local}"]) == 0

    def by_seed(path):
        return {json.loads(line)["seed"]: line for line in path.read_text().splitlines()}

    assert sorted(by_seed(remote)) == list(range(6))
    assert by_seed(remote) == by_seed(local)  # the same episodes, line for line
    summary = json.loads((remote.parent / "summary.json").read_text())
    assert summary["executor"] == {"kind": "ray", "num_workers": 2, "address": cluster.address, "worker_deaths": 0}


def test_without_the_ray_extra_the_ray_tests_fail_saying_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    with pytest.raises(ImportError, match=r"the Ray tests need the ray extra: pip install 'ifgym\[ray\]'"):
        import_ray()
