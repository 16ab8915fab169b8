"""Helpers over rendered Kubernetes objects."""

import re


def of_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def one(docs, kind, name=None):
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def jobwire_deployment(docs):
    return one(docs, "Deployment")


def container(workload, name):
    for c in workload["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name}")


def env_map(c) -> dict:
    return {e["name"]: e for e in c.get("env", [])}


def container_ports(workload) -> dict:
    """Port name -> number over every container of the workload's pod template."""
    ports = {}
    for c in workload["spec"]["template"]["spec"]["containers"]:
        for p in c.get("ports", []):
            ports[p["name"]] = p["containerPort"]
    return ports


def resolve_port(port, ports: dict) -> int:
    """A named or numbered port -> the container port number (fails if it is not one)."""
    if isinstance(port, str) and not port.isdigit():
        assert port in ports, f"port name {port!r} is not a container port ({ports})"
        return ports[port]
    number = int(port)
    assert number in ports.values(), f"port {number} is not a container port ({ports})"
    return number


def workloads_selected_by(docs, selector: dict):
    return [
        d for d in docs
        if d.get("kind") in ("Deployment", "StatefulSet")
        and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]


_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> float:
    """humantime-style `25s`, `1m30s`, `500ms` -> seconds."""
    parts = re.findall(r"(\d+)\s*(ns|us|ms|s|m|h|d)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration.replace(" ", ""), duration
    return sum(int(n) * _UNITS[u] for n, u in parts)


_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(value: str, defined: dict) -> str:
    """A container env value as the kubelet expands it: `$(NAME)` becomes the value of NAME if
    an earlier entry defined it (else stays as written), `$$` becomes `$`."""

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return defined.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, value)


def expanded_env(c, secret_value) -> dict:
    """Name -> value of the container's env in order, with `$(NAME)` references expanded and
    every secretKeyRef replaced by `secret_value(name, key)`."""
    out: dict = {}
    for e in c.get("env", []):
        if "value" in e:
            out[e["name"]] = expand(e["value"], out)
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            out[e["name"]] = secret_value(ref["name"], ref["key"])
    return out
