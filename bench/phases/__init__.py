"""The phases of `make bench` (bench/suite.py orders them), one module each: `run(suite)` takes the run's
`context.Suite` (its stores, servers, campaigns and loads) and puts its figures in `suite.report`. Beside them:
`context` (the run), `loadgen` (the fixed-rate client, also used by bench/sale.py and bench/ab.py) and `report`
(the table, the JSON, the Markdown and the chart).
"""
