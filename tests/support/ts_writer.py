"""The writer's arrays written through tensorstore's zarr and OCDBT drivers: the cross-check
for ockpt's own encoders (`_chunkwrite`, `ocdbt.write`), used by the tests only.

`write_arrays` has the signature of `ockpt._zarr_write.write_arrays`; tests swap it in with
monkeypatch so that one save is written by tensorstore and the same save by ockpt, and compare
the stored values (or files) byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorstore as ts

from ockpt import _zarr_write
from ockpt.store import Store

#: The configuration Orbax gives tensorstore for every database it writes (WRITE-014).
OCDBT_CONFIG: dict[str, Any] = {
    "max_inline_value_bytes": 1024,
    "max_decoded_node_bytes": 100_000_000,
    "compression": {"id": "zstd"},
}


def _kvstore(item: Store, name: str, *, use_ocdbt: bool, process_index: int) -> dict[str, Any]:
    if use_ocdbt:
        return {
            "driver": "ocdbt",
            "base": item.child(_zarr_write.process_dir(process_index)).tensorstore_spec(),
            "config": OCDBT_CONFIG,
            "path": name + "/",
        }
    return item.child(name).tensorstore_spec()


def write_arrays(
    item: Store,
    arrays: Iterable[_zarr_write.ArrayWrite],
    *,
    use_ocdbt: bool,
    zarr_version: int,
    compression_level: int | None,
    process_index: int,
) -> None:
    """`_zarr_write.write_arrays`, through tensorstore's zarr drivers (one opened array each)."""
    context = ts.Context()
    opened = []
    for a in arrays:
        metadata = _zarr_write.zarr_metadata(
            zarr_version=zarr_version,
            shape=a.shape,
            dtype=a.dtype,
            chunk_shape=a.chunk_shape,
            write_shape=a.write_shape,
            compression_level=compression_level if a.compress else None,
        ).to_dict()
        spec = {
            "driver": "zarr" if zarr_version == 2 else "zarr3",
            "kvstore": _kvstore(
                item, a.param_name, use_ocdbt=use_ocdbt, process_index=process_index
            ),
            "metadata": metadata,
            "store_data_equal_to_fill_value": True,
        }
        if a.write_metadata:
            opened.append((a, ts.open(spec, create=True, context=context)))
        elif a.pieces:
            opened.append((a, ts.open(spec, open=True, assume_metadata=True, context=context)))
    writes = []
    for a, future in opened:
        store = future.result()
        for piece in a.pieces:
            region = tuple(
                slice(s, s + n) for s, n in zip(piece.start, piece.value.shape, strict=True)
            )
            writes.append((store[region] if region else store).write(piece.value))
    for w in writes:
        w.result()
