"""Every message body relaunch puts on the bus (contract).

Invariants:
- models are frozen and forbid unknown fields; each carries `schema` = "relaunch.<type>/v<n>";
- changes are additive only: a new optional field keeps v1, anything else is a v2 model;
- identifiers that end up in a subject token or a Slurm argv are validated here, once.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from relaunch.common.verdicts import Action, FaultDomain  # noqa: F401 - re-exported

_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_JOB_ID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,8})?$")


def validate_name(value: str) -> str:
    if not _TOKEN.fullmatch(value):  # fullmatch: `$` alone would let a trailing newline through
        raise ValueError(f"{value!r} is not a valid name (letters, digits, '_' and '-', 1-64 chars)")
    return value


def _job_id(value: str) -> str:
    if not _JOB_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slurm job id (digits, optionally _arrayindex)")
    return value


# The validators' rules, also said in the JSON schemas (the API's OpenAPI, docs/asyncapi.yaml), so that a client
# generated from them knows what a name or a job id may hold.
Name = Annotated[str, AfterValidator(validate_name),
                 WithJsonSchema({"type": "string", "pattern": _TOKEN.pattern, "minLength": 1, "maxLength": 64})]
JobId = Annotated[str, AfterValidator(_job_id), WithJsonSchema({"type": "string", "pattern": _JOB_ID.pattern})]

Operation = Literal["restart", "terminate"]
ReconcileState = Literal["PENDING", "CONVERGED", "ABANDONED"]


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JobObserved(Message):
    """What the actuator's scheduler observer saw of one opted-in job."""

    schema_: Literal["relaunch.job_observed/v1"] = Field("relaunch.job_observed/v1", alias="schema")
    cluster: Name
    job_id: JobId
    name: str = ""
    state: str
    reason: str = ""
    restarts: int = Field(ge=0)
    nodes: list[Name] = []
    comment: str = ""
    partition: str = ""
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    observed_at: dt.datetime
    # Additive in v1 (None: not known):
    submit_time: dt.datetime | None = Field(
        None, description="Slurm's SubmitTime of the job's first attempt (Slurm gives each requeued attempt a new "
                          "one); with cluster and job_id it names a job (a reused job id is a new job)")
    partition_nodes: int | None = Field(
        None, ge=0, description="nodes of the job's partition that can run jobs now (not down, drained or failed)")
    user_id: int | None = Field(
        None, ge=0, description="the job's owner (Slurm's user_id): the detector reads the job's output only where this "
                                "user could read it (docs/security.md); None: not known, and then nothing is read")
    group_id: int | None = Field(None, ge=0, description="the job's primary group (Slurm's group_id)")
    work_dir: str = Field("", description="the job's working directory as Slurm recorded it ('' when not known)")
    node_addrs: dict[Name, str] = Field(
        {}, description="each node of the job -> its NodeAddr as Slurm knows it (an address or a host name): the "
                        "detector maps an address a log line blames to its node with it (docs/log-ingest.md, 'Which "
                        "host a line blames'); empty: not known")
    nodes_down: list[Name] = Field(
        [], description="the nodes of the job Slurm shows DOWN, FAIL or NOT_RESPONDING when observed: a node failure's "
                        "failed node (the one that printed Slurm's NODE FAILURE line survived); empty: none, or not known")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class LogBatch(Message):
    """A batch of raw log lines of one job attempt, in file order."""

    schema_: Literal["relaunch.log_batch/v1"] = Field("relaunch.log_batch/v1", alias="schema")
    cluster: Name
    job_id: JobId
    attempt: int = Field(ge=0)
    path: str
    offset: int = Field(ge=0, description="byte offset of the first line in the file")
    lines: list[str]
    read_at: dt.datetime = Field(description="when the lines were written at the latest, or read; hang and straggler "
                                             "detection take it as the lines' time (the detector's follower gives the "
                                             "file's mtime when it is between its previous look and the read)")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ProgressReported(Message):
    """Forward progress of one job (from relaunch.client in training code, or parsed from its log)."""

    schema_: Literal["relaunch.progress/v1"] = Field("relaunch.progress/v1", alias="schema")
    cluster: Name
    job_id: JobId
    step: int = Field(ge=0)
    throughput: float | None = Field(None, ge=0, description="samples, tokens or iterations per second")
    step_time_s: float | None = Field(None, ge=0)
    rank: int | None = Field(None, ge=0)
    node: Name | None = None
    at: dt.datetime
    # Additive in v1 (divergence detection, docs/policy.md "Divergence"; NaN and infinity travel as the
    # strings "NaN", "Infinity", "-Infinity": they are what is looked for, and JSON has no such numbers):
    loss: float | None = Field(None, description="the training loss at this step (NaN and infinity allowed)")
    grad_norm: float | None = Field(None, description="the gradient norm at this step (NaN and infinity allowed)")
    loss_scale: float | None = Field(None, ge=0, description="the fp16 dynamic loss scale")
    skipped: bool | None = Field(None, description="the optimizer skipped this step (fp16 overflow)")
    key: str | None = Field(
        None, max_length=64, description="the reporting process's key, printed once by relaunch.client in the job's own "
                                         "log ('relaunch: progress key <key>'): a report is bound to its job only "
                                         "when the detector has read that line in the job's log (docs/security.md)")
    checkpoint_saved: bool | None = Field(
        None, description="the training saved a checkpoint holding this step (relaunch.client.report_checkpoint; "
                          "additive in v1): a fact of the ledger, docs/goodput.md")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, ser_json_inf_nan="strings")


