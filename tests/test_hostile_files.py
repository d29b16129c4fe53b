"""Hostile files: decompression bombs, damaged and crafted files, external storage, and
the temporaries of killed saves.

Every loader of parameters, solver states and networks either loads a file whole or
raises a DpnbError naming it, leaving the network and the solver as they were, and
decides from what the file declares, before reading its data, whether it fits.
Loads that could blow up run in a forked child, whose peak memory is measured."""
from __future__ import annotations

import io
import os
import pickle
import random
import re
import signal
import time
import zipfile
import zlib

import h5py
import numpy as np
import pytest

import dpnb as nn
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.errors import DpnbError
from dpnb.formats.files import atomic_write
from dpnb.formats.checked_read import LIMIT_VARIABLE
from dpnb.utils import load as nnabla_load
from dpnb.utils.nnp_graph import NnpLoader
from dpnb.utils.save import save as save_network

MiB = 1 << 20
PARAMETER_FORMATS = (".h5", ".nnp", ".npz", ".protobuf", ".nntxt")
STATE_FORMATS = (".h5", ".protobuf", ".npz")
NETWORK_FORMATS = (".nnp", ".nntxt")
MUTATIONS = 300  # per file format and loader: about 12 s for all on a small machine


# -- helpers ---------------------------------------------------------------------------


def _rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def in_child(work, env: dict | None = None):
    """Run ``work()`` in a forked child: (("ok", result) or ("raised", type name, message,
    whether a DpnbError), the child's peak memory beyond this process's, in bytes)."""
    base = _rss()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.environ.update(env or {})
            try:
                outcome = ("ok", work())
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                outcome = ("raised", type(e).__name__, str(e), isinstance(e, DpnbError))
            with os.fdopen(write, "wb") as f:
                pickle.dump(outcome, f)
        finally:
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as f:
            data = f.read()
    except BaseException:  # interrupted (a timeout): end the child too
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, _, usage = os.wait4(pid, 0)
    return pickle.loads(data), usage.ru_maxrss * 1024 - base


def small_network():
    """Two affine layers: parameters fc/affine/{W,b} and fc2/affine/{W,b}; (x, y)."""
    x = nn.Variable((2, 3))
    with nn.parameter_scope("fc"):
        h = PF.affine(x, 4)
    with nn.parameter_scope("fc2"):
        y = PF.affine(h, 2)
    return x, y


def values() -> dict[str, np.ndarray]:
    """The current parameters' values, copied."""
    return {name: v.d.copy() for name, v in nn.get_parameters(grad_only=False).items()}


def refused(outcome, *patterns: str) -> None:
    """Check that a child's outcome is a DpnbError whose message matches ``patterns``."""
    assert outcome[0] == "raised" and outcome[3], outcome
    for pattern in patterns:
        assert re.search(pattern, outcome[2]), (pattern, outcome[2])


def gzip_bomb_h5(path, elements: int, chunk: int = MiB) -> None:
    """An .h5 parameter file of one float32 dataset of ``elements`` zeros, gzip-chunked:
    one compressed chunk written again and again, so the file stays small."""
    zeros = zlib.compress(np.zeros(chunk, np.float32).tobytes(), 9)
    with h5py.File(path, "w") as h5:
        dataset = h5.create_dataset("fc/affine/W", (elements,), np.float32, chunks=(chunk,),
                                    compression="gzip")
        dataset.attrs["need_grad"] = True
        dataset.attrs["index"] = 0
        for offset in range(0, elements, chunk):
            dataset.id.write_direct_chunk((offset,), zeros)


