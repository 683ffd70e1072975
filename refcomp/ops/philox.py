"""Counter-based random bits that every backend computes to the same bit, and the generators that seed them.

refcomp has no integer arithmetic, so the bits come from float32 steps that are exact on integers
below 2**24: a sum, the product of a 12-bit number and a 12-bit constant, fmod by 4096, a scaling by
2**-12. Nothing rounds, so NumPy, the emulator and CUDA compute the same bits whatever they fuse.

The hash is Philox-4x32's shape (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC
2011) on four 12-bit lanes: each round multiplies two lanes by odd constants, splits each 24-bit
product into its high and low halves, and adds a high half and a round key into another lane. Its
constants are Philox's scaled to 12 bits. The counter is an element's flat index (two lanes, so a
draw has at most 2**24 elements) and the draw's stream number (two lanes); the key is the
generator's 24-bit seed. ROUNDS: 14 is the fewest that pass the statistical battery of
tests/test_random.py (uniformity, neighbouring elements, neighbouring streams and keys, avalanche);
16 leaves a margin, as Philox's 10 rounds do over its 7.
"""
from __future__ import annotations

import numbers

from ..errors import ShapeError
from ..symbolic.dims import prod
from .core import TensorCore, iota, lift
from .elementwise import fmod, where

LANE = 4096.0  # 2**12: one lane's values, so a lane times a 12-bit constant stays below 2**24
ROUNDS = 16
MULTIPLIERS = (3365, 3291)  # Philox-4x32's 0xD2511F53 and 0xCD9E8D57 scaled to 12 bits, made odd
WEYL = (2531, 2999)  # its round-key increments (the golden ratio and sqrt(3) - 1) scaled to 12 bits
MAX_ELEMENTS = 1 << 24  # the flat index fills two lanes
MAX_STREAMS = 1 << 24
TORCH_DEFAULT_SEED = 67280421310721  # torch.initial_seed() of a fresh process


def seed_key(seed: int) -> int:
    """A 24-bit key: a seed below 2**24 is its own key (as a seed tensor's value is); a larger one
    (torch seeds are 64-bit) is folded by SplitMix64's finaliser, so nearby large seeds differ."""
    if seed < 0:
        seed &= (1 << 64) - 1  # torch takes a negative seed modulo 2**64
    if seed < MAX_ELEMENTS:
        return seed
    z = seed & ((1 << 64) - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (z ^ (z >> 31)) & (MAX_ELEMENTS - 1)


class Generator:
    """torch.Generator's part in refcomp: a seed and the number of draws made from it.

    Each draw takes the next stream, so two draws never repeat each other's bits, and a graph built
    twice from generators seeded alike draws the same. The seed is an int or a scalar Tensor (a seed
    fed at run time, so one compiled program draws afresh per call: an integer in [0, 2**24), its
    fraction dropped). `Generator()` and `Generator("cpu")` (torch's device argument) have torch's
    default seed."""

    def __init__(self, seed=None, *, device=None):
        if isinstance(seed, str) or seed is None:  # torch.Generator("cpu"): torch's fixed default seed
            seed = TORCH_DEFAULT_SEED
        self.manual_seed(seed)

    def manual_seed(self, seed) -> "Generator":
        if isinstance(seed, TensorCore):
            if not isinstance(prod(seed.shape), int) or prod(seed.shape) != 1:
                raise ShapeError(f"a generator's seed tensor must hold one value, got {seed.label}")
            self._seed = seed
        elif isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
            self._seed = int(seed)
        else:
            raise ShapeError(f"a generator's seed must be an int or a one-value tensor, got {seed!r}")
        self.draws = 0
        return self

    def initial_seed(self):
        return self._seed

    def next_stream(self) -> int:
        if self.draws >= MAX_STREAMS:
            raise ShapeError(f"a generator gives {MAX_STREAMS} draws; reseed it with manual_seed")
        self.draws += 1
        return self.draws - 1

    def key_lanes(self) -> tuple:
        """The key's two 12-bit lanes, as numbers (an int seed) or scalar tensors (a seed tensor)."""
        if not isinstance(self._seed, TensorCore):
            key = seed_key(self._seed)
            return float(key % 4096), float(key // 4096)
        seed = self._seed.reshape(()).to("float32")
        seed = seed - fmod(seed, 1.0)
        seed = fmod(seed, float(MAX_ELEMENTS))
        seed = where(seed < 0.0, seed + float(MAX_ELEMENTS), seed)
        low = fmod(seed, LANE)
        return low, (seed - low) * (1.0 / LANE)


default_generator = Generator(TORCH_DEFAULT_SEED)


def manual_seed(seed) -> Generator:
    """torch.manual_seed: reseed the generator that draws without a `generator=`."""
    return default_generator.manual_seed(seed)


def _split(product):
    """(high, low) 12-bit halves of an exact product below 2**24."""
    low = fmod(product, LANE)
    return (product - low) * (1.0 / LANE), low


def random_bits(shape: tuple, generator) -> tuple:
    """Two tensors of `shape` holding independent integers uniform in [0, 2**24), exactly, from the
    generator's next stream."""
    generator = default_generator if generator is None else generator
    if not isinstance(generator, Generator):
        raise ShapeError(f"generator must be an rc.Generator, got {type(generator).__name__}")
    count = prod(shape)
    if isinstance(count, int) and count > MAX_ELEMENTS:
        raise ShapeError(f"a random draw of shape {tuple(shape)} has {count:,} elements; refcomp's counter "
                         f"covers {MAX_ELEMENTS:,} per draw (draw in parts)")
    stream = generator.next_stream()
    flat = iota((count,), 0).reshape(tuple(shape))  # exact below 2**24 elements (checked at each binding)
    return philox(flat, float(stream), generator.key_lanes())


def philox(counter, stream, key) -> tuple:
    """The hash of (counter, stream) under `key`: two 24-bit halves. Counter and stream are integers
    below 2**24 (tensors or numbers), the key two 12-bit lanes."""
    x0 = fmod(counter, LANE)
    x1 = (counter - x0) * (1.0 / LANE)
    x2 = fmod(lift(stream), LANE)
    x3 = (stream - x2) * (1.0 / LANE)
    k0, k1 = key
    for r in range(ROUNDS):
        hi0, lo0 = _split(x0 * float(MULTIPLIERS[0]))
        hi1, lo1 = _split(x2 * float(MULTIPLIERS[1]))
        key0 = k0 + float(WEYL[0] * r % 4096)
        key1 = k1 + float(WEYL[1] * r % 4096)
        x0, x1, x2, x3 = fmod(hi1 + x1 + key0, LANE), lo1, fmod(hi0 + x3 + key1, LANE), lo0
    return x0 * LANE + x1, x2 * LANE + x3