class EvidenceLine(Message):
    path: str
    offset: int = Field(ge=0)
    text: str


class AnomalyDetected(Message):
    """The detector's finding about one attempt of one job."""

    schema_: Literal["relaunch.anomaly/v1"] = Field("relaunch.anomaly/v1", alias="schema")
    anomaly_id: str
    cluster: Name
    job_id: JobId
    attempt: int = Field(ge=0)
    kind: Literal["crash", "hang", "straggler", "divergence"]
    source: Literal["log", "scheduler", "progress", "node"]
    signature_id: str
    category: str
    fault_domain: FaultDomain
    action: Action
    summary: str
    nodes: list[Name] = []
    ranks: list[int] = Field(default=[], description="global ranks the evidence names (additive in v1)")
    evidence: list[EvidenceLine] = []
    detected_at: dt.datetime
    # Additive in v1 (the decider's progress and do-not-restart rules read them; None: not known):
    last_step: int | None = Field(None, ge=0, description="the highest training step this attempt reached")
    exit_code: int | None = Field(None, description="the attempt's exit code, when the scheduler reported one")
    advanced: bool | None = Field(None, description="a hang's: whether the attempt stepped forward before it went "
                                  "silent (the no-progress rule never stops a job that did); None: not known")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Advice(Message):
    """The decider's durable intent for one attempt (docs/architecture.md, "Decision" and "Reconcile")."""

    schema_: Literal["relaunch.advice/v1"] = Field("relaunch.advice/v1", alias="schema")
    cluster: Name
    job_id: JobId
    attempt: int = Field(ge=0, description="the Slurm restart count of the attempt that failed")
    generation: int = Field(ge=1)
    operation: Operation
    exclude_nodes: list[Name] = []
    reason: str
    evidence_refs: list[str] = []
    policy: dict[str, int | str | bool] = {}
    issued_at: dt.datetime
    expires_at: dt.datetime
    resume_step: int | None = Field(
        None, ge=0, description="a restart's: the step of the last checkpoint saved before the failure, which the "
                                "successor is expected to resume from (additive in v1; None: no save seen)")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ReconcileStatus(Message):
    """The actuator's report on one Advice generation."""

    schema_: Literal["relaunch.reconcile_status/v1"] = Field("relaunch.reconcile_status/v1", alias="schema")
    cluster: Name
    job_id: JobId
    generation: int = Field(ge=1)
    status: ReconcileState
    reason: str
    step: str = ""
    detail: str = ""
    at: dt.datetime

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class AuditEntry(Message):
    """One thing a service did or chose not to do, for the ledger."""

    schema_: Literal["relaunch.audit/v1"] = Field("relaunch.audit/v1", alias="schema")
    cluster: Name
    job_id: JobId
    service: str
    action: str
    detail: str = ""
    idempotency_key: str
    at: dt.datetime

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


XidClass = Literal["hardware", "application", "remap", "unknown"]
Verdict = Literal["healthy", "degraded", "failed"]
ThrottleReason = Literal["hw_slowdown", "hw_thermal", "sw_thermal", "power_brake"]
InjectableFault = Literal["xid", "ecc", "nvlink", "throttle", "gpu-lost", "clear"]


