-- The action cache: the result of a task that succeeded, by the digest of
-- what it ran (its action key), within a scope (a group, or the owner of
-- suites outside any group). A task that opts in and has the key of an
-- entry is not run: it gets the entry's result. action_cache_files names
-- the blobs an entry's outputs are, so that the blob store's collection
-- keeps them while the entry lives; an entry unused for the task files'
-- retention goes.

-- +goose Up
CREATE TABLE action_cache (
    scope      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    result     TEXT    NOT NULL, -- JSON api.TaskResult
    task_id    TEXT    NOT NULL, -- the task whose run it is
    created_at BIGINT   NOT NULL,
    used_at    BIGINT   NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX action_cache_used_at ON action_cache (used_at);
CREATE TABLE action_cache_files (
    scope  TEXT NOT NULL,
    key    TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (scope, key, digest),
    FOREIGN KEY (scope, key) REFERENCES action_cache (scope, key) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE action_cache_files;
DROP TABLE action_cache;
