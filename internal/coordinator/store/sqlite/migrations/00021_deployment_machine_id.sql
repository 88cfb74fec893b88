-- The machine id the agent on a pool machine must register with. The
-- orchestrator reads it from the machine through its executor (or gives
-- the machine one) before it makes the machine's join token, so a leaked
-- token does not register another machine as the pool's (issue 26).
-- Empty: not bound (a deployment made by hand, or before this).

-- +goose Up
ALTER TABLE deployments ADD COLUMN machine_id TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE deployments DROP COLUMN machine_id;
