#!/bin/sh
# The Kubernetes manifests of deploy/k8s, checked without a cluster:
#   1. kubectl parses each file and converts it to API objects
#      (`kubectl label --local -f FILE -o yaml`, which needs no server;
#      `kubectl create --dry-run=client` does need one, for its REST
#      mapping, and so cannot run here) - a parse check, not a schema one;
#   2. a structural check (python3 + PyYAML) of what the cluster engines
#      code relies on: the Indexed Job's completions, parallelism and
#      WORLD_SIZE agree; RANK comes from the completion index; MASTER_ADDR
#      is pod 0 of the Job under the headless Service its pods' subdomain
#      names, and MASTER_PORT is the port that Service and the container
#      expose; the Services select the pods' labels; the pserver list
#      names every StatefulSet replica under its Service; every token
#      volume mounts the Secret defined in secret.yaml.
# SKIP (77) when neither kubectl nor PyYAML is there.
set -u
K8S=$FL_SRCDIR/deploy/k8s
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
fails=0
checked=0
if command -v kubectl > /dev/null 2>&1; then
  for f in "$K8S"/*.yaml; do
    if timeout 30 kubectl label --local -f "$f" -o yaml flotilla-check=1 > /dev/null 2> /tmp/fl_k8s.$$; then
      echo "ok: kubectl parses ${f##*/}"
    else
      echo "FAIL: kubectl cannot parse ${f##*/}: $(head -2 /tmp/fl_k8s.$$)"
      fails=$((fails + 1))
    fi
  done
  rm -f /tmp/fl_k8s.$$
  checked=1
else
  echo "note: no kubectl: parse check left out"
fi
if "$PY" -c 'import yaml' 2> /dev/null; then
  "$PY" - "$K8S" << 'PYEOF' || fails=$((fails + 1))
import glob, os, sys, yaml
docs = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.yaml"))):
    docs += [(os.path.basename(f), d) for d in yaml.safe_load_all(open(f)) if d]
by_kind = {}
for f, d in docs:
    by_kind.setdefault(d["kind"], []).append((f, d))
bad = []
def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}
services = {d["metadata"]["name"]: d for _, d in by_kind.get("Service", [])}
secrets = {d["metadata"]["name"] for _, d in by_kind.get("Secret", [])}
def selects(svc, labels):
    sel = svc["spec"]["selector"]
    return all(labels.get(k) == v for k, v in sel.items())
def check_token(f, pod):
    for v in pod["volumes"]:
        if "secret" in v and v["secret"]["secretName"] not in secrets:
            bad.append(f"{f}: volume {v['name']} mounts unknown Secret {v['secret']['secretName']}")
for f, job in by_kind.get("Job", []):
    s = job["spec"]; pod = s["template"]["spec"]; labels = s["template"]["metadata"]["labels"]
    c = pod["containers"][0]; env = env_of(c)
    if s.get("completionMode") != "Indexed": bad.append(f"{f}: not an Indexed Job")
    ws = int(env["WORLD_SIZE"]["value"])
    if not (s["completions"] == s["parallelism"] == ws):
        bad.append(f"{f}: completions {s['completions']}, parallelism {s['parallelism']}, WORLD_SIZE {ws} differ")
    fr = env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    if "job-completion-index" not in fr: bad.append(f"{f}: RANK not from the completion index")
    check_token(f, pod)
    if "MASTER_ADDR" in env:
        sub = pod.get("subdomain")
        want = f"{job['metadata']['name']}-0.{sub}"
        if env["MASTER_ADDR"]["value"] != want: bad.append(f"{f}: MASTER_ADDR {env['MASTER_ADDR']['value']} is not {want}")
        svc = services.get(sub)
        if not svc: bad.append(f"{f}: no Service {sub} for the subdomain")
        else:
            if svc["spec"].get("clusterIP") != "None": bad.append(f"{f}: Service {sub} is not headless")
            if not selects(svc, labels): bad.append(f"{f}: Service {sub} does not select the trainer pods")
            port = int(env["MASTER_PORT"]["value"])
            if port not in [p["port"] for p in svc["spec"]["ports"]]: bad.append(f"{f}: Service {sub} lacks MASTER_PORT {port}")
            if port not in [p["containerPort"] for p in c.get("ports", [])]: bad.append(f"{f}: container lacks port {port}")
    print(f"ok: {f}: Indexed Job of {ws} trainers" + (f", rendezvous {env['MASTER_ADDR']['value']}:{env['MASTER_PORT']['value']}" if "MASTER_ADDR" in env else ""))
for f, ss in by_kind.get("StatefulSet", []):
    s = ss["spec"]; pod = s["template"]["spec"]; c = pod["containers"][0]; env = env_of(c)
    svc = services.get(s["serviceName"])
    if not svc or not selects(svc, s["template"]["metadata"]["labels"]):
        bad.append(f"{f}: Service {s['serviceName']} missing or not selecting the pservers")
    port = svc["spec"]["ports"][0]["port"] if svc else 0
    want = ",".join(f"{ss['metadata']['name']}-{i}.{s['serviceName']}:{port}" for i in range(s["replicas"]))
    got = env["FLOTILLA_PSERVERS_IP_PORT_LIST"]["value"]
    if got != want: bad.append(f"{f}: pserver list {got} is not {want}")
    if "pod-index" not in env["FLOTILLA_PSERVER_ID"]["valueFrom"]["fieldRef"]["fieldPath"]:
        bad.append(f"{f}: FLOTILLA_PSERVER_ID not from the pod index")
    check_token(f, pod)
    for jf, job in by_kind.get("Job", []):
        jenv = env_of(job["spec"]["template"]["spec"]["containers"][0])
        if "FLOTILLA_PSERVERS_IP_PORT_LIST" in jenv:
            if jenv["FLOTILLA_PSERVERS_IP_PORT_LIST"]["value"] != want: bad.append(f"{jf}: pserver list differs from {f}'s")
            if env["FLOTILLA_TRAINERS_NUM"]["value"] != jenv["WORLD_SIZE"]["value"]: bad.append(f"{f}: FLOTILLA_TRAINERS_NUM differs from {jf}'s WORLD_SIZE")
    print(f"ok: {f}: {s['replicas']} pservers {want}")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PYEOF
  checked=1
else
  echo "note: no PyYAML: structural check left out"
fi
[ $checked = 1 ] || { echo "SKIP: neither kubectl nor PyYAML here"; exit 77; }
[ $fails = 0 ] || exit 1
echo "PASS: deploy/k8s manifests"
