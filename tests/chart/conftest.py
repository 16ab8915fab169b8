"""Shared fixtures of the chart tests: the three CI renders and `jobwire serve --help`."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import render  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if render.have_helm():
        return
    skip = pytest.mark.skip(reason="helm-python-sdk is not installed: the chart cannot be rendered")
    for item in items:
        if "rendered" in item.fixturenames or "rendered_all" in item.fixturenames:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def rendered_all() -> dict[str, list[dict]]:
    """CI values file name -> the Kubernetes objects it renders."""
    return {name: render.manifests(render.load_values(path)) for name, path in render.CI_VALUES.items()}


@pytest.fixture(params=list(render.CI_VALUES))
def rendered(request, rendered_all) -> list[dict]:
    return rendered_all[request.param]


@pytest.fixture(scope="session")
def serve_help() -> str:
    """`jobwire serve --help` of the binary cargo built (JOBWIRE_BIN overrides the path)."""
    binary = os.environ.get("JOBWIRE_BIN", str(render.REPO / "target" / "debug" / "jobwire"))
    if not Path(binary).exists():
        pytest.fail(f"{binary} does not exist: run `cargo build --locked` first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWIRE_")}
    out = subprocess.run([binary, "serve", "--help"], env=env, check=True, capture_output=True, text=True)
    return out.stdout


@pytest.fixture(scope="session")
def documented_env(serve_help) -> set[str]:
    names = set(re.findall(r"\[env: (JOBWIRE_[A-Z0-9_]+)", serve_help))
    assert len(names) >= 10, f"parsed too few JOBWIRE_* variables from --help: {names}"
    return names


@pytest.fixture(scope="session")
def documented_flags(serve_help) -> set[str]:
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", serve_help, re.M))
