-- Task suites and their tasks, and the suite each node works on.
--
-- Conventions as in 00001. A few fields of the JSON specs are copied into
-- columns of their own (a suite's name, group and priority, a task's
-- priority) because queries filter, order or enforce uniqueness on them; the
-- store writes both from the same Go value.

-- +goose Up
ALTER TABLE nodes ADD COLUMN current_suite TEXT NOT NULL DEFAULT '';

CREATE TABLE suites (
    id             TEXT    PRIMARY KEY,
    name           TEXT    NOT NULL,              -- spec.name
    group_name     TEXT    NOT NULL DEFAULT '',   -- spec.group
    priority       INTEGER NOT NULL DEFAULT 0,    -- spec.priority
    spec           TEXT    NOT NULL,              -- JSON api.SuiteSpec
    state          TEXT    NOT NULL,
    owner          TEXT    NOT NULL DEFAULT '',
    assigned_nodes TEXT    NOT NULL DEFAULT '[]', -- JSON array of node IDs
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    last_task_at   INTEGER                        -- NULL: no task added yet
);

-- A name belongs to one live suite at a time; Complete and Cancelled suites
-- give it up. PostgreSQL has the same partial unique index.
CREATE UNIQUE INDEX suites_live_name ON suites (name) WHERE state IN ('Open', 'Closed');
CREATE INDEX suites_name ON suites (name, created_at);
CREATE INDEX suites_state ON suites (state);

CREATE TABLE tasks (
    seq        INTEGER PRIMARY KEY, -- the rowid: insertion order, "oldest first" (BIGSERIAL)
    id         TEXT    NOT NULL UNIQUE,
    suite_id   TEXT    NOT NULL REFERENCES suites (id) ON DELETE CASCADE,
    spec       TEXT    NOT NULL,             -- JSON api.TaskSpec
    priority   INTEGER NOT NULL DEFAULT 0,   -- spec.priority
    state      TEXT    NOT NULL,
    attempt    INTEGER NOT NULL DEFAULT 0,   -- attempts started
    node_id    TEXT    NOT NULL DEFAULT '',  -- node of the current or last attempt; no
                                             -- foreign key: history outlives nodes
    result     TEXT,                         -- JSON api.TaskResult; NULL: none yet
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- Claims read the first Ready tasks of a suite in dispatch order straight off
-- this index; counts by (suite_id, state) use its prefix, so they need no
-- index of their own (each index is paid for on every state change).
CREATE INDEX tasks_claim ON tasks (suite_id, state, priority DESC, seq);
-- Listing a suite's tasks in order, page by page. Neither column ever
-- changes, so state changes never touch this index.
CREATE INDEX tasks_suite ON tasks (suite_id, seq);
-- Reclaiming a lost node's tasks, and listing a node's tasks.
CREATE INDEX tasks_node ON tasks (node_id, state);

-- One row per failed attempt; an attempt fails at most once, since only the
-- attempt that holds its task may report.
CREATE TABLE task_failures (
    task_id   TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt   INTEGER NOT NULL,
    node_id   TEXT    NOT NULL,
    exit_code INTEGER NOT NULL,
    signal    TEXT    NOT NULL DEFAULT '',
    reason    TEXT    NOT NULL DEFAULT '',
    stdout    TEXT    NOT NULL DEFAULT '',
    stderr    TEXT    NOT NULL DEFAULT '',
    at        INTEGER NOT NULL,
    PRIMARY KEY (task_id, attempt)
);

-- +goose Down
DROP TABLE task_failures;
DROP TABLE tasks;
DROP TABLE suites;
ALTER TABLE nodes DROP COLUMN current_suite;
