"""EvolIF's scoring, one module per part.

`scorer` (a turn's live constraints: rules, then one judge call), `judge` (the LLM judge of the
judged groups), `evaluator` (EvolIF's own evaluator's verdicts, `semantics="evolif"`) and `metrics`
(CSR, ISR, EDR, REC, STA, pass rates, survival). Import the public names from `ifgym.rewards`
(`EvolIFScorer`, `EvolIFJudge`, `evolif_check`, `summarize`).
"""
