-- What a task needs to survive lost nodes and failures gracefully.
--
-- reclaimed_from/reclaimed_attempt remember the attempt that was running
-- on a node when the node was declared offline and the task went back to
-- the queue. That attempt may still finish (the node was cut off, not
-- dead): the first completion wins, whether it is the lost attempt or its
-- re-run, and an agent that comes back still holding the task takes it
-- back instead of it running twice.
--
-- not_before holds a retried task back after a counted failure, so a task
-- that fails at once does not spin: the pause doubles with each failure.
-- Claims skip those rows while they walk tasks_ready, which carries
-- not_before so that a claim still reads the index alone.

-- +goose Up
ALTER TABLE tasks ADD COLUMN reclaimed_from TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN reclaimed_attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN not_before INTEGER NOT NULL DEFAULT 0;
DROP INDEX tasks_ready;
CREATE INDEX tasks_ready ON tasks (suite_id, priority DESC, seq, not_before) WHERE state = 'Ready';

-- +goose Down
DROP INDEX tasks_ready;
CREATE INDEX tasks_ready ON tasks (suite_id, priority DESC, seq) WHERE state = 'Ready';
ALTER TABLE tasks DROP COLUMN not_before;
ALTER TABLE tasks DROP COLUMN reclaimed_attempt;
ALTER TABLE tasks DROP COLUMN reclaimed_from;
