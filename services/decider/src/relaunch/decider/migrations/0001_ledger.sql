-- The ledger: every job, attempt, anomaly, advice generation, reconcile step and audit entry.
-- Recovery adds rows, never erases them.

CREATE TABLE jobs (
    cluster        text NOT NULL,
    job_id         text NOT NULL,
    name           text NOT NULL DEFAULT '',
    comment        text NOT NULL DEFAULT '',
    partition      text NOT NULL DEFAULT '',
    options        jsonb NOT NULL DEFAULT '{}',
    option_errors  jsonb NOT NULL DEFAULT '[]',
    mode           text NOT NULL DEFAULT 'act',          -- act | observe (malformed opt-in)
    state          text NOT NULL DEFAULT '',
    reason         text NOT NULL DEFAULT '',
    restarts       integer NOT NULL DEFAULT 0,
    verdict        text NOT NULL DEFAULT 'watching',     -- watching | recovering | stopped
    verdict_reason text NOT NULL DEFAULT '',
    first_seen     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, job_id)
);

CREATE TABLE attempts (
    cluster    text NOT NULL,
    job_id     text NOT NULL,
    idx        integer NOT NULL,
    state      text NOT NULL DEFAULT '',
    nodes      text[] NOT NULL DEFAULT '{}',
    exit_code  integer,
    first_seen timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, job_id, idx),
    FOREIGN KEY (cluster, job_id) REFERENCES jobs (cluster, job_id)
);

CREATE TABLE anomalies (
    anomaly_id   text PRIMARY KEY,
    cluster      text NOT NULL,
    job_id       text NOT NULL,
    attempt      integer NOT NULL,
    kind         text NOT NULL,
    source       text NOT NULL,
    signature_id text NOT NULL,
    category     text NOT NULL,
    fault_domain text NOT NULL,
    action       text NOT NULL,
    summary      text NOT NULL,
    nodes        text[] NOT NULL DEFAULT '{}',
    evidence     jsonb NOT NULL DEFAULT '[]',
    detected_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (cluster, job_id) REFERENCES jobs (cluster, job_id)
);

CREATE TABLE advice (
    cluster       text NOT NULL,
    job_id        text NOT NULL,
    generation    integer NOT NULL,
    attempt       integer NOT NULL,
    operation     text NOT NULL,
    exclude_nodes text[] NOT NULL DEFAULT '{}',
    reason        text NOT NULL,
    evidence_refs jsonb NOT NULL DEFAULT '[]',
    policy        jsonb NOT NULL DEFAULT '{}',
    status        text NOT NULL DEFAULT 'PENDING',
    status_reason text NOT NULL DEFAULT '',
    issued_at     timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, job_id, generation),
    UNIQUE (cluster, job_id, attempt),
    FOREIGN KEY (cluster, job_id) REFERENCES jobs (cluster, job_id)
);

CREATE TABLE reconcile_steps (
    id         bigserial PRIMARY KEY,
    cluster    text NOT NULL,
    job_id     text NOT NULL,
    generation integer NOT NULL,
    status     text NOT NULL,
    reason     text NOT NULL,
    step       text NOT NULL DEFAULT '',
    detail     text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL,
    dedupe_key text NOT NULL UNIQUE
);

CREATE TABLE audit (
    id              bigserial PRIMARY KEY,
    cluster         text NOT NULL,
    job_id          text NOT NULL,
    service         text NOT NULL,
    action          text NOT NULL,
    detail          text NOT NULL DEFAULT '',
    idempotency_key text NOT NULL UNIQUE,
    at              timestamptz NOT NULL
);

-- Transactional outbox: an Advice row and its outbox row commit together; a publisher sends
-- unpublished rows with their Msg-Id (a replay after a crash is dropped by JetStream's dedupe).
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    subject      text NOT NULL,
    msg_id       text NOT NULL UNIQUE,
    payload      bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX anomalies_job ON anomalies (cluster, job_id);
CREATE INDEX audit_job ON audit (cluster, job_id);
CREATE INDEX reconcile_job ON reconcile_steps (cluster, job_id);
