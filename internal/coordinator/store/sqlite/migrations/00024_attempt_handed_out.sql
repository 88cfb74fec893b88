-- An attempt of a task is handed out once, at the price of one integer:
-- handed_out is the attempt last handed out and not taken back, and the
-- row's own CHECK keeps attempt from going below it. A claim moves both
-- up, a return (an attempt taken back unrun) both down; any other write
-- that moved attempt back would hand out an attempt again, and the
-- database refuses it. This replaces 00019's task_attempts, whose row
-- trigger cost a claim 3.6 times its time (issue 30): nothing read its
-- rows but its own test.

-- +goose Up
DROP TRIGGER task_attempt_started;
DROP TRIGGER task_attempt_returned;
DROP TABLE task_attempts;
ALTER TABLE tasks ADD COLUMN handed_out INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= handed_out);
-- Every attempt counted so far was handed out (returns took theirs off).
UPDATE tasks SET handed_out = attempt WHERE attempt > 0;

-- +goose Down
ALTER TABLE tasks DROP COLUMN handed_out;
CREATE TABLE task_attempts (
    task_id    TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    node_id    TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;
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
