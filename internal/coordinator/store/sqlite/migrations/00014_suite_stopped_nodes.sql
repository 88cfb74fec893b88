-- The nodes on which a suite's worker pool was stopped by hand
-- (allocation stop pool:SUITE): the suite is not offered to them again
-- until it is assigned to them again.

-- +goose Up
ALTER TABLE suites ADD COLUMN stopped_nodes TEXT NOT NULL DEFAULT '[]'; -- JSON array of node IDs

-- +goose Down
ALTER TABLE suites DROP COLUMN stopped_nodes;
