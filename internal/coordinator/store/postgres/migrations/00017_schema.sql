-- The PostgreSQL schema as of the SQLite store's migration 00017: the
-- SQLite history (00001 to 00017) in one step, numbered 00017 so that a
-- database of either store at version N has the same tables. A later
-- change gets the same number in both migrations folders (see doc.go).
--
-- Tables and columns mirror the SQLite ones, name for name and with the
-- same encodings, so the two stores' Go code reads alike: ids and names are
-- TEXT (COLLATE "C", so that lists sort by bytes as SQLite's do, whatever
-- the database's locale); times are BIGINT unix nanoseconds, NULL (or 0
-- where SQLite uses 0) for "never"; lists, maps and specs are JSON in TEXT
-- columns, kept as written (jsonb would refuse a \u0000 a task printed);
-- hashes, blobs and what processes printed are BYTEA.
--
-- Where PostgreSQL needs more than SQLite does, it says so below: suites
-- carry a seq in place of SQLite's implicit rowid, and suite_counts is
-- split in shards so that concurrent claims on one suite do not queue on
-- one row.

-- +goose Up
CREATE TABLE nodes (
    id             TEXT COLLATE "C" PRIMARY KEY,
    name           TEXT COLLATE "C" NOT NULL DEFAULT '',
    machine_id     TEXT    NOT NULL,
    data_dir       TEXT    NOT NULL,
    tags           TEXT    NOT NULL DEFAULT '[]', -- JSON array
    labels         TEXT    NOT NULL DEFAULT '{}', -- JSON object
    group_names    TEXT    NOT NULL DEFAULT '[]', -- JSON array
    hardware       TEXT    NOT NULL DEFAULT '{}', -- JSON api.Hardware
    status         TEXT    NOT NULL DEFAULT '',
    status_reason  TEXT    NOT NULL DEFAULT '',
    agent_state    TEXT    NOT NULL DEFAULT '',
    agent_version  TEXT    NOT NULL DEFAULT '',
    current_suite  TEXT    NOT NULL DEFAULT '',
    last_heartbeat BIGINT,
    registered_at  BIGINT  NOT NULL,
    updated_at     BIGINT  NOT NULL,
    UNIQUE (machine_id, data_dir)
);
CREATE INDEX nodes_status ON nodes (status);
CREATE INDEX nodes_name ON nodes (name, id);

-- The last notification seq handed out per node, apart from nodes and
-- notifications so that neither acks nor DeleteNode can let a seq be
-- handed out twice. Its row lock also orders a node's enqueues: a seq
-- commits before the next one is handed out.
CREATE TABLE notification_seqs (
    node_id  TEXT COLLATE "C" PRIMARY KEY,
    last_seq BIGINT NOT NULL
);

CREATE TABLE notifications (
    node_id    TEXT COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    seq        BIGINT  NOT NULL,
    method     TEXT    NOT NULL,
    body       BYTEA   NOT NULL, -- JSON, kept byte for byte
    created_at BIGINT  NOT NULL,
    PRIMARY KEY (node_id, seq)
);

CREATE TABLE users (
    name       TEXT COLLATE "C" PRIMARY KEY,
    admin      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT  NOT NULL
);

CREATE TABLE memberships (
    user_name  TEXT COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    group_name TEXT COLLATE "C" NOT NULL,
    role       TEXT NOT NULL,
    PRIMARY KEY (user_name, group_name)
);

