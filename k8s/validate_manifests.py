#!/usr/bin/python3
"""Validates the kvfold kustomize base without kubectl.

usage: /usr/bin/python3 k8s/validate_manifests.py k8s/base

Parses kustomization.yaml and every resource it lists (PyYAML, Debian python3-yaml), then
checks what the deployment relies on: a memory_svc StatefulSet with a PVC template behind a
headless and a client Service; a 2-replica inference_svc Deployment with its Service;
gRPC health probes on the serving ports; resource requests and limits; securityContext
basics; the flags ConfigMap (generator files, required flags, mounted where --flagfile points);
the models PVC; termination grace at least the drain time from the flags. Then it breaks
copies of the manifests on purpose and checks that each breakage is reported (so the
checks themselves are tested). Exit 0 when all is well, 1 with one line per problem.
"""
import copy
import os
import sys

try:
    import yaml
except ImportError:
    print("k8s: PyYAML is missing: apt-get install python3-yaml (scripts/setup.sh installs it "
          "with python3-torch)")
    sys.exit(1)

MEMORY_FLAGS = {"--listen": "0.0.0.0:7070", "--db_dir": "/data"}
INFERENCE_FLAGS = {"--model": None, "--projector": None, "--memory_store": None,
                   "--listen": "0.0.0.0:7071"}


def load(base):
    """Returns (kustomization, [docs], {flagfile name: {flag: value}}); raises on parse errors."""
    with open(os.path.join(base, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    docs = []
    for res in kustomization.get("resources", []):
        with open(os.path.join(base, res)) as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d is not None)
    flagfiles = {}
    for gen in kustomization.get("configMapGenerator", []):
        for path in gen.get("files", []):
            flags = {}
            with open(os.path.join(base, path)) as f:
                for line in f:
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    name, _, value = line.partition("=")
                    flags[name] = value
            flagfiles[(gen["name"], os.path.basename(path))] = flags
    return kustomization, docs, flagfiles


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind and
            (name is None or d.get("metadata", {}).get("name") == name)]


def port_numbers(container):
    return {p["containerPort"]: p.get("name") for p in container.get("ports", [])}


def check_pod(errors, what, pod_spec, labels, flags):
    """Probes, resources, security and mounts of a pod template."""
    containers = pod_spec.get("containers") or []
    if not containers:
        errors.append(f"{what}: no containers")
        return
    sc = pod_spec.get("securityContext", {})
    if sc.get("runAsNonRoot") is not True:
        errors.append(f"{what}: pod securityContext.runAsNonRoot must be true")
    for c in containers:
        cw = f"{what}/{c.get('name')}"
        ports = port_numbers(c)
        grpc_probes = 0
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = c.get(probe)
            if not p:
                errors.append(f"{cw}: missing {probe}")
                continue
            handler = p.get("grpc") or p.get("tcpSocket")
            if handler is None:
                errors.append(f"{cw}: {probe} must be a grpc (or tcpSocket) probe")
                continue
            if handler.get("port") not in ports:
                errors.append(f"{cw}: {probe} port {handler.get('port')} is not a containerPort")
            if "grpc" in p:
                grpc_probes += 1
        if grpc_probes < 2:
            errors.append(f"{cw}: startup and readiness must be gRPC health probes")
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
        args = c.get("args", [])
        flagfile = [a.split("=", 1)[1] for a in args if a.startswith("--flagfile=")]
        if not flagfile:
            errors.append(f"{cw}: no --flagfile argument")
        else:
            mount_dirs = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            dirname, fname = os.path.split(flagfile[0])
            vol_name = mount_dirs.get(dirname)
            vols = {v["name"]: v for v in pod_spec.get("volumes", [])}
            cm = vols.get(vol_name, {}).get("configMap", {}).get("name")
            if (cm, fname) not in flags:
                errors.append(f"{cw}: --flagfile {flagfile[0]} is not a mounted generated ConfigMap file")
    if not labels:
        errors.append(f"{what}: pod template has no labels")


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_services(errors, docs, name, labels, container_ports, headless):
    svcs = [s for s in find(docs, "Service") if selects(s["spec"].get("selector"), labels)]
    if not svcs:
        errors.append(f"{name}: no Service selects its pods")
    for s in svcs:
        for p in s["spec"].get("ports", []):
            target = p.get("targetPort", p.get("port"))
            if target not in container_ports and target not in container_ports.values():
                errors.append(f"Service {s['metadata']['name']}: targetPort {target} not exposed")
    if headless and not any(s["spec"].get("clusterIP") == "None" for s in svcs):
        errors.append(f"{name}: no headless Service")
    if headless and not any(s["spec"].get("clusterIP") != "None" for s in svcs):
        errors.append(f"{name}: no client (ClusterIP) Service")
    return svcs


