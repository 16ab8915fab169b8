"""README.md's "Clients" section shows each SDK's tested producer and worker.

Every fenced code block of the section must appear, byte for byte, as a fenced block of the
same language in that SDK's own README (clients/<lang>/README.md), whose suite checks its
blocks against the example programs it runs against a real server. So a snippet that drifts
from the tested code fails here, and each language shows both a producer and a worker.
"""

from __future__ import annotations

import re

import pytest

from conftest import REPO_ROOT

SDK_README = {
    "python": REPO_ROOT / "clients" / "python" / "README.md",
    "ts": REPO_ROOT / "clients" / "node" / "README.md",
    "go": REPO_ROOT / "clients" / "go" / "README.md",
    "rust": REPO_ROOT / "clients" / "rust" / "README.md",
}
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def clients_section() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    start = text.index("\n## Clients\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def section_blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(clients_section())]


@pytest.mark.parametrize("lang", sorted(SDK_README))
def test_each_language_shows_a_producer_and_a_worker(lang: str) -> None:
    assert sum(1 for kind, _ in section_blocks() if kind == lang) == 2, lang


@pytest.mark.parametrize("index", range(len(section_blocks())))
def test_each_snippet_is_the_sdk_readme_s_tested_one(index: int) -> None:
    kind, body = section_blocks()[index]
    assert kind in SDK_README, f"a {kind} block in README's Clients section: no SDK README for it"
    theirs = [b for k, b in FENCE.findall(SDK_README[kind].read_text()) if k == kind]
    assert body in theirs, (
        f"README's Clients section, {kind} block {index}: not a block of "
        f"{SDK_README[kind].relative_to(REPO_ROOT)} (copy it from there)\n{body}"
    )
