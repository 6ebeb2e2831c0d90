"""`import_torch` of ockpt/torch/runtime.py: the torch module, or, where torch cannot be imported,
an `UnsupportedError` saying how to install it for the purpose named."""

from __future__ import annotations

import sys

import pytest

from ockpt.errors import UnsupportedError
from ockpt.torch.runtime import import_torch

# --- torch/runtime.py: import_torch ---


def test_import_torch_gives_the_torch_module() -> None:
    torch = pytest.importorskip("torch")
    assert import_torch() is torch
    assert import_torch("the .pt converter") is torch


def test_import_torch_without_torch_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ImportError
    with pytest.raises(UnsupportedError) as e:
        import_torch()
    assert e.value.message == "ockpt.torch needs PyTorch: pip install torch (or 'ockpt[torch]')"
    assert e.value.rule is None and e.value.file is None
    assert e.value.__cause__ is None and e.value.__suppress_context__
    with pytest.raises(UnsupportedError) as e:
        import_torch("the .pt converter")
    assert e.value.message == (
        "the .pt converter needs PyTorch: pip install torch (or 'ockpt[torch]')"
    )
