"""FlexBench's evaluation side: an SOP's dimensions, the pipeline that builds them, the judges, the metrics.

Dimensions live here and only here (leakage resistance: the user simulator never imports this
module, and the env never hands it anything derived from it).

**Dimensions.** One SOP becomes a list of dimensions: each checks one non-overlapping observable
unit of the instruction with one evaluation question about the assistant's output (`criterion`),
and a `precondition` that says when it applies. Three kinds:

- *base action* (`precondition: null`): a step every call must contain ("ask which platform").
- *branch* (`precondition: "If …"` / `"When …"`): a step that applies only once its condition held
  in the call ("if the caller is not in charge, ask for the owner's name"); prohibitions that only
  apply under a condition ("never share prices with someone not in charge") are branches too.
- *always-on rule* (`precondition: "always"`): a prohibition, limit or ordering that holds for
  every agent message ("never promise waived fees", "under 80 words", "no fees before the identity
  check"). It is never "attempted", only kept or broken, so it is not a base action.

Precondition groups tie each base action to the branches its outcome decides (asking whether the
caller is in charge → "if not in charge …", "if in charge …"); mutually exclusive sets list
branches that cannot both apply in one call. A branch in no group is free-standing.

**File.** A dimension set is a JSON file a person can review and edit (`DimensionSet.save`)::

    {"schema": "ifgym.flexbench.dimensions/v1", "sop": "merchant_onboarding", "sop_sha256": "…",
     "reviewed": true,
     "dimensions": [{"id": "d1", "unit": "<SOP text>", "criterion": "Does the assistant …?",
                     "precondition": null, "rule": {"evidence": ["regex", …]}}, …],
     "groups": [{"base": "d1", "branches": ["d2", "d3"]}], "exclusive": [["d2", "d3"]], "meta": {}}

`rule` is optional and only used by the rule checker (`judge="rules"`): `when` (regexes on the
caller's messages showing a branch's precondition held), `until` (regexes on the assistant's
messages ending the rule's scope, for "not before …" rules), `evidence` (regexes on the
assistant's messages showing the action done as required), `attempt` (regexes showing the action
was attempted at all, e.g. a farewell for "summarise, thank and say goodbye"), `violation`
(regexes showing it done wrong or a rule broken), `max_words` / `max_questions` (per assistant
message). A base action's rule needs `evidence` (nothing else can show it was done); an always-on
rule's needs `violation` or a limit. Reviewed files for the shipped SOPs are in
`rewards/assets/flexbench/`.

**Pipeline** (`build_dimensions`, needs a model): segmentation into non-overlapping units copied
verbatim from the SOP → one criterion per unit → verification (is coverage complete, which unit is
missing, which criterion invents a requirement) → a bounded modification loop → logic extraction
(groups and mutually exclusive sets). Malformed model answers are re-asked a bounded number of
times; the result is marked `reviewed: false` with the verifier's last findings in `meta`.
`pipeline="paper"` runs the paper's appendix B instead (segmentation with stand-alone, canonicalised
segments and intent + wording for scripts → criteria → verification → modification, coverage first →
gradual → dependency; temperature 0.2, hotter on each re-ask; only a verified-complete set goes on),
keeping each stage's output in `meta["pipeline"]["stages"]`.

**Judge.** One verdict per dimension over the whole trace, with the same meaning from the rule
checker and the LLM judge:

- base action: yes = done as required; no = attempted but done wrong; unknown = not attempted
  (no evidence either way);
- branch: unknown = its precondition never held (or no agent message came after it); yes = done
  as required after it held; no = done wrong, or not done although it held (the agent's later
  messages are the evidence that it was skipped);
- always-on rule: yes = kept in every agent message; no = broken at least once; unknown = no agent
  message to judge.

`RuleDimensionChecker` applies the files' rules. `LLMDimensionJudge` asks a model (one call, bounded
re-asks, unparseable items → unknown) what happened to each item — yes, no (done wrong), skipped
(applied but never attempted) or unknown — and maps "skipped" by kind here, so a skipped base
action is unknown (it does not raise Coverage) and a skipped branch is no.

**Metrics** (`gate`): Coverage = attempted base actions / (attempted + unknown), attempted = a
yes or no verdict. Achievement = branch yes / (yes + no), counting a branch only where its base
action was attempted (else it is *gated out*); a free-standing branch counts whenever it is
known; known branches that exclude each other (a judge contradiction: they cannot all have
applied) count once per connected cluster, with the worst label, reported in
`exclusive_conflicts`. Achievement is `n/a` (NaN; `format_rate` prints "n/a") when no branch was
exercised, never 0. Compliance = always-on rules kept / (kept + broken), `n/a` when there is none.

Over many calls (`summarize`) each rate is reported twice, under its own name: `coverage`,
`achievement`, `compliance` (and `score`) are means over calls, each call weighing the same, and
they are the headline (the results table's first rows, the env's reward); `coverage_pooled`,
`achievement_pooled`, `compliance_pooled` are ratios of sums over all calls, the corpus-level
form of the same ratios, where each base action, branch or rule weighs the same. They differ
when calls exercise different numbers of branches (a call with one failed branch weighs as much
as a call with five passed ones in `achievement`, a fifth as much in `achievement_pooled`); with
one SOP every call has the same base actions, so the two Coverage figures are equal.

Episodes played with `metrics="paper"` (env=flexbench_paper) are summed up as the paper does
instead (`paper_metrics`): `Coverage` and `Achievement` are its equations (6) and (7), sums over
every call, with the always-on rules among Achievement's requirements; the per-call means follow
as `coverage_per_call` and `achievement_per_call`, then `compliance` and `score`.

The episode score (`FlexScores.score`, the env's end-of-episode reward) is
`mean(Coverage, Achievement) × Compliance` (Coverage alone where Achievement is n/a, factor 1
where Compliance is n/a). Compliance multiplies rather than averages so that keeping the rules can
never make up for doing nothing: a call that says goodbye at once keeps every rule, and an
average would reward that. Breaking every rule scores 0 however complete the call was.

The package is split by stage: `dimensions` (the schema, loading, `fingerprint`), `gating` (verdicts
to Coverage, Achievement, Compliance), `judges` (the rule checker, the LLM judge, the scorer the env uses),
`rubric` (the env's turn and episode rewards, its end rule), `report` (corpus metrics, tables,
heatmaps) and `pipeline` (building dimensions from an SOP with a model); import its public names
from here.
"""