def zip_bomb(path, member: str, size: int, head: bytes = b"") -> None:
    """A zip with ``member`` inflating to ``size`` bytes: ``head``, then zeros."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("nnp_version.txt", "0.1\n")
        with archive.open(member, "w", force_zip64=True) as f:
            f.write(head)
            block = bytes(MiB)
            for _ in range((size - len(head)) // MiB):
                f.write(block)


# -- item 2: decompression bombs ---------------------------------------------------------


def test_an_h5_gzip_bomb_is_refused_from_its_declared_size(tmp_path):
    path = tmp_path / "bomb.h5"
    gzip_bomb_h5(path, 400 * MiB)  # 1.6 GB of float32 in a file of about 1.6 MB
    assert path.stat().st_size < 4 * MiB
    outcome, peak = in_child(lambda: nn.load_parameters(path),
                             {LIMIT_VARIABLE: str(256 * MiB)})
    refused(outcome, re.escape(str(path)), "1,677,721,600 bytes", "fc/affine/W",
            "268,435,456 bytes", LIMIT_VARIABLE)
    assert peak < 100 * MiB


@pytest.mark.parametrize("ext", [".h5", ".nnp", ".npz"])
def test_bombs_are_refused_under_the_default_limit(tmp_path, ext):
    path = tmp_path / f"bomb{ext}"
    if ext == ".h5":
        gzip_bomb_h5(path, 400 * MiB)
    else:
        zip_bomb(path, "parameter.h5" if ext == ".nnp" else "w.npy", 256 * MiB)  # 256 KB files
    outcome, peak = in_child(lambda: nn.load_parameters(path))
    refused(outcome, re.escape(str(path)), r"(1,677,721,600|268,435,456) bytes",
            "but stores only", "decompression bomb", LIMIT_VARIABLE)
    assert peak < 50 * MiB


def test_a_bomb_of_another_shape_than_the_network_is_refused_under_the_default_limit(tmp_path):
    path = tmp_path / "bomb.h5"
    gzip_bomb_h5(path, 400 * MiB)
    small_network()
    outcome, peak = in_child(lambda: nn.load_parameters(path))
    refused(outcome, r"'fc/affine/W' is \(419430400,\) in the file, \(3, 4\) in the network")
    assert peak < 100 * MiB


@pytest.mark.parametrize("load", ["load_parameters", "NnpLoader"])
def test_an_nnp_whose_member_inflates_beyond_the_limit_is_refused_before_inflating(tmp_path,
                                                                                  load):
    path = tmp_path / "bomb.nnp"
    zip_bomb(path, "parameter.h5", 256 * MiB)  # a 256 KB file
    reader = {"load_parameters": lambda: nn.load_parameters(path),
              "NnpLoader": lambda: NnpLoader(path)}[load]
    outcome, peak = in_child(reader, {LIMIT_VARIABLE: str(64 * MiB)})
    refused(outcome, re.escape(str(path)), "member 'parameter.h5'", "268,435,456 bytes",
            LIMIT_VARIABLE)
    assert peak < 50 * MiB


def test_an_nnp_member_within_a_limit_set_by_hand_is_spooled_and_its_misfit_never_read(
        tmp_path):
    path = tmp_path / "bomb.nnp"
    h5 = io.BytesIO()
    with h5py.File(h5, "w") as f:  # a dataset declared at 256 MiB, its storage never written
        f.create_dataset("fc/affine/W", (64 * MiB,), np.float32)
    zip_bomb(path, "parameter.h5", 256 * MiB, head=h5.getvalue())
    small_network()
    outcome, peak = in_child(lambda: nn.load_parameters(path), {LIMIT_VARIABLE: str(1 << 30)})
    refused(outcome, r"'fc/affine/W' is \(67108864,\) in the file, \(3, 4\) in the network")
    assert peak < 100 * MiB


def test_an_npz_bomb_is_refused_from_its_headers(tmp_path):
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("w.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (64 * MiB,)})
            for _ in range(256):
                f.write(bytes(MiB))
        archive.writestr("__need_grad__.npy", _npy(np.array(["w"])))
    outcome, peak = in_child(lambda: nn.load_parameters(path), {LIMIT_VARIABLE: str(64 * MiB)})
    refused(outcome, re.escape(str(path)), "member 'w.npy'", "268,435,", LIMIT_VARIABLE)
    assert peak < 50 * MiB


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_an_npy_header_declaring_more_than_its_member_holds_allocates_nothing(tmp_path):
    path = tmp_path / "liar.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 28,)})
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.npy", header.getvalue() + bytes(16))
        archive.writestr("__need_grad__.npy", _npy(np.array(["w"])))
    outcome, peak = in_child(lambda: nn.load_parameters(path), {LIMIT_VARIABLE: str(2 << 30)})
    refused(outcome, "declares 1,073,741,824 bytes for array 'w'", "holds fewer")
    assert peak < 50 * MiB


@pytest.mark.parametrize("dims", [[1 << 40, 1 << 40], [-3, 4], [1 << 20, 1 << 20]])
def test_a_protobuf_shape_without_data_allocates_nothing(tmp_path, dims):
    from dpnb.formats import nnabla_pb2

    message = nnabla_pb2.NNablaProtoBuf()
    p = message.parameter.add()
    p.variable_name = "w"
    p.shape.dim.extend(dims)
    path = tmp_path / "huge.protobuf"
    path.write_bytes(message.SerializeToString())
    with pytest.raises(DpnbError, match=re.escape(str(path))):
        nn.load_parameters(path)
    assert nn.get_parameters() == {}


def test_the_limit_must_be_a_positive_number(tmp_path, monkeypatch):
    small_network()
    nn.save_parameters(tmp_path / "p.h5")
    monkeypatch.setenv(LIMIT_VARIABLE, "8G")
    with pytest.raises(DpnbError, match=f"{LIMIT_VARIABLE} must be a positive number of bytes"):
        nn.load_parameters(tmp_path / "p.h5")


# -- item 3: corrupt files and all-or-nothing loads ---------------------------------------


def _h5_with_second(path, make_second) -> None:
    """A parameter .h5 of the small network whose fc2/affine/W ``make_second(h5, name)`` writes."""
    with h5py.File(path, "w") as h5:
        for index, (name, value) in enumerate(values().items()):
            if name == "fc2/affine/W":
                make_second(h5, name)
            else:
                h5[name] = value
            h5[name].attrs["index"] = index
            h5[name].attrs["need_grad"] = True


@pytest.mark.parametrize("second, problem", [
    (lambda h5, name: h5.create_dataset(name, data="not numbers"), "not numeric"),
    (lambda h5, name: h5.create_dataset(name, data=np.zeros(8, "i4,f4")), "not numeric"),
    (lambda h5, name: h5.create_dataset(name, data=np.zeros(8, "S4")), "not numeric"),
    (lambda h5, name: h5.create_dataset(name, data=np.zeros((5, 5), np.float32)),
     r"'fc2/affine/W' is \(5, 5\) in the file, \(4, 2\) in the network"),
])
def test_a_bad_second_parameter_leaves_the_first_untouched(tmp_path, second, problem):
    small_network()
    path = tmp_path / "p.h5"
    _h5_with_second(path, second)
    for v in nn.get_parameters(grad_only=False).values():
        v.d = v.d + 1  # the network moves on: loading the first would change it
    before = values()
    with pytest.raises(DpnbError, match=problem):
        nn.load_parameters(path)
    for name, value in values().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_a_file_whose_names_clash_with_the_network_changes_nothing(tmp_path):
    nn.parameter.get_parameter_or_create("zz", (2,))
    path = tmp_path / "p.npz"
    nn.save_parameters(path, params={"a": nn.Variable.from_numpy_array(np.ones((3, 4))),
                                     "zz/b": nn.Variable.from_numpy_array(np.ones(2))})
    with pytest.raises(DpnbError, match="'zz' is a parameter of the network, not a scope"):
        nn.load_parameters(path)
    assert list(nn.get_parameters(grad_only=False)) == ["zz"]


def _trained_solver():
    """An Adam solver over the small network, one step taken."""
    x, y = small_network()
    x.d = np.random.RandomState(0).rand(*x.shape)
    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())
    loss = nn.functions.mean(y)
    loss.forward()
    solver.zero_grad()
    loss.backward()
    solver.update()
    return solver, loss


def _states(solver) -> dict:
    return {f"{name}/{key}": v.d.copy() for name, state in solver.get_states().items()
            for key, v in state.pstate.items()}


def test_solver_states_with_a_bad_second_entry_leave_the_solver_untouched(tmp_path):
    solver, loss = _trained_solver()
    path = tmp_path / "s.h5"
    solver.save_states(path)
    with h5py.File(path, "a") as h5:
        del h5["fc2/affine/W/var"]
        h5["fc2/affine/W/var"] = "a string"
    loss.forward()
    loss.backward()
    solver.update()  # the solver moves on: loading the first states would change it
    before = _states(solver)
    with pytest.raises(DpnbError, match=r"s\.h5'.*'fc2/affine/W/var'.*not numeric"):
        solver.load_states(path)
    for name, value in _states(solver).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_a_load_of_several_files_changes_nothing_when_one_is_bad(tmp_path):
    x, y = small_network()
    net = {"name": "net", "batch_size": 2, "outputs": {"y": y}, "names": {"x": x}}
    save_network(tmp_path / "n.nnp", {"networks": [net]})
    nn.save_parameters(tmp_path / "good.h5")
    _h5_with_second(tmp_path / "bad.h5", lambda h5, name: h5.create_dataset(name, data="x"))
    for v in nn.get_parameters(grad_only=False).values():
        v.d = 0  # the files hold other values
    with pytest.raises(DpnbError, match=r"bad\.h5.*not numeric"):
        nnabla_load.load([str(tmp_path / "n.nnp"), str(tmp_path / "good.h5"),
                          str(tmp_path / "bad.h5")], prepare_data_iterator=False)
    assert all(not v.any() for v in values().values())


# -- item 4: external and virtual storage -------------------------------------------------


def test_an_h5_dataset_stored_in_another_file_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the password is swordfish!!!")  # 28 bytes: 7 float32
    path = tmp_path / "p.h5"
    with h5py.File(path, "w") as h5:
        h5.create_dataset("w", (7,), np.float32, external=[(str(secret), 0, 28)])
    with pytest.raises(DpnbError, match=r"p\.h5'.*dataset 'w' stored outside the file"):
        nn.load_parameters(path)
    assert nn.get_parameters() == {}


def test_an_h5_virtual_dataset_is_refused(tmp_path):
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as h5:
        h5["data"] = np.arange(4, dtype=np.float32)
    layout = h5py.VirtualLayout((4,), np.float32)
    layout[:] = h5py.VirtualSource(str(source), "data", shape=(4,))
    path = tmp_path / "p.h5"
    with h5py.File(path, "w") as h5:
        h5.create_virtual_dataset("w", layout)
    with pytest.raises(DpnbError, match="dataset 'w' stored outside the file"):
        nn.load_parameters(path)


# -- item 8: temporaries of killed saves ---------------------------------------------------


def _temporaries(directory, target: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(f".{target}.") and n.endswith(".tmp")]


def _saving_forever(path) -> int:
    """A forked child saving the current parameters to ``path`` again and again; its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            while True:
                nn.save_parameters(path)
        finally:
            os._exit(1)
    return pid


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ext", [".h5", ".npz", ".nnp", ".protobuf"])
def test_saves_killed_midway_leave_temporaries_that_the_next_save_removes(tmp_path, ext):
    size = (1 << 20) if ext == ".protobuf" else (4 << 20)  # 4 or 16 MB
    nn.parameter.get_parameter_or_create("w", (size,), np.random.RandomState(0).rand(size))
    target = tmp_path / f"p{ext}"
    nn.save_parameters(target)
    expected = nn.get_parameters()["w"].d.copy()
    kills = 0
    while kills < 4 or not _temporaries(tmp_path, target.name):
        seen = set(_temporaries(tmp_path, target.name))
        pid = _saving_forever(target)
        deadline = time.monotonic() + 30
        while not set(_temporaries(tmp_path, target.name)) - seen:
            assert time.monotonic() < deadline, "the saving child never started a save"
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        kills += 1
        assert kills < 20
    nn.clear_parameters()
    nn.load_parameters(target)  # the target stayed whole through every kill
    np.testing.assert_array_equal(nn.get_parameters()["w"].d, expected)
    nn.save_parameters(target)
    assert sorted(os.listdir(tmp_path)) == [target.name]


