"""The chart's dashboard settings: `ui.enabled` passes `--ui` (and `ui.readOnly`
`--ui-read-only`), flags the binary has; the dashboard gets its own Service with
`sessionAffinity: ClientIP` (sessions are per replica) that selects jobwire's pods and that the
ServiceMonitor does not scrape; the main Service keeps per-connection balancing; the
NetworkPolicy lets `networkPolicy.uiFrom` reach the HTTP port."""

import pytest

import render
from k8s import container, jobwire_deployment, of_kind, one, workloads_selected_by

AUTH = {"principals": [{"name": "ci", "tokens": [{"id": "ci", "sha256": "ab" * 32}],
                        "grants": [{"queues": ["*"], "roles": ["admin"]}]}]}


def needs_helm():
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")


def args_of(docs) -> list[str]:
    return container(jobwire_deployment(docs), "jobwire")["args"]


def ui_services(docs) -> list[dict]:
    return [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == "jobwire-ui"]


def test_the_dashboard_is_off_by_default():
    needs_helm()
    docs = render.manifests({"auth": {"config": AUTH}})
    assert "--ui" not in args_of(docs) and "--ui-read-only" not in args_of(docs)
    assert ui_services(docs) == []


def test_ui_flags_are_flags_of_the_binary(documented_flags):
    for flag in ("--ui", "--ui-read-only", "--ui-session-idle", "--ui-session-max", "--ui-cookie-secure"):
        assert flag in documented_flags, f"{flag} is not a flag of `jobwire serve`"


@pytest.mark.parametrize("read_only", [False, True])
def test_ui_enabled_passes_the_flags_and_adds_a_sticky_service(read_only):
    needs_helm()
    docs = render.manifests({"auth": {"config": AUTH},
                             "ui": {"enabled": True, "readOnly": read_only,
                                    "sessionAffinityTimeoutSeconds": 600}})
    args = args_of(docs)
    assert "--ui" in args
    assert ("--ui-read-only" in args) == read_only
    svc = one(docs, "Service", "jobwire-ui")["spec"]
    assert svc["sessionAffinity"] == "ClientIP"
    assert svc["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] == 600
    assert [p["name"] for p in svc["ports"]] == ["http"], "the dashboard Service carries HTTP only"
    assert svc["ports"][0]["targetPort"] == "http"
    assert workloads_selected_by(docs, svc["selector"]) == [jobwire_deployment(docs)]
    main = one(docs, "Service", "jobwire")["spec"]
    assert main.get("sessionAffinity", "None") == "None", "gRPC keeps per-connection balancing"


def test_the_service_monitor_does_not_scrape_the_dashboard_service():
    needs_helm()
    docs = render.manifests({"auth": {"config": AUTH}, "ui": {"enabled": True},
                             "serviceMonitor": {"enabled": True}})
    selector = one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    scraped = [s["metadata"]["name"] for s in of_kind(docs, "Service")
               if selector.items() <= s["metadata"]["labels"].items()]
    assert scraped == ["jobwire"]


def test_network_policy_lets_ui_from_reach_the_http_port():
    needs_helm()
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    docs = render.manifests({"auth": {"config": AUTH}, "ui": {"enabled": True},
                             "networkPolicy": {"enabled": True, "uiFrom": [peer]}})
    policy = one(docs, "NetworkPolicy", "jobwire")
    rules = [r for r in policy["spec"]["ingress"] if r.get("from") == [peer]]
    assert len(rules) == 1 and rules[0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    without = render.manifests({"auth": {"config": AUTH}, "networkPolicy": {"enabled": True, "uiFrom": [peer]}})
    assert all(r.get("from") != [peer] for r in one(without, "NetworkPolicy", "jobwire")["spec"]["ingress"])


def test_ci_values_with_the_dashboard(rendered_all):
    assert "--ui" in args_of(rendered_all["all-enabled"])
    assert {"--ui", "--ui-read-only", "--ui-cookie-secure"} <= set(args_of(rendered_all["secure"]))
    assert "--ui" not in args_of(rendered_all["defaults"])
