"""``cupy.cuda.memory``: the pools dpnb empties (``free_all_blocks``) and what it may ask
them; the stand-in allocates nothing of its own, so they hold nothing."""
from __future__ import annotations


class MemoryPool:
    def __init__(self, allocator=None):
        pass

    def free_all_blocks(self, stream=None) -> None:
        pass

    def used_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0

    def free_bytes(self) -> int:
        return 0

    def n_free_blocks(self) -> int:
        return 0

    def set_limit(self, size=None, fraction=None) -> None:
        pass

    def get_limit(self) -> int:
        return 0

    def malloc(self, size):
        raise NotImplementedError("the stand-in has no device memory to hand out")


class PinnedMemoryPool:
    def __init__(self, allocator=None):
        pass

    def free_all_blocks(self) -> None:
        pass

    def n_free_blocks(self) -> int:
        return 0


_allocator = None


def get_allocator():
    return _allocator


def set_allocator(allocator=None) -> None:
    global _allocator
    _allocator = allocator
