-- Pools of machines sized to demand (the orchestrator). A pool's spec is a
-- document of kind "pool"; its machines and its decisions are kept here.

-- +goose Up
-- The node whose agent registered from a deployment's machine.
ALTER TABLE deployments ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
-- A join token made for one deployment's agent: the node it creates is
-- linked to that deployment.
ALTER TABLE tokens ADD COLUMN deployment_id TEXT NOT NULL DEFAULT '';

CREATE TABLE pool_machines (
    id            TEXT    PRIMARY KEY,
    pool          TEXT    NOT NULL,
    template      TEXT    NOT NULL,
    provider      TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    state_reason  TEXT    NOT NULL DEFAULT '',
    deployment_id TEXT    NOT NULL DEFAULT '',
    node_id       TEXT    NOT NULL DEFAULT '',
    cpus          REAL    NOT NULL DEFAULT 0,
    memory_mb     INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    launched_at   INTEGER NOT NULL DEFAULT 0, -- the provider gave the machine: bootstrap starts
    ready_at      INTEGER NOT NULL DEFAULT 0,
    busy_at       INTEGER NOT NULL DEFAULT 0, -- work last seen on its node
    updated_at    INTEGER NOT NULL
);
CREATE INDEX pool_machines_pool ON pool_machines (pool, created_at, id);

CREATE TABLE pool_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    pool    TEXT    NOT NULL,
    machine TEXT    NOT NULL DEFAULT '',
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    message TEXT    NOT NULL
);
CREATE INDEX pool_events_pool ON pool_events (pool, id);

-- +goose Down
DROP TABLE pool_events;
DROP TABLE pool_machines;
ALTER TABLE tokens DROP COLUMN deployment_id;
ALTER TABLE deployments DROP COLUMN node_id;
