-- Ensembles: several allocations deployed across nodes as one (seed 004).
-- The spec and the replicas (where each went, its container and ports) are
-- JSON written from one Go value; the name is a column since it is unique
-- among the ensembles that are not shut down or failed.

-- +goose Up
CREATE TABLE ensembles (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL,
    spec       TEXT    NOT NULL,             -- JSON api.EnsembleSpec
    state      TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    owner      TEXT    NOT NULL DEFAULT '',
    replicas   TEXT    NOT NULL DEFAULT '[]', -- JSON []api.EnsembleReplica
    lost       TEXT    NOT NULL DEFAULT '[]', -- JSON []api.EnsembleReplica: placed again elsewhere, to delete
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX ensembles_live_name ON ensembles (name) WHERE state NOT IN ('shut down', 'failed');

-- +goose Down
DROP TABLE ensembles;
