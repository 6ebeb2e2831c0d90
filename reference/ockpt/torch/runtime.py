"""PyTorch itself, imported on first use: an optional dependency (the ``torch`` extra), needed by
`ockpt.torch` and by the ``.pt`` converter."""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedError

__all__ = ["import_torch"]


def import_torch(purpose: str = "ockpt.torch") -> Any:
    """The torch module, or `UnsupportedError` saying how to install it for `purpose`."""
    try:
        import torch
    except ImportError:
        raise UnsupportedError(
            f"{purpose} needs PyTorch: pip install torch (or 'ockpt[torch]')"
        ) from None
    return torch
