"""The storage layer: where a checkpoint's bytes are, and the one hardened way to read them.

* `files`: local files: the one open of a checkpoint file (regular files only, contained in
  the checkpoint, bounded reads) and bounded directory listings;
* `location`: `Location`, a directory local or behind a kvstore URL (reads of a URL's objects
  bounded before they are fetched, and by byte range);
* `datafile`: `DataFile`, a file read a byte range at a time (an OCDBT data file): a local
  file on a kept descriptor, or an object of a URL;
* `byterange`: `ByteRange`, a range of an open file read in bounded pieces.

Nothing else in ockpt opens a file of a checkpoint (tests/test_architecture.py checks it).
"""

from .byterange import ByteRange
from .files import Listing, check_tree, open_range, read_file, read_inside, resolve_inside
from .location import Location, import_tensorstore, is_url, new_context

__all__ = [
    "ByteRange",
    "Listing",
    "check_tree",
    "Location",
    "import_tensorstore",
    "is_url",
    "new_context",
    "open_range",
    "read_file",
    "read_inside",
    "resolve_inside",
]
