"""What dpnb uses of ipyparallel and IPython beyond their documented API is there, and
``dpnb doctor`` names what is gone and what of dpnb it breaks."""
from __future__ import annotations

from ipyparallel.client.magics import ParallelMagics

from dpnb.cluster.checks import check_ipyparallel
from dpnb.cluster.internals import INTERNALS, Internal, missing


def test_every_internal_dpnb_uses_is_there():
    assert missing() == [], "\n".join(missing())
    assert check_ipyparallel().found


def test_a_gone_internal_is_named_with_its_version_and_use():
    gone = missing([Internal("ipyparallel", "Cluster.no_such_method", "does something"),
                    Internal("no_such_module_of_ipyparallel", "X", "does more"),
                    Internal("ipyparallel", "Client._no_such_socket", "sends", on_instances=True),
                    Internal("ipyparallel", "Client._mux_stream", "sends", on_instances=True),
                    INTERNALS[0]])
    assert len(gone) == 3
    assert gone[0].startswith("ipyparallel.Cluster.no_such_method is gone in ipyparallel 9.")
    assert gone[0].endswith("; dpnb uses it where it does something")
    assert gone[1].startswith("no_such_module_of_ipyparallel does not import (")
    assert gone[2].startswith("ipyparallel.Client._no_such_socket is gone in ipyparallel 9.")


def test_doctor_fails_ipyparallel_where_an_internal_is_gone(monkeypatch):
    monkeypatch.delattr(ParallelMagics, "stream_output")
    check = check_ipyparallel()
    assert not check.found
    assert ("ipyparallel.client.magics.ParallelMagics.stream_output is gone in ipyparallel 9."
            in check.detail)
    assert "shows the ranks' output in rank order" in check.detail
    assert "ipyparallel>=9,<10" in check.fix


def test_doctor_fails_ipyparallel_of_another_major_version(monkeypatch):
    from dpnb.cluster import checks

    monkeypatch.setattr(checks, "_version", lambda name: "10.0.1")
    check = check_ipyparallel()
    assert not check.found and check.detail == "version 10.0.1; dpnb works with 9.x"
