"""Render the chart with Helm's own engine and check the output against our rules.

    check.py render CHART OUT [--values FILE]...   schema, helm lint, render, then `policy` and `chart`
    check.py policy FILE...                        the security rules, on any manifests

Exits 1 with one line per problem. `kubernetes-validate --strict` is run on OUT by the caller.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

import yaml

WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "Pod"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                  "CustomResourceDefinition", "PersistentVolume", "StorageClass", "Node",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
WRITES = {"create", "patch", "update", "delete", "deletecollection", "*"}
# What the kube runtime may do; anything beyond it is a finding (see templates/rbac.yaml).
RBAC_VERBS = {"get", "list", "watch", "create", "patch", "delete"}
RBAC_RESOURCES = {"namespaces", "resourcequotas", "limitranges", "networkpolicies", "serviceaccounts",
                  "persistentvolumeclaims", "secrets", "pods", "pods/log", "pods/exec", "events",
                  "volumesnapshots", "persistentvolumes"}
# Subresources reached by a CONNECT (a stream into a pod), not by a write of an object.
CONNECTS = {"pods/exec", "pods/attach", "pods/portforward", "pods/proxy"}


def load_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def where(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def pod_spec(doc: dict) -> dict | None:
    if doc.get("kind") not in WORKLOADS:
        return None
    if doc["kind"] == "Pod":
        return doc.get("spec", {})
    return doc.get("spec", {}).get("template", {}).get("spec", {})


def check_image(ref: str) -> str | None:
    if "@sha256:" in ref:
        return None
    name = ref.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {ref} has no tag"
    if name.rsplit(":", 1)[1] == "latest":
        return f"image {ref} uses latest"
    return None


def rbac(role: dict) -> list[str]:
    """Only the runtime's verbs and resources: no wildcards, no RBAC objects (escalation), no nodes."""
    problems = []
    for rule in role.get("rules", []):
        groups, res, verbs = set(rule.get("apiGroups", [])), set(rule.get("resources", [])), set(rule.get("verbs", []))
        if "*" in groups | res | verbs or not verbs <= RBAC_VERBS or not res <= RBAC_RESOURCES:
            problems.append(f"{where(role)}: rule beyond the runtime's needs: {rule}")
        if groups - {"", "networking.k8s.io", "snapshot.storage.k8s.io"}:
            problems.append(f"{where(role)}: API groups {sorted(groups)}")
        if "secrets" in res and verbs & {"get", "list", "watch"} and role.get("kind") == "ClusterRole":
            problems.append(f"{where(role)}: reads Secrets (every Secret of the cluster, once bound cluster-wide)")
    return problems


def confined(docs: list[dict]) -> list[str]:
    """A ServiceAccount bound cluster-wide to writes is held to its namespaces by an admission policy."""
    problems = []
    roles = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ClusterRole"}
    policies = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ValidatingAdmissionPolicy"}
    denying = {d["spec"].get("policyName") for d in docs
               if d.get("kind") == "ValidatingAdmissionPolicyBinding"
               and "Deny" in d.get("spec", {}).get("validationActions", [])}
    for binding in (d for d in docs if d.get("kind") == "ClusterRoleBinding"):
        role = roles.get(binding.get("roleRef", {}).get("name"))
        if role is None:
            continue
        writes = {r for rule in role.get("rules", []) if set(rule.get("verbs", [])) & WRITES
                  for r in rule.get("resources", [])}
        if not writes:
            continue
        for subject in binding.get("subjects", []):
            if subject.get("kind") != "ServiceAccount":
                continue
            user = f"system:serviceaccount:{subject.get('namespace')}:{subject.get('name')}"
            covered = set()
            for name, p in policies.items():
                conditions = " ".join(c.get("expression", "") for c in p["spec"].get("matchConditions", []))
                if name in denying and f'"{user}"' in conditions and p["spec"].get("validations"):
                    for rule in p["spec"].get("matchConstraints", {}).get("resourceRules", []):
                        operations, resources = set(rule.get("operations", [])), set(rule.get("resources", []))
                        if {"CREATE", "UPDATE", "DELETE"} <= operations:
                            covered |= resources - CONNECTS
                        if "CONNECT" in operations:
                            covered |= resources & CONNECTS
            if writes - covered:
                problems.append(f"{where(binding)}: {user} writes {sorted(writes - covered)} cluster-wide "
                                "without a ValidatingAdmissionPolicy (with a Deny binding) confining it")
    return problems


