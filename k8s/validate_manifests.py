#!/usr/bin/python3
"""Renders the kvfold kustomizations and checks what the deployment relies on.

usage: /usr/bin/python3 k8s/validate_manifests.py [DIR ...]     (default: base + every overlay)

Each DIR (k8s/base, k8s/overlays/<name>) is rendered with `kubectl kustomize DIR` (kubectl
bundles kustomize), then the rendered objects are checked against the rules of its profile
(the directory's name: base, dev, prod or gpu; docs in k8s/README.md):

  every profile  a memory workload (StatefulSet with a PVC template behind a headless and a
                 client Service, or the RADOS component's Deployment) and the inference
                 Deployment with its client and headless Services; gRPC (or /readyz) probes on
                 real ports; resource requests and limits; securityContext basics; each pod
                 its own ServiceAccount with automountServiceAccountToken: false; the flags
                 ConfigMap mounted where --config points; the model staged by the
                 kvfold-stage-model init step into a volume --model is under; termination
                 grace >= drain delay + drain timeout; /metrics bound to all interfaces.
  dev            one replica each, CPU, --insecure-no-auth given explicitly to both servers.
  prod           HPA on a custom per-pod metric served by prometheus-adapter's rules plus
                 CPU; PodDisruptionBudgets for both workloads; NetworkPolicies (store only
                 from inference pods, inference only from the ingress namespace, default
                 deny); topology spread; tokens and TLS from Secret volumes; ServiceMonitors;
                 no replicas field under the HPA; no gRPC probe on a TLS port.
  gpu            prod plus the CUDA image, nvidia.com/gpu: 1, a GPU toleration and node
                 selector, --backend=cuda.
The Grafana dashboards in k8s/grafana/ may only query series the servers register.

Then it breaks copies of the rendered objects on purpose and checks that each breakage is
reported (so the checks themselves are tested). Exit 0 when all is well, 1 with one line
per problem, 77 (CTest's skip code) when kubectl is not installed.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

try:
    import yaml
except ImportError:
    print("k8s: PyYAML is missing: apt-get install python3-yaml")
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def render(directory):
    """The objects `kubectl kustomize` renders for `directory` (raises on failure)."""
    out = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind and
            (name is None or d.get("metadata", {}).get("name") == name)]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def parse_config(text):
    """{'--flag': 'value' or True} from a --config file (TOML, keys = long flag names)."""
    return {f"--{k}": v if v is True else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in tomllib.loads(text).items()}


def parse_flags(lines):
    """{'--flag': 'value' or True} from arguments."""
    flags = {}
    for line in lines:
        line = line.strip()
        if not line.startswith("--"):
            continue
        name, sep, value = line.partition("=")
        flags[name] = value if sep else True
    return flags


class Workload:
    """A Deployment or StatefulSet with its pod spec and the flags of its first container."""

    def __init__(self, doc, docs):
        self.doc = doc
        self.kind = doc["kind"]
        self.name = doc["metadata"]["name"]
        self.spec = doc["spec"]
        self.pod = self.spec["template"]["spec"]
        self.labels = self.spec["template"]["metadata"].get("labels", {})
        self.container = (self.pod.get("containers") or [{}])[0]
        self.config_problem = None
        self.flags = self._flags(docs)

    def _flags(self, docs):
        args = self.container.get("args", [])
        flags = {}
        for a in args:
            if a.startswith("--config="):
                path = a.split("=", 1)[1]
                text = self._mounted_configmap_file(path, docs)
                if text is None:
                    self.config_problem = f"--config {path} is not a file of a mounted ConfigMap"
                else:
                    try:
                        flags.update(parse_config(text))
                    except tomllib.TOMLDecodeError as e:
                        self.config_problem = f"--config {path} is not valid TOML: {e}"
        for name, value in parse_flags(args).items():
            if name != "--config":
                if name in flags:
                    self.config_problem = f"{name} is set twice (config file and arguments)"
                flags[name] = value
        return flags

    def _mounted_configmap_file(self, path, docs):
        dirname, fname = os.path.split(path)
        mounts = {m["mountPath"]: m["name"] for m in self.container.get("volumeMounts", [])}
        vol = self.volumes().get(mounts.get(dirname), {})
        cm_name = vol.get("configMap", {}).get("name")
        cms = find(docs, "ConfigMap", cm_name)
        return cms[0].get("data", {}).get(fname) if cms else None

    def volumes(self):
        return {v["name"]: v for v in self.pod.get("volumes", [])}

    def mounts(self, container=None):
        c = container or self.container
        return {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}

    def ports(self):
        return {p["containerPort"]: p.get("name") for c in self.pod.get("containers", [])
                for p in c.get("ports", [])}


def workload(docs, name):
    found = [d for d in docs if d.get("kind") in ("Deployment", "StatefulSet")
             and d["metadata"]["name"] == name]
    return Workload(found[0], docs) if len(found) == 1 else None


def check_pod(errors, w, docs):
    what = f"{w.kind} {w.name}"
    pod = w.pod
    if pod.get("securityContext", {}).get("runAsNonRoot") is not True:
        errors.append(f"{what}: pod securityContext.runAsNonRoot must be true")
    sa = pod.get("serviceAccountName")
    if not sa or sa == "default":
        errors.append(f"{what}: no ServiceAccount of its own (serviceAccountName)")
    elif not find(docs, "ServiceAccount", sa):
        errors.append(f"{what}: ServiceAccount {sa} is not in the manifests")
    elif find(docs, "ServiceAccount", sa)[0].get("automountServiceAccountToken") is not False:
        errors.append(f"ServiceAccount {sa}: automountServiceAccountToken must be false")
    if pod.get("automountServiceAccountToken") is not False:
        errors.append(f"{what}: automountServiceAccountToken must be false")
    if w.config_problem:
        errors.append(f"{what}: {w.config_problem}")
    ports = w.ports()
    named = {v: k for k, v in ports.items() if v}
    for c in pod.get("initContainers", []) + pod.get("containers", []):
        cw = f"{what}/{c.get('name')}"
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in res.get(kind, {}):
                    errors.append(f"{cw}: resources.{kind}.{r} missing")
        csc = c.get("securityContext", {})
        if csc.get("allowPrivilegeEscalation") is not False:
            errors.append(f"{cw}: allowPrivilegeEscalation must be false")
        if "ALL" not in csc.get("capabilities", {}).get("drop", []):
            errors.append(f"{cw}: capabilities must drop ALL")
        if csc.get("readOnlyRootFilesystem") is not True:
            errors.append(f"{cw}: readOnlyRootFilesystem must be true")
    c = w.container
    cw = f"{what}/{c.get('name')}"
    ready_probes = 0
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe)
        if not p:
            errors.append(f"{cw}: missing {probe}")
            continue
        handler = p.get("grpc") or p.get("tcpSocket") or p.get("httpGet")
        if handler is None:
            errors.append(f"{cw}: {probe} must be a grpc, httpGet or tcpSocket probe")
            continue
        port = handler.get("port")
        if port not in ports and port not in named:
            errors.append(f"{cw}: {probe} port {port} is not a containerPort")
        if "grpc" in p or ("httpGet" in p and p["httpGet"].get("path") == "/readyz"):
            ready_probes += probe != "livenessProbe"
        if "grpc" in p and w.flags.get("--tls-cert"):
            errors.append(f"{cw}: {probe} is a gRPC probe on a TLS port (Kubernetes' gRPC "
                          "probe speaks plaintext only)")
    return ready_probes


def check_services(errors, docs, w, headless_needed):
    svcs = [s for s in find(docs, "Service") if selects(s["spec"].get("selector"), w.labels)]
    ports = w.ports()
    if not svcs:
        errors.append(f"{w.name}: no Service selects its pods")
    for s in svcs:
        for p in s["spec"].get("ports", []):
            target = p.get("targetPort", p.get("port"))
            if target not in ports and target not in ports.values():
                errors.append(f"Service {s['metadata']['name']}: targetPort {target} not exposed")
    if headless_needed and not any(s["spec"].get("clusterIP") == "None" for s in svcs):
        errors.append(f"{w.name}: no headless Service")
    if not any(s["spec"].get("clusterIP") != "None" for s in svcs):
        errors.append(f"{w.name}: no client (ClusterIP) Service")
    return svcs


def check_memory(errors, docs, w, inf):
    ready = check_pod(errors, w, docs)
    if ready < 2 and not w.flags.get("--tls-cert"):
        errors.append(f"{w.kind} {w.name}: startup and readiness must be gRPC health probes")
    for flag in ("--listen",):
        if flag not in w.flags:
            errors.append(f"memory flags: missing {flag}")
    if w.kind == "StatefulSet":
        templates = {t["metadata"]["name"]: t for t in w.spec.get("volumeClaimTemplates", [])}
        if not templates:
            errors.append("StatefulSet has no volumeClaimTemplates (PVC)")
        for t in templates.values():
            if "storage" not in t["spec"].get("resources", {}).get("requests", {}):
                errors.append(f"PVC template {t['metadata']['name']} requests no storage")
        db_dir = w.flags.get("--db-dir")
        if not any(w.mounts().get(db_dir) == n for n in templates):
            errors.append(f"--db-dir {db_dir} is not on a volumeClaimTemplate mount")
        svcs = check_services(errors, docs, w, headless_needed=True)
        headless = [s["metadata"]["name"] for s in svcs if s["spec"].get("clusterIP") == "None"]
        if w.spec.get("serviceName") not in headless:
            errors.append(f"StatefulSet serviceName {w.spec.get('serviceName')} is not its headless Service")
    else:
        if w.flags.get("--backend") != "rados":
            errors.append("a memory Deployment must run the rados backend (RocksDB has one writer)")
        svcs = check_services(errors, docs, w, headless_needed=False)
    store = inf.flags.get("--memory-store", "") if inf else ""
    host, _, port = str(store).partition(":")
    if not any(s["metadata"]["name"] == host and s["spec"].get("clusterIP") != "None" and
               any(str(p["port"]) == port for p in s["spec"]["ports"]) for s in svcs):
        errors.append(f"--memory-store {store} is not the memory_svc client Service")
    drain = float(w.flags.get("--drain-seconds", 10))
    if w.pod.get("terminationGracePeriodSeconds", 30) < drain:
        errors.append("memory_svc terminationGracePeriodSeconds is shorter than --drain-seconds")


def check_model_staging(errors, w):
    """--model lives in a volume an init step (kvfold-stage-model) fills; its sources are
    mounted at the same paths in the server container (the staged files are links)."""
    model = str(w.flags.get("--model", ""))
    inits = [c for c in w.pod.get("initContainers", [])
             if any("kvfold-stage-model" in x for x in c.get("command", []))]
    if not inits:
        errors.append("inference: no kvfold-stage-model init step stages the model")
        return
    init = inits[0]
    args = parse_flags(init.get("args", []))
    to = str(args.get("--to", ""))
    if not model.startswith(to.rstrip("/") + "/"):
        errors.append(f"--model {model} is not in the staged directory {to}")
    main_mounts = w.mounts()
    init_mounts = w.mounts(init)
    if main_mounts.get(to) is None or main_mounts.get(to) != init_mounts.get(to):
        errors.append(f"the staged directory {to} is not the same volume in both containers")
    src = str(args.get("--from", ""))
    if src:
        src_mount = [p for p in init_mounts if src == p or src.startswith(p.rstrip("/") + "/")]
        if not src_mount or main_mounts.get(src_mount[0]) != init_mounts[src_mount[0]]:
            errors.append(f"the model source {src} is not mounted at the same path in the server")
    elif "--from-url" not in args:
        errors.append("kvfold-stage-model has neither --from nor --from-url")


def check_inference(errors, docs, w, profile):
    ready = check_pod(errors, w, docs)
    if ready < 2:
        errors.append(f"Deployment {w.name}: startup and readiness must be gRPC health or "
                      "/readyz probes")
    for flag in ("--model", "--memory-store", "--listen"):
        if flag not in w.flags:
            errors.append(f"inference flags: missing {flag}")
    svcs = check_services(errors, docs, w, headless_needed=True)
    if not any(s["spec"].get("clusterIP") == "None" and
               any(p.get("name") == "grpc" for p in s["spec"].get("ports", [])) for s in svcs):
        errors.append("inference: no headless gRPC Service for client-side round robin")
    check_model_staging(errors, w)
    metrics = str(w.flags.get("--metrics-listen", ""))
    if not metrics.startswith("0.0.0.0:") and not metrics.startswith("[::]:"):
        errors.append(f"inference --metrics-listen {metrics or '(unset)'} is not on all interfaces")
    elif int(metrics.rsplit(":", 1)[1]) not in w.ports():
        errors.append(f"inference --metrics-listen port {metrics} is not a containerPort")
    grace = w.pod.get("terminationGracePeriodSeconds", 30)
    drain = float(w.flags.get("--drain-delay", 0)) + float(w.flags.get("--drain-timeout-s", 30))
    if grace < drain:
        errors.append(f"inference terminationGracePeriodSeconds {grace} is shorter than "
                      f"--drain-delay + --drain-timeout-s ({drain:g})")
    if profile in ("prod", "gpu"):
        if "replicas" in w.spec:
            errors.append("inference Deployment sets replicas although an HPA owns the count")
    else:
        want = 1 if profile == "dev" else 2
        if w.spec.get("replicas") != want:
            errors.append(f"inference Deployment replicas {w.spec.get('replicas')}, expected {want}")


def check_auth(errors, w, profile):
    what = f"{w.kind} {w.name}"
    tokens, insecure = "--tokens-file" in w.flags, w.flags.get("--insecure-no-auth") is True
    if profile == "base":
        return
    if tokens == insecure:
        errors.append(f"{what}: exactly one of --tokens-file and --insecure-no-auth")
    if profile == "dev" and not insecure:
        errors.append(f"{what}: dev must pass --insecure-no-auth explicitly")
    if profile in ("prod", "gpu"):
        if insecure:
            errors.append(f"{what}: --insecure-no-auth in production")
        secret_mounts = {p for p, name in w.mounts().items() if "secret" in w.volumes().get(name, {})}
        for flag in ("--tokens-file", "--tls-cert", "--tls-key", "--store-token-file",
                     "--memory-store-tls-ca"):
            if flag in ("--store-token-file", "--memory-store-tls-ca") and "memory" in w.name:
                continue
            path = str(w.flags.get(flag, ""))
            if not path:
                errors.append(f"{what}: {flag} missing in production")
            elif os.path.dirname(path) not in secret_mounts:
                errors.append(f"{what}: {flag} {path} is not in a mounted Secret")


def check_prod(errors, docs, inf, mem, directory):
    hpas = [h for h in find(docs, "HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"]["name"] == inf.name]
    if not hpas:
        errors.append("prod: no HorizontalPodAutoscaler for inference")
    else:
        metrics = hpas[0]["spec"].get("metrics", [])
        custom = [m["pods"]["metric"]["name"] for m in metrics if m.get("type") == "Pods"]
        if not any(m in ("kvfold_inference_kv_pool_utilization", "kvfold_inference_queue_depth")
                   for m in custom):
            errors.append("prod: the inference HPA has no KV-pool or queue-depth Pods metric")
        if not any(m.get("type") == "Resource" and m["resource"]["name"] == "cpu" for m in metrics):
            errors.append("prod: the inference HPA has no CPU fallback")
        rules_path = os.path.join(HERE, "overlays", "prod", "prometheus-adapter-values.yaml")
        with open(rules_path) as f:
            rules = yaml.safe_load(f)["rules"]["custom"]
        served = {r["name"]["as"] for r in rules}
        for m in custom:
            if m not in served:
                errors.append(f"prod: HPA metric {m} is not served by prometheus-adapter's rules")
    for w in (inf, mem):
        if not any(selects(p["spec"]["selector"].get("matchLabels"), w.labels)
                   for p in find(docs, "PodDisruptionBudget")):
            errors.append(f"prod: no PodDisruptionBudget for {w.name}")
        if not any(selects(m["spec"]["selector"].get("matchLabels"), w.labels) and
                   any(e.get("port") == "metrics" for e in m["spec"].get("endpoints", []))
                   for m in find(docs, "ServiceMonitor")):
            errors.append(f"prod: no ServiceMonitor scrapes {w.name}")
    if not inf.pod.get("topologySpreadConstraints"):
        errors.append("prod: inference pods have no topologySpreadConstraints")
    check_network_policies(errors, docs, inf, mem)


def allowed_from(docs, w, port):
    """The `from` peers of every policy rule that admits TCP `port` into w's pods; None when a
    rule admits everything (no `from`) or no policy selects the pods (all allowed)."""
    policies = [p for p in find(docs, "NetworkPolicy")
                if "Ingress" in p["spec"].get("policyTypes", ["Ingress"]) and
                selects(p["spec"]["podSelector"].get("matchLabels"), w.labels)]
    if not policies:
        return None
    peers = []
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(x.get("port") in (port, w.ports().get(port)) for x in ports):
                continue
            if "from" not in rule:
                return None
            peers.extend(rule["from"])
    return peers


def check_network_policies(errors, docs, inf, mem):
    mem_port = next(k for k, v in mem.ports().items() if v == "grpc")
    peers = allowed_from(docs, mem, mem_port)
    if peers is None or not peers or not all(
            "namespaceSelector" not in p and
            selects(p.get("podSelector", {}).get("matchLabels"), inf.labels) for p in peers):
        errors.append("prod: NetworkPolicy must admit the store's gRPC port only from inference pods")
    inf_port = next(k for k, v in inf.ports().items() if v == "grpc")
    peers = allowed_from(docs, inf, inf_port)
    if peers is None or not peers or not all(
            "podSelector" not in p and p.get("namespaceSelector") for p in peers):
        errors.append("prod: NetworkPolicy must admit inference's gRPC port only from the "
                      "ingress namespace")


def check_gpu(errors, inf):
    c = inf.container
    if str(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")) != "1":
        errors.append("gpu: inference limits must request nvidia.com/gpu: 1")
    if not any(t.get("key") == "nvidia.com/gpu" for t in inf.pod.get("tolerations", [])):
        errors.append("gpu: no toleration for nvidia.com/gpu")
    if not inf.pod.get("nodeSelector"):
        errors.append("gpu: no nodeSelector for GPU nodes")
    if "cuda" not in c.get("image", ""):
        errors.append(f"gpu: inference image {c.get('image')} is not the CUDA image")
    if inf.flags.get("--backend") != "cuda":
        errors.append("gpu: --backend must be cuda")


def validate(docs, profile, directory):
    errors = []
    for d in docs:
        for field in ("apiVersion", "kind"):
            if field not in d:
                errors.append(f"a document has no {field}")
        if not d.get("metadata", {}).get("name"):
            errors.append(f"a {d.get('kind')} has no metadata.name")
    inf, mem = workload(docs, "kvfold-inference"), workload(docs, "kvfold-memory")
    if inf is None or inf.kind != "Deployment":
        errors.append("expected one Deployment kvfold-inference")
    if mem is None:
        errors.append("expected one workload kvfold-memory (StatefulSet or Deployment)")
    if inf is None or mem is None:
        return errors
    check_memory(errors, docs, mem, inf)
    check_inference(errors, docs, inf, profile)
    for w in (inf, mem):
        check_auth(errors, w, profile)
        if profile == "dev" and w.spec.get("replicas") != 1:
            errors.append(f"dev: {w.name} must run one replica")
    if profile in ("prod", "gpu"):
        check_prod(errors, docs, inf, mem, directory)
    if profile == "gpu":
        check_gpu(errors, inf)
    elif "nvidia.com/gpu" in str(inf.container.get("resources")):
        errors.append(f"{profile}: requests a GPU")
    return errors


def mutations(profile):
    """(break the docs, text the error must contain) pairs for this profile."""
    def pod(ds, name="kvfold-inference"):
        return workload(ds, name).doc["spec"]["template"]["spec"]

    def container(ds, name="kvfold-inference"):
        return pod(ds, name)["containers"][0]

    def args(ds, name="kvfold-inference"):
        return container(ds, name).setdefault("args", [])

    def drop_kind(ds, kind):
        for d in find(ds, kind):
            ds.remove(d)

    cases = [
        (lambda ds: container(ds).pop("readinessProbe"), "missing readinessProbe"),
        (lambda ds: container(ds, "kvfold-memory").pop("livenessProbe"), "missing livenessProbe"),
        (lambda ds: container(ds)["resources"].pop("limits"), "limits.cpu"),
        (lambda ds: container(ds)["securityContext"].update(allowPrivilegeEscalation=True),
         "allowPrivilegeEscalation"),
        (lambda ds: pod(ds).update(automountServiceAccountToken=True),
         "automountServiceAccountToken must be false"),
        (lambda ds: pod(ds, "kvfold-memory").pop("serviceAccountName"), "ServiceAccount of its own"),
        (lambda ds: pod(ds).update(terminationGracePeriodSeconds=5), "is shorter than"),
        (lambda ds: pod(ds).pop("initContainers"), "kvfold-stage-model"),
        (lambda ds: args(ds).append("--metrics-listen=127.0.0.1:9091")
         if not any(a.startswith("--metrics-listen") for a in args(ds)) else None, "set twice"),
        (lambda ds: [ds.remove(s) for s in find(ds, "Service", "inference-svc-headless")],
         "round robin"),
    ]
    if profile == "base":
        cases += [
            (lambda ds: workload(ds, "kvfold-memory").doc["spec"].pop("volumeClaimTemplates"),
             "volumeClaimTemplates"),
            (lambda ds: workload(ds, "kvfold-inference").doc["spec"].update(replicas=1),
             "expected 2"),
            (lambda ds: [ds.remove(s) for s in find(ds, "Service", "memory-svc-headless")],
             "headless"),
        ]
    if profile == "dev":
        cases += [
            (lambda ds: [find(ds, "ConfigMap")[0]["data"].update(
                {k: v.replace("insecure-no-auth = true", "") for k, v in
                 find(ds, "ConfigMap")[0]["data"].items()})], "--insecure-no-auth"),
        ]
    if profile in ("prod", "gpu"):
        cases += [
            (lambda ds: drop_kind(ds, "PodDisruptionBudget"), "no PodDisruptionBudget"),
            (lambda ds: drop_kind(ds, "HorizontalPodAutoscaler"), "HorizontalPodAutoscaler"),
            (lambda ds: [h["spec"].update(metrics=[m for m in h["spec"]["metrics"]
                                                   if m["type"] != "Resource"])
                         for h in find(ds, "HorizontalPodAutoscaler")], "CPU fallback"),
            (lambda ds: drop_kind(ds, "NetworkPolicy"), "only from inference pods"),
            (lambda ds: [p["spec"]["ingress"][0]["from"].append({"namespaceSelector": {}})
                         for p in find(ds, "NetworkPolicy", "kvfold-memory-from-inference")],
             "only from inference pods"),
            (lambda ds: pod(ds).pop("topologySpreadConstraints"), "topologySpreadConstraints"),
            (lambda ds: drop_kind(ds, "ServiceMonitor"), "ServiceMonitor"),
            (lambda ds: pod(ds).update(volumes=[v for v in pod(ds)["volumes"]
                                                if v["name"] != "tls"]), "not in a mounted Secret"),
            (lambda ds: workload(ds, "kvfold-inference").doc["spec"].update(replicas=3),
             "HPA owns"),
            (lambda ds: container(ds)["readinessProbe"].update(grpc={"port": 7071}),
             "TLS port"),
        ]
    if profile == "gpu":
        cases += [
            (lambda ds: container(ds)["resources"]["limits"].pop("nvidia.com/gpu"), "nvidia.com/gpu: 1"),
            (lambda ds: pod(ds).pop("tolerations"), "toleration"),
        ]
    return cases


def self_test(docs, profile, directory):
    problems = []
    for fn, expect in mutations(profile):
        ds = copy.deepcopy(docs)
        fn(ds)
        if not any(expect in e for e in validate(ds, profile, directory)):
            problems.append(f"self-test: breaking '{expect}' went unnoticed")
    return problems


def registered_metrics():
    """Metric names the servers register: string literals "kvfold_..." in their sources."""
    names = set()
    root = os.path.dirname(HERE)
    for sub in ("inference_svc/service", "memory_svc/service"):
        d = os.path.join(root, sub)
        for f in os.listdir(d) if os.path.isdir(d) else []:
            if f.endswith(".cc"):
                with open(os.path.join(d, f)) as src:
                    names.update(re.findall(r'"(kvfold_[a-z0-9_]+)"', src.read()))
    return names


def check_dashboards(dashboards, registered):
    """Every kvfold_* series a dashboard queries is one the servers export."""
    errors = []
    for name, dash in dashboards.items():
        exprs = [t.get("expr", "") for p in dash.get("panels", []) for t in p.get("targets", [])]
        if not exprs:
            errors.append(f"dashboard {name}: no queries")
        for e in exprs:
            for m in re.findall(r"kvfold_[a-z0-9_]+", e):
                base = re.sub(r"_(bucket|sum|count)$", "", m)
                if m not in registered and base not in registered:
                    errors.append(f"dashboard {name}: {m} is not a metric the servers export")
    return errors


def main():
    dirs = sys.argv[1:] or [os.path.join(HERE, "base")] + sorted(
        os.path.join(HERE, "overlays", d) for d in os.listdir(os.path.join(HERE, "overlays")))
    if shutil.which("kubectl") is None:
        print("k8s: SKIP: kubectl is not installed (it renders the kustomizations)")
        return SKIP
    failed = 0
    dashboards = {}
    for f in sorted(os.listdir(os.path.join(HERE, "grafana"))):
        with open(os.path.join(HERE, "grafana", f)) as src:
            dashboards[f] = json.load(src)
    registered = registered_metrics()
    errors = check_dashboards(dashboards, registered)
    broken = copy.deepcopy(dashboards)
    next(iter(broken.values()))["panels"][0]["targets"][0]["expr"] = "rate(kvfold_no_such_total[1m])"
    if not check_dashboards(broken, registered):
        errors.append("self-test: a dashboard query of an unknown metric went unnoticed")
    for e in errors:
        print(f"k8s: grafana: {e}")
    print(f"k8s: grafana: {len(dashboards)} dashboard(s): {'OK' if not errors else 'problems'}")
    failed += bool(errors)
    for directory in dirs:
        profile = os.path.basename(os.path.normpath(directory))
        if profile not in ("base", "dev", "prod", "gpu"):
            print(f"k8s: {directory}: unknown profile {profile}")
            failed += 1
            continue
        try:
            docs = render(directory)
        except (RuntimeError, subprocess.TimeoutExpired, yaml.YAMLError) as e:
            print(f"k8s: {directory}: kubectl kustomize failed: {e}")
            failed += 1
            continue
        errors = validate(docs, profile, directory) + self_test(docs, profile, directory)
        for e in errors:
            print(f"k8s: {profile}: {e}")
        kinds = {}
        for d in docs:
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        print(f"k8s: {profile}: {len(docs)} objects ({summary}), {len(mutations(profile))} "
              f"breakages detected: {'OK' if not errors else f'{len(errors)} problem(s)'}")
        failed += bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
