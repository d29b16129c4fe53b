"""The communicator's machinery, not an API: imported only by ``dpnb.communicators``
(and by dpnb's tests), and free to change.

``exchange`` (what every collective goes through) runs ``plan``s (chunks of
memory, one rank's part in a collective) after the ``agreement`` check (small
collectives inline in it), over the ``mpi`` and ``nccl`` transports; ``wait``
holds the ``Guard`` that waits with the timeout, reports stalls and deadlocks
and marks the communicator broken, reading the ``status_board`` where every
rank publishes the collective it entered (and ``exits`` its exit)."""
