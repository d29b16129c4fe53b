"""A JupyterLab server of the test's own (127.0.0.1, a free port, a token, private config,
data, runtime, settings and workspace folders) and the system Chromium to drive it."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def find_chromium() -> str | None:
    """Debian's Chromium (Playwright's own download cannot be fetched here), or None."""
    for path in (os.environ.get("DPNB_CHROMIUM"), *CHROMIUM_CANDIDATES):
        if path and os.access(path, os.X_OK):
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """One ``jupyter lab`` process; ``url(path)`` gives an address with the token."""

    def __init__(self, root: Path, home: Path, ipython_dir: Path, log: Path):
        self.root, self.home, self.ipython_dir, self.log = root, home, ipython_dir, log
        self.port = free_port()
        self.token = secrets.token_hex(16)
        for name in ("config", "data", "runtime", "settings", "workspaces"):
            (home / name).mkdir(parents=True, exist_ok=True)
        # Every cell in the DOM, whether scrolled to or not: the tests read all of them.
        tracker = home / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
        tracker.parent.mkdir(parents=True, exist_ok=True)
        tracker.write_text(json.dumps({"windowingMode": "none"}))
        news = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        news.parent.mkdir(parents=True, exist_ok=True)
        news.write_text(json.dumps({"fetchNews": "false"}))
        env = dict(os.environ, IPYTHONDIR=str(ipython_dir),
                   JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
                   JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   OMP_NUM_THREADS="1")
        self._log_file = open(log, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: its restored promise
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=root, env=env, stdout=self._log_file, stderr=subprocess.STDOUT)
        self._wait_ready(timeout=90)

    def url(self, path: str = "lab") -> str:
        sep = "&" if "?" in path else "?"
        return f"http://127.0.0.1:{self.port}/{path}{sep}token={self.token}"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n"
                                   f"{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"jupyter lab did not answer in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def shutdown(self) -> None:
        """Stop the server (its kernels with it), then anything it left in its process group."""
        try:
            req = urllib.request.Request(self.url("api/shutdown"), method="POST")
            urllib.request.urlopen(req, timeout=10).close()
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(timeout=10)
        self._log_file.close()


def copy_notebooks(names, source: Path, root: Path) -> None:
    for name in names:
        shutil.copy(source / name, root / name)
