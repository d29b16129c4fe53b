"""Reading files that may be hostile (damaged, crafted, or a decompression bomb): every
reader of parameter, solver-state and network files decodes through here.

What a file declares (dataset shapes, zip member sizes, .npy headers, protobuf shapes)
is checked before a byte of data is read: against one limit on the bytes a file may
declare, and against the shapes the destination expects where the caller knows them.
Only plain numeric arrays are accepted: no strings, objects, compound types, external
or virtual .h5 storage.  Whatever a decoder raises on a broken file becomes a DpnbError
that names the file."""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence

import h5py
import numpy as np
from h5py import h5a

from ..errors import DpnbError

LIMIT_VARIABLE = "DPNB_MAX_DECLARED_BYTES"
DEFAULT_CAP = 8 << 30  # 8 GiB: some times the largest parameter file of nnabla's model zoo
NUMERIC = "biuf"  # bool, signed and unsigned integers, floats: what a parameter can hold
BOMB_FLOOR = 64 << 20  # an entry declaring more than this ...
MAX_RATIO = 100  # ... and more than this many times the bytes it stores is a bomb
SPOOL_BYTES = 32 << 20  # a zip member bigger than this is spooled to disk, not memory
COPY_BYTES = 1 << 20

Shape = tuple[int, ...]


def _physical_memory() -> int | None:
    """This machine's memory in bytes, where the system tells it."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def max_declared_bytes() -> int:
    """The most bytes one file may declare: ``$DPNB_MAX_DECLARED_BYTES``, else the
    smaller of 8 GiB and half this machine's memory (a load holds the decoded arrays
    beside the parameters they replace, so a file declaring more could not be loaded).
    Set by hand, it also lifts the guess that refuses decompression bombs below it."""
    value = os.environ.get(LIMIT_VARIABLE)
    if value is None:
        memory = _physical_memory()
        return DEFAULT_CAP if memory is None else min(DEFAULT_CAP, memory // 2)
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit <= 0:
        raise DpnbError(f"{LIMIT_VARIABLE} must be a positive number of bytes, got {value!r}; "
                        f"set it to e.g. {16 << 30} for 16 GiB, or unset it")
    return limit


class Reading:
    """One file being decoded: ``label`` names it in errors ("parameter file 'x.h5'"),
    the bytes its entries declared so far are held against the limit, and ``expected``
    (name -> shape, or None where anything goes) gives the destination's shapes, so
    that an entry of another shape is reported without its data being read."""

    def __init__(self, label: str, expected: Callable[[str], Shape | None] | None = None):
        self.label = label
        self.limit = max_declared_bytes()
        self.trusting = LIMIT_VARIABLE in os.environ  # a limit set by hand: no bomb guess
        self.declared = 0
        self._expected = expected
        self.mismatched: list[str] = []

    def over_limit(self, what: str, nbytes: int, total: int) -> DpnbError:
        """The error for ``what`` declaring ``nbytes``, ``total`` in all, over the limit."""
        return DpnbError(f"{self.label} declares {nbytes:,} bytes for {what} ({total:,} bytes in "
                         f"all so far), over the limit of {self.limit:,} bytes that one file may "
                         f"declare: it is damaged or crafted; if you trust it, raise the limit "
                         f"with the environment variable {LIMIT_VARIABLE}=<bytes>")

    def declare(self, item: str, shape: Sequence[int], itemsize: int,
                stored: int | None = None) -> bool:
        """Count an array ``item`` of ``shape`` (kept compressed in ``stored`` bytes, where
        known) against the limit; False where the destination expects another shape
        (noted in ``mismatched``; skip its data)."""
        shape = self._checked_shape(item, shape)
        expected = None if self._expected is None else self._expected(item)
        if expected is not None and tuple(expected) != shape:
            self.mismatched.append(f"{item!r} is {shape} in the file, {tuple(expected)} in the "
                                   "network")
            return False
        nbytes = math.prod(shape) * int(itemsize)
        if self.declared + nbytes > self.limit:
            raise self.over_limit(f"{item!r} of shape {shape}", nbytes, self.declared + nbytes)
        self._refuse_bomb(f"{item!r} of shape {shape}", nbytes, stored)
        self.declared += nbytes
        return True

    def _refuse_bomb(self, what: str, nbytes: int, stored: int | None) -> None:
        """Refuse an entry inflating far beyond what it stores, unless the limit was set by
        hand: nnabla and dpnb write parameters uncompressed, and real values compress
        little, so only a crafted file (or a big one of mostly zeros) does that."""
        if self.trusting or stored is None or nbytes <= BOMB_FLOOR:
            return
        if nbytes > MAX_RATIO * stored:
            raise DpnbError(f"{self.label} declares {nbytes:,} bytes for {what} but stores "
                            f"only {stored:,}: a decompression bomb, or a big entry of mostly "
                            f"zeros; if you trust the file, set the environment variable "
                            f"{LIMIT_VARIABLE}=<bytes> to load whatever declares no more")

    def _checked_shape(self, item: str, shape: Sequence[int] | None) -> Shape:
        """``shape`` as a tuple of non-negative ints, or an error naming ``item``."""
        if shape is None or any(int(d) < 0 for d in shape):
            raise DpnbError(f"{self.label} declares {item!r} with shape {shape}, which no array "
                            "has: it is damaged or crafted; save it again")
        return tuple(int(d) for d in shape)

    def declare_members(self, infos: Sequence[zipfile.ZipInfo]) -> None:
        """Hold the sizes a zip archive's members declare against the limit, each and in
        all, before any is inflated."""
        total = 0
        for info in infos:
            total += info.file_size
            if info.file_size > self.limit or total > self.limit:
                raise self.over_limit(f"member {info.filename!r} (inflated)", info.file_size,
                                       total)
            self._refuse_bomb(f"member {info.filename!r}", info.file_size, info.compress_size)

    def refuse(self, problem: str) -> DpnbError:
        """The error for an entry of the file that dpnb will not read."""
        return DpnbError(f"{self.label} {problem}; dpnb reads only plain numeric arrays (as "
                         "nnabla writes them): save the file again from the network")

    def finish(self) -> None:
        """Raise the entries whose shapes did not fit the destination, all at once."""
        if self.mismatched:
            raise DpnbError(f"{self.label} does not fit the network: "
                            f"{'; '.join(self.mismatched)}; the file belongs to a different "
                            "network (build the network it was saved from, or load it in "
                            "another parameter_scope)")


@contextlib.contextmanager
def decoding(reading: Reading, fmt: str, what: str) -> Iterator[None]:
    """Turn whatever a decoder raises on a broken file into a DpnbError naming the
    file; a MemoryError (which the limit should have prevented) names what it declared."""
    try:
        yield
    except DpnbError:
        raise
    except MemoryError as e:
        raise DpnbError(f"{reading.label} ({fmt}) ran out of memory after declaring "
                        f"{reading.declared:,} bytes (the limit is {reading.limit:,}); free "
                        f"memory, or lower the limit with {LIMIT_VARIABLE}") from e
    except Exception as e:  # noqa: BLE001 - h5py, zipfile and protobuf raise many types
        raise DpnbError(f"{reading.label} is truncated or not a {fmt} {what} file "
                        f"({type(e).__name__}: {e}); save it again") from e


# -- .h5 ----------------------------------------------------------------------------


def h5_datasets(h5: h5py.File) -> list[tuple[str, h5py.Dataset]]:
    """The datasets of an open .h5 file with their paths, in the file's order."""
    found: list[tuple[str, h5py.Dataset]] = []
    h5.visititems(lambda name, obj: found.append((name, obj))
                  if isinstance(obj, h5py.Dataset) else None)
    return found