CREATE TABLE tokens (
    id            TEXT COLLATE "C" PRIMARY KEY,
    kind          TEXT    NOT NULL,
    name          TEXT    NOT NULL DEFAULT '',
    hash          BYTEA   NOT NULL UNIQUE,
    user_name     TEXT COLLATE "C" REFERENCES users (name) ON DELETE CASCADE, -- api tokens
    node_id       TEXT COLLATE "C" REFERENCES nodes (id) ON DELETE CASCADE,   -- node credentials
    group_names   TEXT    NOT NULL DEFAULT '[]', -- JSON array: what joining nodes get
    max_uses      INTEGER NOT NULL DEFAULT 0,    -- 0: unlimited
    uses          INTEGER NOT NULL DEFAULT 0,
    expires_at    BIGINT,
    created_at    BIGINT  NOT NULL,
    last_used     BIGINT,
    deployment_id TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX tokens_user_name ON tokens (user_name);
CREATE INDEX tokens_node_id ON tokens (node_id);
CREATE INDEX tokens_created ON tokens (created_at, id);

CREATE TABLE suites (
    -- seq stands for SQLite's implicit rowid: the order suites were made
    -- in, which breaks ties between suites of one name made at one time.
    seq            BIGINT  GENERATED ALWAYS AS IDENTITY UNIQUE,
    id             TEXT COLLATE "C" PRIMARY KEY,
    name           TEXT COLLATE "C" NOT NULL,   -- spec.name
    group_name     TEXT COLLATE "C" NOT NULL DEFAULT '', -- spec.group
    priority       INTEGER NOT NULL DEFAULT 0,  -- spec.priority
    spec           TEXT    NOT NULL,            -- JSON api.SuiteSpec
    state          TEXT    NOT NULL,
    owner          TEXT    NOT NULL DEFAULT '',
    assigned_nodes TEXT    NOT NULL DEFAULT '[]', -- JSON array of node IDs
    stopped_nodes  TEXT    NOT NULL DEFAULT '[]', -- JSON array of node IDs
    created_at     BIGINT  NOT NULL,
    updated_at     BIGINT  NOT NULL,
    last_task_at   BIGINT                       -- NULL: no task added yet
);
-- A name belongs to one live suite at a time.
CREATE UNIQUE INDEX suites_live_name ON suites (name) WHERE state IN ('Open', 'Closed');
CREATE INDEX suites_name ON suites (name, created_at);
CREATE INDEX suites_state ON suites (state);
CREATE INDEX suites_order ON suites (priority DESC, created_at, id);

-- Each suite's task counts by state, kept in the transaction of every
-- change they count. SQLite keeps one row per suite; here a suite's counts
-- are the sum of its rows, one per shard, and each transaction adds its
-- differences to one shard picked at random (made when first used), so
-- that replicas claiming from one suite at once rarely wait on each
-- other's row. A shard's own counts may go negative; their sums cannot.
-- Every suite has its shard 0, made with it.
CREATE TABLE suite_counts (
    suite_id  TEXT COLLATE "C" NOT NULL REFERENCES suites (id) ON DELETE CASCADE,
    shard     SMALLINT NOT NULL,
    pending   BIGINT   NOT NULL DEFAULT 0,
    ready     BIGINT   NOT NULL DEFAULT 0,
    running   BIGINT   NOT NULL DEFAULT 0,
    finished  BIGINT   NOT NULL DEFAULT 0,
    failed    BIGINT   NOT NULL DEFAULT 0,
    cancelled BIGINT   NOT NULL DEFAULT 0,
    PRIMARY KEY (suite_id, shard)
);

CREATE TABLE tasks (
    seq               BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- insertion order
    id                TEXT COLLATE "C" NOT NULL UNIQUE,
    suite_id          TEXT COLLATE "C" NOT NULL REFERENCES suites (id) ON DELETE CASCADE,
    spec              TEXT    NOT NULL,            -- JSON api.TaskSpec
    priority          INTEGER NOT NULL DEFAULT 0,  -- spec.priority
    state             TEXT    NOT NULL,
    attempt           INTEGER NOT NULL DEFAULT 0,  -- attempts started
    node_id           TEXT COLLATE "C" NOT NULL DEFAULT '', -- no foreign key: history outlives nodes
    result            TEXT,                        -- JSON api.TaskResult; NULL: none yet
    created_at        BIGINT  NOT NULL,
    updated_at        BIGINT  NOT NULL,
    reclaimed_from    TEXT COLLATE "C" NOT NULL DEFAULT '',
    reclaimed_attempt INTEGER NOT NULL DEFAULT 0,
    not_before        BIGINT  NOT NULL DEFAULT 0,
    name              TEXT COLLATE "C" NOT NULL DEFAULT '',
    waiting           INTEGER NOT NULL DEFAULT 0,
    reason            TEXT    NOT NULL DEFAULT ''
);
-- As in SQLite (00004, 00008): partial indexes of the states that are
-- looked for, so that a finished task leaves no index entry to keep.
CREATE INDEX tasks_suite ON tasks (suite_id, seq);
CREATE INDEX tasks_ready ON tasks (suite_id, priority DESC, seq, not_before) WHERE state = 'Ready';
CREATE INDEX tasks_running ON tasks (node_id) WHERE state = 'Running';
CREATE INDEX tasks_failed ON tasks (suite_id, seq) WHERE state = 'Failed';
CREATE UNIQUE INDEX tasks_name ON tasks (suite_id, name) WHERE name <> '';

CREATE TABLE task_failures (
    task_id   TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt   INTEGER NOT NULL,
    node_id   TEXT    NOT NULL,
    exit_code INTEGER NOT NULL,
    signal    TEXT    NOT NULL DEFAULT '',
    -- What a process printed may hold any byte, NUL included, which TEXT
    -- refuses: the texts of failures and problems are BYTEA.
    reason    BYTEA   NOT NULL DEFAULT '',
    stdout    BYTEA   NOT NULL DEFAULT '',
    stderr    BYTEA   NOT NULL DEFAULT '',
    at        BIGINT  NOT NULL,
    PRIMARY KEY (task_id, attempt)
);

CREATE TABLE task_deps (
    after_id TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    task_id  TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (after_id, task_id)
);
CREATE INDEX task_deps_task ON task_deps (task_id);

CREATE TABLE documents (
    kind       TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    body       BYTEA   NOT NULL,
    version    INTEGER NOT NULL,
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (kind, name)
);

CREATE TABLE deployments (
    id           TEXT COLLATE "C" PRIMARY KEY,
    provider     TEXT COLLATE "C" NOT NULL,
    resource_id  TEXT    NOT NULL DEFAULT '',
    name         TEXT COLLATE "C" NOT NULL,
    template     TEXT    NOT NULL DEFAULT '',
    state        TEXT    NOT NULL,
    state_reason TEXT    NOT NULL DEFAULT '',
    address      TEXT    NOT NULL DEFAULT '',
    executors    TEXT    NOT NULL DEFAULT '[]',
    extra        TEXT    NOT NULL DEFAULT '{}',
    labels       TEXT    NOT NULL DEFAULT '{}',
    node_id      TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL
);
-- A name is taken while its machine exists (or is being made).
CREATE UNIQUE INDEX deployments_live_name ON deployments (provider, name) WHERE state NOT IN ('terminated', 'failed');
CREATE INDEX deployments_created ON deployments (created_at, id);

CREATE TABLE containers (
    node_id    TEXT COLLATE "C" NOT NULL,
    id         TEXT COLLATE "C" NOT NULL,
    status     TEXT    NOT NULL,
    live       BOOLEAN NOT NULL,
    record     TEXT    NOT NULL, -- JSON api.Container
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (node_id, id)
);
CREATE INDEX containers_id ON containers (id);

CREATE TABLE suite_problems (
    suite_id    TEXT COLLATE "C" NOT NULL REFERENCES suites (id) ON DELETE CASCADE,
    node_id     TEXT COLLATE "C" NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    stage       TEXT    NOT NULL,
    exit_code   INTEGER NOT NULL,
    reason      BYTEA   NOT NULL,
    output_tail BYTEA   NOT NULL DEFAULT '',
    at          BIGINT  NOT NULL,
    PRIMARY KEY (suite_id, node_id)
);
CREATE INDEX suite_problems_node ON suite_problems (node_id);

-- One row that the health probe rewrites: a real write, so that /healthz
-- fails when writes do (a full disk, a read-only standby).
CREATE TABLE health_probe (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    at  BIGINT  NOT NULL,
    pad BYTEA   NOT NULL
);

CREATE TABLE pool_machines (
    id            TEXT COLLATE "C" PRIMARY KEY,
    pool          TEXT COLLATE "C" NOT NULL,
    template      TEXT    NOT NULL,
    provider      TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    state_reason  TEXT    NOT NULL DEFAULT '',
    deployment_id TEXT    NOT NULL DEFAULT '',
    node_id       TEXT    NOT NULL DEFAULT '',
    cpus          DOUBLE PRECISION NOT NULL DEFAULT 0,
    memory_mb     BIGINT  NOT NULL DEFAULT 0,
    created_at    BIGINT  NOT NULL,
    launched_at   BIGINT  NOT NULL DEFAULT 0,
    ready_at      BIGINT  NOT NULL DEFAULT 0,
    busy_at       BIGINT  NOT NULL DEFAULT 0,
    updated_at    BIGINT  NOT NULL
);
CREATE INDEX pool_machines_pool ON pool_machines (pool, created_at, id);

CREATE TABLE pool_events (
    id      BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pool    TEXT COLLATE "C" NOT NULL,
    machine TEXT    NOT NULL DEFAULT '',
    at      BIGINT  NOT NULL,
    kind    TEXT    NOT NULL,
    message TEXT    NOT NULL
);
CREATE INDEX pool_events_pool ON pool_events (pool, id);

CREATE TABLE ensembles (
    id         TEXT COLLATE "C" PRIMARY KEY,
    name       TEXT COLLATE "C" NOT NULL,
    spec       TEXT    NOT NULL,              -- JSON api.EnsembleSpec
    state      TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    owner      TEXT    NOT NULL DEFAULT '',
    replicas   TEXT    NOT NULL DEFAULT '[]', -- JSON []api.EnsembleReplica
    lost       TEXT    NOT NULL DEFAULT '[]', -- JSON []api.EnsembleReplica
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL
);
CREATE UNIQUE INDEX ensembles_live_name ON ensembles (name) WHERE state NOT IN ('shut down', 'failed');

-- +goose Down
DROP TABLE ensembles;
DROP TABLE pool_events;
DROP TABLE pool_machines;
DROP TABLE health_probe;
DROP TABLE suite_problems;
DROP TABLE containers;
DROP TABLE deployments;
DROP TABLE documents;
DROP TABLE task_deps;
DROP TABLE task_failures;
DROP TABLE tasks;
DROP TABLE suite_counts;
DROP TABLE suites;
DROP TABLE tokens;
DROP TABLE memberships;
DROP TABLE users;
DROP TABLE notifications;
DROP TABLE notification_seqs;
DROP TABLE nodes;
