"""The file and directory names of the format, defined once (spec/directories.md).

Every module that looks for, opens or writes one of these names takes it from here.
"""

from __future__ import annotations

import re

__all__ = [
    "METADATA_FILE",
    "CHECKPOINT_METADATA_FILE",
    "ROOT_METADATA_DIR",
    "ROOT_METADATA_NAME",
    "ROOT_METADATA_FILE",
    "LEGACY_ROOT_METADATA_NAME",
    "LEGACY_ROOT_METADATA_FILE",
    "SHARDING_FILE",
    "STRINGS_FILE",
    "ARRAY_METADATAS_DIR",
    "ARRAY_METADATAS_PROCESS_FILE",
    "MSGPACK_FILE",
    "MANIFEST_FILE",
    "OCDBT_DATA_DIR",
    "OCDBT_PROCESS_DIR",
    "COMMIT_FILE",
    "V1_MARKER",
    "V1_JSON_FILE",
    "STEP_JSON_FILE",
    "JSON_ITEM_FILES",
    "PROTO_FILE",
    "JAX_RANDOM_KEY_DIR",
    "JAX_RANDOM_KEY_METADATA_DIR",
    "NP_RANDOM_KEY_DIR",
    "NP_RANDOM_KEY_METADATA_DIR",
    "PYTREE_CHECKPOINTABLES",
    "DEFAULT_ITEM",
    "TMP_MARKER",
    "REPLACED_SUFFIX",
    "DELETED_SUFFIX",
    "OWN_TMP_SUFFIX",
    "OWN_TMP_NAME",
    "ZARR2_METADATA",
    "ZARR3_METADATA",
]

#: An item's tree metadata (json-documents §2).
METADATA_FILE = "_METADATA"
#: Timestamps and item handlers of an item, step or v1 checkpoint (json-documents §3).
CHECKPOINT_METADATA_FILE = "_CHECKPOINT_METADATA"
#: The directory of a checkpoint-manager root's own metadata (directories §5.3); never a step.
ROOT_METADATA_DIR = "metadata"
ROOT_METADATA_NAME = "_ROOT_METADATA"
ROOT_METADATA_FILE = f"{ROOT_METADATA_DIR}/{ROOT_METADATA_NAME}"
#: Root metadata before 0.10: a JSON item.
LEGACY_ROOT_METADATA_NAME = "metadata"
LEGACY_ROOT_METADATA_FILE = f"{ROOT_METADATA_DIR}/{LEGACY_ROOT_METADATA_NAME}"
SHARDING_FILE = "_sharding"
STRINGS_FILE = "_strings.json"
ARRAY_METADATAS_DIR = "array_metadatas"
#: `array_metadatas/process_<N>`: what process N wrote; at most 9 digits (N < 10^9).
ARRAY_METADATAS_PROCESS_FILE = re.compile(r"process_(0|[1-9][0-9]{0,8})")
#: The legacy msgpack aggregate file (written up to 0.5.15).
MSGPACK_FILE = "checkpoint"
MANIFEST_FILE = "manifest.ocdbt"
OCDBT_DATA_DIR = "d"
#: `ocdbt.process_<N>/`: the database one writing process wrote.
OCDBT_PROCESS_DIR = re.compile(r"ocdbt\.process_(0|[1-9][0-9]*)")
COMMIT_FILE = "commit_success.txt"
#: The empty file that marks a v1 checkpoint.
V1_MARKER = "orbax.checkpoint"
#: The file of a JSON checkpointable of a v1 checkpoint, and of a JSON item of a step.
V1_JSON_FILE = "data.json"
STEP_JSON_FILE = "metadata"
#: Names of the one file of a JSON item (directories §6).
JSON_ITEM_FILES = frozenset({STEP_JSON_FILE, "metrics", V1_JSON_FILE})
#: The protobuf text file of a proto item (its handler's default file name, checkpointables §5).
PROTO_FILE = "proto.pbtxt"
#: The two parts of a JAX random-key item: the key data (an array item) and a JSON item
#: `{"typed": bool}` (checkpointables §4).
JAX_RANDOM_KEY_DIR = "jax_random_key"
JAX_RANDOM_KEY_METADATA_DIR = "jax_random_key_metadata"
#: The two parts of a numpy random-state item: the state (a pytree item) and a JSON item
#: `{"legacy": bool}`.
NP_RANDOM_KEY_DIR = "np_random_key"
NP_RANDOM_KEY_METADATA_DIR = "np_random_key_metadata"
#: v1 names of the pytree checkpointable, newest first.
PYTREE_CHECKPOINTABLES = ("state", "pytree")
#: The item name of a step saved with a single unnamed pytree.
DEFAULT_ITEM = "default"
#: In the name of every directory or file of an unfinished save (LAYOUT-001).
TMP_MARKER = ".orbax-checkpoint-tmp"
#: `<name>` + this: where an overwrite without atomic exchange parks the old checkpoint (DIR-006).
REPLACED_SUFFIX = TMP_MARKER + "-replaced"
#: `<name>` + this: what ockpt releases before DIR-008 renamed a directory to before removing it.
DELETED_SUFFIX = TMP_MARKER + "-deleted"
#: `<name>` + this + 12 hex digits: the temporary directory of one ockpt save, never another's
#: (DIR-003), and the name a removed directory takes first (DIR-005, DIR-006).
OWN_TMP_SUFFIX = TMP_MARKER + "-ockpt-"
OWN_TMP_NAME = re.compile(r"(?P<name>.+)\.orbax-checkpoint-tmp-ockpt-[0-9a-f]{12}")
ZARR2_METADATA = ".zarray"
ZARR3_METADATA = "zarr.json"
#: the documents of a zarr array directory (every other file of it is a chunk or shard)
ZARR_DOCUMENTS = frozenset({ZARR2_METADATA, ZARR3_METADATA, ".zattrs", ".zgroup"})
