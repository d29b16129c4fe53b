"""The controller launcher of dpnb's clusters and of its "mpi" profile (ipcluster, the
IPython Clusters panel): ipyparallel's local one, with the cluster file private.

ipyparallel writes ``security/cluster-<id>.json`` (process ids, paths, the launch
configuration) with the default mode after the controller starts and rewrites it in
place at each change, which keeps a file's mode; so the file is made first, 0600."""
from __future__ import annotations

import os

from ipyparallel.cluster.launcher import LocalControllerLauncher


class PrivateFileControllerLauncher(LocalControllerLauncher):
    """A local controller whose cluster's file only its owner can read."""

    # how ipyparallel names the class in cluster files and finds it again ("module:Class",
    # its default for classes without an entry point, does not load back)
    entrypoint_name = f"{__name__}.PrivateFileControllerLauncher"

    def start(self):
        security = os.path.join(self.profile_dir, "security")
        os.makedirs(security, mode=0o700, exist_ok=True)
        path = os.path.join(security, f"cluster-{self.cluster_id}.json")
        # empty until ipyparallel writes it (attach waits for that); one an earlier start
        # left may have another mode
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.chmod(path, 0o600)
        return super().start()