def validate(kustomization, docs, flags):
    errors = []
    for d in docs:
        for field in ("apiVersion", "kind"):
            if field not in d:
                errors.append(f"a document has no {field}")
        if not d.get("metadata", {}).get("name"):
            errors.append(f"a {d.get('kind')} has no metadata.name")

    mem_flags = next((v for (cm, f), v in flags.items() if f == "memory.flags"), None)
    inf_flags = next((v for (cm, f), v in flags.items() if f == "inference.flags"), None)
    for fname, got, want in (("memory.flags", mem_flags, MEMORY_FLAGS),
                             ("inference.flags", inf_flags, INFERENCE_FLAGS)):
        if got is None:
            errors.append(f"configMapGenerator has no {fname}")
            continue
        for flag, value in want.items():
            if flag not in got:
                errors.append(f"{fname}: missing {flag}")
            elif value is not None and got[flag] != value:
                errors.append(f"{fname}: {flag}={got[flag]}, expected {value}")

    # memory_svc: StatefulSet + PVC template + headless & client Services.
    sts = find(docs, "StatefulSet")
    if len(sts) != 1:
        errors.append(f"expected one StatefulSet (memory_svc), found {len(sts)}")
    for s in sts:
        spec = s["spec"]
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"].get("labels", {})
        check_pod(errors, "StatefulSet " + s["metadata"]["name"], pod, labels, flags)
        if not selects(spec["selector"]["matchLabels"], labels):
            errors.append("StatefulSet selector does not match its pod labels")
        templates = {t["metadata"]["name"]: t for t in spec.get("volumeClaimTemplates", [])}
        if not templates:
            errors.append("StatefulSet has no volumeClaimTemplates (PVC)")
        for t in templates.values():
            if "storage" not in t["spec"].get("resources", {}).get("requests", {}):
                errors.append(f"PVC template {t['metadata']['name']} requests no storage")
        mounts = {m["name"]: m["mountPath"] for c in pod["containers"]
                  for m in c.get("volumeMounts", [])}
        db_dir = (mem_flags or {}).get("--db_dir")
        if not any(mounts.get(n) == db_dir for n in templates):
            errors.append(f"--db_dir {db_dir} is not on a volumeClaimTemplate mount")
        ports = {k: v for c in pod["containers"] for k, v in port_numbers(c).items()}
        svcs = check_services(errors, docs, "memory_svc", labels, ports, headless=True)
        headless = [x["metadata"]["name"] for x in svcs if x["spec"].get("clusterIP") == "None"]
        if spec.get("serviceName") not in headless:
            errors.append(f"StatefulSet serviceName {spec.get('serviceName')} is not its headless Service")
        store = (inf_flags or {}).get("--memory_store", "")
        host, _, port = store.partition(":")
        if not any(x["metadata"]["name"] == host and x["spec"].get("clusterIP") != "None" and
                   any(str(p["port"]) == port for p in x["spec"]["ports"]) for x in svcs):
            errors.append(f"--memory_store {store} is not the memory_svc client Service")
        drain = int((mem_flags or {}).get("--drain_seconds", "10"))
        if pod.get("terminationGracePeriodSeconds", 30) < drain:
            errors.append("memory_svc terminationGracePeriodSeconds is shorter than --drain_seconds")

    # inference_svc: Deployment (2 replicas) + Service + models volume.
    deps = find(docs, "Deployment")
    if len(deps) != 1:
        errors.append(f"expected one Deployment (inference_svc), found {len(deps)}")
    for d in deps:
        spec = d["spec"]
        if spec.get("replicas") != 2:
            errors.append(f"inference Deployment replicas {spec.get('replicas')}, expected 2")
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"].get("labels", {})
        check_pod(errors, "Deployment " + d["metadata"]["name"], pod, labels, flags)
        if not selects(spec["selector"]["matchLabels"], labels):
            errors.append("Deployment selector does not match its pod labels")
        ports = {k: v for c in pod["containers"] for k, v in port_numbers(c).items()}
        check_services(errors, docs, "inference_svc", labels, ports, headless=False)
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
                  if "persistentVolumeClaim" in v]
        pvcs = [p["metadata"]["name"] for p in find(docs, "PersistentVolumeClaim")]
        if not claims:
            errors.append("inference pods mount no model volume (PVC)")
        for c in claims:
            if c not in pvcs:
                errors.append(f"inference volume claims {c}, which the base does not define")
        model = (inf_flags or {}).get("--model", "")
        mounts = [m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])]
        if not any(model.startswith(m.rstrip("/") + "/") for m in mounts):
            errors.append(f"--model {model} is not under a mounted volume")
        drain = float((inf_flags or {}).get("--drain_timeout_s", "30"))
        if pod.get("terminationGracePeriodSeconds", 30) < drain:
            errors.append("inference terminationGracePeriodSeconds is shorter than --drain_timeout_s")
    return errors


