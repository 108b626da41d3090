"""Python imports this at start-up when this folder is on ``PYTHONPATH``: tests/conftest.py puts it there
under ``COURSE_SIMULATE=mac``, so every Python the test run starts (a notebook's kernel, a test's
subprocess) runs on the imitated Mac build of tests/mac_build.py, as the run itself does."""

import importlib.util
import os
from pathlib import Path

if os.environ.get("COURSE_SIMULATE", "").strip().lower() == "mac":
    spec = importlib.util.spec_from_file_location("mac_build", Path(__file__).resolve().parents[1] / "mac_build.py")
    mac_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mac_build)
    mac_build.apply()
