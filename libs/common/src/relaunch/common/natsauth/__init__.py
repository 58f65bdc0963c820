"""NATS users of relaunch, their subject permissions, and the setup step that creates the streams.

Least privilege (docs/security.md): one NATS user per service, each allowed to publish only what it
produces and to use only its own durable consumers. The rules that matter:
- only the decider publishes Advice; only the actuator may read the ADVICE stream's consumer
  (create/bind it, pull from it, ack on it); nobody else may create a consumer on ADVICE;
- a gpu-probe publishes only its own node's health subject and answers only its own node's
  inject requests;
- the api reads EVENTS (ephemeral ordered consumers) and publishes nothing but the audit entries of
  operator overrides;
- the notifier reads its own durables on EVENTS and DLQ and publishes nothing but its dead letters;
- every user gets a private reply inbox (`_INBOX_<user>.>`): nobody can read another user's replies
  (JetStream API answers, publish acks, pulled messages all arrive on the requester's inbox);
- a custom consumer (relaunch.common.custom_consumers, declared in RELAUNCH_CUSTOM_CONSUMERS) reads its
  own durable on EVENTS or ADVICE (info, pull, ack if declared so) and nothing else; the admin creates
  that durable at setup, so its user never creates or changes a consumer and publishes no relaunch subject.
Streams are created by the `admin` user (`python -m relaunch.common.natsauth setup`, run by
`scripts/stack.sh` and by the deployments' setup job), so no service may create or change a stream;
the actuator alone creates its two KV buckets (lease and hold registry), which are its own state.

Invariant: this module is pure except `write_passwords` / `main`; subject names come from
`subjects`, so a renamed subject or durable changes the permissions with it.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from .. import consumers, subjects
from ..custom_consumers import CustomConsumer, check_unique
from ..subjects import ConsumerSpec

ADMIN = "admin"
CLI = "cli"
OPERATOR = "operator"
"""The identity that may send `relaunch inject` requests (docs/security.md, "Who may inject"): not the
shared `cli` user, which every training process holds. The local stack points the CLI at its password."""
SERVICES = ("detector", "decider", "actuator", "watchdog", "api", "notifier")
LEASE_BUCKET = "relaunch-leases"
HOLDS_BUCKET = "relaunch-holds"
"""The actuator's KV buckets (relaunch.actuator.adapters.coordination; a unit test keeps them equal)."""
API = "$JS.API"

CONSUMERS: dict[str, tuple[ConsumerSpec, ...]] = {
    service: tuple(c.spec for c in consumers.of(service)) for service in ("detector", "decider", "actuator", "notifier")
}
"""Each service's durable consumers, from their one declaration (relaunch.common.consumers)."""


SHARED_PROBE = "gpu-probe"
"""One user for every node's probe, where per-node passwords cannot be handed out (a Kubernetes
DaemonSet shares one Secret): it may publish any node's health of its cluster, a weaker guarantee."""


def probe_user(node: str) -> str:
    """The NATS user (and Bus service name) of one node's gpu-probe."""
    return f"gpu-probe-{node}"


def inbox_prefix(user: str) -> str:
    """The reply-inbox prefix of `user`: its JetStream answers and acks arrive under `<prefix>.>`."""
    return f"_INBOX_{user}"


def _durable(spec: ConsumerSpec) -> list[str]:
    """What using one durable pull consumer takes: create/update and bind it, pull, ack/nak/term."""
    s, d = spec.stream.name, spec.durable
    return [f"{API}.CONSUMER.DURABLE.CREATE.{s}.{d}", f"{API}.CONSUMER.CREATE.{s}.{d}",
            f"{API}.CONSUMER.CREATE.{s}.{d}.>", f"{API}.CONSUMER.INFO.{s}.{d}",
            f"{API}.CONSUMER.MSG.NEXT.{s}.{d}", f"$JS.ACK.{s}.{d}.>"]


def custom_permissions(consumer: CustomConsumer) -> dict:
    """A custom consumer's user: bind (info) and pull its own durable, ack on it when declared so, and
    its own reply inbox (where the pulled messages and the API's answers arrive)."""
    s, d = consumer.stream, consumer.durable
    publish = [f"{API}.CONSUMER.INFO.{s}.{d}", f"{API}.CONSUMER.MSG.NEXT.{s}.{d}"]
    if consumer.ack:
        publish.append(f"$JS.ACK.{s}.{d}.>")
    return {"publish": {"allow": publish}, "subscribe": {"allow": [f"{inbox_prefix(consumer.name)}.>"]}}


