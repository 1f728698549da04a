"""What people read: the console result and verdict blocks, catalogue listings, the cost model's
working (--explain), planning tables, and figures (matplotlib, the only package that draws).

May import: capsim.planning, capsim.validation, capsim.reference and everything below them."""