def test_the_temporary_of_a_save_still_going_on_is_kept(tmp_path):
    target = tmp_path / "p.h5"
    started_r, started_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            with atomic_write(target) as f:
                f.write(b"partial")
                os.write(started_w, b"1")
                os.read(go_r, 1)  # hold the temporary until told
                f.write(b" and the rest")
        finally:
            os._exit(0)
    try:
        os.read(started_r, 1)
        live = _temporaries(tmp_path, target.name)
        assert len(live) == 1
        with atomic_write(target) as f:  # another save of the same target sweeps
            f.write(b"other")
        assert _temporaries(tmp_path, target.name) == live
    finally:
        os.write(go_w, b"1")
        os.waitpid(pid, 0)
    assert target.read_bytes() == b"partial and the rest"
    assert _temporaries(tmp_path, target.name) == []


# -- fuzzing every loader ------------------------------------------------------------------


def _mutated(data: bytes, rng: random.Random) -> bytes:
    """``data`` with a few bytes changed, cut short, a piece repeated, or a piece cut out."""
    data = bytearray(data)
    kind = rng.randrange(4)
    a, b = sorted(rng.randrange(len(data)) for _ in range(2))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:
        del data[a:]
    elif kind == 2:
        data[b:b] = data[a:b]
    else:
        del data[a:b]
    return bytes(data)


