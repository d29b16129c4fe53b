"""Every function, parametric function, solver and initializer dpnb shares with nnabla
takes nnabla 1.39's parameters, in its order, with its defaults (recorded in
fixtures/nnabla/names.json by record_names.py)."""
import ast
import importlib
import inspect
import json
from pathlib import Path

import pytest



RECORD = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "names.json").read_text())

def dpnb_module(nnabla_name: str):
    return importlib.import_module("dpnb" + nnabla_name[len("nnabla"):])


SHARED = [(module, name) for module, names in RECORD["signatures"].items()
          for name, signature in names.items()
          if signature is not None and hasattr(dpnb_module(module), name)]


STARS = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}


def same_default(text: str | None):
    """A recorded default as a value where it is a literal, tuples read as lists (nnabla's
    ``axes=[1]`` and dpnb's immutable ``axes=(1,)`` mean the same)."""
    try:
        value = ast.literal_eval(text) if text is not None else None
    except (ValueError, SyntaxError):
        return text
    return list(value) if isinstance(value, tuple) else value


def signature(value) -> list:
    """[name, default] per parameter, as record_names.py writes them, defaults compared
    as values."""
    return [[STARS.get(p.kind, "") + p.name,
             same_default(repr(p.default)) if p.default is not p.empty else None]
            for p in inspect.signature(value).parameters.values() if p.name != "self"]


@pytest.mark.parametrize("module, name", SHARED, ids=[f"{m[7:]}.{n}" for m, n in SHARED])
def test_signature_is_nnabla_s(module, name):
    want = [[p, same_default(d)] for p, d in RECORD["signatures"][module][name]]
    got = signature(getattr(dpnb_module(module), name))
    if want and want[-1][0].startswith("**"):
        # nnabla reads documented keywords from **kw; dpnb names them after *args.
        want, got = want[:-1], got[:len(want) - 1]
    assert got == want


def test_the_shared_names_are_checked():
    assert len(SHARED) >= 60