def self_test(kustomization, docs, flags):
    """Each mutation must produce at least one error mentioning `expect`."""
    def container(kind, ds):
        return find(ds, kind)[0]["spec"]["template"]["spec"]["containers"][0]

    def mutate(fn, expect):
        ds, fl = copy.deepcopy(docs), copy.deepcopy(flags)
        fn(ds, fl)
        errs = validate(kustomization, ds, fl)
        return None if any(expect in e for e in errs) else f"self-test: breaking '{expect}' went unnoticed"

    cases = [
        (lambda ds, fl: container("Deployment", ds).pop("readinessProbe"), "missing readinessProbe"),
        (lambda ds, fl: container("StatefulSet", ds).pop("livenessProbe"), "missing livenessProbe"),
        (lambda ds, fl: container("StatefulSet", ds)["startupProbe"]["grpc"].update(port=1),
         "not a containerPort"),
        (lambda ds, fl: container("Deployment", ds)["resources"].pop("limits"), "limits.cpu"),
        (lambda ds, fl: find(ds, "StatefulSet")[0]["spec"].pop("volumeClaimTemplates"),
         "volumeClaimTemplates"),
        (lambda ds, fl: find(ds, "Deployment")[0]["spec"].update(replicas=1), "expected 2"),
        (lambda ds, fl: ds.remove(find(ds, "Service", "memory-svc-headless")[0]), "headless"),
        (lambda ds, fl: [v.pop("--memory_store") for (c, f), v in fl.items() if f == "inference.flags"],
         "--memory_store"),
        (lambda ds, fl: find(ds, "Deployment")[0]["spec"]["template"]["spec"].update(
            terminationGracePeriodSeconds=5), "shorter than --drain_timeout_s"),
        (lambda ds, fl: container("Deployment", ds)["securityContext"].update(
            allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    ]
    return [m for m in (mutate(fn, expect) for fn, expect in cases) if m]


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "base")
    try:
        kustomization, docs, flags = load(base)
    except (OSError, yaml.YAMLError) as e:
        print(f"k8s: cannot load {base}: {e}")
        return 1
    errors = validate(kustomization, docs, flags) + self_test(kustomization, docs, flags)
    for e in errors:
        print("k8s:", e)
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    print(f"k8s: {len(docs)} resources ({', '.join(kinds)}), "
          f"{len(flags)} flag files: {'OK' if not errors else f'{len(errors)} problem(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
