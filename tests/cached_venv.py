"""Virtual environments that tests build with other versions of Python and of dpnb's
dependencies (the oldest supported ones, the real nnabla), kept at the repository root
under a name git ignores (``.venv-oldest/``, ``.venv-nnabla/``) and reused while what
they were built from is unchanged: the Python, the pinned requirements, dpnb's own
declared dependencies and the checkout installed into them (editable, so that every
run tests the working tree).

A venv that cannot be built (no such Python, PyPI out of reach, a requirement pip's
resolver refuses) fails the test that needs it with pip's own words: the ranges dpnb
declares are what is tested, so there is nothing to skip to."""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORD = "dpnb-test-venv.json"


def find_python(version: str) -> tuple[str, dict]:
    """A Python interpreter of ``version`` (``"3.10"``) and the environment to run it in:
    ``python3.10`` on PATH, through pyenv's shim with its newest 3.10.x where pyenv is
    there; a test failure that says how to get one where there is none."""
    env = clean_env()
    pyenv = shutil.which("pyenv")
    if pyenv:
        listed = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout
        mine = sorted((v for v in listed.split() if v.startswith(version + ".") and
                       v[len(version) + 1:].isdigit()), key=lambda v: int(v.split(".")[2]))
        if mine:
            env["PYENV_VERSION"] = mine[-1]
    python = shutil.which(f"python{version}")
    if python:
        got = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, env=env)
        if got.returncode == 0 and got.stdout.strip() == version:
            return python, env
    pytest.fail(f"no Python {version} found (python{version} on PATH, or pyenv with a "
                f"{version}.x installed); install one, e.g. `pyenv install {version}`", pytrace=False)


def _declared_dependencies() -> str:
    """pyproject.toml's [project] dependencies and extras, as text (the venv is rebuilt
    when they change)."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return json.dumps([project["dependencies"], project.get("optional-dependencies", {})],
                      sort_keys=True)


def _run(args: list[str], what: str, env: dict, timeout: float) -> None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} took more than {timeout:.0f} s: {' '.join(args)}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"{what} failed (status {done.returncode}): {' '.join(args)}\n"
                    f"{(done.stdout + done.stderr)[-4000:]}", pytrace=False)


def cached_venv(name: str, python_version: str, requirements: list[str],
                extras: str = "", timeout: float = 1200) -> pathlib.Path:
    """The venv ``ROOT/name`` with Python ``python_version``, ``requirements`` and this
    checkout (with ``extras``, e.g. ``"[cluster,mpich]"``) installed in ONE pip call, so
    that pip's resolver judges dpnb's declared ranges against the pins; built when
    missing or when its record differs, reused otherwise. Returns its directory."""
    python, python_env = find_python(python_version)
    venv = ROOT / name
    record = {"python": python_version, "requirements": requirements, "extras": extras,
              "checkout": str(ROOT), "declared": _declared_dependencies()}
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    record_file = venv / RECORD
    if record_file.exists() and json.loads(record_file.read_text()).get("key") == key \
            and (venv / "bin" / "python").exists():
        return venv
    if venv.exists():
        shutil.rmtree(venv)
    _run([python, "-m", "venv", str(venv)], f"creating the Python {python_version} venv {name}",
         python_env, 300)
    env = clean_env()
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run(pip + ["--upgrade", "pip"], f"upgrading pip in {name} (is PyPI reachable?)", env, 600)
    _run(pip + requirements + ["-e", f"{ROOT}{extras}"],
         f"installing {' '.join(requirements)} and this checkout{extras} into {name}",
         env, timeout)
    record_file.write_text(json.dumps({"key": key, **record}, indent=1))
    return venv


def clean_env() -> dict:
    """The environment for a process of a cached venv: no PYTHONPATH (which could put
    another checkout or the test runner's packages first), no VIRTUAL_ENV."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYENV_VERSION")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def python_of(venv: pathlib.Path) -> str:
    """The venv's interpreter."""
    return str(venv / "bin" / "python")
