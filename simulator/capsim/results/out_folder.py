"""Output folders written whole or not at all: what every command's `--out DIR` (and `--plots
DIR`) writes through.

The files go into a new hidden folder beside DIR (`.DIR.partial-XXXX`); a manifest
(`capsim-output.json`: which command wrote the folder and which files it holds) is written last,
and only then does the folder move into place. So an interrupted command never leaves a DIR that
looks complete: at most a hidden partial folder, removed on the way out when Python can still
clean up. An existing DIR is replaced whole when it is an output of the same command (its
manifest says so and it holds nothing else, or, written before manifests existed, it holds only
that command's file names); a folder holding anything else (another command's output, files
capsim did not write) is refused before any work starts, so outputs are never mixed and no
user file is ever deleted.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsim.errors import CapsimError, quote, short_path

MANIFEST = "capsim-output.json"
_FIGURE = re.compile(r".+\.(png|svg)$")
_CALIBRATION = re.compile(r".+\.calibrated\.(yaml|jsonl|csv)$")
# Each command's file names (figures besides), to recognise a folder written before manifests;
# the first name marks the kind.
_LEGACY = {
    "run": ("summary.json", "requests.csv", "steps.csv", "seeds.csv", "confidence.csv"),
    "sweep": ("sweep.json", "sweep.csv", "runs.csv"),
    "compare": ("compare.json", "compare.csv", "runs.csv"),
    "capacity": ("capacity.json", "capacity.csv", "capacity_points.csv", "runs.csv"),
    "validate": ("validation.json", "validation.csv"),
}
KINDS = (*_LEGACY, "calibrate", "plan", "plots")


class OutputFolder:
    """`path`, to be written by the command `kind` (run, sweep, compare, capacity, validate,
    calibrate, plan, plots). Made before the work starts, so that a folder that cannot be replaced is
    refused at once; `writing()` then gives the folder to write into."""

    def __init__(self, path: Path | str, kind: str, option: str = "--out") -> None:
        assert kind in KINDS, kind
        self.path, self.kind, self.option = Path(path).absolute(), kind, option
        self.check()
        self._try_writing()

    def _try_writing(self) -> None:
        check_writable(self.path, self.option, "a folder that can be created and written")

    def check(self) -> None:
        """Refuse a path that is a file, or a folder holding anything but this command's output."""
        p = self.path
        if p.exists() and not p.is_dir():
            raise CapsimError(f"{self.option} {short_path(p)}: exists and is not a folder; give a folder to write into.")
        entries = sorted(os.listdir(p)) if p.is_dir() else []
        if not entries:
            return
        found = kind_of(p)
        if found == self.kind:
            return
        what = (_what(found) if found else
                f"files capsim did not write ({', '.join(quote(e, 40) for e in entries[:3])}"
                f"{', ...' if len(entries) > 3 else ''})")
        raise CapsimError(f"{self.option} {short_path(p)}: the folder holds {what}; capsim replaces a folder only when it holds "
                          f"{_what(self.kind, earlier=True)}, and never mixes outputs. Give a new or empty folder, or "
                          "remove this one first.")

    @contextmanager
    def writing(self, keep_partial: bool = False) -> Iterator[Path]:
        """Yield a fresh folder beside `path` to write into; when the block ends normally, write
        the manifest and put the folder in place of `path`. On any exception (Ctrl-C included)
        the partial folder is removed, or kept when `keep_partial` and something was written into
        it (measurements worth keeping)."""
        self.check()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.parent / f".{self.path.name}.partial-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            yield tmp
            files = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*") if f.is_file())
            (tmp / MANIFEST).write_text(json.dumps({"written_by": "capsim", "kind": self.kind, "files": files},
                                                   indent=2) + "\n")
            self._put_in_place(tmp)
        except BaseException:
            if not (keep_partial and any(f.stat().st_size for f in tmp.rglob("*") if f.is_file())):
                shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _put_in_place(self, tmp: Path) -> None:
        old = None
        if self.path.exists():
            self.check()  # still ours: nothing was added to it meanwhile
            old = self.path.parent / f".{self.path.name}.old-{secrets.token_hex(4)}"
            os.rename(self.path, old)
        os.rename(tmp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def final(self, paths: list[Path], tmp: Path) -> list[Path]:
        """Where files written into `tmp` are once the folder is in place."""
        return [self.path / Path(p).relative_to(tmp) for p in paths]


def check_writable(path: Path, option: str, wanted: str) -> None:
    """Make and remove a folder in the nearest existing folder above `path` now (creating nothing
    else), so that a place that cannot be written is refused before the work rather than after
    it; `wanted` says what to give instead."""
    parent = Path(path).absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        probe = parent / f".capsim-probe-{secrets.token_hex(4)}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise CapsimError(f"{option} {short_path(path)}: cannot write there ({exc.strerror or exc}); give "
                          f"{wanted}.") from None


def _what(kind: str, earlier: bool = False) -> str:
    if kind == "plots":
        return f"{'earlier ' if earlier else ''}figures capsim drew"
    return f"the output of {'an earlier ' if earlier else ''}`capsim {kind}`"


def kind_of(folder: Path) -> str | None:
    """The command whose output `folder` holds and nothing else, or None."""
    entries = set(os.listdir(folder))
    if not entries:
        return None
    manifest = folder / MANIFEST
    if MANIFEST in entries:
        try:
            data = json.loads(manifest.read_text()[:1_000_000])
            kind, files = data["kind"], set(data["files"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        tops = {f.split("/")[0] for f in files} | {MANIFEST}
        extra = entries - tops
        return kind if kind in KINDS and extra <= {"plots"} and _plots_ok(folder, extra) else None
    for kind, names in _LEGACY.items():
        if names[0] in entries and all(e in names or _FIGURE.match(e) for e in entries - {"plots"}) \
                and _plots_ok(folder, entries):
            return kind
    if all(_CALIBRATION.match(e) for e in entries):
        return "calibrate"
    if all(_FIGURE.match(e) for e in entries):
        return "plots"
    return None


def _plots_ok(folder: Path, entries: set[str]) -> bool:
    """A `plots` entry, if any, is a folder of figures capsim drew (`capsim plot` writes there)."""
    plots = folder / "plots"
    return "plots" not in entries or (plots.is_dir() and (not os.listdir(plots) or kind_of(plots) == "plots"))


class Outputs:
    """A command's --out folder and --plots folder, checked when made (before the work); figures
    go into the --out folder when both name the same one."""

    def __init__(self, kind: str, out_dir: Path | None, plots_dir: Path | None, plots_option: str = "--plots") -> None:
        same = out_dir is not None and plots_dir is not None and Path(plots_dir).absolute() == Path(out_dir).absolute()
        self.out = OutputFolder(out_dir, kind) if out_dir is not None else None
        self.plots = OutputFolder(plots_dir, "plots", plots_option) if plots_dir is not None and not same else None
        self.figures_in_out = same

    def save(self, files, figures) -> list[Path]:
        """Write `files(folder)` (and `figures(folder)` when they share it) into the --out folder
        and `figures(folder)` into the --plots folder, each whole; return where the files are."""
        written: list[Path] = []
        if self.out is not None:
            with self.out.writing() as tmp:
                paths = list(files(tmp)) + (list(figures(tmp)) if self.figures_in_out else [])
            written += self.out.final(paths, tmp)
        if self.plots is not None:
            with self.plots.writing() as tmp:
                paths = list(figures(tmp))
            written += self.plots.final(paths, tmp)
        return written
