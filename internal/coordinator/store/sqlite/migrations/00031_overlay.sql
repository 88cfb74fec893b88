-- The overlay network (issue 32): a node that joins it gets a block of
-- the overlay's prefix, kept for as long as the node exists, and tells
-- its WireGuard public key and the endpoint peers reach it at. A key is
-- one node's: two nodes with one key (a cloned data dir) would steal each
-- other's traffic. overlay_revision.rev grows at every write to the
-- members and to the ensembles (whose replicas' names the nodes serve),
-- as node_revision does for nodes, so a server reads the overlay again
-- only when something changed.

-- +goose Up
CREATE TABLE overlay_members (
    node_id     TEXT    PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    block       INTEGER NOT NULL UNIQUE,
    public_key  TEXT    NOT NULL UNIQUE,
    listen_port INTEGER NOT NULL,
    endpoint    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    joined_at   INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE TABLE overlay_revision (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    rev INTEGER NOT NULL
);
INSERT INTO overlay_revision (id, rev) VALUES (1, 1);
-- +goose StatementBegin
CREATE TRIGGER overlay_added AFTER INSERT ON overlay_members
BEGIN
    UPDATE overlay_revision SET rev = rev + 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER overlay_changed AFTER UPDATE ON overlay_members
BEGIN
    UPDATE overlay_revision SET rev = rev + 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER overlay_removed AFTER DELETE ON overlay_members
BEGIN
    UPDATE overlay_revision SET rev = rev + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER overlay_ensemble_added AFTER INSERT ON ensembles
BEGIN
    UPDATE overlay_revision SET rev = rev + 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER overlay_ensemble_changed AFTER UPDATE OF state, replicas ON ensembles
    WHEN OLD.state IS NOT NEW.state OR OLD.replicas IS NOT NEW.replicas
BEGIN
    UPDATE overlay_revision SET rev = rev + 1;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER overlay_ensemble_changed;
DROP TRIGGER overlay_ensemble_added;
DROP TRIGGER overlay_removed;
DROP TRIGGER overlay_changed;
DROP TRIGGER overlay_added;
DROP TABLE overlay_revision;
DROP TABLE overlay_members;
