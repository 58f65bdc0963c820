"""deploy/helm/relaunch renders offline for the value sets operators use, lints clean, and every
object it renders is valid Kubernetes under the strict schemas of one recent release.

Rendering uses the Helm SDK bundled in the helm-python-sdk wheel; validation uses the schemas
bundled in kubernetes-validate. The NATS chart is vendored (charts/nats, the official chart's 1.x line, Apache
2.0), so `helm install` works with no network; the tests below check relaunch's own objects (`render`) and
validate the NATS chart's too (`render(..., subcharts=True)`).
"""

from __future__ import annotations

import copy
import json

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from deploy_checks import DEPLOY, ENTRY_POINTS, entry_point, needed_variables, runnable_module, setting_fields, unknown_settings

CHART = DEPLOY / "helm" / "relaunch"
KUBERNETES_VERSION = "1.35.0"
RELEASE, NAMESPACE = "relaunch", "relaunch-system"

SLURM_CONF = "ClusterName=gpu\nSlurmctldHost=slurm-controller\nAuthType=auth/munge\n"
NOTIFIER_ROUTES = """[[routes]]
name = "ops"
url_file = "/etc/relaunch/notifier/secrets/ops.url"
events = ["job_stopped"]
"""
VALUE_SETS: dict[str, dict] = {
    "defaults": {},
    "external-nats": {
        "nats": {"enabled": False},
        "externalNats": {"url": "nats://nats.messaging.svc:4222"},
    },
    "existing-secrets": {
        "nats": {"enabled": False},
        "externalNats": {"url": "", "existingSecret": {"name": "relaunch-connections", "key": "nats"}},
        "database": {"url": "", "existingSecret": {"name": "relaunch-connections", "key": "postgres"}},
        "redis": {"url": "", "existingSecret": {"name": "relaunch-connections", "key": "redis"}},
    },
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "no-gpu-probe": {"gpuProbe": {"enabled": False}},
    "everything": {
        "cluster": "gpu",
        "imagePullSecrets": [{"name": "registry"}],
        "podAnnotations": {"example.com/team": "ml-infra"},
        "commonLabels": {"team": "ml-infra"},
        "serviceMonitor": {"enabled": True},
        "detector": {
            "replicas": 2,
            "settings": {"hang_warmup_s": 900, "extra_signatures": ["/etc/relaunch/extra.toml"]},
            "jobLogs": {"path": "/shared/jobs", "volume": {"persistentVolumeClaim": {"claimName": "jobs"}}},
            "extraVolumes": [{"name": "signatures", "configMap": {"name": "relaunch-signatures"}}],
            "extraVolumeMounts": [{"name": "signatures", "mountPath": "/etc/relaunch", "readOnly": True}],
        },
        "decider": {"replicas": 2, "settings": {"outbox_interval_s": 0.5}},
        "actuator": {
            "mode": "act",
            "settings": {"poll_interval_s": 2, "slurm_timeout_s": 20},
            "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 401, "runAsGroup": 401, "fsGroup": 401},
            "slurm": {"conf": SLURM_CONF, "munge": {"keySecret": "slurm-munge", "keySecretKey": "key"}},
            "extraEnv": [{"name": "SLURM_TIME_FORMAT", "value": "standard"}],
        },
        "watchdog": {"enabled": True, "command": ["python", "-m", "relaunch.actuator.watchdog"]},
        "api": {"replicas": 2, "service": {"type": "LoadBalancer", "port": 8080}},
        "notifier": {"routes": NOTIFIER_ROUTES, "existingSecret": "relaunch-webhooks", "settings": {"retry_max_s": 60}},
        "gpuProbe": {
            "settings": {"expected_gpus": 4, "interval_s": 5},
            "runtimeClassName": "nvidia",
            "priorityClassName": "system-node-critical",
        },
    },
    # A 3-server NATS cluster from the NATS chart: relaunch's streams and buckets R3.
    "nats-cluster": {"nats": {"config": {"cluster": {"enabled": True, "replicas": 3}}}},
    "external-nats-cluster": {"nats": {"enabled": False}, "externalNats": {
        "url": "nats://n1.messaging.svc:4222,nats://n2.messaging.svc:4222,nats://n3.messaging.svc:4222",
        "replicas": 3}},
    "munge-off": {"actuator": {"slurm": {"munge": {"enabled": False}, "existingConfigMap": "slurm-config"}}},
    # Beside Slinky: slurmrestd with a token Secret; no slurm.conf, no munge (docs/install-kubernetes.md).
    "slinky": {"actuator": {"mode": "act", "slurm": {"api": "rest", "rest": {"url": "http://slurm-restapi.slurm:6820"}}}},
    "slinky-tls": {"actuator": {"slurm": {"api": "rest", "conf": SLURM_CONF, "rest": {
        "url": "https://slurm-restapi.slurm:6820", "tokenSecret": "slurm-token-relaunch", "tokenSecretKey": "auth-token",
        "caSecret": "slurm-restapi-ca", "userName": "relaunch"}}}},
    # Custom consumers declared once (docs/custom-consumer.md): with NATS users, and on a NATS without users.
    "custom-consumers": {"natsAuth": {"existingSecret": "relaunch-nats-users"}, "customConsumers": [
        {"name": "advice-webhook", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]},
        {"name": "restarts-db", "stream": "EVENTS", "filterSubjects": ["relaunch.event.reconcile.>"],
         "durable": "restarts", "ack": False, "ackWaitS": 60, "maxDeliver": 5, "deliver": "all"}]},
    "custom-consumers-no-users": {"customConsumers": [
        {"name": "advice-webhook", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]}]},
    "nats-users-tls": {"natsAuth": {"existingSecret": "relaunch-nats-users"},
                       "natsTls": {"existingSecret": "relaunch-nats-tls", "clientCert": True},
                       "watchdog": {"enabled": True, "command": ["python", "-m", "relaunch.actuator.watchdog"]}},
}


