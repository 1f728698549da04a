"""What a whole-forward-pass run measures: the model's layer shapes and the steps of the grid.

The model comes from the catalogue (`llama-3.1-8b`) or a model YAML file with the catalogue's
fields. With pydantic present it is validated as a `capsim.spec.config.ModelSpec`; on the GPU machine's
image (no pydantic) the YAML is read as plain data and only the fields the forward pass uses are
checked. Only dense softmax-attention models with a gated MLP (the Llama family) are built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from capsim.errors import CapsimError

# The ModelSpec fields the torch model is built from; a raw row carries them so that the
# comparison can rebuild the spec without the catalogue.
SPEC_FIELDS = ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
               "mlp", "tie_embeddings", "max_context_tokens")
# Fields that make an architecture something else than a dense Llama-style decoder.
_UNSUPPORTED = ("layers", "sliding_window_tokens", "linear_attention", "moe", "mla")


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder's shapes: the `ModelSpec` fields the forward pass needs, plus the layer slice."""

    name: str  # catalogue name, or the YAML file's `name`
    num_layers: int  # the model's full depth (from the spec)
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    mlp: str  # always "gated" here
    tie_embeddings: bool
    max_context_tokens: int

    def spec_fields(self) -> dict:
        """The fields a raw row stores (`model_spec`), enough to rebuild a ModelSpec."""
        d = asdict(self)
        return {k: d[k] for k in SPEC_FIELDS}


def _raw_spec(model: str) -> tuple[dict, str]:
    """(fields, where) of a catalogue name or YAML path, without pydantic."""
    import yaml

    path = Path(model)
    if model.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise CapsimError(f"--forward {model}: no such model file.")
        return yaml.safe_load(path.read_text()), str(path)
    where = "capsim/data/models.yaml"
    for entry in yaml.safe_load(resources.files("capsim.spec.data").joinpath("models.yaml").read_text()):
        names = [entry.get("name", ""), *entry.get("aliases", [])]
        if model.lower() in (str(n).lower() for n in names):
            return entry, f"{where} (model {entry['name']})"
    raise CapsimError(f"--forward {model!r}: not a catalogue model (see `capsim models`) or a model YAML file.")


def _validated_spec(model: str) -> tuple[dict, str] | None:
    """(fields, where) through capsim's own validation, or None where pydantic is missing."""
    try:
        from capsim.spec.catalog import load_model
        from capsim.spec.config import ModelSpec, load_yaml_as
    except ImportError:
        return None
    path = Path(model)
    if model.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise CapsimError(f"--forward {model}: no such model file.")
        return load_yaml_as(ModelSpec, path).model_dump(mode="json"), str(path)
    spec = load_model(model)
    return spec.model_dump(mode="json"), f"capsim/data/models.yaml (model {spec.name})"


def load_shape(model: str) -> ModelShape:
    """The shapes of `model` (catalogue name or YAML path); a clear error for what cannot be built."""
    found = _validated_spec(model)
    data, where = found if found is not None else _raw_spec(model)
    if not isinstance(data, dict):
        raise CapsimError(f"{where}: expected a mapping of model fields.")
    for key in _UNSUPPORTED:
        if data.get(key):
            raise CapsimError(f"{where}: field {key!r} is set; the forward pass builds dense softmax-attention "
                              "models with a gated MLP only (Llama-style: no MoE, MLA, sliding or linear layers).")
    if data.get("mlp", "gated") != "gated" or data.get("attention_output_gate"):
        raise CapsimError(f"{where}: field 'mlp' must be 'gated' and 'attention_output_gate' false for the "
                          "forward pass (Llama-style decoders only).")
    missing = [k for k in ("name", "num_layers", *SPEC_FIELDS[:6], "max_context_tokens") if k not in data]
    if missing:
        raise CapsimError(f"{where}: missing field(s) {', '.join(missing)}.")
    if data["num_heads"] % data["num_kv_heads"]:
        raise CapsimError(f"{where}: num_heads must be a multiple of num_kv_heads.")
    return ModelShape(name=str(data["name"]), num_layers=int(data["num_layers"]), mlp="gated",
                      tie_embeddings=bool(data.get("tie_embeddings", False)),
                      **{k: int(data[k]) for k in SPEC_FIELDS if k not in ("mlp", "tie_embeddings")})


@dataclass(frozen=True)
class StepShape:
    """One forward pass: decoding sequences and prompt chunks (the order the step lays tokens out)."""

    kind: str  # "decode", "prefill" or "mixed"
    decode_contexts: tuple[int, ...]  # per decoding sequence: positions it attends, its new token included
    prefill: tuple[tuple[int, int], ...]  # per prompt chunk: (tokens already cached, new tokens); each chunk
    # is its prompt's last, so each yields one logit

    @property
    def num_decodes(self) -> int:
        return len(self.decode_contexts)

    @property
    def chunk_tokens(self) -> int:
        """New prompt tokens in the step."""
        return sum(n for _, n in self.prefill)

    @property
    def num_tokens(self) -> int:
        return self.num_decodes + self.chunk_tokens

    @property
    def num_seqs(self) -> int:
        return self.num_decodes + len(self.prefill)

    @property
    def logit_tokens(self) -> int:
        """Rows the LM head runs on: every decoding sequence and every finished prompt."""
        return self.num_seqs

    def seq_lengths(self) -> list[int]:
        """Cache positions each sequence holds after the step (decodes first, then chunks)."""
        return list(self.decode_contexts) + [c0 + n for c0, n in self.prefill]

    def kv_tokens(self) -> int:
        return sum(self.seq_lengths())

    def fields(self) -> dict:
        """The step's part of a raw row."""
        return {"kind": self.kind, "batch": self.num_seqs, "decode_contexts": list(self.decode_contexts),
                "prefill": [list(p) for p in self.prefill], "chunk_tokens": self.chunk_tokens,
                "num_tokens": self.num_tokens, "logit_tokens": self.logit_tokens}

    @staticmethod
    def from_row(row: dict) -> StepShape:
        return StepShape(row["kind"], tuple(row["decode_contexts"]), tuple((int(a), int(b)) for a, b in row["prefill"]))
