"""One home for a verdict, below both the run (`--until-decided` makes verdicts as it measures)
and the analysis (`compare`, the answers, the glance, the report read them): what a stored
decision is (record.py, the only way run.json's decisions are written and read), and what a
comparison's two sides are judged on besides their times: whose family an agent is
(families.py), the float32 arithmetic each side ran (arithmetic.py), and where each side's CPU
went (kernel_time.py). import-linter holds the layer (pyproject.toml). The rule that turns an
interval into a verdict is stats/judgement.py's judge(), which compare's fixed-level test and
the until-decided looks both call (in stats/, below this layer, where both of them are)."""
