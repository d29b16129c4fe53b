"""ipcluster configuration of the IPython profile "mpi" (installed by `dpnb profile install`).

Engines are started by mpiexec, one per MPI rank, through dpnb's engine entry
point, so that engine ids equal ranks.  The controller listens on 127.0.0.1;
see "Several machines" in dpnb's docs/clusters.md before opening it to other hosts."""
from dpnb.cluster.profile import configure

configure(get_config())  # noqa: F821 - get_config is provided by IPython's config loader
