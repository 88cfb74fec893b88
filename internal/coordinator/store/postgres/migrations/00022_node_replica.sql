-- The server process that holds (or last held) the agent's session:
-- its replica ID and instance. The leader finds the nodes of a replica
-- that stopped renewing its lease by it (issue 27).

-- +goose Up
ALTER TABLE nodes ADD COLUMN replica TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE nodes DROP COLUMN replica;
