"""Orbax checkpoints in PyTorch (the ``torch`` extra): a flat state dict, and
`torch.distributed.checkpoint` storage that reads and writes Orbax checkpoints.

Importing `ockpt.torch` does not import torch; each name imports it on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dcp_reader import OrbaxReader
    from .dcp_writer import OrbaxWriter
    from .state_dict import load_state_dict

__all__ = ["OrbaxReader", "OrbaxWriter", "load_state_dict"]


def __getattr__(name: str) -> Any:
    """Each public name, imported from its module on first use (PEP 562)."""
    if name == "load_state_dict":
        from . import state_dict as module
    elif name == "OrbaxReader":
        from . import dcp_reader as module
    elif name == "OrbaxWriter":
        from . import dcp_writer as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
