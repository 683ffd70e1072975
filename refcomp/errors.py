"""Every error refcomp raises for bad input derives from `RefcompError`.

Users catch one class; the message always names the tensor, node or dimension at fault, so a
mistake is found in the user's program rather than in a traceback from deep inside NumPy.
"""


class RefcompError(Exception):
    """Base of every error refcomp raises for bad input or a failed build."""


class ShapeError(RefcompError):
    """Shapes that do not fit: a binary op, a matmul, a reshape, an axis out of range."""


class BindingError(RefcompError):
    """A symbolic dimension is unbound, or two feeds disagree about its value."""


class FeedError(RefcompError):
    """A fed array is missing or has the wrong shape or dtype."""


class AllocationError(RefcompError):
    """A tensor or buffer would not fit in memory: said with the bytes it needs and the tensor that
    needs them, instead of a MemoryError (or the machine swapping) deep inside NumPy."""


class CacheError(RefcompError):
    """The kernel cache cannot be used: its directory is not writable, or an artifact stays
    unloadable after a rebuild. Raised instead of an OSError so the message can say how to fix it."""


class KVCacheError(RefcompError):
    """A paged KV pool cannot do what was asked: it is full, or a sequence, page or slot is not one it
    holds."""


class UnsupportedError(RefcompError, AttributeError):
    """A name refcomp's Tensor does not have (a PyTorch method it does not provide, say). Also an
    AttributeError, so `hasattr` and `getattr(t, name, default)` behave as Python's do."""
