-- +goose Up
-- Machines made by providers (docker, local, libvirt, aws).
CREATE TABLE deployments (
    id           TEXT    PRIMARY KEY,
    provider     TEXT    NOT NULL,
    resource_id  TEXT    NOT NULL DEFAULT '',
    name         TEXT    NOT NULL,
    template     TEXT    NOT NULL DEFAULT '',
    state        TEXT    NOT NULL,
    state_reason TEXT    NOT NULL DEFAULT '',
    address      TEXT    NOT NULL DEFAULT '',
    executors    TEXT    NOT NULL DEFAULT '[]',
    extra        TEXT    NOT NULL DEFAULT '{}',
    labels       TEXT    NOT NULL DEFAULT '{}',
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
-- A name is taken while its machine exists (or is being made).
CREATE UNIQUE INDEX deployments_live_name ON deployments (provider, name) WHERE state NOT IN ('terminated', 'failed');

-- +goose Down
DROP TABLE deployments;
