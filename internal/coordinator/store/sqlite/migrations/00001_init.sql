-- The coordinator's first schema.
--
-- Conventions, kept so that a PostgreSQL schema can mirror this one column
-- for column: ids are TEXT; times are INTEGER unix nanoseconds (BIGINT in
-- PostgreSQL), NULL where the Go value is the zero time ("never"); lists and
-- maps are JSON in TEXT columns; hashes are BLOB (BYTEA).

-- +goose Up
CREATE TABLE nodes (
    id             TEXT    PRIMARY KEY,
    name           TEXT    NOT NULL DEFAULT '',
    machine_id     TEXT    NOT NULL,
    data_dir       TEXT    NOT NULL,
    tags           TEXT    NOT NULL DEFAULT '[]', -- JSON array
    labels         TEXT    NOT NULL DEFAULT '{}', -- JSON object
    group_names    TEXT    NOT NULL DEFAULT '[]', -- JSON array; GROUPS is a keyword
    hardware       TEXT    NOT NULL DEFAULT '{}', -- JSON api.Hardware
    status         TEXT    NOT NULL DEFAULT '',
    status_reason  TEXT    NOT NULL DEFAULT '',
    agent_state    TEXT    NOT NULL DEFAULT '',
    agent_version  TEXT    NOT NULL DEFAULT '',
    last_heartbeat INTEGER,
    registered_at  INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    UNIQUE (machine_id, data_dir)
);

CREATE INDEX nodes_status ON nodes (status);

-- The last notification seq handed out per node. It lives apart from nodes
-- and notifications on purpose: acks delete notifications and DeleteNode
-- deletes the node, and neither may let a seq be handed out twice.
CREATE TABLE notification_seqs (
    node_id  TEXT    PRIMARY KEY,
    last_seq INTEGER NOT NULL
);

CREATE TABLE notifications (
    node_id    TEXT    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    method     TEXT    NOT NULL,
    body       TEXT    NOT NULL, -- JSON, kept byte for byte
    created_at INTEGER NOT NULL,
    PRIMARY KEY (node_id, seq)
);

CREATE TABLE users (
    name       TEXT    PRIMARY KEY,
    admin      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at INTEGER NOT NULL
);

CREATE TABLE memberships (
    user_name  TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    group_name TEXT NOT NULL,
    role       TEXT NOT NULL,
    PRIMARY KEY (user_name, group_name)
);

CREATE TABLE tokens (
    id          TEXT    PRIMARY KEY,
    kind        TEXT    NOT NULL,
    name        TEXT    NOT NULL DEFAULT '',
    hash        BLOB    NOT NULL UNIQUE,
    user_name   TEXT    REFERENCES users (name) ON DELETE CASCADE, -- api tokens
    node_id     TEXT    REFERENCES nodes (id) ON DELETE CASCADE,   -- node credentials
    group_names TEXT    NOT NULL DEFAULT '[]', -- JSON array: what joining nodes get
    max_uses    INTEGER NOT NULL DEFAULT 0,    -- 0: unlimited
    uses        INTEGER NOT NULL DEFAULT 0,
    expires_at  INTEGER,
    created_at  INTEGER NOT NULL,
    last_used   INTEGER
);

CREATE INDEX tokens_user_name ON tokens (user_name);
CREATE INDEX tokens_node_id ON tokens (node_id);

-- +goose Down
DROP TABLE tokens;
DROP TABLE memberships;
DROP TABLE users;
DROP TABLE notifications;
DROP TABLE notification_seqs;
DROP TABLE nodes;
