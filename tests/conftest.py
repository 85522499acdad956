"""Shared test setup: headless rendering before anything imports mujoco."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
