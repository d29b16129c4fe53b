"""Host memory cached as nnabla's CpuCachedArray caches it (dpnb.host_memory): a freed
array's pages serve the next array without the kernel's page faults; not caching, and
releasing, behave as glibc by default.  Each case runs in a fresh interpreter, since the
setting is the whole process's."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dpnb import host_memory

glibc_only = pytest.mark.skipif(not host_memory.cache(True),
                                reason="the C library is not glibc: dpnb leaves it as it is")

FAULTS = """
import resource, sys
import numpy as np
import dpnb as nn

nn.prefer_cached_array(sys.argv[1] == "cached")
np.ones(16 << 20, np.float32)            # 64 MiB allocated and freed once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = np.ones(16 << 20, np.float32)    # the same size again, five times
    del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(setting: str) -> int:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FAULTS), setting],
                          capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout)


@glibc_only
def test_cached_arrays_reuse_freed_pages_and_uncached_ones_fault_them_in_again():
    huge_pages = (64 << 20) // (2 << 20)     # the fewest faults that map 64 MiB (NumPy asks
    assert page_faults("cached") < huge_pages                # for huge pages): none again
    assert page_faults("uncached") >= 5 * huge_pages         # each allocation faults anew


@glibc_only
def test_clear_memory_cache_hands_cached_memory_back():
    script = textwrap.dedent("""
        import numpy as np
        import dpnb as nn
        from dpnb.extensions.cpu import clear_memory_cache
        def resident_mib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20
        a = np.ones(64 << 20, np.uint8)
        del a
        cached = resident_mib()
        clear_memory_cache()
        print(cached - resident_mib())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 48                            # most of the 64 MiB went back
