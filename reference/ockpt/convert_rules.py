"""Name and layout rules of a conversion: how a JAX tree's leaves become another stack's tensors.

A flat output (safetensors, a Hugging Face folder, .npz, .pt) names each leaf by its *source
name*: its key path joined with the conversion's separator (``params.layers_0.mlp.kernel``).
Three kinds of rule map it onto, say, a PyTorch model's state_dict without code:

* ``rename`` -- ``(REGEX, REPLACEMENT)`` pairs, applied **all, in order**, each to the result of
  the one before (as a ``sed -e ... -e ...`` script): the name is replaced by
  ``re.sub(REGEX, REPLACEMENT, name)`` (every non-overlapping match; ``\\1`` and ``\\g<name>``
  refer to groups). Anchor a pattern with ``^`` / ``$`` to touch one place only.
* ``transpose`` -- ``PATTERN`` or ``PATTERN=AXES``: a leaf whose source name the pattern
  matches (``re.search``) is stored with its axes permuted. Without AXES a 2-D leaf is
  transposed (a flax ``Dense`` kernel ``(in, out)`` becomes a torch ``Linear`` weight
  ``(out, in)``) and a leaf of any other rank is an error, since reversing the axes of, say, a
  4-D convolution kernel is rarely the layout wanted; AXES (``3,2,0,1``) is the permutation
  (``numpy.transpose``'s ``axes``: output axis i is source axis AXES[i]) for any rank.
* ``dtype`` -- ``PATTERN=DTYPE``: a matched leaf is stored as DTYPE, rounding as numpy does.
  A rule casts within a family only (floating to floating, integer to integer, as Hugging
  Face's ``torch_dtype`` casts only floating parameters): ``'.*=bfloat16'`` halves the
  weights and leaves integer counters and booleans as they are.

For `transpose` and `dtype` the first rule whose pattern matches applies. Patterns match the
source name, not the renamed one, so they read like `ockpt inspect`'s names whatever the
rename rules do. String leaves are renamed but never transposed or cast.

The same rules come from the command line (``--rename 'REGEX=REPLACEMENT'``, split at the first
``=``; write ``\\=`` for an ``=`` inside the regex) or from a JSON file (``--rules FILE``)::

    {"rename": [["^params\\\\.", ""], "kernel$=weight"],
     "transpose": ["kernel$"],
     "dtype": ["embedding$=bfloat16"]}

where a rename is either a ``[REGEX, REPLACEMENT]`` pair or a ``"REGEX=REPLACEMENT"`` string.
A file's rules come before the command line's. Rules are checked when parsed (a bad regex, an
unknown dtype, bad axes or an unknown JSON key is a `ValueError` naming the rule).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .documents._json import parse_json
from .errors import DocumentError
from .limits import current as limits_in_force
from .store.files import read_file

__all__ = ["Rules", "parse_rules", "load_rules_file"]

_KEYS = ("rename", "transpose", "dtype")


@dataclass(frozen=True)
class Rules:
    """Parsed conversion rules (see the module docstring). The empty `Rules()` maps every leaf
    to itself."""

    rename: tuple[tuple[re.Pattern[str], str], ...] = ()
    transpose: tuple[tuple[re.Pattern[str], tuple[int, ...] | None], ...] = ()
    dtype: tuple[tuple[re.Pattern[str], np.dtype], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rename or self.transpose or self.dtype)

    def __add__(self, other: Rules) -> Rules:
        return Rules(
            self.rename + other.rename, self.transpose + other.transpose, self.dtype + other.dtype
        )

    def target_name(self, name: str) -> str:
        """`name` after every rename rule, in order."""
        for pattern, replacement in self.rename:
            name = pattern.sub(replacement, name)
        return name

    def axes(self, name: str, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """The axis permutation of the first transpose rule matching `name`, or None."""
        for pattern, axes in self.transpose:
            if pattern.search(name) is None:
                continue
            if axes is None:
                if len(shape) != 2:
                    raise ValueError(
                        f"--transpose {pattern.pattern!r} matches {name!r} of shape {shape}: "
                        "without axes it transposes 2-D leaves only; give the permutation, "
                        f"for example --transpose '{pattern.pattern}="
                        f"{','.join(str(i) for i in reversed(range(len(shape))))}'"
                    )
                return (1, 0)
            if sorted(axes) != list(range(len(shape))):
                raise ValueError(
                    f"--transpose {pattern.pattern!r}: axes {axes} are no permutation of the "
                    f"{len(shape)} axes of {name!r} (shape {shape})"
                )
            return axes
        return None

    def cast(self, name: str, dtype: np.dtype) -> np.dtype:
        """The dtype of the first dtype rule matching `name` when it is of `dtype`'s family
        (floating or integer), else `dtype` itself."""
        for pattern, target in self.dtype:
            if pattern.search(name) is not None:
                family = _family(dtype)
                return target if family is not None and family == _family(target) else dtype
        return dtype


def _family(dtype: np.dtype) -> str | None:
    """The dtype's family: float or int (signed or unsigned); None for bool and complex."""
    name = dtypes.dtype_name(dtype)
    if name.startswith(("int", "uint")):
        return "int"
    if name.startswith(("float", "bfloat")):
        return "float"
    return None


