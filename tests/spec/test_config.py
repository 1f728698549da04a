"""YAML reading and error reporting: file, line, field, what is allowed."""

import pytest
from capsim.spec.config import HardwareProfile, load_yaml_as, read_yaml
from capsim.errors import CapsimError
from capsim.workload.schema import WorkloadConfig


def test_yaml_syntax_error_names_file_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model: llama\narrivals: {kind: poisson\nseed: 1\n")
    with pytest.raises(CapsimError) as exc:
        read_yaml(path)
    msg = str(exc.value)
    assert str(path) in msg and "not valid YAML at line" in msg


def test_missing_file():
    with pytest.raises(CapsimError, match="cannot read the file"):
        read_yaml("/nonexistent/workload.yaml")


def test_top_level_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(CapsimError, match="expected a mapping"):
        load_yaml_as(WorkloadConfig, path)


def test_several_problems_one_paragraph_each(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("name: x\nmemory_bytes: lots\npeak_flops: {fp16: 1.0e+12}\nsources: {}\nwheels: 4\n")
    with pytest.raises(CapsimError) as exc:
        load_yaml_as(HardwareProfile, path)
    lines = str(exc.value).split("\n")
    assert len(lines) == 4 and all(line.startswith(f"{path}: field '") for line in lines)
    assert "field 'memory_bytes'" in lines[0] and "field 'wheels': unknown key" in lines[3]
    assert f"{path}: field 'interconnect': required field is missing." in lines


def test_a_flood_of_problems_is_cut_to_a_count(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("name: x\nmemory_bytes: 1\n" + "".join(f"junk{i}: 1\n" for i in range(30)))
    with pytest.raises(CapsimError) as exc:
        load_yaml_as(HardwareProfile, path)
    lines = str(exc.value).split("\n")
    assert len(lines) == 21 and lines[-1].endswith("and 14 more problem(s).")


def test_frozen_config_objects(tmp_path, round_gpu):
    with pytest.raises(Exception):
        round_gpu.memory_bytes = 1
