-- node_revision.rev grows whenever a node is added or removed, or its
-- name, tags, labels, groups or hardware change, and at no other write,
-- as SQLite's 00027: a server may keep what describes the nodes in memory
-- for as long as it reads the same revision (store.Nodes.NodesRevision),
-- and every replica reads the one row, so a node registered or retagged
-- through one replica shows in the others at their next read. The row is
-- locked from the node's write until its commit; writes that change no
-- watched column (heartbeats, status) do not fire the triggers.

-- +goose Up
CREATE TABLE node_revision (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    rev BIGINT  NOT NULL
);
INSERT INTO node_revision (id, rev) VALUES (1, 1);
-- +goose StatementBegin
CREATE FUNCTION node_revised() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE node_revision SET rev = rev + 1;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER node_added_or_removed AFTER INSERT OR DELETE ON nodes
    FOR EACH ROW EXECUTE FUNCTION node_revised();
CREATE TRIGGER node_described AFTER UPDATE OF name, tags, labels, group_names, hardware ON nodes
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.tags IS DISTINCT FROM NEW.tags
        OR OLD.labels IS DISTINCT FROM NEW.labels OR OLD.group_names IS DISTINCT FROM NEW.group_names
        OR OLD.hardware IS DISTINCT FROM NEW.hardware)
    EXECUTE FUNCTION node_revised();

-- +goose Down
DROP TRIGGER node_described ON nodes;
DROP TRIGGER node_added_or_removed ON nodes;
DROP FUNCTION node_revised();
DROP TABLE node_revision;
