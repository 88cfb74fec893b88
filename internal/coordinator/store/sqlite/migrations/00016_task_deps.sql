-- Tasks that wait for others, carry names, and say why nodemgr cancelled them.
--
-- A task with dependencies is Pending while `waiting` (how many of its
-- dependencies have not finished) is above zero, and Ready when it falls to
-- zero. task_deps holds one row per (dependency, dependent), keyed by the
-- dependency first: when a task ends, its dependents are found off the
-- primary key. A task that fails or is cancelled for good cancels its
-- dependents, with the reason in `reason`.
--
-- A name is unique in its suite, so that `after` and `input_from` can name
-- a task instead of its ID; the partial index leaves unnamed tasks out.

-- +goose Up
ALTER TABLE suite_counts ADD COLUMN pending INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN reason TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX tasks_name ON tasks (suite_id, name) WHERE name <> '';
CREATE TABLE task_deps (
    after_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    task_id  TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (after_id, task_id)
) WITHOUT ROWID;
CREATE INDEX task_deps_task ON task_deps (task_id);

-- +goose Down
DROP TABLE task_deps;
DROP INDEX tasks_name;
ALTER TABLE tasks DROP COLUMN reason;
ALTER TABLE tasks DROP COLUMN waiting;
ALTER TABLE tasks DROP COLUMN name;
ALTER TABLE suite_counts DROP COLUMN pending;