class GpuReading(Message):
    """One GPU as gpu-probe read it. Every field after `ecc_uncorrected` is additive in v1: None means
    NVML could not say (unsupported on this GPU, or an NVML error), and `notes` then says why."""

    index: int = Field(ge=0)
    temperature_c: float | None = None
    xids: list[int] = Field(default=[], description="XID codes seen on this GPU within the probe's XID window")
    ecc_uncorrected: int = Field(0, description="volatile uncorrected ECC errors (since the driver loaded)")
    uuid: str | None = None
    name: str | None = None
    lost: bool = Field(False, description="NVML answers 'GPU is lost' for it (fell off the bus)")
    ecc_corrected: int | None = Field(None, description="volatile corrected ECC errors")
    ecc_corrected_aggregate: int | None = Field(None, description="corrected ECC errors over the GPU's lifetime")
    ecc_uncorrected_aggregate: int | None = Field(None, description="uncorrected ECC errors over the GPU's lifetime")
    retired_pages_sbe: int | None = Field(None, description="pages retired for repeated single-bit errors")
    retired_pages_dbe: int | None = Field(None, description="pages retired for double-bit errors")
    retired_pages_pending: bool | None = Field(None, description="a page waits for a GPU reset to be retired")
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = Field(None, description="a row waits for a GPU reset to be remapped")
    remap_failure: bool | None = Field(None, description="a row could not be remapped (no spare rows left)")
    nvlink_crc_errors: int | None = Field(None, description="NVLink CRC errors since the previous sample (delta)")
    nvlink_replay_errors: int | None = Field(None, description="NVLink replay errors since the previous sample")
    nvlink_recovery_errors: int | None = Field(None, description="NVLink recovery errors since the previous sample")
    throttle_reasons: list[ThrottleReason] = Field(default=[], description="fault-like clock slowdowns now active")
    power_w: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    notes: list[str] = Field(default=[], description="fields NVML could not read on this GPU, and why")


class XidRecord(Message):
    """The XIDs of one code on one GPU within the probe's XID window, with their class (what attribution reads)."""

    gpu: int = Field(ge=0)
    code: int = Field(ge=0)
    xid_class: XidClass
    description: str = ""
    count: int = Field(ge=1)
    first_at: dt.datetime
    last_at: dt.datetime


class NodeHealth(Message):
    """gpu-probe's reading of one node; the interval publications are also heartbeats."""

    schema_: Literal["relaunch.node_health/v1"] = Field("relaunch.node_health/v1", alias="schema")
    cluster: Name
    node: Name
    verdict: Literal["healthy", "degraded", "failed"]
    reasons: list[str] = []
    gpus: list[GpuReading] = []
    backend: Literal["nvml", "fake"]
    at: dt.datetime
    # Additive in v1:
    xids: list[XidRecord] = Field(default=[], description="XIDs within the probe's window, per GPU and code")
    gpu_count: int | None = Field(None, description="GPUs that answered NVML in this sample")
    expected_gpus: int | None = Field(None, description="GPUs the node should have")
    notes: list[str] = Field(default=[], description="node-level observations that did not change the verdict")
    trigger: Literal["interval", "xid", "inject", "start"] = Field(
        "interval", description="why this sample was published: the interval (a heartbeat), an XID, or an injection")
    interval_s: float | None = Field(
        None, description="the probe's heartbeat period: no NodeHealth for a few of these means the probe or node "
                          "is down")
    seq: int | None = Field(None, ge=0, description="publication counter of this probe process")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class FaultInjection(Message):
    """A request to the fake GPU backend of one node's probe to report a fault (`relaunch inject`).

    Sent as a plain NATS request on `subjects.control_inject`; the probe answers with InjectionAck.
    """

    schema_: Literal["relaunch.fault_injection/v1"] = Field("relaunch.fault_injection/v1", alias="schema")
    cluster: Name
    node: Name
    fault: InjectableFault
    gpu: int = Field(0, ge=0, le=63)
    code: int | None = Field(None, ge=1, le=1023, description="xid: the XID code")
    count: int | None = Field(None, ge=1, description="ecc: uncorrected errors to add; nvlink: errors per sample")
    nvlink_counter: Literal["crc", "replay", "recovery"] = "crc"
    throttle: ThrottleReason | None = None
    requested_at: dt.datetime

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _xid_names_its_code(self) -> FaultInjection:
        if self.fault == "xid" and self.code is None:
            raise ValueError("an xid fault needs its code")
        return self