def h5_array(reading: Reading, name: str, dataset: h5py.Dataset) -> np.ndarray | None:
    """The numeric array of ``dataset``, checked before it is read; None where its shape
    does not fit the destination (see ``Reading.declare``)."""
    if dataset.is_virtual or dataset.external:
        raise reading.refuse(f"has dataset {name!r} stored outside the file (external or "
                             "virtual storage), which could read any file of this machine")
    if dataset.dtype.kind not in NUMERIC or dataset.dtype.fields is not None:
        raise reading.refuse(f"has dataset {name!r} of type {dataset.dtype}, not numeric")
    stored = dataset.id.get_storage_size()  # compressed, or nothing where never written
    if not reading.declare(name, dataset.shape, dataset.dtype.itemsize, stored):
        return None
    return np.asarray(dataset[()])


def h5_attribute(reading: Reading, obj, key: str, kinds: str = NUMERIC):
    """The single-value attribute ``key`` of ``obj`` (None where absent), of a kind in
    ``kinds``, its type checked before it is read (h5py's low level: one call each)."""
    name = key.encode()
    if not h5a.exists(obj.id, name):
        return None
    attribute = h5a.open(obj.id, name)
    dtype, shape = attribute.dtype, attribute.shape
    if dtype.kind not in kinds or shape is None or math.prod(shape) != 1:
        raise reading.refuse(f"has attribute {key!r} of {obj.name!r} holding "
                             f"{dtype} {shape}, not a single value")
    value = np.empty(shape, dtype)
    attribute.read(value)
    return value.reshape(()).item()


def h5_text_attribute(reading: Reading, obj, key: str) -> str | None:
    """The fixed-length string attribute ``key`` of ``obj``; None where absent or of
    variable length: variable-length data lives in a heap that, damaged, can make
    HDF5 loop forever, so it is never read."""
    name = key.encode()
    if not h5a.exists(obj.id, name) or h5a.open(obj.id, name).dtype.kind == "O":
        return None
    return h5_attribute(reading, obj, key, "S").decode("utf-8", "replace")


