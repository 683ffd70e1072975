"""cuda_cases.SLICE, the golden cases the default run builds with nvcc, AddressSanitizer and the
profiler, still reaches everything the golden programs are made of (every case does under `-m slow`)."""
import pytest

from cuda_cases import CASE_IDS, SLICE, features


def test_the_slice_names_golden_cases():
    assert set(SLICE) <= set(CASE_IDS) and len(set(SLICE)) == len(SLICE)


@pytest.mark.slow
def test_the_slice_reaches_every_feature_of_the_golden_programs():
    """Compiles every case: when a new case brings something the slice misses, add the case named."""
    reached = set().union(*(features(name) for name in SLICE))
    missing = {}
    for name in CASE_IDS:
        for feature in features(name) - reached:
            missing.setdefault(feature, name)
    assert not missing, "SLICE misses " + "; ".join(f"{f} (first in {n})" for f, n in missing.items())
