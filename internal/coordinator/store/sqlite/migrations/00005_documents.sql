-- +goose Up
-- Templates and mapping sets, kept as the YAML the user wrote.
CREATE TABLE documents (
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);

-- +goose Down
DROP TABLE documents;
