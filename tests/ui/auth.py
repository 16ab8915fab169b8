"""The dashboard tests' principals: tokens from `jobwire token new` and the auth file granting them."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# name -> grants. `oncall` acts in the dashboard, `support` only looks; `seeder` makes the jobs
# through the SDK (and runs the workers) and reads what gRPC says.
PRINCIPALS: dict[str, list[dict[str, list[str]]]] = {
    "oncall": [{"queues": ["*"], "roles": ["admin"]}],
    "support": [{"queues": ["*"], "roles": ["viewer"]}],
    "seeder": [{"queues": ["*"], "roles": ["producer", "worker", "admin"]}],
}


@dataclass
class Auth:
    """The auth file's path and each principal's token (secret: never in a URL, log or page)."""

    file: Path
    tokens: dict[str, str] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)


def new_token(binary: str, token_id: str) -> tuple[str, str]:
    """(token, SHA-256 hex of its secret) from `jobwire token new --id ID`."""
    out = subprocess.run(
        [binary, "token", "new", "--id", token_id], check=True, capture_output=True, text=True
    ).stdout
    token = out.splitlines()[0].strip()
    hashes = re.findall(r"sha256\W+([0-9a-f]{64})", out)
    assert token.startswith(f"jw_{token_id}_") and len(hashes) == 1, f"unexpected `token new` output:\n{out}"
    return token, hashes[0]


def make_auth(binary: str, directory: Path) -> Auth:
    auth = Auth(directory / "auth.yaml")
    for name in PRINCIPALS:
        auth.tokens[name], auth.hashes[name] = new_token(binary, name)
    return auth


def write_auth_file(auth: Auth) -> None:
    lines = ["principals:"]
    for name, grants in PRINCIPALS.items():
        lines += [
            f"  - name: {name!r}",
            "    tokens:",
            f"      - {{id: {name!r}, sha256: {auth.hashes[name]!r}}}",
            "    grants:",
        ]
        lines += [f"      - {{queues: {g['queues']!r}, roles: {g['roles']!r}}}" for g in grants]
    auth.file.write_text("\n".join(lines) + "\n")
