import os
import tempfile

import numpy as np
import pytest

# Each test session starts with an empty compiled-program cache, so every graph is searched at least
# once per run (the kernel cache stays shared: it only saves g++ time, never changes a result).
os.environ.setdefault("REFCOMP_PROGRAM_CACHE_DIR", tempfile.mkdtemp(prefix="refcomp-programs-"))
# Tests run each program a few times at most: the emulator's optimised rebuild of a program that
# keeps running would only spend g++ time beside them (tests/test_emu_simd.py checks it explicitly).
os.environ.setdefault("REFCOMP_EMU_OPTIMIZE", "0")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