NUMBER = re.compile(rb"-?\d+(\.\d+)?(e-?\d+)?")
ODD_NUMBERS = [b"-1", b"0", b"-7", b"3.5", b"nan", b"2147483648", b"1099511627776",
               b"99999999999999999999"]


def _mutated_text(data: bytes, rng: random.Random) -> bytes:
    """Protobuf text with a number or three (dims, sizes, values) replaced by odd ones."""
    for _ in range(rng.randint(1, 3)):
        spot = rng.choice(list(NUMBER.finditer(data)))
        data = data[:spot.start()] + rng.choice(ODD_NUMBERS) + data[spot.end():]
    return data


def _mutated_member(data: bytes, rng: random.Random) -> bytes:
    """A zip with one member's bytes mutated, the archive itself well formed."""
    source = zipfile.ZipFile(io.BytesIO(data))
    victim = rng.choice([i.filename for i in source.infolist() if i.file_size])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in source.namelist():
            member = source.read(name)
            archive.writestr(name, _mutated(member, rng) if name == victim else member)
    return out.getvalue()


def _mutation(data: bytes, ext: str, rng: random.Random, i: int) -> bytes:
    """The ``i``-th mutation: of the bytes, or every other one inside the format."""
    if i % 2 and ext in (".nnp", ".npz"):
        return _mutated_member(data, rng)
    if i % 2 and ext == ".nntxt":
        return _mutated_text(data, rng)
    return _mutated(data, rng)


