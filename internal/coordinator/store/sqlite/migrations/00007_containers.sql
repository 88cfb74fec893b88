-- +goose Up
-- What agents report about the containers they run, per (node, job).
CREATE TABLE containers (
    node_id    TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    live       INTEGER NOT NULL,
    record     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (node_id, id)
);
CREATE INDEX containers_id ON containers (id);

-- +goose Down
DROP TABLE containers;
