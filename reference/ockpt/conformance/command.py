"""The command adapter: any executable, in any language, as a reader under the suite.

Spec string (``--impl``)::

    cmd:PROGRAM ARGS...                       # capabilities: DEFAULT_CAPABILITIES
    cmd(path/to/capabilities.json):PROGRAM ARGS...

The template is split like a shell command line (`shlex`, no shell runs it); in every word the
placeholders ``{checkpoint}`` (what to read), ``{out}`` (an empty directory for the output),
``{step}`` and ``{item}`` (what to load inside the checkpoint, empty when the case names
nothing) and ``{kind}`` (``pytree``, or ``ocdbt`` for a bare OCDBT database, only for readers
that declare ``databases``) are replaced. The same values are in the environment as
``OCKPT_CONFORMANCE_CHECKPOINT``, ``_OUT``, ``_STEP``, ``_ITEM`` and ``_KIND``.

The program writes into ``{out}`` either ``result.json`` (``{"format":
"ockpt-conformance-output/1", "leaves": [...]}``, the leaf records of `leaves`, arrays as
``.npy`` files next to it; for ``{kind}`` ``ocdbt``: ``{"format": ..., "keys": [...]}``) or
``error.json`` (``{"rule": "OCDBT-005" | null, "message": "..."}``: a refusal; ``"unsupported":
true`` marks a checkpoint the program does not handle, scored n/a). Anything else (no file, a
non-zero exit status without ``error.json``, a malformed file, running past the time limit) is
a crash. conformance/README.md documents the protocol; `schemas/command-output.schema.json`
is its JSON Schema.

The capabilities file holds ``{"name": ..., "version": ..., "capabilities": {...}}`` (or the
capabilities object alone, see `protocol`); a relative template word that names a file next to
the capabilities file is not resolved: give paths as the program's working directory (the
suite's) sees them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .leaves import OutputError, tree_from_records

__all__ = [
    "OUTPUT_FORMAT",
    "DEFAULT_CAPABILITIES",
    "CommandAdapter",
    "CommandRefusal",
    "CommandFailure",
    "CommandUnsupported",
    "OutputError",
    "parse_spec",
    "output_schema",
    "validate_output",
]

OUTPUT_FORMAT = "ockpt-conformance-output/1"
RESULT_FILE = "result.json"
_PLACEHOLDER = re.compile(r"\{(?:checkpoint|out|step|item|kind)\}")
ERROR_FILE = "error.json"

#: A program that declares nothing is taken to read every layout of every release, without
#: targets or options: what it lacks shows as failures.
DEFAULT_CAPABILITIES: dict[str, Any] = {
    "reads": {
        "layouts": ["item", "v1", "manager"],
        "zarr": [2, 3],
        "ocdbt": [True, False],
        "releases": ["0.3", "0.4", "0.5", "0.10", "0.11", "0.12"],
        "options": [],
        "targets": False,
        "errors": "rules",
    },
    "writes": {},
}


class CommandRefusal(Exception):
    """The program refused the checkpoint (``error.json``). `rule`: the rule id it named."""

    def __init__(self, message: str, rule: str | None) -> None:
        super().__init__(message)
        self.rule = rule


class CommandUnsupported(Exception):
    """The program does not handle this checkpoint (``error.json`` with ``unsupported``)."""


class CommandFailure(Exception):
    """The program crashed, hung or wrote no valid output: never a clean refusal."""


@cache
def output_schema() -> dict[str, Any]:
    """The JSON Schema of ``result.json`` and ``error.json`` (draft 2020-12)."""
    text = (
        resources.files(__package__)
        .joinpath("schemas/command-output.schema.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


def validate_output(doc: Any, what: str) -> None:
    """Check ``result.json`` / ``error.json`` against its definition in the output schema
    (`what`: ``pytree_result``, ``keys_result`` or ``error``); raises `OutputError`."""
    from jsonschema import Draft202012Validator

    schema = {k: v for k, v in output_schema().items() if k != "anyOf"} | {
        "$ref": f"#/$defs/{what}"
    }
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        e = min(errors, key=lambda e: -len(list(e.absolute_path)))
        where = "/".join(map(str, e.absolute_path)) or "<root>"
        raise OutputError(f"{what} does not follow the protocol at {where}: {e.message[:200]}")


def parse_spec(spec: str) -> tuple[str, Path | None]:
    """(template, capabilities file) of a ``cmd:`` / ``cmd(FILE):`` spec string."""
    if spec.startswith("cmd("):
        end = spec.find("):")
        if end < 0:
            raise ValueError(f"{spec!r}: expected cmd(CAPABILITIES.json):TEMPLATE")
        return spec[end + 2 :], Path(spec[4:end])
    if spec.startswith("cmd:"):
        return spec[4:], None
    raise ValueError(f"{spec!r} is not a command adapter (cmd:TEMPLATE)")


class CommandAdapter:
    """Runs a program per read; see the module docstring for the protocol."""

    def __init__(
        self,
        template: str,
        capabilities: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        version: str = "",
        timeout: float = 60.0,
    ) -> None:
        self.argv = shlex.split(template)
        if not self.argv:
            raise ValueError("the command template is empty")
        self.template = template
        caps = json.loads(json.dumps(capabilities or DEFAULT_CAPABILITIES))
        caps.setdefault("writes", {})
        caps.setdefault("reads", {})
        # the protocol passes no target: a command reader never loads into one
        caps["reads"]["targets"] = False
        self.capabilities = caps
        self.name = name or f"cmd:{Path(self.argv[0]).name}"
        self.version = version or template
        self.timeout = timeout

    @classmethod
    def from_spec(cls, spec: str) -> CommandAdapter:
        template, caps_file = parse_spec(spec)
        if caps_file is None:
            return cls(template)
        doc = json.loads(caps_file.read_text(encoding="utf-8"))
        caps = doc.get("capabilities", doc) if "reads" not in doc else doc
        return cls(
            template,
            caps,
            name=doc.get("name"),
            version=str(doc.get("version", "")),
            timeout=float(doc.get("timeout_s", 60.0)),
        )

    # -- the protocol ----------------------------------------------------------------------

    def write(self, case: Any, directory: Path) -> None:
        raise NotImplementedError("a command adapter reads only")

    def _run(
        self, path: Path, out: Path, kind: str, step: int | None, item: str | None
    ) -> dict[str, Any]:
        """Run the program once; the parsed ``result.json`` (raises for anything else)."""
        values = {
            "{checkpoint}": str(path),
            "{out}": str(out),
            "{step}": "" if step is None else str(step),
            "{item}": item or "",
            "{kind}": kind,
        }
        argv = [_PLACEHOLDER.sub(lambda m: values[m.group(0)], word) for word in self.argv]
        env = dict(os.environ)
        for k, v in values.items():
            env[f"OCKPT_CONFORMANCE_{k.strip('{}').upper()}"] = v
        try:
            proc = subprocess.run(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CommandFailure(f"ran past {self.timeout:.0f} s") from None
        except OSError as e:
            raise CommandFailure(f"cannot run {argv[0]}: {e}") from None
        status = proc.returncode
        tail = " / ".join(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:])
        error, result = out / ERROR_FILE, out / RESULT_FILE
        if error.is_file():
            doc = self._json(error)
            validate_output(doc, "error")
            if doc.get("unsupported"):
                raise CommandUnsupported(doc.get("message", ""))
            raise CommandRefusal(doc.get("message", ""), doc.get("rule"))
        if status != 0:
            how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
            raise CommandFailure(f"{how} without {ERROR_FILE}" + (f": {tail}" if tail else ""))
        if not result.is_file():
            raise CommandFailure(
                f"wrote neither {RESULT_FILE} nor {ERROR_FILE}" + (f": {tail}" if tail else "")
            )
        doc = self._json(result)
        validate_output(doc, "pytree_result" if kind == "pytree" else "keys_result")
        return doc

    @staticmethod
    def _json(path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise OutputError(f"{path.name}: {e}") from None

    def read(
        self,
        path: Path,
        target: Any = None,
        *,
        step: int | None = None,
        item: str | None = None,
        partial: bool = False,
        cast: str = "exact",
        pad_or_truncate: bool = False,
    ) -> Any:
        if target is not None or partial or cast != "exact" or pad_or_truncate:
            raise CommandUnsupported("the command protocol passes no target and no load options")
        out = Path(tempfile.mkdtemp(prefix="ockpt-cmd-"))
        try:
            doc = self._run(Path(path), out, "pytree", step, item)
            return tree_from_records(doc["leaves"], out)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def read_database(self, path: Path) -> dict[bytes, dict[str, Any]]:
        """Key -> ``{"value_length": n, "sha256": hex or None}`` of the latest generation."""
        out = Path(tempfile.mkdtemp(prefix="ockpt-cmd-"))
        try:
            doc = self._run(Path(path), out, "ocdbt", None, None)
            keys: dict[bytes, dict[str, Any]] = {}
            for k in doc["keys"]:
                key = bytes.fromhex(k["key_hex"]) if "key_hex" in k else k["key"].encode("utf-8")
                if key in keys:
                    raise OutputError(f"key {key!r} listed twice")
                keys[key] = {"value_length": k.get("value_length"), "sha256": k.get("sha256")}
            return keys
        finally:
            shutil.rmtree(out, ignore_errors=True)