from ifgym.rewards.flexbench.dimensions import (
    ALWAYS,
    DIMENSIONS_DIR,
    DIMENSIONS_SUFFIX,
    KINDS,
    SCHEMA,
    Dimension,
    DimensionRule,
    DimensionSet,
    dimension_names,
    fingerprint,
    load_dimensions,
)
from ifgym.rewards.flexbench.gating import FlexScores, format_rate, gate
from ifgym.rewards.flexbench.judges import (
    DEFAULT_DIMENSION_MODE,
    DIMENSION_MODES,
    FlexBenchScorer,
    LLMDimensionJudge,
    RuleDimensionChecker,
    parse_dimension_labels,
)
from ifgym.rewards.flexbench.pipeline import (
    PAPER_TEMPERATURE,
    PAPER_TEMPERATURE_STEP,
    PIPELINES,
    build_dimensions,
    paper_temperatures,
)
from ifgym.rewards.flexbench.report import (
    DEFINITIONS,
    HEADLINE,
    HEADLINE_METRIC,
    METRICS,
    PAPER_DEFINITIONS,
    PAPER_HEADLINE,
    PAPER_HEADLINE_METRIC,
    FlexRow,
    consistency,
    dimension_table,
    episode_dimensions,
    episode_metrics,
    episode_row,
    episode_scores,
    heatmap_figure,
    heatmap_matrix,
    paper_metrics,
    plot_heatmap,
    short_name,
    summarize,
    summarize_rows,
    write_report,
)
from ifgym.rewards.flexbench.rubric import REWARDS, FlexBenchRubric

__all__ = [
    "ALWAYS",
    "DIMENSIONS_DIR",
    "DIMENSION_MODES",
    "KINDS",
    "SCHEMA",
    "Dimension",
    "DimensionRule",
    "DimensionSet",
    "FlexBenchRubric",
    "FlexBenchScorer",
    "FlexRow",
    "FlexScores",
    "LLMDimensionJudge",
    "RuleDimensionChecker",
    "build_dimensions",
    "consistency",
    "dimension_table",
    "episode_row",
    "episode_scores",
    "fingerprint",
    "format_rate",
    "gate",
    "heatmap_figure",
    "heatmap_matrix",
    "load_dimensions",
    "paper_metrics",
    "plot_heatmap",
    "short_name",
    "summarize",
    "summarize_rows",
    "write_report",
    "DEFAULT_DIMENSION_MODE",
    "DIMENSIONS_SUFFIX",
    "HEADLINE",
    "HEADLINE_METRIC",
    "DEFINITIONS",
    "METRICS",
    "PIPELINES",
    "PAPER_TEMPERATURE",
    "PAPER_TEMPERATURE_STEP",
    "paper_temperatures",
    "PAPER_DEFINITIONS",
    "PAPER_HEADLINE",
    "PAPER_HEADLINE_METRIC",
    "REWARDS",
    "dimension_names",
    "episode_dimensions",
    "episode_metrics",
    "parse_dimension_labels",
]
