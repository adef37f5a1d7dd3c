"""StructFlow's scoring, one module per part.

`judge` (`ChecklistJudge`: the turn's checklist items in one model call, or P(yes) per item, and the
forgiving reader of its answers), `scorer` (`StructFlowScorer`: rule-checkable items by a rule, the
rest by the judge) and `metrics` (StructFlowBench's CSR, ISR, WCSR, DRFR and breakdowns over episodes,
`summarize`, and over its own evaluation files, `score_file`). Import each name from its module.
"""