def _compile(regex: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as e:
        raise ValueError(f"{where}: {regex!r} is not a regular expression: {e}") from None


def _split(text: str, where: str, *, first: bool) -> tuple[str, str]:
    r"""``LEFT=RIGHT``, split at the first ``=`` not written ``\=`` (`first`), else the last."""
    if first:
        m = re.match(r"((?:[^=\\]|\\.)*)=(.*)\Z", text, re.DOTALL)
        if m is not None:
            return m.group(1), m.group(2)
    elif "=" in text:
        left, right = text.rsplit("=", 1)
        return left, right
    raise ValueError(f"{where}: {text!r} has no '=' (expected {where.split()[-1]})")


def _rename(rule: object, where: str) -> tuple[re.Pattern[str], str]:
    if isinstance(rule, str):
        regex, replacement = _split(rule, f"{where} REGEX=REPLACEMENT", first=True)
    elif (
        isinstance(rule, (list, tuple)) and len(rule) == 2 and all(isinstance(x, str) for x in rule)
    ):
        regex, replacement = rule
    else:
        raise ValueError(f"{where}: a rename is 'REGEX=REPLACEMENT' or [REGEX, REPLACEMENT]")
    pattern = _compile(regex, where)
    try:
        pattern.sub(replacement, "")  # a bad group reference fails here, not mid-conversion
    except (re.error, IndexError) as e:
        raise ValueError(f"{where}: replacement {replacement!r}: {e}") from None
    return pattern, replacement


def _transpose(rule: object, where: str) -> tuple[re.Pattern[str], tuple[int, ...] | None]:
    if not isinstance(rule, str):
        raise ValueError(f"{where}: a transpose rule is 'PATTERN' or 'PATTERN=AXES'")
    m = re.fullmatch(r"(.*)=\s*(\d+(?:\s*,\s*\d+)*)\s*", rule, re.DOTALL)
    if m is None:
        return _compile(rule, where), None
    axes = tuple(int(x) for x in m.group(2).split(","))
    if sorted(axes) != list(range(len(axes))):
        raise ValueError(f"{where}: axes {m.group(2)!r} are no permutation of 0..{len(axes) - 1}")
    return _compile(m.group(1), where), axes


def _dtype(rule: object, where: str) -> tuple[re.Pattern[str], np.dtype]:
    if not isinstance(rule, str):
        raise ValueError(f"{where}: a dtype rule is 'PATTERN=DTYPE'")
    regex, name = _split(rule, f"{where} PATTERN=DTYPE", first=False)
    name = name.strip()
    if name not in dtypes.SUPPORTED or _family(dtypes.SUPPORTED[name]) is None:
        known = sorted(n for n, d in dtypes.SUPPORTED.items() if _family(d) is not None)
        raise ValueError(f"{where}: unknown dtype {name!r}; one of {', '.join(known)}")
    return _compile(regex, where), dtypes.SUPPORTED[name]


def parse_rules(
    *,
    rename: Iterable[object] = (),
    transpose: Iterable[object] = (),
    dtype: Iterable[object] = (),
) -> Rules:
    """Rules from their text forms (the command line's or a JSON file's; module docstring)."""
    return Rules(
        tuple(_rename(r, "--rename") for r in rename),
        tuple(_transpose(r, "--transpose") for r in transpose),
        tuple(_dtype(r, "--dtype") for r in dtype),
    )


def load_rules_file(path: str) -> Rules:
    """Rules from a JSON file: an object with the optional lists "rename", "transpose" and
    "dtype" (module docstring). Unknown keys are refused, so a typo cannot drop rules."""
    text = read_file(path, limit=limits_in_force().max_json_bytes, rule="JSON-003")
    try:
        doc = parse_json(text, file=path)  # bounded in size, depth and values
    except DocumentError as e:
        raise ValueError(f"{path}: not JSON: {e.message}") from None
    if not isinstance(doc, dict) or set(doc) - set(_KEYS):
        raise ValueError(f"{path}: expected an object with the lists {', '.join(_KEYS)}")
    lists: dict[str, Sequence[object]] = {}
    for key in _KEYS:
        value = doc.get(key, [])
        if not isinstance(value, list):
            raise ValueError(f"{path}: {key!r} must be a list")
        lists[key] = value
    try:
        return parse_rules(**lists)  # type: ignore[arg-type]
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
