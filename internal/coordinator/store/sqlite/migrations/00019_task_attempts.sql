-- One row per attempt handed out, keyed by (task, attempt): the database
-- itself refuses to hand out an attempt of a task twice, whatever the code
-- that claims does. The rows are written by triggers on tasks.attempt, the
-- one column that says an attempt started (a claim adds one) or was taken
-- back unrun (a return takes one off), so no code path can move it without
-- them. They also keep where and when each attempt started.

-- +goose Up
CREATE TABLE task_attempts (
    task_id    TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    node_id    TEXT    NOT NULL,
    started_at INTEGER NOT NULL,          -- unix nanoseconds
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;

-- The attempts running now: earlier ones are not known.
INSERT INTO task_attempts (task_id, attempt, node_id, started_at)
    SELECT id, attempt, node_id, updated_at FROM tasks WHERE attempt > 0 AND state = 'Running';

-- +goose StatementBegin
CREATE TRIGGER task_attempt_started AFTER UPDATE OF attempt ON tasks
    WHEN NEW.attempt > OLD.attempt
BEGIN
    INSERT INTO task_attempts (task_id, attempt, node_id, started_at)
        VALUES (NEW.id, NEW.attempt, NEW.node_id, NEW.updated_at);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER task_attempt_returned AFTER UPDATE OF attempt ON tasks
    WHEN NEW.attempt < OLD.attempt
BEGIN
    DELETE FROM task_attempts WHERE task_id = OLD.id AND attempt = OLD.attempt;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER task_attempt_returned;
DROP TRIGGER task_attempt_started;
DROP TABLE task_attempts;
