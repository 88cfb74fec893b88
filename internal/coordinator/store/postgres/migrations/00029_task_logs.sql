-- task_logs: an attempt's full output, as SQLite's 00029.

-- +goose Up
CREATE TABLE task_logs (
    task_id   TEXT COLLATE "C" NOT NULL,
    attempt   INTEGER NOT NULL,
    digest    TEXT COLLATE "C" NOT NULL,
    bytes     BIGINT  NOT NULL, -- of output, both streams
    truncated BOOLEAN NOT NULL DEFAULT false, -- output beyond the server's cap was dropped
    PRIMARY KEY (task_id, attempt)
);

-- +goose Down
DROP TABLE task_logs;
