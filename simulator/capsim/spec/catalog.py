"""The built-in catalogues: GPUs (hardware_profiles/*.yaml, shipped in the package) and models
(capsim/data/models.yaml). Lookups accept aliases and suggest the closest names on a miss."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from capsim.spec.config import HardwareProfile, ModelSpec, load_yaml_as, read_yaml, validate
from capsim.errors import CapsimError, did_you_mean, quote

T = TypeVar("T", bound=BaseModel)


def _profile_files() -> list[Path]:
    root = resources.files("capsim.hardware_profiles")
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml"))


@cache
def hardware_catalog() -> dict[str, HardwareProfile]:
    """Every shipped profile by name (calibrated profiles are named '<gpu>.calibrated')."""
    profiles = {}
    for path in _profile_files():
        profile = load_yaml_as(HardwareProfile, path)
        expected = path.name.removesuffix(".yaml")
        if profile.name != expected:
            raise CapsimError(f"{path}: field 'name' is {profile.name!r} but the file name says {expected!r}.")
        profiles[profile.name] = profile
    return profiles


@cache
def model_catalog() -> dict[str, ModelSpec]:
    return data_catalog("models.yaml", ModelSpec, "model")


def data_catalog(file_name: str, cls: type[T], what: str) -> dict[str, T]:
    """A list of named entries shipped in spec/data, each validated as `cls`, by name."""
    path = Path(str(resources.files("capsim.spec.data").joinpath(file_name)))
    entries = read_yaml(path)
    if not isinstance(entries, list):
        raise CapsimError(f"{path}: expected a list of {what}s.")
    out = {}
    for i, entry in enumerate(entries):
        name = entry.get("name", f"[{i}]") if isinstance(entry, dict) else f"[{i}]"
        spec = validate(cls, entry, f"{path} ({what} {name})")
        out[getattr(spec, "name")] = spec
    return out


def _suggest(name: str, table: dict[str, str]) -> str:
    """Did-you-mean over names and aliases, reported as canonical names without repeats."""
    hint = did_you_mean(name, table)
    if not hint:
        return ""
    close = hint.removeprefix(" Did you mean: ").removesuffix("?").split(", ")
    names = list(dict.fromkeys(table[c] for c in close))
    return f" Did you mean: {', '.join(names)}?"


def _aliases(items: dict) -> dict[str, str]:
    table = {}
    for name, item in items.items():
        table[name.lower()] = name
        for alias in item.aliases:
            table[alias.lower()] = name
    return table


def load_hardware(name_or_path: str | Path) -> HardwareProfile:
    """A GPU by catalogue name or alias ('4090', 'h100', 'h200.calibrated'), or a profile YAML path."""
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or _is_file(text):
        return load_yaml_as(HardwareProfile, Path(text))
    catalog = hardware_catalog()
    key = _aliases(catalog).get(text.lower())
    if key is None:
        raise CapsimError(
            f"unknown GPU {quote(text)}.{_suggest(text, _aliases(catalog))} "
            f"Known GPUs: {', '.join(sorted(catalog))} (see `capsim gpus`), or give a profile YAML path."
        )
    return catalog[key]


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long to be a path, a NUL byte
        return False


def load_model(name: str | Path) -> ModelSpec:
    """A model by catalogue name or alias, or a local Hugging Face config.json path (any name
    ending in .json: capsim.spec.hf_config)."""
    if str(name).endswith(".json"):
        from capsim.spec.hf_config import model_from_hf_config

        return model_from_hf_config(Path(name))
    catalog = model_catalog()
    key = _aliases(catalog).get(str(name).lower())
    if key is None:
        raise CapsimError(
            f"unknown model {quote(name)}.{_suggest(name, _aliases(catalog))} "
            f"Known models: {', '.join(sorted(catalog))} (see `capsim models`), "
            "or define one inline in the workload's 'model' block."
        )
    return catalog[key]
