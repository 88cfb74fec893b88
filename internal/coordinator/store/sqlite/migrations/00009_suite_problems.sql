-- Why a node could not take a suite up: the latest prepare failure per
-- (suite, node), as its agent reported it with suite.leave. A newer report
-- replaces the older one; the node running the suite fine later removes it.
-- Both sides cascade: a problem means nothing without its suite or node.

-- +goose Up
CREATE TABLE suite_problems (
    suite_id    TEXT    NOT NULL REFERENCES suites (id) ON DELETE CASCADE,
    node_id     TEXT    NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    stage       TEXT    NOT NULL,
    exit_code   INTEGER NOT NULL,
    reason      TEXT    NOT NULL,
    output_tail TEXT    NOT NULL DEFAULT '',
    at          INTEGER NOT NULL,
    PRIMARY KEY (suite_id, node_id)
);
CREATE INDEX suite_problems_node ON suite_problems (node_id);

-- One row that the health probe rewrites: a real write, so that /healthz
-- fails when writes do (a full disk).
CREATE TABLE health_probe (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    at  INTEGER NOT NULL,
    pad BLOB    NOT NULL
);

-- +goose Down
DROP TABLE health_probe;
DROP TABLE suite_problems;
