"""Growable flat record buffers: fixed-width numeric rows in one bytearray, read back as zero-copy
numpy columns. The step log (capsim.sim.step_log) and the request and gap logs
(capsim.sim.request_log) write one row per record into them as the run goes.
"""

from __future__ import annotations

import struct

import numpy as np


class Rows:
    """Fixed-width numeric rows kept as one flat buffer (one C call per row, one zero-copy matrix
    at the end). Integer buffers start narrow (int32) and widen to int64 the first time a value
    needs it, so they cost half as much while every value stays exact."""

    # PERF: a row is packed by a precompiled struct (array.extend parses each value as an argument).

    _WIDER = {"h": "i", "i": "q"}

    def __init__(self, width: int, typecode: str = "d") -> None:
        self.width = width
        self.data = bytearray()
        self._set_type(typecode)

    def _set_type(self, typecode: str) -> None:
        self.typecode = typecode
        packer = struct.Struct(f"={self.width}{typecode}")  # native order, standard sizes (numpy's)
        self.pack, self.row_bytes = packer.pack, packer.size

    def __len__(self) -> int:
        return len(self.data) // self.row_bytes

    def add(self, values) -> None:
        try:
            self.data += self.pack(*values)
        except struct.error:
            self.widen_for(values)

    def widen_for(self, values) -> None:
        """A value of this row does not fit the type: widen the buffer, then add the row."""
        if self.typecode not in self._WIDER:
            raise OverflowError(f"a value of {tuple(values)} does not fit a '{self.typecode}' record")
        old = np.frombuffer(self.data, dtype=self.typecode)
        self._set_type(self._WIDER[self.typecode])
        self.data = bytearray(old.astype(self.typecode).tobytes())
        self.add(values)

    def matrix(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=self.typecode).reshape(-1, self.width)


class Records:
    """Rows of named numeric fields: the float ones in a float64 buffer, the rest in an integer
    one (Rows: int32 until a value needs int64)."""

    def __init__(self, fields: tuple[str, ...], floats: tuple[str, ...]) -> None:
        self.fields = fields
        self._float_names = tuple(f for f in fields if f in floats)
        self._int_names = tuple(f for f in fields if f not in floats)
        self._f = Rows(len(self._float_names), "d")
        self._i = Rows(len(self._int_names), "i")

    def __len__(self) -> int:
        return len(self._i) if self._int_names else len(self._f)

    def add(self, floats: tuple, ints: tuple) -> None:
        """One row: its float fields, then the others, each in field order."""
        self._f.data += self._f.pack(*floats)  # float64 takes any float: no widening to handle
        self._i.add(ints)

    def columns(self) -> dict[str, np.ndarray]:
        """Each field's column (views into the buffers: read them once the rows are all in)."""
        f, i = self._f.matrix(), self._i.matrix()
        out = {name: f[:, j] for j, name in enumerate(self._float_names)}
        out.update({name: i[:, j] for j, name in enumerate(self._int_names)})
        return {name: out[name] for name in self.fields}
