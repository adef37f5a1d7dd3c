"""Bridges to the RL ecosystem, each imported only when used (`import ifgym` stays light).

- `ifgym.integrations.trl`: `ifgym train`, GRPO with TRL's `GRPOTrainer` and ifgym's turn reward
  (needs the `train` extra).
- `ifgym.integrations.verifiers`: every ifgym env as a `verifiers.v1` environment (needs the
  `verifiers` extra).

They build envs and run evaluations through `ifgym.runner` (as `ifgym eval` does), never through `ifgym.cli`.
"""
