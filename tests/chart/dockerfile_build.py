"""Runs the build stage of the Dockerfile without a Docker engine.

Replays the first stage's WORKDIR, COPY and RUN instructions in a temporary directory: the
build context is a clean copy of the committed tree (`git archive HEAD`) filtered by
.dockerignore, each WORKDIR maps to a directory under the temporary root, and each RUN runs with
bash there. This catches what can break the image build: a file the build needs but the
Dockerfile (or .dockerignore) leaves out, a stale Cargo.lock (`--locked`), stub sources that no
longer satisfy the manifest, and a cached stub build hiding the real sources.

  --full   run the RUN lines as written (`cargo build --release --locked`, own target dir):
           the real image build step, about as slow as a clean release build.
  default  same steps, with `cargo check --locked` in place of the release build and the target
           dir target/docker-check (kept between runs): build scripts run, so a missing proto
           shows, and --locked checks the lock file; only code generation and linking are
           skipped. Not the repository's own target/: cargo hashes path packages by their path
           relative to the workspace, so a build from the clean copy would overwrite
           target/debug/jobwire while cargo still thinks the repository's build is fresh.

Only the instructions this Dockerfile uses are understood (ARG, FROM, WORKDIR, COPY, RUN,
comments and continuation lines); anything else in the build stage is an error, so the check
cannot silently skip a step.
"""

import argparse
import fnmatch
import io
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASE_CMD = "cargo build --release --locked"


def instructions(dockerfile: Path):
    """Yields (keyword, argument) for each instruction, continuation lines joined."""
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, arg = line.partition(" ")
        yield keyword.upper(), arg.strip()


def ignore_patterns():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.strip().startswith("#")]


def ignored(path: str, patterns) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.strip("/")
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            result = not negate
    return result


def build_context(dest: Path):
    """A clean copy of HEAD, minus what .dockerignore excludes."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "HEAD"],
        check=True, capture_output=True,
    ).stdout
    patterns = ignore_patterns()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and not ignored(m.name, patterns)]
        tar.extractall(dest, members=members, filter="data")
    return len(members)


def copy(context: Path, workdir: Path, arg: str):
    words = shlex.split(arg)
    if any(w.startswith("--") for w in words):
        raise SystemExit(f"dockerfile_build: COPY flags are not understood in the build stage: {arg}")
    *sources, target = words
    dest = workdir / target
    for src in sources:
        path = context / src
        if not path.exists():
            raise SystemExit(
                f"dockerfile_build: COPY {src}: not in the build context "
                "(missing from the tree or excluded by .dockerignore)"
            )
        to = dest / path.name if target.endswith("/") or len(sources) > 1 else dest
        if path.is_dir():
            to = dest
            subprocess.run(["mkdir", "-p", str(to)], check=True)
            subprocess.run(["cp", "-a", f"{path}/.", str(to)], check=True)
        else:
            to.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", str(path), str(to)], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="real release build, own target dir")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="jobwire-docker-") as tmp:
        root = Path(tmp) / "root"
        context = Path(tmp) / "context"
        context.mkdir()
        count = build_context(context)
        print(f"dockerfile_build: build context: {count} files from HEAD after .dockerignore")
        env = dict(os.environ)
        if not args.full:
            env["CARGO_TARGET_DIR"] = str(REPO / "target" / "docker-check")
        stage = 0
        workdir = root
        release_runs = 0
        copied_out = []
        started = time.monotonic()
        for keyword, arg in instructions(REPO / "Dockerfile"):
            if keyword == "FROM":
                stage += 1
                continue
            if stage > 1:
                if keyword == "COPY" and arg.startswith("--from="):
                    copied_out.append(shlex.split(arg)[1])
                continue
            if stage == 0:
                if keyword != "ARG":
                    raise SystemExit(f"dockerfile_build: {keyword} before FROM")
                continue
            if keyword == "WORKDIR":
                workdir = root / arg.lstrip("/")
                workdir.mkdir(parents=True, exist_ok=True)
            elif keyword == "COPY":
                copy(context, workdir, arg)
            elif keyword == "RUN":
                if RELEASE_CMD in arg:
                    release_runs += 1
                    if not args.full:
                        arg = arg.replace(RELEASE_CMD, "cargo check --locked")
                print(f"dockerfile_build: RUN {arg}", flush=True)
                subprocess.run(["bash", "-euo", "pipefail", "-c", arg], cwd=workdir, env=env, check=True)
            elif keyword == "ARG":
                continue
            else:
                raise SystemExit(f"dockerfile_build: {keyword} is not understood in the build stage")
        if release_runs == 0:
            raise SystemExit(f"dockerfile_build: the build stage never runs `{RELEASE_CMD}`")
        if args.full:
            if not copied_out:
                raise SystemExit("dockerfile_build: no later stage copies from the build stage")
            for path in copied_out:
                if not (root / path.lstrip("/")).exists():
                    raise SystemExit(f"dockerfile_build: {path} missing after the build")
            binary = root / copied_out[0].lstrip("/")
            out = subprocess.run([str(binary), "--version"], check=True, capture_output=True, text=True)
            if not out.stdout.startswith("jobwire "):
                raise SystemExit(f"dockerfile_build: {binary} is not the real jobwire (a stub?): "
                                 f"--version printed {out.stdout!r}")
            print(f"dockerfile_build: built {out.stdout.strip()}")
        print(f"dockerfile_build: build stage OK ({'full' if args.full else 'quick'}) "
              f"in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
