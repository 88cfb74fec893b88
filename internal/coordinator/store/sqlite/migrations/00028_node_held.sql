-- nodes.held is how many of its current suite's tasks the node's agent
-- holds and has not started (prefetched), as it last said; a suite's
-- counts show them apart from the tasks that run (issue 31: the dashboard
-- showed 62 running with 6 worker processes). Written with heartbeats.

-- +goose Up
ALTER TABLE nodes ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
CREATE INDEX nodes_current_suite ON nodes (current_suite) WHERE current_suite <> '';

-- +goose Down
DROP INDEX nodes_current_suite;
ALTER TABLE nodes DROP COLUMN held;