def render(values: dict, name: str = RELEASE, subcharts: bool = False) -> list[dict]:
    """The objects the chart renders: relaunch's own, or with `subcharts` the NATS chart's too."""
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=name, namespace=NAMESPACE)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml") and (subcharts or "/charts/" not in path):
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render(values) for name, values in VALUE_SETS.items()}


@pytest.fixture(scope="module")
def rendered_all() -> dict[str, list[dict]]:
    return {name: render(values, subcharts=True) for name, values in VALUE_SETS.items()}


def find(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def one(objects, kind, name):
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_specs(objects):
    for o in objects:
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]


def env_of(container) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


# --- lint and schema -------------------------------------------------------------------------------

@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_lint_finds_nothing(value_set):
    report = helm.lint(str(CHART), VALUE_SETS[value_set], namespace=NAMESPACE)
    assert report["errors"] == []
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == []


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_rendered_object_is_valid_kubernetes(rendered_all, value_set):
    objects = rendered_all[value_set]
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: kubernetes-validate has no schema for it (checked below instead)
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{value_set}: {obj['kind']} {obj['metadata']['name']}: {exc.message} "
                        f"at {'.'.join(map(str, exc.absolute_path))}")


def test_the_validator_rejects_what_kubernetes_would(rendered):
    """Guards the test above: strict validation does catch a misplaced field and a wrong type."""
    deployment = copy.deepcopy(one(rendered["defaults"], "Deployment", "relaunch-detector"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment = copy.deepcopy(one(rendered["defaults"], "Deployment", "relaunch-detector"))
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("values, message", [
    ({"detector": {"setings": {}}}, "setings"),
    ({"actuator": {"mode": "acting"}}, "/actuator/mode"),
    ({"detector": {"settings": {"hang_warmup": 5}}}, "hang_warmup"),
    ({"cluster": "gpu.cluster"}, "/cluster"),
])
def test_values_schema_rejects_unknown_keys_and_bad_values(values, message):
    with pytest.raises(helm.HelmValuesError, match=message):
        render(values)


@pytest.mark.parametrize("values, message", [
    ({"nats": {"enabled": False}}, "externalNats"),
    ({"database": {"url": ""}}, "database"),
    ({"watchdog": {"enabled": True, "command": []}}, "watchdog.command"),
    ({"actuator": {"slurm": {"existingConfigMap": ""}}}, "slurm.conf"),
    ({"actuator": {"slurm": {"munge": {"keySecret": ""}}}}, "munge"),
])
def test_missing_connections_fail_with_a_message_that_says_what_to_set(values, message):
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def test_settings_in_the_schema_are_settings_the_services_have():
    """`<component>.settings` keys become RELAUNCH_<SERVICE>_<KEY>; the schema lists only real ones
    (a service refuses to start on an unknown one)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    components = {"detector": "RELAUNCH_DETECTOR_", "decider": "RELAUNCH_DECIDER_",
                  "actuator": "RELAUNCH_ACTUATOR_", "api": "RELAUNCH_API_", "gpuProbe": "RELAUNCH_PROBE_",
                  "notifier": "RELAUNCH_NOTIFIER_"}
    for component, prefix in components.items():
        listed = set(schema["properties"][component]["properties"]["settings"]["properties"])
        assert listed <= setting_fields(prefix), f"{component}.settings lists {listed - setting_fields(prefix)}"
        assert "health_port" not in listed  # the chart owns the health ports (probes use them)


def test_every_value_is_documented_in_values_yaml():
    """Each value in values.yaml has a comment right above it, or sits in a block that has one."""
    text = (CHART / "values.yaml").read_text()
    lines = text.splitlines()

    def commented(node_line: int) -> bool:
        return node_line > 0 and lines[node_line - 1].lstrip().startswith("#")

    undocumented = []

    def walk(node, path, documented):
        if not isinstance(node, yaml.MappingNode):
            return
        for key, value in node.value:
            here = [*path, key.value]
            if here[:2] == ["nats", "config"] or here[:2] == ["nats", "natsBox"]:
                continue  # the NATS chart's own values, documented there
            ok = documented or commented(key.start_mark.line)
            if not isinstance(value, yaml.MappingNode) or not value.value:
                if not ok:
                    undocumented.append(".".join(here))
            walk(value, here, ok)

    walk(yaml.compose(text), [], False)
    assert undocumented == []


# --- what the chart deploys ----------------------------------------------------------------------

def test_defaults_deploy_every_service_and_the_probe_on_gpu_nodes(rendered):
    objects = rendered["defaults"]
    for name in ("detector", "decider", "actuator", "api", "watchdog"):
        one(objects, "Deployment", f"relaunch-{name}")
    probe = one(objects, "DaemonSet", "relaunch-gpu-probe")
    assert probe["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    container = probe["spec"]["template"]["spec"]["containers"][0]
    assert env_of(container)["RELAUNCH_PROBE_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "nvidia.com/gpu" not in str(container.get("resources", {}))  # never takes a job's GPU


def test_each_component_runs_its_own_entry_point_of_the_one_image(rendered):
    images = set()
    for name, spec in pod_specs(rendered["everything"]):
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            images.add(container["image"])
        command = spec["containers"][0]["command"]
        assert command[:2] == ["python", "-m"], name
        assert runnable_module(command[2]), f"{name}: python -m {command[2]} would not start"
    assert images == {'relaunch:0.1.0'}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_pods_run_non_root_read_only_and_bounded(rendered, value_set):
    for name, spec in pod_specs(rendered[value_set]):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["automountServiceAccountToken"] is False, name
        # Service links would inject RELAUNCH_API_PORT=tcp://... and RELAUNCH_*_SERVICE_HOST, which
        # the services reject as unknown settings.
        assert spec["enableServiceLinks"] is False, name
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            context = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert container["resources"]["requests"]["memory"], where
            assert container["resources"]["limits"]["memory"], where


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_services_have_probes_on_healthz_at_their_health_port(rendered, value_set):
    for name, spec in pod_specs(rendered[value_set]):
        if name.endswith("-nats-setup"):
            continue  # a one-shot hook Job: no health endpoint to promise
        container = spec["containers"][0]
        env = env_of(container)
        for kind in ("readinessProbe", "livenessProbe"):
            probe = container[kind]
            if name.endswith("-api"):  # the API, listening on the pod's address
                assert probe["httpGet"]["path"] == "/healthz" and probe["httpGet"]["port"] == "http", name
                assert env["RELAUNCH_API_HOST"]["value"] == "0.0.0.0"
            else:  # the others serve /healthz and /metrics on the pod's address, port "metrics"
                port = next(e["value"] for n, e in env.items() if n.endswith("_HEALTH_PORT"))
                assert probe["httpGet"] == {"path": "/healthz", "port": "metrics"}, name
                assert {"name": "metrics", "containerPort": int(port), "protocol": "TCP"} in container["ports"], name
                assert env["RELAUNCH_HEALTH_HOST"]["value"] == "0.0.0.0", name
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_relaunch_variable_is_a_setting_the_services_accept(rendered, value_set):
    names = [e for _, spec in pod_specs(rendered[value_set]) for c in spec["containers"] for e in env_of(c)]
    assert unknown_settings(names) == []


def test_component_settings_become_their_services_variables(rendered):
    objects = rendered["everything"]
    detector = env_of(one(objects, "Deployment", "relaunch-detector")["spec"]["template"]["spec"]["containers"][0])
    assert detector["RELAUNCH_DETECTOR_HANG_WARMUP_S"]["value"] == "900"
    assert detector["RELAUNCH_DETECTOR_EXTRA_SIGNATURES"]["value"] == '["/etc/relaunch/extra.toml"]'
    assert {"hang_warmup_s", "extra_signatures"} <= setting_fields("RELAUNCH_DETECTOR_")


def test_connections_default_to_the_nats_subchart_and_a_chart_secret(rendered):
    objects = rendered["defaults"]
    env = env_of(one(objects, "Deployment", "relaunch-decider")["spec"]["template"]["spec"]["containers"][0])
    assert env["RELAUNCH_NATS_URL"]["value"] == f"nats://{RELEASE}-nats.{NAMESPACE}.svc:4222"
    assert env["RELAUNCH_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "relaunch-urls", "key": "database-url"}
    secret = one(objects, "Secret", "relaunch-urls")
    assert set(secret["stringData"]) == {"database-url", "redis-url"}


def test_nats_service_name_follows_the_nats_charts_naming():
    objects = render({}, name="ml")
    env = env_of(one(objects, "Deployment", "ml-relaunch-detector")["spec"]["template"]["spec"]["containers"][0])
    assert env["RELAUNCH_NATS_URL"]["value"] == f"nats://ml-nats.{NAMESPACE}.svc:4222"


def test_external_nats_is_used_when_the_subchart_is_off(rendered):
    objects = rendered["external-nats"]
    for name, spec in pod_specs(objects):
        ref = env_of(spec["containers"][0])["RELAUNCH_NATS_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "relaunch-urls", "key": "nats-url"}, name
    assert one(objects, "Secret", "relaunch-urls")["stringData"]["nats-url"] == "nats://nats.messaging.svc:4222"


@pytest.mark.parametrize(("value_set", "replicas"), [("defaults", "1"), ("external-nats", "1"), ("nats-cluster", "3"),
                                                    ("external-nats-cluster", "3")])
def test_every_service_makes_its_streams_and_buckets_with_the_clusters_replicas(rendered, value_set, replicas):
    for name, spec in pod_specs(rendered[value_set]):
        assert env_of(spec["containers"][0])["RELAUNCH_NATS_REPLICAS"]["value"] == replicas, name
    if value_set == "external-nats-cluster":
        url = one(rendered[value_set], "Secret", "relaunch-urls")["stringData"]["nats-url"]
        assert url.count("nats://") == 3


def test_existing_secrets_replace_every_url_and_the_chart_writes_none(rendered):
    objects = rendered["existing-secrets"]
    assert not find(objects, "Secret")
    expected = {"RELAUNCH_NATS_URL": "nats", "RELAUNCH_DATABASE_URL": "postgres", "RELAUNCH_REDIS_URL": "redis"}
    seen = set()
    for _, spec in pod_specs(objects):
        for name, var in env_of(spec["containers"][0]).items():
            if name in expected:
                assert var["valueFrom"]["secretKeyRef"] == {"name": "relaunch-connections", "key": expected[name]}
                seen.add(name)
    assert seen == set(expected)


def test_actuator_is_one_observing_replica_with_slurm_access(rendered):
    deployment = one(rendered["defaults"], "Deployment", "relaunch-actuator")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    spec = deployment["spec"]["template"]["spec"]
    env = env_of(spec["containers"][0])
    assert env["RELAUNCH_ACTUATOR_MODE"]["value"] == "observe"
    assert env["SLURM_CONF"]["value"] == "/etc/slurm/slurm.conf"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["slurm-conf"]["configMap"]["name"] == "relaunch-slurm-conf"
    assert volumes["munge-key-secret"]["secret"]["secretName"] == "relaunch-munge-key"
    munged = next(c for c in spec["initContainers"] if c["name"] == "munged")
    assert munged["restartPolicy"] == "Always"  # a native sidecar: up before the actuator starts
    for container in (spec["containers"][0], munged):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["munge-socket"] == "/run/munge", container["name"]


def test_inline_slurm_conf_and_act_mode(rendered):
    objects = rendered["everything"]
    config = one(objects, "ConfigMap", "relaunch-slurm")
    assert config["data"]["slurm.conf"].strip() == SLURM_CONF.strip()
    spec = one(objects, "Deployment", "relaunch-actuator")["spec"]["template"]["spec"]
    assert env_of(spec["containers"][0])["RELAUNCH_ACTUATOR_MODE"]["value"] == "act"
    assert spec["securityContext"]["runAsUser"] == 401
    watchdog = one(objects, "Deployment", "relaunch-watchdog")["spec"]["template"]["spec"]
    assert watchdog["securityContext"]["runAsUser"] == 401
    assert {v["name"] for v in watchdog["volumes"]} >= {"slurm-conf", "munge-socket"}


def test_munge_sidecar_can_be_left_out(rendered):
    spec = one(rendered["munge-off"], "Deployment", "relaunch-actuator")["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    assert {v["name"] for v in spec["volumes"]} == {"tmp", "slurm-conf"}


@pytest.mark.parametrize("value_set", ["slinky", "slinky-tls"])
def test_slinky_form_reaches_slurmrestd_with_a_token_file_and_no_munge(rendered, value_set):
    objects = rendered[value_set]
    assert not find(objects, "ConfigMap", "relaunch-slurm"), "no slurm.conf is needed (nor rendered) with slurmrestd"
    for name in ("relaunch-actuator", "relaunch-watchdog"):
        spec = one(objects, "Deployment", name)["spec"]["template"]["spec"]
        assert "initContainers" not in spec, "no munge sidecar"
        (container,) = spec["containers"]
        env = env_of(container)
        assert "SLURM_CONF" not in env and env["RELAUNCH_SLURM_API"]["value"] == "rest"
        assert env["RELAUNCH_SLURMRESTD_URL"]["value"].endswith("slurm-restapi.slurm:6820")
        assert not any("TOKEN" in e and "value" in env[e] and "/" not in env[e]["value"] for e in env), \
            "the token itself is never an environment value"
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        token = env["RELAUNCH_SLURMRESTD_TOKEN_FILE"]["value"]
        assert token.startswith(mounts["slurmrestd-token"]["mountPath"] + "/") and mounts["slurmrestd-token"]["readOnly"]
        secret = volumes["slurmrestd-token"]["secret"]
        assert secret["items"][0]["path"] == token.rsplit("/", 1)[1]
        assert not {"munge-socket", "munge-key", "slurm-conf"} & set(volumes)
        if value_set == "slinky-tls":
            assert secret["secretName"] == "slurm-token-relaunch"
            assert volumes["slurmrestd-ca"]["secret"]["secretName"] == "slurm-restapi-ca"
            assert env["RELAUNCH_SLURMRESTD_CA_FILE"]["value"].startswith(mounts["slurmrestd-ca"]["mountPath"])
            assert env["RELAUNCH_SLURMRESTD_USER_NAME"]["value"] == "relaunch"
        else:
            assert secret["secretName"] == "relaunch-slurm-token" and "RELAUNCH_SLURMRESTD_CA_FILE" not in env


def test_slinky_form_without_a_url_says_what_to_set():
    with pytest.raises(helm.HelmError, match="actuator.slurm.rest.url"):
        render({"actuator": {"slurm": {"api": "rest"}}})


def test_detector_mounts_job_logs_read_only_at_their_own_path(rendered):
    spec = one(rendered["everything"], "Deployment", "relaunch-detector")["spec"]["template"]["spec"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "job-logs")
    assert mount == {"name": "job-logs", "mountPath": "/shared/jobs", "readOnly": True}
    volume = next(v for v in spec["volumes"] if v["name"] == "job-logs")
    assert volume["persistentVolumeClaim"] == {"claimName": "jobs"}


def test_gpu_probe_can_be_turned_off(rendered):
    assert not find(rendered["no-gpu-probe"], "DaemonSet")
    assert len(find(rendered["no-gpu-probe"], "Deployment")) == 6  # detector, decider, actuator, watchdog, api, notifier


@pytest.mark.parametrize("value_set", ["service-monitor", "everything"])
def test_service_monitor_scrapes_the_api_service(rendered, value_set):
    objects = rendered[value_set]
    monitor = one(objects, "ServiceMonitor", "relaunch")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    service = one(objects, "Service", "relaunch-api")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
    if value_set == "service-monitor":
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert not find(rendered["defaults"], "ServiceMonitor")


@pytest.mark.parametrize("value_set", ["service-monitor", "everything"])
def test_pod_monitor_scrapes_every_service_pod_on_its_metrics_port(rendered, value_set):
    objects = rendered[value_set]
    monitor = one(objects, "PodMonitor", "relaunch-services")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    components = {e["key"]: e["values"] for e in monitor["spec"]["selector"]["matchExpressions"]}
    selected = []
    for name, spec in pod_specs(objects):
        labels = next(o for o in objects if o["metadata"]["name"] == name)["spec"]["template"]["metadata"]["labels"]
        if labels.get("app.kubernetes.io/component") in components["app.kubernetes.io/component"]:
            assert labels["app.kubernetes.io/instance"] in components["app.kubernetes.io/instance"]
            assert any(p["name"] == "metrics" for p in spec["containers"][0]["ports"]), name
            selected.append(name)
    assert len(selected) == (5 if find(objects, "DaemonSet") else 4), selected
    assert not find(rendered["defaults"], "PodMonitor")


def test_the_nats_chart_is_vendored_so_that_helm_install_needs_no_network():
    """Issue 41: `helm install` failed offline ("missing in charts/ directory: nats") even with nats.enabled=false.
    The official chart ships in charts/nats with its licence, at a version the declared range accepts."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (nats,) = [d for d in chart["dependencies"] if d["name"] == "nats"]
    assert nats["condition"] == "nats.enabled"
    vendored = yaml.safe_load((CHART / "charts" / "nats" / "Chart.yaml").read_text())
    assert vendored["name"] == "nats" and vendored["version"] == nats["version"]
    assert "Apache License" in (CHART / "charts" / "nats" / "LICENSE").read_text()


def test_the_nats_chart_renders_a_jetstream_server_offline_and_none_when_off(rendered_all):
    ours = {o["metadata"]["name"] for o in render({})}
    theirs = [o for o in rendered_all["defaults"] if o["metadata"]["name"] not in ours]
    (server,) = find(theirs, "StatefulSet")
    assert server["metadata"]["name"] == f"{RELEASE}-nats"
    config = one(theirs, "ConfigMap", f"{RELEASE}-nats-config")
    assert "jetstream" in json.dumps(config["data"])
    assert not find(rendered_all["external-nats"], "StatefulSet")


# --- wiring ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_service_gets_every_backend_url_it_needs(rendered, value_set):
    """From each service's settings (`backends`), in every value set CI renders."""
    seen = set()
    for pod, spec in pod_specs(rendered[value_set]):
        for container in spec["containers"]:
            module = entry_point(container.get("command", []) + container.get("args", []))
            if module not in ENTRY_POINTS:
                continue
            seen.add(module)
            env = env_of(container)
            for variable in needed_variables(module):
                assert variable in env and (env[variable].get("value") or env[variable].get("valueFrom")), \
                    f"{value_set}: {pod}/{container['name']} ({module}) has no {variable}"
    assert {"relaunch.detector", "relaunch.decider", "relaunch.actuator", "relaunch.api"} <= seen


def test_the_notifier_gets_its_routes_file_and_its_webhook_secrets(rendered):
    objects = rendered["everything"]
    (spec,) = [spec for name, spec in pod_specs(objects) if name.endswith("-notifier")]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["RELAUNCH_NOTIFIER_ROUTES_FILE"] == "/etc/relaunch/notifier/routes.toml"
    assert env["RELAUNCH_NOTIFIER_RETRY_MAX_S"] == "60"
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["/etc/relaunch/notifier/secrets"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["webhook-secrets"]["secret"]["secretName"] == "relaunch-webhooks"
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("notifier-routes")]
    assert config["data"]["routes.toml"].strip() == NOTIFIER_ROUTES.strip()
    (spec,) = [spec for name, spec in pod_specs(rendered["defaults"]) if name.endswith("-notifier")]
    assert {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}["RELAUNCH_NOTIFIER_ROUTES_FILE"] == ""


@pytest.mark.parametrize("value_set", ["custom-consumers", "custom-consumers-no-users"])
def test_custom_consumers_declared_in_the_values_reach_the_setup_job_as_one_declaration(rendered, value_set,
                                                                                      monkeypatch):
    from relaunch.common.custom_consumers import CustomConsumer
    from relaunch.common.settings import CommonSettings

    job = one(rendered[value_set], "Job", "relaunch-nats-setup")
    env = env_of(job["spec"]["template"]["spec"]["containers"][0])
    monkeypatch.setenv("RELAUNCH_CUSTOM_CONSUMERS", env["RELAUNCH_CUSTOM_CONSUMERS"]["value"])
    declared = CommonSettings().custom_consumers  # as natsauth setup reads it in the Job
    assert declared == tuple(CustomConsumer.model_validate(v) for v in VALUE_SETS[value_set]["customConsumers"])
    assert ("RELAUNCH_NATS_USER" in env) == (value_set == "custom-consumers")


def test_without_custom_consumers_nor_users_there_is_no_setup_job(rendered):
    assert not find(rendered["defaults"], "Job")
    assert "RELAUNCH_CUSTOM_CONSUMERS" not in {
        n for _, spec in pod_specs(rendered["nats-users-tls"]) for c in spec["containers"] for n in env_of(c)}


def test_the_notes_print_how_to_get_each_custom_consumers_authorization_entry():
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(VALUE_SETS["custom-consumers"], name=RELEASE, namespace=NAMESPACE)
    notes = next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))
    assert "python -m relaunch.common.natsauth config --creds DIR --cluster local --only advice-webhook,restarts-db" in notes
    declaration = notes.split("RELAUNCH_CUSTOM_CONSUMERS='")[1].split("'")[0]
    assert json.loads(declaration) == VALUE_SETS["custom-consumers"]["customConsumers"]
