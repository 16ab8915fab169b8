"""README.md's "The dashboard" subsection against the repository and the binary.

The pictures it shows exist and are PNGs of the screenshot size (scripts/ui-screenshots.sh
makes them at the 1280x800 viewport), the flags it names are `jobwire serve`'s own, and the
chart values it names are in helm/jobwire/values.yaml.
"""

from __future__ import annotations

import re
import struct
import subprocess

from conftest import README_SHOTS, REPO_ROOT, VIEWPORT, jobwire_binary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def dashboard_section() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    m = re.search(r"^### The dashboard\n(.*?)(?=^#{2,3} )", readme, re.S | re.M)
    assert m, "README.md has no '### The dashboard' subsection"
    return m.group(1)


def test_the_readme_pictures_exist_and_are_screenshots():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", dashboard_section())
    assert sorted(images) == sorted(f"docs/img/{f}" for f in README_SHOTS.values()), images
    for image in images:
        path = REPO_ROOT / image
        assert path.is_file(), f"{image} is referenced by README.md but missing"
        head = path.read_bytes()[:24]
        assert head[:8] == PNG_MAGIC, f"{image} is not a PNG"
        width, height = struct.unpack(">II", head[16:24])
        assert (width, height) == (VIEWPORT["width"], VIEWPORT["height"]), (image, width, height)
        assert path.stat().st_size < 400 * 1024, f"{image} is {path.stat().st_size} bytes"


def test_the_flags_it_names_are_the_servers():
    section = dashboard_section()
    help_text = subprocess.run(
        [jobwire_binary(), "serve", "--help"], check=True, capture_output=True, text=True
    ).stdout
    flags = set(re.findall(r"`(--[a-z][a-z-]+)", section))
    envs = set(re.findall(r"`(JOBWIRE_[A-Z_]+)", section))
    assert {"--ui", "--ui-read-only"} <= flags, flags
    for flag in flags:
        assert re.search(rf"\s{re.escape(flag)}\b", help_text), f"README names {flag}, serve --help does not"
    for env in envs:
        assert env in help_text, f"README names {env}, serve --help does not"


def test_the_chart_values_it_names_are_the_charts():
    values = (REPO_ROOT / "helm" / "jobwire" / "values.yaml").read_text()
    named = set(re.findall(r"`(ui\.[A-Za-z]+): (?:true|false)`", dashboard_section()))
    assert named == {"ui.enabled", "ui.readOnly"}, named
    block = re.search(r"^ui:\n((?:[ #].*\n|\n)*)", values, re.M)
    assert block, "helm/jobwire/values.yaml has no ui: block"
    for name in named:
        key = name.split(".", 1)[1]
        assert re.search(rf"^  {key}: ", block.group(1), re.M), f"values.yaml has no {name}"
