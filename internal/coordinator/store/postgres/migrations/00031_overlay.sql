-- The overlay network (issue 32), as SQLite's 00031: a node's block of
-- the overlay's prefix, its WireGuard public key (one node's only) and
-- its endpoint; overlay_revision.rev grows at every write to the members
-- and to the ensembles' state and replicas (whose names the nodes serve),
-- from triggers, so every replica sees a change at its next read of the row.

-- +goose Up
CREATE TABLE overlay_members (
    node_id     TEXT    PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    block       INTEGER NOT NULL UNIQUE,
    public_key  TEXT    NOT NULL UNIQUE,
    listen_port INTEGER NOT NULL,
    endpoint    TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    joined_at   BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL
);
CREATE TABLE overlay_revision (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    rev BIGINT  NOT NULL
);
INSERT INTO overlay_revision (id, rev) VALUES (1, 1);
-- +goose StatementBegin
CREATE FUNCTION overlay_revised() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE overlay_revision SET rev = rev + 1;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER overlay_revised AFTER INSERT OR UPDATE OR DELETE ON overlay_members
    FOR EACH ROW EXECUTE FUNCTION overlay_revised();
CREATE TRIGGER overlay_ensemble_added AFTER INSERT ON ensembles
    FOR EACH ROW EXECUTE FUNCTION overlay_revised();
CREATE TRIGGER overlay_ensemble_changed AFTER UPDATE OF state, replicas ON ensembles
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.replicas IS DISTINCT FROM NEW.replicas)
    EXECUTE FUNCTION overlay_revised();

-- +goose Down
DROP TRIGGER overlay_ensemble_changed ON ensembles;
DROP TRIGGER overlay_ensemble_added ON ensembles;
DROP TRIGGER overlay_revised ON overlay_members;
DROP FUNCTION overlay_revised();
DROP TABLE overlay_revision;
DROP TABLE overlay_members;
