"""The flat record buffers: integer rows widen without losing a value, records keep their fields apart."""

import numpy as np
import pytest
from capsim.sim.buffers import Records, Rows


def test_integer_rows_widen_when_a_value_needs_it_and_keep_every_value():
    rows = Rows(2, "h")
    rows.add((1, -2))
    rows.add((40_000, 3))  # past int16: the buffer becomes int32, the half-written row is dropped
    rows.add((5, 2**40))  # past int32: int64
    assert rows.typecode == "q" and rows.matrix().tolist() == [[1, -2], [40_000, 3], [5, 2**40]]
    floats = Rows(1, "d")
    with pytest.raises(OverflowError):
        floats.add((10**400,))


def test_records_keep_floats_and_integers_apart_in_field_order():
    rec = Records(("id", "t_s", "n"), floats=("t_s",))
    rec.add((0.5,), (1, 3))
    rec.add((1.25,), (2, 2**35))  # n needs int64: the integer buffer widens
    cols = rec.columns()
    assert list(cols) == ["id", "t_s", "n"] and len(rec) == 2
    assert cols["t_s"].dtype == np.float64 and cols["t_s"].tolist() == [0.5, 1.25]
    assert cols["n"].dtype == np.int64 and cols["n"].tolist() == [3, 2**35] and cols["id"].tolist() == [1, 2]
