-- task_logs: an attempt's full output (issue 31), gzipped in the blob
-- store, kept when it was more than a result's 64 KiB tails or the
-- attempt ran long enough to be followed. A task's result names its last
-- attempt's log too; this table has every attempt's, for `task logs
-- --attempt N` and for failures, and the blob store's collection keeps
-- every digest named here. Rows go in with the attempt's report.

-- +goose Up
CREATE TABLE task_logs (
    task_id   TEXT    NOT NULL,
    attempt   INTEGER NOT NULL,
    digest    TEXT    NOT NULL,
    bytes     INTEGER NOT NULL, -- of output, both streams
    truncated INTEGER NOT NULL DEFAULT 0, -- 1: output beyond the server's cap was dropped
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE task_logs;