def check_custom(custom: tuple[CustomConsumer, ...]) -> None:
    """ValueError when a declaration takes a user or a durable of relaunch's own, or repeats one."""
    check_unique(custom, {ADMIN, CLI, OPERATOR, *SERVICES, SHARED_PROBE}, {c.spec.durable for c in consumers.ALL})


def _kv(bucket: str, *, create: bool) -> list[str]:
    """Read, write, list (an ordered consumer) and, when `create`, create one KV bucket."""
    stream = f"KV_{bucket}"
    grants = [f"{API}.STREAM.INFO.{stream}", f"$KV.{bucket}.>", f"{API}.DIRECT.GET.{stream}",
              f"{API}.DIRECT.GET.{stream}.>", f"{API}.STREAM.MSG.GET.{stream}",
              f"{API}.CONSUMER.CREATE.{stream}", f"{API}.CONSUMER.CREATE.{stream}.>",
              f"{API}.CONSUMER.DELETE.{stream}.>", f"{API}.CONSUMER.INFO.{stream}.>", f"$JS.FC.{stream}.>"]
    if create:
        grants.append(f"{API}.STREAM.CREATE.{stream}")
    return grants


def _service(user: str, publish: list[str], subscribe: list[str] = (), consumers=(),
             responses: bool = False) -> dict:
    pub = [*publish, subjects.dlq(user)]
    pub += [f"{API}.STREAM.INFO.{spec.name}" for spec in subjects.STREAMS]  # Bus.connect checks the streams
    for spec in consumers:
        pub += _durable(spec)
    perms: dict = {"publish": {"allow": pub}, "subscribe": {"allow": [*subscribe, f"{inbox_prefix(user)}.>"]}}
    if responses:
        perms["allow_responses"] = True  # answer requests (reply subjects), nothing more
    return perms


