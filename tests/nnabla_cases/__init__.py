"""Reference cases run with nnabla (to record fixtures) and with dpnb (to test against them)."""
import math


def assert_matches(got, want, rtol: float = 1e-7, atol: float = 0.0, path: str = "") -> None:
    """Assert that ``got`` equals the recorded ``want``, recursing into dicts and lists and
    comparing floats with a tolerance, so a case's whole result is checked at once."""
    where = path or "result"
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: expected a dict, got {got!r}"
        assert sorted(got) == sorted(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_matches(got[key], want[key], rtol, atol, f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)), f"{where}: expected a list, got {got!r}"
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_matches(g, w, rtol, atol, f"{where}[{i}]")
    elif isinstance(want, bool) or want is None or isinstance(want, str):
        assert got == want and type(got) is type(want), f"{where}: {got!r} != {want!r}"
    elif isinstance(want, float) or isinstance(got, float):
        assert not isinstance(got, bool) and math.isclose(got, want, rel_tol=rtol, abs_tol=atol), \
            f"{where}: {got!r} != {want!r}"
    else:
        assert got == want and not isinstance(got, bool), f"{where}: {got!r} != {want!r}"
