"""Helpers of the browser tests: a private JupyterLab server and Playwright steps on it."""
