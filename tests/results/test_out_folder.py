"""Output folders: written whole or not at all, replaced only when they hold the same command's
output, never mixed, never holding a user's file that gets deleted."""

from __future__ import annotations

import json

import pytest
from capsim.errors import CapsimError
from capsim.results.out_folder import MANIFEST, Outputs, OutputFolder, kind_of
from helpers import run_main


def _write(folder, kind, names=("a.csv", "b.json"), fail=False):
    out = OutputFolder(folder, kind)
    with out.writing() as tmp:
        for name in names:
            (tmp / name).write_text(name)
        if fail:
            raise KeyboardInterrupt
    return out


def test_a_folder_appears_whole_with_its_manifest_written_last(tmp_path):
    _write(tmp_path / "d", "run", ("summary.json", "requests.csv"))
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [MANIFEST, "requests.csv", "summary.json"]
    assert json.loads((tmp_path / "d" / MANIFEST).read_text()) == {
        "written_by": "capsim", "kind": "run", "files": ["requests.csv", "summary.json"]}
    assert [p.name for p in tmp_path.iterdir()] == ["d"]  # no partial folder left beside it


def test_an_interrupted_write_leaves_nothing_and_keeps_the_earlier_output(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _write(tmp_path / "new", "sweep", fail=True)
    assert list(tmp_path.iterdir()) == []
    _write(tmp_path / "d", "sweep", ("sweep.csv",))
    with pytest.raises(KeyboardInterrupt):
        _write(tmp_path / "d", "sweep", ("other.csv",), fail=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert (tmp_path / "d" / "sweep.csv").read_text() == "sweep.csv"


def test_the_same_commands_output_is_replaced_whole(tmp_path):
    _write(tmp_path / "d", "run", ("summary.json", "steps.csv", "seeds.csv"))
    _write(tmp_path / "d", "run", ("summary.json",))
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [MANIFEST, "summary.json"]  # no stale seeds.csv


@pytest.mark.parametrize("existing, fragment", [
    ({"sweep.json": "{}", "sweep.csv": ""}, "the output of `capsim sweep`"),
    ({"notes.txt": "mine"}, "files capsim did not write ('notes.txt')"),
    ({"summary.json": "{}", "notes.txt": "mine"}, "files capsim did not write"),
])
def test_a_folder_of_anything_else_is_refused_before_any_work(tmp_path, existing, fragment):
    folder = tmp_path / "d"
    folder.mkdir()
    for name, text in existing.items():
        (folder / name).write_text(text)
    with pytest.raises(CapsimError, match="never mixes outputs") as exc:
        OutputFolder(folder, "run")
    assert fragment in str(exc.value)
    assert sorted(p.name for p in folder.iterdir()) == sorted(existing)


def test_a_file_added_to_an_output_makes_it_someone_elses(tmp_path):
    _write(tmp_path / "d", "run", ("summary.json",))
    (tmp_path / "d" / "my-notes.md").write_text("keep me")
    with pytest.raises(CapsimError, match="did not write"):
        OutputFolder(tmp_path / "d", "run")


def test_outputs_written_before_manifests_are_recognised_by_their_names(tmp_path):
    folder = tmp_path / "old"
    (folder / "plots").mkdir(parents=True)
    for name in ("summary.json", "requests.csv", "steps.csv", "latency_cdf.png", "plots/kv_memory.svg"):
        (folder / name).write_text("")
    assert kind_of(folder) == "run"
    (folder / "sweep.json").write_text("")
    assert kind_of(folder) is None


def test_plots_inside_a_run_folder_go_with_it(tmp_path):
    _write(tmp_path / "d", "run", ("summary.json",))
    _write(tmp_path / "d" / "plots", "plots", ("latency_cdf.png",))
    assert kind_of(tmp_path / "d") == "run"
    _write(tmp_path / "d", "run", ("summary.json",))
    assert not (tmp_path / "d" / "plots").exists()


def test_figures_share_the_out_folder_when_plots_names_it(tmp_path):
    outputs = Outputs("sweep", tmp_path / "d", tmp_path / "d")
    paths = outputs.save(lambda f: [_touch(f / "sweep.csv")], lambda f: [_touch(f / "latency.png")])
    assert paths == [tmp_path / "d" / "sweep.csv", tmp_path / "d" / "latency.png"]
    assert kind_of(tmp_path / "d") == "sweep"


def _touch(path):
    path.write_text("")
    return path


def test_a_file_where_the_folder_should_be_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(CapsimError, match="exists and is not a folder"):
        OutputFolder(tmp_path / "f", "run")


def test_the_cli_refuses_another_commands_folder_before_simulating_and_replaces_its_own(tmp_path):
    out = tmp_path / "out"
    compare = ["compare", "workloads/chat.yaml", "--requests", "10", "--workers", "1", "--out", out]
    assert run_main(*compare, "--kv-cache", "fp16", "--kv-cache", "fp8")[0] == 0
    code, _, err = run_main("run", "workloads/bench-1m.yaml", "--out", out)  # a million requests: refused at once
    assert code == 2 and "holds the output of `capsim compare`" in err
    assert run_main(*compare, "--kv-cache", "fp8")[0] == 0
    assert (out / "compare.csv").read_text().count("\n") == 2  # one combination now, not the earlier two
    code, _, err = run_main("plot", out, "--out", out)  # would replace the data it draws from
    assert code == 2 and "holds the output of `capsim compare`" in err


def test_ctrl_c_while_a_run_writes_its_files_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    import capsim.results.table_files

    def interrupted(parts, fh, names):
        fh.write("partial,row\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(capsim.results.table_files, "write_parts", interrupted)  # the tables come after summary.json
    code, _, err = run_main("run", "workloads/chat.yaml", "--requests", "20", "--out", tmp_path / "run")
    assert code == 130 and err.strip() == "interrupted"
    assert list(tmp_path.iterdir()) == []


def test_measurements_are_kept_beside_the_folder_when_asked_and_nothing_when_there_are_none(tmp_path):
    out = OutputFolder(tmp_path / "calib", "calibrate")
    with pytest.raises(KeyboardInterrupt), out.writing(keep_partial=True) as tmp:
        (tmp / "gpu.calibrated.jsonl").write_text('{"point": 1}\n')
        raise KeyboardInterrupt
    kept = list(tmp_path.iterdir())
    assert len(kept) == 1 and kept[0].name.startswith(".calib.partial-")  # hidden: not a finished output
    assert (kept[0] / "gpu.calibrated.jsonl").read_text() == '{"point": 1}\n'
    with pytest.raises(KeyboardInterrupt), OutputFolder(tmp_path / "other", "calibrate").writing(keep_partial=True):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == kept


def test_a_place_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    (tmp_path / "file").write_text("")
    code, out, err = run_main("run", "workloads/bench-1m.yaml", "--out", tmp_path / "file" / "run")
    assert code == 2 and out == "" and "cannot write there" in err  # at once: not after a million requests
