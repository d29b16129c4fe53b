"""Engines as one Slurm job of ``n`` tasks (``dpnb.start(engines="slurm")``).

ipyparallel's ``SlurmEngineSetLauncher`` submits ``srun <engine command>`` with
``sbatch``; without an MPI plugin srun starts ``n`` one-rank MPI worlds, each engine
rank 0.  This launcher's batch script runs ``srun --mpi=pmi2``: Slurm's PMI server,
which the ``mpich`` wheel's MPICH speaks, makes the tasks one MPI world, so engine
ids equal ranks and each rank's local rank is Slurm's ``SLURM_LOCALID``.  It writes
its batch script beside its log instead of the current directory, says why sbatch
refused a job or why it still pends, tells when its job has ended, and ``stop()``
returns once the job has left the queue."""
from __future__ import annotations

import os
import subprocess
import time

from ipyparallel.cluster.launcher import SlurmEngineSetLauncher
from traitlets import Float, Unicode

from ..errors import DpnbError

SRUN_MPI = "pmi2"
# States of a job whose processes may still run (squeue's names).
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                    "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING",
                    "STAGE_OUT", "STOPPED"})
TEMPLATE = f"""#!/bin/sh
#SBATCH --export=ALL
#SBATCH --job-name=dpnb-engines-{{cluster_id}}
#SBATCH --ntasks={{n}}
#SBATCH --output={{output_file}}
srun --mpi={SRUN_MPI} {{program_and_args}}
"""
STATE_CHECK_EVERY = 1.0   # seconds a job state read from squeue is reused


def squeue_state(job_id: str) -> tuple[str | None, str]:
    """The job's state as squeue names it ("PENDING", "CANCELLED", ...) and squeue's
    reason for it ("Resources", "None"); (None, "") where Slurm no longer knows the
    job; ("UNKNOWN", why) where squeue cannot answer."""
    try:
        done = subprocess.run(["squeue", "--noheader", "--states=all", "--jobs", job_id,
                               "--format=%T|%r"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "UNKNOWN", str(e)
    if done.returncode != 0:
        return (None, "") if "Invalid job id" in done.stderr else ("UNKNOWN", done.stderr.strip())
    lines = done.stdout.split()
    if not lines:
        return None, ""
    state, _, reason = lines[0].partition("|")
    return state, reason


class SlurmEngines(SlurmEngineSetLauncher):
    """One Slurm job whose ``n`` tasks are the ranks of one MPI world, one engine each."""

    # how ipyparallel names the class in cluster files and finds it again ("module:Class",
    # its default for classes without an entry point, does not load back)
    entrypoint_name = f"{__name__}.SlurmEngines"

    default_template = Unicode(TEMPLATE)
    stop_timeout = Float(60.0, config=True,
                         help="seconds stop() waits for the cancelled job to end")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        log_dir = os.path.join(self.profile_dir, "log")
        os.makedirs(log_dir, exist_ok=True)
        self.batch_file = os.path.join(log_dir, f"{self.identifier}.sbatch")
        self._state: tuple[str | None, str] = (None, "")
        self._state_read = -float("inf")

    def start(self, n=1):
        """Submit the job; the batch script is removed once sbatch has read it.  A
        DpnbError with sbatch's message where it refuses the job."""
        try:
            return super().start(n)
        except subprocess.CalledProcessError as e:
            message = (e.stderr or b"").decode("utf8", "replace").strip()
            raise DpnbError(f"sbatch refused the job of {n} engine tasks: {message or e}.  "
                            "Ask for what the partition has (n; SBATCH_PARTITION and other "
                            "sbatch variables in env=)") from None
        except FileNotFoundError as e:
            raise DpnbError(f"engines='slurm' submits the engines with sbatch, which is not "
                            f"on PATH here ({e}); start the notebook on a host of the Slurm "
                            "cluster (a login node), or use engines='mpi'") from None
        finally:
            if os.path.exists(self.batch_file):
                os.remove(self.batch_file)

    def _run_command(self, command, **kwargs):
        """A Slurm command's output; its error output goes into the CalledProcessError
        (ipyparallel's lets it reach this process's stderr, far from the notebook)."""
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, **kwargs)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout,
                                                done.stderr)
        return done.stdout.decode("utf8", "replace")

    def job_state(self) -> str | None:
        """The job's state, read from squeue at most every ``STATE_CHECK_EVERY`` seconds."""
        return self._job_state_and_reason()[0]

    def _job_state_and_reason(self) -> tuple[str | None, str]:
        if not self.job_id:
            return None, ""
        if time.monotonic() - self._state_read >= STATE_CHECK_EVERY:
            self._state, self._state_read = squeue_state(self.job_id), time.monotonic()
        return self._state

    def ended(self) -> bool:
        """Whether the submitted job has ended (finished, failed, cancelled or forgotten)."""
        state = self.job_state()
        return bool(self.job_id) and state not in ACTIVE and state != "UNKNOWN"

    def stop(self):
        """Cancel the job (unless it has ended already) and wait until it has ended, at
        most ``stop_timeout`` seconds."""
        output = refused = ""
        if self.job_id and not self._ended_now():
            try:
                output = self._run_command(self.delete_command + [self.job_id])
            except subprocess.CalledProcessError as e:   # it may have ended meanwhile
                refused = (e.stderr or b"").decode("utf8", "replace").strip()
        deadline = time.monotonic() + self.stop_timeout
        while self.job_id and not self._ended_now() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.job_id and not self._ended_now():
            self.log.warning("Slurm job %s was still %s %g s after scancel%s", self.job_id,
                             self.job_state(), self.stop_timeout,
                             f" ({refused})" if refused else "")
        self.notify_stop(dict(job_id=self.job_id, output=output))
        return output

    def _ended_now(self) -> bool:
        """``ended()`` from a fresh squeue answer."""
        self._state_read = -float("inf")
        return self.ended()

    def get_output(self, remove=False):
        """The job's output so far (read again each time: the job may still write it), or
        what Slurm says about a job that has written none yet."""
        try:
            with open(self.output_file) as f:
                self._output = f.read()
        except FileNotFoundError:
            if not self._output and self.job_id:
                state, reason = self._job_state_and_reason()
                why = f", reason: {reason}" if reason and reason != "None" else ""
                return f"(no output yet: Slurm job {self.job_id} is {state}{why})"
        if remove and os.path.isfile(self.output_file):
            os.remove(self.output_file)
        return self._output or ""
