"""Host memory kept as nnabla's ``CpuCachedArray`` keeps it: the blocks of freed arrays
stay in the process for the next arrays, so that a training step's temporaries do not
fault their pages in afresh at every step.

NumPy allocates through the C library's ``malloc``.  glibc's, by default, takes blocks
above a threshold (128 KiB, rising with use to 32 MiB at most) straight from the kernel
and returns them on ``free``, and gives the top of its heap back beyond another; every
new array of an activation's size then pays the kernel's page faults again (on the
2-core development VM up to 2 ms a megabyte, a tenth of a ResNet-23 step).  Caching
raises both thresholds (``mallopt``), as a caching allocator would; not caching puts
glibc's initial settings back; ``release()`` hands what is cached back (``malloc_trim``).
With another C library both do nothing and say so."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT = 128 * 1024               # glibc's initial value of both thresholds
_CACHED_MMAP = 1 << 30                    # blocks below 1 GiB come from (and go back to) the heap
_CACHED_TRIM = (1 << 31) - 1              # the heap's top is never handed back on free


@functools.cache
def _glibc():
    """glibc's functions, or None where the C library is another (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def cache(on: bool) -> bool:
    """Keep freed host blocks for reuse (``on``) or return them as glibc does by default;
    whether the C library took the setting."""
    libc = _glibc()
    if libc is None:
        return False
    mmap, trim = (_CACHED_MMAP, _CACHED_TRIM) if on else (_GLIBC_DEFAULT, _GLIBC_DEFAULT)
    took = [libc.mallopt(_M_MMAP_THRESHOLD, mmap), libc.mallopt(_M_TRIM_THRESHOLD, trim)]
    return all(took)


def release() -> bool:
    """Hand the host memory cached so far back to the operating system; whether any was."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))