def permissions(cluster: str, nodes: list[str], shared_probe: bool = False,
                custom: tuple[CustomConsumer, ...] = ()) -> dict[str, dict]:
    """user -> NATS permissions (publish/subscribe allow lists); deny is implicit for everything else."""
    check_custom(custom)
    p = subjects.PREFIX
    audit = f"{p}.event.audit.>"
    events = subjects.EVENTS.name
    live = consumers.API_EVENTS.stream.name  # the API's live readers (consumers.API_EVENTS)
    users = {
        ADMIN: {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}},
        # (audit: a job's output it refused to read for the job's user, docs/security.md)
        "detector": _service("detector", [f"{p}.signal.log.>", f"{p}.event.anomaly.>", f"{p}.event.checkpoint.>", audit,
                                          # after Redis lost its state: the last JobObserved per job
                                          # (relaunch.detector.rebuilding)
                                          f"{API}.STREAM.MSG.GET.{subjects.SIGNALS.name}"],
                             consumers=CONSUMERS["detector"]),
        # Advice, and the audit entry of each decision (through the outbox, relaunch.decider.adapters.ledger)
        "decider": _service("decider", [f"{p}.advice.>", audit], consumers=CONSUMERS["decider"]),
        "actuator": _service(
            "actuator", [f"{p}.signal.job.>", f"{p}.event.reconcile.>", f"{p}.event.hang_evidence.>", audit,
                         # reads the newest Advice of a job and the anomaly behind it (by subject)
                         f"{API}.STREAM.MSG.GET.{subjects.ADVICE.name}", f"{API}.DIRECT.GET.{subjects.ADVICE.name}.>",
                         f"{API}.STREAM.MSG.GET.{events}", f"{API}.DIRECT.GET.{events}.>",
                         *_kv(LEASE_BUCKET, create=True), *_kv(HOLDS_BUCKET, create=True)],
            consumers=CONSUMERS["actuator"]),
        # It may start before the actuator made the hold registry: creating it empty is harmless.
        "watchdog": _service("watchdog", [audit, *_kv(HOLDS_BUCKET, create=True)]),
        # Live reading of EVENTS: unnamed ephemeral ordered consumers (the server names them, and removes
        # them when the reader goes), with flow control. Not `CONSUMER.CREATE.EVENTS.>`, `DELETE` or
        # `INFO`: those would reach the decider's durables on EVENTS too.
        # The dashboard's health panel reads (read-only) each durable's lag, except the actuator's on
        # ADVICE (only the actuator touches ADVICE's consumer), and the actuator's lease (the leader).
        "api": _service("api", [audit, f"{API}.CONSUMER.CREATE.{live}", f"$JS.FC.{live}.>",
                                *(f"{API}.CONSUMER.INFO.{c.spec.stream.name}.{c.spec.durable}"
                                  for c in consumers.ALL if c.spec.stream is not subjects.ADVICE),
                                f"{API}.STREAM.INFO.KV_{LEASE_BUCKET}", f"{API}.DIRECT.GET.KV_{LEASE_BUCKET}.>",
                                f"{API}.STREAM.MSG.GET.KV_{LEASE_BUCKET}"]),
        # Reads audit entries, reconcile statuses and dead letters on its own durables; publishes nothing
        # but its own dead letters (the webhooks are outside NATS).
        "notifier": _service("notifier", [], consumers=CONSUMERS["notifier"]),
        # The relaunch CLI and the SDK in training code: progress, event tailing. Not fault injection:
        # every training process of every user holds this user (OPERATOR injects).
        CLI: {"publish": {"allow": [f"{p}.signal.progress.>"]},
              # Events, Advice, Slurm's job observations and node health (what squeue and sinfo show every
              # user; `relaunch demo` narrates them): every training process of every user holds this
              # user, so it never reads log lines, other jobs' progress and its keys, nor dead letters
              # (which quote the messages they hold): docs/security.md.
              "subscribe": {"allow": [f"{p}.event.>", f"{p}.advice.>", f"{p}.signal.job.>", f"{p}.signal.node.>",
                                      f"{inbox_prefix(CLI)}.>"]}},
    }
    # `relaunch inject` and nothing else: its requests, and their answers on its own inbox.
    users[OPERATOR] = {"publish": {"allow": [f"{p}.control.inject.>"]},
                       "subscribe": {"allow": [f"{inbox_prefix(OPERATOR)}.>"]}}
    for node in nodes:
        user = probe_user(node)
        users[user] = _service(user, [subjects.signal_node(cluster, node)],
                               subscribe=[consumers.PROBE_INJECT.subject_for(cluster=cluster, node=node)],
                               responses=True)
    if shared_probe:
        users[SHARED_PROBE] = {
            "publish": {"allow": [subjects.signal_node(cluster, "*"),
                                  *(f"{API}.STREAM.INFO.{spec.name}" for spec in subjects.STREAMS)]},
            "subscribe": {"allow": [consumers.PROBE_INJECT.subject_for(cluster=cluster, node="*"),
                                    f"{inbox_prefix(SHARED_PROBE)}.>"]},
            "allow_responses": True}
    for consumer in custom:
        users[consumer.name] = custom_permissions(consumer)
    return users


def all_users(nodes: list[str], shared_probe: bool = False, custom: tuple[CustomConsumer, ...] = ()) -> list[str]:
    return [ADMIN, CLI, OPERATOR, *SERVICES, *(probe_user(n) for n in nodes),
            *([SHARED_PROBE] if shared_probe else []), *(c.name for c in custom)]


def authorization_config(cluster: str, nodes: list[str], passwords: dict[str, str], shared_probe: bool = False,
                         custom: tuple[CustomConsumer, ...] = (), only: list[str] | None = None) -> str:
    """The `authorization { users = [...] }` block of a nats-server config (JSON values are valid there);
    `only`: just those users' entries (what to add to a server that has relaunch's users already)."""
    perms = permissions(cluster, nodes, shared_probe, custom)
    names = [u for u in all_users(nodes, shared_probe, custom) if only is None or u in only]
    users = [{"user": u, "password": passwords[u], "permissions": perms[u]} for u in names]
    return "authorization {\n  users = " + json.dumps(users, indent=2) + "\n}\n"


def write_passwords(creds_dir: Path, users: list[str]) -> dict[str, str]:
    """Create `<creds_dir>/<user>.pass` (mode 600, random) where missing; return every user's password."""
    creds_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(creds_dir, 0o700)
    out = {}
    for user in users:
        path = creds_dir / f"{user}.pass"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
        out[user] = read_password(path)
    return out


def read_password(path: str | os.PathLike) -> str:
    """The first line of a password file (a Kubernetes Secret mounted as a file, or one stack.sh wrote)."""
    text = Path(path).read_text()
    password = text.splitlines()[0].strip() if text.strip() else ""
    if not password:
        raise ValueError(f"the NATS password file {path} is empty")
    return password
