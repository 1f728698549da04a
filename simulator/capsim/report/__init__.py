"""What people read: the console result and verdict blocks, catalogue listings, the cost model's
working (--explain), planning tables, figures (matplotlib) and the self-contained HTML report
(plotly, an optional extra): the only package that draws.

May import: capsim.planning, capsim.validation, capsim.reference and everything below them."""