def policy(docs: list[dict]) -> list[str]:
    """The "restricted" Pod Security Standard plus our own: resources, pinned images, namespaces, RBAC."""
    problems = confined(docs)
    seen = set()
    for doc in docs:
        w = where(doc)
        key = (doc.get("apiVersion"), doc.get("kind"), doc.get("metadata", {}).get("name"))
        if key in seen:
            problems.append(f"{w}: defined twice")
        seen.add(key)
        if doc.get("kind") not in CLUSTER_SCOPED and not doc.get("metadata", {}).get("namespace"):
            problems.append(f"{w}: no metadata.namespace")
        if doc.get("kind") in ("ClusterRole", "Role"):
            problems += rbac(doc)
        spec = pod_spec(doc)
        if spec is None:
            continue
        psc = spec.get("securityContext", {})
        if psc.get("runAsNonRoot") is not True:
            problems.append(f"{w}: pod securityContext.runAsNonRoot is not true")
        if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            problems.append(f"{w}: pod seccompProfile is not RuntimeDefault")
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(host):
                problems.append(f"{w}: {host}")
        for vol in spec.get("volumes", []):
            if "hostPath" in vol:
                problems.append(f"{w}: hostPath volume {vol.get('name')}")
        containers = spec.get("initContainers", []) + spec.get("containers", [])
        if not spec.get("containers"):
            problems.append(f"{w}: no containers")
        for c in containers:
            cw = f"{w} container {c.get('name')}"
            res = c.get("resources", {})
            for part, names in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
                for n in names:
                    if n not in res.get(part, {}):
                        problems.append(f"{cw}: no resources.{part}.{n}")
            sc = c.get("securityContext", {})
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{cw}: allowPrivilegeEscalation is not false")
            if sc.get("privileged"):
                problems.append(f"{cw}: privileged")
            if sc.get("runAsNonRoot") is False or sc.get("runAsUser") == 0:
                problems.append(f"{cw}: runs as root")
            caps = sc.get("capabilities", {})
            if "ALL" not in caps.get("drop", []):
                problems.append(f"{cw}: capabilities do not drop ALL")
            if caps.get("add"):
                problems.append(f"{cw}: adds capabilities {caps['add']}")
            if sc.get("seccompProfile", {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
                problems.append(f"{cw}: seccompProfile is unconfined")
            bad = check_image(c.get("image", ""))
            if bad:
                problems.append(f"{cw}: {bad}")
    return problems


def chart_rules(docs: list[dict], namespace: str, values: dict) -> list[str]:
    """What deploy/README.md promises about this chart's output."""
    problems = []
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    def one(kind: str, component: str | None = None) -> dict | None:
        found = [d for d in by_kind.get(kind, [])
                 if component is None
                 or d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component]
        if len(found) != 1:
            problems.append(f"expected one {kind} {component or ''}, found {len(found)}")
            return None
        return found[0]

    # The server: replicas, probes, config and database from the Secret.
    server = one("Deployment", "server")
    cm = one("ConfigMap")
    if server is None or cm is None:
        return problems
    spec = server["spec"]
    if spec["replicas"] < 2:
        problems.append(f"server replicas {spec['replicas']} < 2")
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        get = c.get(probe, {}).get("httpGet", {})
        if get.get("port") != "http" or not get.get("path", "").startswith("/"):
            problems.append(f"server {probe} is not an HTTP GET on the http port")
    liveness = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
    if liveness == c.get("readinessProbe", {}).get("httpGet", {}).get("path"):
        problems.append("liveness probes the readiness route: a database outage would restart every replica")
    if c["args"] != ["serve", "--config", "/etc/gpu-sandbox/config.toml"]:
        problems.append(f"server args {c['args']}")
    env = {e["name"]: e for e in c.get("env", [])}
    if "secretKeyRef" not in env.get("SANDBOX_DATABASE_URL", {}).get("valueFrom", {}):
        problems.append("SANDBOX_DATABASE_URL does not come from a Secret")
    if env.get("SANDBOX_SESSIONS__STOP_ON_SHUTDOWN", {}).get("value") != "false":
        problems.append("a server replica that stops would stop every session")
    if spec.get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") != 0:
        problems.append("an upgrade may drop below the replica count")
    if not c["securityContext"].get("readOnlyRootFilesystem"):
        problems.append("server root filesystem is writable")

    # Monitoring: the scraper's token from a Secret, the ServiceMonitor on the server's port and
    # path with that Secret, and a way through the server's NetworkPolicy.
    chart_defaults = yaml.safe_load((Path(__file__).parent.parent / "chart" / "values.yaml").read_text())
    mon = merge(chart_defaults.get("monitoring", {}), values.get("monitoring", {}))
    token_env = env.get("SANDBOX_METRICS__TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
    if mon.get("tokenSecret") and token_env.get("name") != mon["tokenSecret"]:
        problems.append("SANDBOX_METRICS__TOKEN does not come from monitoring.tokenSecret")
    monitors = by_kind.get("ServiceMonitor", [])
    if mon.get("serviceMonitor", {}).get("enabled"):
        if len(monitors) != 1:
            problems.append(f"expected one ServiceMonitor, found {len(monitors)}")
        else:
            sm = monitors[0]["spec"]
            ep = sm["endpoints"][0]
            cred = ep.get("authorization", {}).get("credentials", {})
            if ep.get("port") != "http" or ep.get("path") != "/metrics":
                problems.append("the ServiceMonitor does not scrape /metrics on the http port")
            if cred.get("name") != mon.get("tokenSecret") or cred.get("key") != token_env.get("key"):
                problems.append("the ServiceMonitor's bearer token is not the server's metrics token")
            services = [d for d in by_kind.get("Service", [])
                        if all(d["metadata"].get("labels", {}).get(k) == v
                               for k, v in sm["selector"]["matchLabels"].items())]
            if len(services) != 1:
                problems.append(f"the ServiceMonitor selects {len(services)} Services, not the server's one")
            for policy in by_kind.get("NetworkPolicy", []):
                froms = [f for rule in policy["spec"].get("ingress", []) for f in rule.get("from", [])]
                wanted = mon["serviceMonitor"].get("prometheusNamespaceSelector")
                if not any(f.get("namespaceSelector") == wanted for f in froms):
                    problems.append("the server's NetworkPolicy keeps Prometheus out")
    elif monitors:
        problems.append("a ServiceMonitor although monitoring.serviceMonitor.enabled is false")

    try:
        config = tomllib.loads(cm["data"]["config.toml"])
    except tomllib.TOMLDecodeError as e:
        return problems + [f"config.toml does not parse: {e}"]
    if "database_url" in config:
        problems.append("config.toml holds database_url; it belongs in the Secret")
    kube = config.get("kube", {})
    if config.get("runtime") != "kube" or kube.get("server_namespace") != namespace:
        problems.append(f"config.toml runtime/server_namespace: {config.get('runtime')}/{kube.get('server_namespace')}")

    # Priority: sessions preempt placeholders, placeholders preempt nothing.
    classes = {d["metadata"]["name"]: d for d in by_kind.get("PriorityClass", [])}
    if values.get("priorityClasses", {}).get("create", True):
        session = classes.get(kube.get("session_priority_class"))
        if session is None:
            problems.append(f"no PriorityClass {kube.get('session_priority_class')} for the config's sessions")
        for ph in [d for d in by_kind.get("Deployment", [])
                   if d["metadata"]["labels"].get("app.kubernetes.io/component") == "placeholder"]:
            name = ph["spec"]["template"]["spec"].get("priorityClassName")
            pc = classes.get(name)
            if pc is None or pc["value"] >= 0 or pc.get("preemptionPolicy") != "Never":
                problems.append(f"{where(ph)}: priority class {name} is not negative with preemptionPolicy Never")
            elif session is not None and session["value"] <= pc["value"]:
                problems.append(f"{where(ph)}: sessions cannot preempt it")
            limits = ph["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
            if not {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"} <= set(limits):
                problems.append(f"{where(ph)}: no HAMi slice in its limits")

    # The pre-puller pulls exactly the images the server launches.
    for ds in by_kind.get("DaemonSet", []):
        pulled = {i["image"] for i in ds["spec"]["template"]["spec"].get("initContainers", [])}
        launched = set(kube.get("images", {}).values())
        if pulled != launched:
            problems.append(f"{where(ds)} pulls {sorted(pulled)}, the server launches {sorted(launched)}")

    # The PDB and Service select the server's pods.
    labels = spec["template"]["metadata"]["labels"]
    pdb = one("PodDisruptionBudget")
    svc = one("Service")
    for obj, sel in ((pdb, pdb and pdb["spec"]["selector"]["matchLabels"]), (svc, svc and svc["spec"]["selector"])):
        if obj and not sel.items() <= labels.items():
            problems.append(f"{where(obj)} does not select the server's pods")

    problems += admission_cases(by_kind.get("ValidatingAdmissionPolicy", []), kube.get("namespace_prefix", ""))

    for ing in by_kind.get("Ingress", []):
        if ing["metadata"].get("annotations", {}).get("nginx.ingress.kubernetes.io/proxy-body-size") != "0":
            problems.append(f"{where(ing)}: upload size is limited")

    return problems


def admission_cases(policies: list[dict], prefix: str) -> list[str]:
    """The confining policies, evaluated (cel-python) on the requests the server makes and on ones it must not:
    one for the namespaced objects (held to the namespaces it manages), one for the cluster-scoped dataset volumes."""
    import celpy

    def matching(resource: str) -> list[dict]:
        return [p for p in policies
                if any(resource in r.get("resources", []) for r in p["spec"].get("matchConstraints", {}).get("resourceRules", []))]

    namespaced, volumes = matching("namespaces"), matching("persistentvolumes")
    if len(policies) != 2 or len(namespaced) != 1 or len(volumes) != 1 or namespaced == volumes:
        return [f"expected two ValidatingAdmissionPolicies (namespaces, persistentvolumes), found {len(policies)}"]
    env = celpy.Environment()

    def evaluate(expression: str, activation: dict):
        return env.program(env.compile(expression)).evaluate(celpy.json_to_cel(activation))

    ours = {"app.kubernetes.io/managed-by": "gpu-sandbox"}
    user_ns = {"metadata": {"name": f"{prefix}alice", "labels": ours}}
    foreign_ns = {"metadata": {"name": "kube-system", "labels": {}}}
    lookalike = {"metadata": {"name": f"{prefix}team", "labels": {}}}
    obj = {"metadata": {"name": "x"}}
    exec_options = {"kind": "PodExecOptions", "container": "editor", "command": ["sh", "-c", "cat"]}
    cases = [  # (what, resource, operation, object, oldObject, namespaceObject, allowed)
        ("a user namespace created", "namespaces", "CREATE", user_ns, None, None, True),
        ("a user namespace applied again", "namespaces", "UPDATE", user_ns, user_ns, None, True),
        ("a pod in a user namespace", "pods", "CREATE", obj, None, user_ns, True),
        ("a token Secret deleted in a user namespace", "secrets", "DELETE", None, obj, user_ns, True),
        ("a departed user's namespace deleted", "namespaces", "DELETE", None, user_ns, None, True),
        ("kube-system deleted", "namespaces", "DELETE", None, foreign_ns, None, False),
        ("a namespace with our prefix made by someone else, deleted", "namespaces", "DELETE", None, lookalike, None, False),
        ("kube-system labelled as ours", "namespaces", "CREATE", {"metadata": {"name": "kube-system", "labels": ours}}, None, None, False),
        ("a namespace with our prefix made by someone else, taken over", "namespaces", "UPDATE",
         {"metadata": {"name": f"{prefix}team", "labels": ours}}, lookalike, None, False),
        ("a Secret in kube-system", "secrets", "UPDATE", obj, obj, foreign_ns, False),
        ("a pod in a namespace with our prefix but not ours", "pods", "CREATE", obj, None, lookalike, False),
        ("a workspace snapshot in a user namespace", "volumesnapshots", "CREATE", obj, None, user_ns, True),
        ("a snapshot deleted in kube-system", "volumesnapshots", "DELETE", None, obj, foreign_ns, False),
        # An exec is a CONNECT on pods (subresource exec) whose object is the PodExecOptions.
        ("an exec into a user's editor (promotion)", "pods", "CONNECT", exec_options, None, user_ns, True),
        ("an exec into a pod of kube-system", "pods", "CONNECT", exec_options, None, foreign_ns, False),
        ("an exec into a namespace with our prefix but not ours", "pods", "CONNECT", exec_options, None, lookalike, False),
    ]

    def volume(modes=("ReadOnlyMany",), reclaim="Retain", claim_ns=f"{prefix}alice", labels=ours):
        return {"metadata": {"name": "v", "labels": dict(labels)},
                "spec": {"accessModes": list(modes), "persistentVolumeReclaimPolicy": reclaim,
                         "claimRef": {"namespace": claim_ns, "name": "dataset-imagenet"}}}

    foreign_volume = volume(labels={})
    volume_cases = [
        ("a dataset volume bound in a user namespace", "persistentvolumes", "CREATE", volume(), None, None, True),
        ("a dataset volume applied again", "persistentvolumes", "UPDATE", volume(), volume(), None, True),
        ("a departed user's dataset volume deleted", "persistentvolumes", "DELETE", None, volume(), None, True),
        ("someone else's volume deleted", "persistentvolumes", "DELETE", None, foreign_volume, None, False),
        ("someone else's volume taken over", "persistentvolumes", "UPDATE", volume(), foreign_volume, None, False),
        ("a writable volume", "persistentvolumes", "CREATE", volume(modes=("ReadWriteMany",)), None, None, False),
        ("a volume deleted with its claim", "persistentvolumes", "CREATE", volume(reclaim="Delete"), None, None, False),
        ("a volume bound to a claim in kube-system", "persistentvolumes", "CREATE", volume(claim_ns="kube-system"), None, None, False),
    ]
    problems = []
    for spec, what, resource, operation, new, old, namespace, allowed in (
            [(namespaced[0]["spec"], *c) for c in cases] + [(volumes[0]["spec"], *c) for c in volume_cases]):
        account = spec["matchConditions"][0]["expression"].split('"')[1]
        activation = {"request": {"resource": {"resource": resource}, "operation": operation,
                                  "userInfo": {"username": account}},
                      "object": new, "oldObject": old, "namespaceObject": namespace}
        try:
            activation["variables"] = {v["name"]: evaluate(v["expression"], activation)
                                       for v in spec.get("variables", [])}
            verdict = all(bool(evaluate(v["expression"], activation)) for v in spec["validations"])
        except Exception as e:  # an error is a denial under failurePolicy Fail
            verdict = f"error: {e}" if allowed else False
        if verdict is not allowed:
            problems.append(f"admission policy: {what}: {'allowed' if verdict is True else verdict}, "
                            f"should be {'allowed' if allowed else 'denied'}")
    for p in policies:
        if p["spec"].get("failurePolicy") != "Fail":
            problems.append(f"admission policy {p['metadata']['name']}: failurePolicy is not Fail")
    return problems


def render(chart: str, value_files: list[str], release: str, namespace: str) -> tuple[str, dict]:
    import helm_python as helm  # the Helm Go SDK, through its C ABI

    values: dict = {}
    for f in value_files:
        values = merge(values, yaml.safe_load(Path(f).read_text()) or {})
    lint = helm.lint(chart, values, strict=True, namespace=namespace)
    # Helm severities: 1 info, 2 warning, 3 error; strict fails on warnings too.
    findings = [m for m in lint["messages"] if m["severity"] >= 2] + [{"error": e} for e in lint["errors"]]
    if findings:
        raise SystemExit("helm lint:\n" + "\n".join(f"  {m.get('path', '')}: {m['error']}" for m in findings))
    with helm.Chart.load(chart) as c:
        c.validate_schema(values)
        manifests = c.render(values, name=release, namespace=namespace, is_install=True)
    out = []
    for path in sorted(manifests):
        if path.endswith(".yaml") and manifests[path].strip():
            out.append(f"# Source: {path}\n{manifests[path].strip()}\n")
    return "---\n".join(out), values


def merge(base: dict, over: dict) -> dict:
    """Helm's rule for several -f files: maps merge, everything else is replaced."""
    result = dict(base)
    for k, v in over.items():
        result[k] = merge(result[k], v) if isinstance(v, dict) and isinstance(result.get(k), dict) else v
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("chart")
    r.add_argument("out")
    r.add_argument("--values", action="append", default=[])
    r.add_argument("--release", default="gpu-sandbox")
    r.add_argument("--namespace", default="gpu-sandbox")
    j = sub.add_parser("json", help="render the chart and print its objects as one JSON list")
    j.add_argument("chart")
    j.add_argument("--values", action="append", default=[])
    j.add_argument("--release", default="gpu-sandbox")
    j.add_argument("--namespace", default="gpu-sandbox")
    p = sub.add_parser("policy")
    p.add_argument("files", nargs="+")
    args = ap.parse_args()

    if args.cmd == "json":
        text, _ = render(args.chart, args.values, args.release, args.namespace)
        print(json.dumps(load_docs(text)))
        return 0
    if args.cmd == "render":
        try:
            text, values = render(args.chart, args.values, args.release, args.namespace)
        except Exception as e:  # the SDK's errors carry Helm's message
            print(f"render: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        Path(args.out).write_text(text)
        docs = load_docs(text)
        problems = policy(docs) + chart_rules(docs, args.namespace, values)
        print(f"rendered {len(docs)} objects: " + ", ".join(sorted(where(d) for d in docs)))
    else:
        problems = []
        for f in args.files:
            problems += [f"{f}: {p}" for p in policy(load_docs(Path(f).read_text()))]
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
