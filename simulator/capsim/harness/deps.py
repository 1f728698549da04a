"""Lazy imports of the optional `calibrate` extra (torch, triton).

capsim's core install never pulls torch: every harness function that needs it calls `require_torch`
inside the function, which turns a missing install into a CapsimError that says what to install.
"""

from __future__ import annotations

import os
from types import ModuleType

from capsim.errors import CapsimError

INSTALL_HINT = "pip install '.[calibrate]'"


def require_torch() -> ModuleType:
    """Import and return torch, or raise a CapsimError naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise CapsimError(
            f"the calibration harness needs PyTorch, which is not installed; run `{INSTALL_HINT}` "
            "(or install a CUDA build of torch for your GPU first)."
        ) from None
    return torch


def require_triton() -> ModuleType:
    """Import and return triton, or raise a CapsimError naming the extra to install."""
    require_torch()
    try:
        import triton
    except ImportError:
        raise CapsimError(
            f"the 'triton' backend needs Triton, which is not installed; run `{INSTALL_HINT}`, "
            "or choose --backend sdpa."
        ) from None
    return triton


def triton_interpreted() -> bool:
    """True when Triton runs kernels on CPU through its interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def versions() -> dict[str, str | None]:
    """Installed torch and triton versions (None for what is missing); used for provenance."""
    out: dict[str, str | None] = {"torch": None, "triton": None}
    try:
        import torch

        out["torch"] = str(torch.__version__)
    except ImportError:
        return out
    try:
        import triton

        out["triton"] = str(triton.__version__)
    except ImportError:
        pass
    return out
