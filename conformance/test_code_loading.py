"""The conformance tools run code only from where they were told to (issue 36 item 2): the
fixtures' record readers, the c-example's build script and the adapter aliases are found beside
``--fixtures`` or in ockpt's own checkout, never in the working directory a user stands in."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ockpt.cli import main as ockpt_main
from ockpt.conformance import adapters
from ockpt.conformance.adapters import C_EXAMPLE, find_repo_file, load_adapter
from ockpt.conformance.fixture_cases import record_module
from ockpt.conformance.runner import find_fixtures

from .conftest import FIXTURES, ROOT

PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A working directory laid out like a checkout whose every code file leaves a marker."""
    marker = tmp_path / "MARKER"
    here = tmp_path / "cwd"
    for rel in ("fixtures/_record.py", C_EXAMPLE, "conformance/adapters/orbax_adapter.py"):
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        (here / rel).write_text(PLANTED.format(marker=str(marker)))
    monkeypatch.chdir(here)
    return marker


def test_the_working_directory_is_never_searched(planted):
    """Attack: `ockpt conformance ...` run inside a downloaded directory ran its `_record.py`."""
    assert find_fixtures() == FIXTURES
    assert find_repo_file(C_EXAMPLE) == ROOT / C_EXAMPLE
    assert find_repo_file("fixtures/_record.py") == FIXTURES / "_record.py"
    assert ockpt_main(["conformance", "export", "out", "--group", "bad_corpus"]) == 0
    assert not planted.exists()


def test_an_installed_package_asks_for_fixtures(planted, monkeypatch, capsys):
    """Without a checkout around the package, nothing is taken from the working directory."""
    monkeypatch.setattr(adapters, "_source_checkout", lambda: None)
    assert find_fixtures() is None
    assert ockpt_main(["conformance", "export", "out"]) == 2
    assert "no fixtures directory" in capsys.readouterr().err
    for spec in ("c-example", "orbax"):
        with pytest.raises(FileNotFoundError, match="working directory is not searched"):
            load_adapter(spec)
    assert not planted.exists()


def test_record_readers_load_from_their_own_file(tmp_path, monkeypatch):
    """The fixtures directory is not put on sys.path: a module planted beside `_record.py`
    cannot stand in for another import."""
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    (fixtures / "_record.py").write_text((FIXTURES / "_record.py").read_text())
    (fixtures / "_record_ocdbt.py").write_text("VALUE = 'planted'\n")
    monkeypatch.delitem(sys.modules, "_record_ocdbt", raising=False)
    monkeypatch.delitem(sys.modules, "_record", raising=False)
    module = record_module(fixtures)
    assert Path(module.__file__).resolve() == (fixtures / "_record.py").resolve()
    assert str(fixtures) not in sys.path
    assert record_module(fixtures) is module  # loaded once
    monkeypatch.delitem(sys.modules, "_record")
    assert Path(record_module(FIXTURES).__file__) == (FIXTURES / "_record.py").resolve()
    with pytest.raises(ValueError, match="no record reader"):
        record_module(fixtures, "generate")