def _fuzzed(tmp_path, valid, ext: str, load, seed: str) -> dict:
    """Load ``MUTATIONS`` mutations of file ``valid``: counts of the outcomes by type."""
    data = valid.read_bytes()
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    path = tmp_path / f"mutated{ext}"
    for i in range(MUTATIONS):
        path.write_bytes(_mutation(data, ext, rng, i))
        try:
            load(path)
            kind = "loaded"
        except DpnbError as e:
            kind = "out of memory" if "ran out of memory" in str(e) else "DpnbError"
        except Exception as e:  # noqa: BLE001 - what the test looks for
            kind = f"{type(e).__name__}: {e}"
        outcomes[kind] = outcomes.get(kind, 0) + 1
    return outcomes


def _valid_files(directory) -> tuple:
    """Valid small files of every kind in ``directory``, and the solver that loads states."""
    x, y = small_network()
    for ext in PARAMETER_FORMATS:
        nn.save_parameters(directory / f"p{ext}")
    solver = S.Adam()
    solver.set_parameters(nn.get_parameters())
    solver.update()
    for ext in STATE_FORMATS:
        solver.save_states(directory / f"s{ext}")
    net = {"name": "net", "batch_size": 2, "outputs": {"y": y}, "names": {"x": x}}
    executor = {"name": "e", "network": "net", "data": ["x"], "output": ["y"]}
    for ext in NETWORK_FORMATS:
        save_network(directory / f"n{ext}", {"networks": [net], "executors": [executor]},
                     include_params=True)
    return solver


LOADERS = ([(f"p{ext}", "load_parameters") for ext in PARAMETER_FORMATS]
           + [(f"s{ext}", "load_states") for ext in STATE_FORMATS]
           + [(f"n{ext}", loader) for ext in NETWORK_FORMATS
              for loader in ("NnpLoader", "utils.load")])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, loader", LOADERS)
def test_fuzzed_files_load_or_raise_a_dpnb_error(tmp_path, name, loader):
    solver = _valid_files(tmp_path)
    load = {"load_parameters": nn.load_parameters,
            "load_states": solver.load_states,
            "NnpLoader": lambda path: NnpLoader(path).get_network("net"),
            "utils.load": lambda path: nnabla_load.load([str(path)],
                                                        prepare_data_iterator=False)}[loader]
    valid = tmp_path / name
    load(valid)
    ext = os.path.splitext(name)[1]
    outcome, peak = in_child(lambda: _fuzzed(tmp_path, valid, ext, load, name),
                             {LIMIT_VARIABLE: str(64 * MiB)})
    assert outcome[0] == "ok", outcome
    outcomes = outcome[1]
    assert set(outcomes) <= {"loaded", "DpnbError"}, outcomes
    assert sum(outcomes.values()) == MUTATIONS
    assert peak < 200 * MiB
