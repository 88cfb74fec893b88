-- When the agent was delivered onto a pool machine and started: from
-- then it has the bootstrap timeout to register. A machine still
-- bootstrapping without it was cut off mid-delivery by a server that
-- stopped, and is replaced at once on the next start, its provider not
-- charged (issue 27). Machines bootstrapping when this runs count as
-- delivered, so that they keep their wait as before. 0: not (yet).

-- +goose Up
ALTER TABLE pool_machines ADD COLUMN delivered_at BIGINT NOT NULL DEFAULT 0;
UPDATE pool_machines SET delivered_at = launched_at WHERE state = 'bootstrapping';

-- +goose Down
ALTER TABLE pool_machines DROP COLUMN delivered_at;