def h5_scalar(reading: Reading, name: str, dataset: h5py.Dataset, kinds: str = "iu") -> int:
    """A dataset holding one integer (a step count ``t``)."""
    value = h5_array(reading, name, dataset)
    if value is None or value.size != 1 or value.dtype.kind not in kinds:
        raise reading.refuse(f"has dataset {name!r} of {dataset.dtype} {dataset.shape}, not "
                             "one integer")
    return int(value.reshape(()))


# -- zip archives (.nnp, .npz) ------------------------------------------------------------


def zip_members(reading: Reading, archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The members of an archive, their declared sizes checked against the limit."""
    infos = archive.infolist()
    reading.declare_members(infos)
    return infos


def spooled_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo):
    """A member copied, inflating it piece by piece, into a temporary file (in memory
    while small): .h5 readers seek about, which an inflating stream does slowly.  The
    stream stops at the size the member declares, and checks its CRC."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    with archive.open(info) as member:
        shutil.copyfileobj(member, spool, COPY_BYTES)
    spool.seek(0)
    return spool


def npz_arrays(reading: Reading, archive: zipfile.ZipFile, kinds: str
               ) -> Iterator[tuple[str, np.ndarray | None]]:
    """(name, array) of each .npy member of an .npz archive, each header checked before
    its data is read; array None where its shape does not fit the destination."""
    for info in zip_members(reading, archive):
        if not info.filename.endswith(".npy"):
            raise reading.refuse(f"has member {info.filename!r}, not an .npy array")
        name = info.filename[:-len(".npy")]
        with archive.open(info) as stream:
            yield name, _npy_array(reading, name, stream, info.file_size, kinds)


def _npy_header(reading: Reading, name: str, stream) -> tuple[Shape, bool, np.dtype]:
    """(shape, Fortran order, dtype) of an .npy stream, read from its header alone."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(stream)
    raise reading.refuse(f"has array {name!r} in .npy format version {version}, which "
                         "numpy.savez does not write for numeric arrays")


def _npy_array(reading: Reading, name: str, stream, member_size: int,
               kinds: str) -> np.ndarray | None:
    """The array of one .npy member, its data read into an array of the declared size."""
    shape, fortran, dtype = _npy_header(reading, name, stream)
    if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None:
        raise reading.refuse(f"has array {name!r} of type {dtype}, not {_kinds(kinds)}")
    if not reading.declare(name, shape, dtype.itemsize):
        return None
    nbytes = math.prod(shape) * dtype.itemsize
    array = np.empty(math.prod(shape), dtype) if nbytes <= member_size else None
    if array is None or _fill(stream, memoryview(array.view(np.uint8))) != nbytes:
        raise DpnbError(f"{reading.label} declares {nbytes:,} bytes for array {name!r} of "
                        f"shape {shape}, but holds fewer: it is truncated or damaged; save it "
                        "again")
    return array.reshape(shape, order="F" if fortran else "C")


def _fill(stream, view: memoryview) -> int:
    """Read ``stream`` into ``view`` piece by piece (no copy of the whole); bytes read."""
    done = 0
    while done < len(view):
        count = stream.readinto(view[done:done + COPY_BYTES])
        if not count:
            break
        done += count
    return done


def _kinds(kinds: str) -> str:
    """Array kinds ("biuf") in words, for errors."""
    words = {"b": "bool", "i": "int", "u": "unsigned int", "f": "float", "U": "str"}
    return " or ".join(words[k] for k in kinds)


# -- protobuf ------------------------------------------------------------------------------


def proto_array(reading: Reading, name: str, dims: Sequence[int], data) -> np.ndarray | None:
    """A protobuf array (``shape.dim`` and float ``data``) as float32, its shape checked
    before anything is allocated; None where it does not fit the destination."""
    if not reading.declare(name, dims, 4):
        return None
    shape = tuple(int(d) for d in dims)
    if len(data) != math.prod(shape):
        raise DpnbError(f"{reading.label} has {len(data)} values for {name} of shape {shape}: "
                        "it is truncated or damaged; save it again")
    return np.array(data, dtype=np.float32).reshape(shape)


def read_capped(f, reading: Reading) -> bytes:
    """The rest of a file object, refused beyond the limit (its size is not known)."""
    data = f.read(reading.limit + 1)
    if len(data) > reading.limit:
        raise reading.over_limit("its contents", len(data), len(data))
    return data


def read_whole(source, reading: Reading) -> bytes:
    """A path's bytes (its size checked first) or a file object's rest, within the limit."""
    if not isinstance(source, (str, os.PathLike)):
        return read_capped(source, reading)
    size = os.path.getsize(source)
    if size > reading.limit:
        raise reading.over_limit("the file itself", size, size)
    with open(source, "rb") as f:
        return f.read()
