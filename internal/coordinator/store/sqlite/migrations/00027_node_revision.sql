-- node_revision.rev grows whenever a node is added or removed, or its
-- name, tags, labels, groups or hardware change, and at no other write
-- (status, heartbeats, agent state, current suite): a server may keep
-- what describes the nodes in memory for as long as it reads the same
-- revision (store.Nodes.NodesRevision; issue 30: a suite's waiting reason
-- read and decoded every node row on every call). The triggers keep it
-- beside the data, so no write path can forget it; heartbeats name none of
-- the columns they watch and do not fire them.

-- +goose Up
CREATE TABLE node_revision (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    rev INTEGER NOT NULL
);
INSERT INTO node_revision (id, rev) VALUES (1, 1);
-- +goose StatementBegin
CREATE TRIGGER node_added AFTER INSERT ON nodes
BEGIN
    UPDATE node_revision SET rev = rev + 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER node_removed AFTER DELETE ON nodes
BEGIN
    UPDATE node_revision SET rev = rev + 1;
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER node_described AFTER UPDATE OF name, tags, labels, group_names, hardware ON nodes
    WHEN OLD.name IS NOT NEW.name OR OLD.tags IS NOT NEW.tags OR OLD.labels IS NOT NEW.labels
        OR OLD.group_names IS NOT NEW.group_names OR OLD.hardware IS NOT NEW.hardware
BEGIN
    UPDATE node_revision SET rev = rev + 1;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER node_described;
DROP TRIGGER node_removed;
DROP TRIGGER node_added;
DROP TABLE node_revision;
