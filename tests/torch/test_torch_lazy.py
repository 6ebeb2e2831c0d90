"""The names of ockpt/torch/__init__.py imported on first use (PEP 562): each from its module,
kept once imported, an unknown one an `AttributeError`, and `dir` listing them all before."""

from __future__ import annotations

import pytest

import ockpt.torch

# --- torch/__init__.py: the names imported on first use (__getattr__, __dir__) ---


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("load_state_dict", "ockpt.torch.state_dict"),
        ("OrbaxReader", "ockpt.torch.dcp_reader"),
        ("OrbaxWriter", "ockpt.torch.dcp_writer"),
    ],
)
def test_each_name_is_imported_from_its_module_on_first_use(monkeypatch, name, module) -> None:
    pytest.importorskip("torch")
    import importlib

    monkeypatch.delitem(vars(ockpt.torch), name, raising=False)
    value = getattr(ockpt.torch, name)
    assert value is getattr(importlib.import_module(module), name)
    assert vars(ockpt.torch)[name] is value  # kept: the next access is a plain lookup


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError) as e:
        _ = ockpt.torch.load_pytree
    assert str(e.value) == "module 'ockpt.torch' has no attribute 'load_pytree'"


def test_dir_lists_the_public_names_before_they_are_imported(monkeypatch) -> None:
    for name in ockpt.torch.__all__:
        monkeypatch.delitem(vars(ockpt.torch), name, raising=False)
    names = dir(ockpt.torch)
    assert names == sorted(names)
    assert {"OrbaxReader", "OrbaxWriter", "load_state_dict", "__all__"} <= set(names)
    assert set(vars(ockpt.torch)) <= set(names)
