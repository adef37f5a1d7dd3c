"""Settings every test shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _wandb_stages_in_tmp(tmp_path_factory, monkeypatch):
    # An offline W&B run stages its artifacts' files in WANDB_DATA_DIR (by default under the home folder) until
    # `wandb sync`; a test's run stays in its own temporary folder. A test that sets the variable itself wins.
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path_factory.mktemp("wandb-data")))
