"""docs/security.md's walk-through, run as written.

Every ```sh block between `<!-- walkthrough -->` and `<!-- /walkthrough -->` runs, in order, in
one bash (`set -euo pipefail`) in an empty directory, with the built jobwire and the venv's
grpcurl first on the PATH; the doc's ports are swapped for free ones. Each ```text block is what
the sh block before it prints: every one of its lines must be in that block's output (lines
with `...` elide something that changes from run to run, such as a token: only the text around
the `...` is checked).
"""

from __future__ import annotations

import os
import re
import subprocess

from conftest import REPO_ROOT, free_port, jobwire_binary

DOC = REPO_ROOT / "docs" / "security.md"
MARK = "@@walkthrough-block@@"


def blocks() -> list[tuple[str, str]]:
    """(kind, body) of each fenced block of the walk-through, kind `sh` or `text`."""
    text = DOC.read_text()
    start, end = text.index("<!-- walkthrough -->"), text.index("<!-- /walkthrough -->")
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(sh|text)\n(.*?)```", text[start:end], re.S)]


def expected_parts(line: str) -> list[str]:
    return [p.strip() for p in line.split("...") if p.strip()]


def test_walkthrough_runs_as_written(tmp_path):
    found = blocks()
    assert [k for k, _ in found].count("sh") >= 8, "the walk-through lost its commands"
    grpc_port, http_port = free_port(), free_port()
    script = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for kind, body in found:
        if kind == "sh":
            body = re.sub(r"\b50443\b", str(grpc_port), re.sub(r"\b9443\b", str(http_port), body))
            script += [f"echo {MARK}", body]
    env = dict(os.environ)
    env = {k: v for k, v in env.items() if not k.startswith("JOBWIRE_")}
    env["PATH"] = os.pathsep.join([str(jobwire_binary().parent), str(REPO_ROOT / ".venv" / "bin"), env["PATH"]])
    env["REPO"] = str(REPO_ROOT)
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    log = (tmp_path / "jobwire.log").read_text() if (tmp_path / "jobwire.log").exists() else ""
    assert proc.returncode == 0, f"the walk-through failed:\n{output}\n--- jobwire.log ---\n{log[-3000:]}"
    outputs = proc.stdout.split(MARK + "\n")[1:]
    sh_index = -1
    for kind, body in found:
        if kind == "sh":
            sh_index += 1
            continue
        got = outputs[sh_index]
        body = re.sub(r"\b50443\b", str(grpc_port), re.sub(r"\b9443\b", str(http_port), body))
        for line in filter(None, (l.strip() for l in body.splitlines())):
            for part in expected_parts(line):
                assert part in got, f"block {sh_index + 1} does not print {part!r}; it printed:\n{got}"