class InjectionAck(Message):
    """A probe's answer to FaultInjection: accepted, or refused with the reason."""

    schema_: Literal["relaunch.injection_ack/v1"] = Field("relaunch.injection_ack/v1", alias="schema")
    cluster: Name
    node: Name
    accepted: bool
    detail: str = ""
    backend: Literal["nvml", "fake"]
    at: dt.datetime

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class DeadLetter(Message):
    """A message a service could not accept, with the reason (payload kept, truncated)."""

    schema_: Literal["relaunch.dead_letter/v1"] = Field("relaunch.dead_letter/v1", alias="schema")
    service: str
    subject: str
    reason: str
    payload: str
    payload_bytes: int
    at: dt.datetime

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class RankEvidence(Message):
    """One rank process of a hung job as read from outside it (py-spy, /proc), and its part in the hang."""

    rank: int = Field(ge=0)
    node: Name
    pid: int = Field(ge=0)
    role: Literal["victim", "suspect", "waiting", "unread"]
    where: Literal["collective", "user", "native", "library", "unknown"]
    collective: str | None = None
    place: str | None = Field(None, description="the innermost frame of the user's code: file:line (function)")
    call: str | None = Field(None, description="what it is in: time.sleep, a native call, a library function")
    state: str = Field("", description="/proc/<pid>/stat state at the second sample (R, S, D...)")
    cpu_ticks: int | None = Field(None, description="utime+stime gained between the two samples")
    frames: list[str] = Field([], description="its main thread's frames that matter, innermost first (at most 12)")
    dump_mode: str = Field("", description="native (py-spy --native) or nonblocking")
    error: str = ""


class HangEvidence(Message):
    """What the actuator read of a hung job's ranks on a hang anomaly, and who it points at
    (docs/architecture.md, "Hang evidence")."""

    schema_: Literal["relaunch.hang_evidence/v1"] = Field("relaunch.hang_evidence/v1", alias="schema")
    anomaly_id: str
    cluster: Name
    job_id: JobId
    attempt: int = Field(ge=0)
    status: Literal["collected", "unavailable", "skipped"]
    detail: str = Field("", description="why nothing was collected, or what failed on some nodes")
    blame: Literal["node", "user_code", "unclear", "none"] = "none"
    victims: list[int] = []
    suspects: list[int] = []
    suspect_nodes: list[Name] = Field([], description="only when the evidence points at the node")
    place: str | None = Field(None, description="the user-code suspect's place (a deadlock when the same twice)")
    reason: str = ""
    ranks: list[RankEvidence] = []
    elapsed_s: float = Field(0.0, ge=0, description="how long the collection took")
    collected_at: dt.datetime

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class CheckpointFact(Message):
    """A fact about an attempt's progress that what a failure costs is computed from (docs/goodput.md):
    a checkpoint save seen (its start or its end, from a framework's save line or relaunch.client), the
    first step of an attempt (where it resumed), its last progress before its anomaly, or the step at which
    it got back past the step the attempt before it failed at."""

    schema_: Literal["relaunch.checkpoint_fact/v1"] = Field("relaunch.checkpoint_fact/v1", alias="schema")
    cluster: Name
    job_id: JobId
    attempt: int = Field(ge=0)
    kind: Literal["save_started", "saved", "first_step", "last_progress", "caught_up", "loaded"] = Field(
        description="save_started / saved: a checkpoint save's start / end; first_step: the attempt's first step; "
                    "last_progress: its last step before its anomaly; caught_up: the first step at which it passed "
                    "the step the attempt before it failed at; loaded: the attempt loaded the checkpoint of `step` "
                    "(a framework's load line)")
    step: int | None = Field(None, ge=0, description="the training step (a save's: the step it holds; None: not said "
                                                        "and no step seen yet)")
    at: dt.datetime = Field(description="when the line was read or the report made")
    source: Literal["log", "client", "detector"] = "log"
    preset: str = Field("", max_length=32, description="the framework whose wording was read (megatron, hf_trainer...)")


ALL_MODELS: tuple[type[Message], ...] = (
    JobObserved, LogBatch, ProgressReported, AnomalyDetected, Advice, ReconcileStatus, AuditEntry, NodeHealth, DeadLetter,
    FaultInjection, InjectionAck, HangEvidence, CheckpointFact,
)


def dump(model: Message) -> bytes:
    """Serialise with the `schema` alias, as on the wire."""
    return model.model_dump_json(by_alias=True).encode()
