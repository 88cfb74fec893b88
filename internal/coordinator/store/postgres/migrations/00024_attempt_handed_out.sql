-- An attempt of a task is handed out once, at the price of one integer,
-- as SQLite's 00024: handed_out is the attempt last handed out and not
-- taken back, and the row's CHECK keeps attempt from going below it. A
-- claim moves both up, a return both down; any other write that moved
-- attempt back would hand out an attempt again, and the database refuses
-- it. This replaces 00019's task_attempts and its row trigger.

-- +goose Up
DROP TRIGGER task_attempt_moved ON tasks;
DROP FUNCTION task_attempt_moved();
DROP TABLE task_attempts;
ALTER TABLE tasks ADD COLUMN handed_out INTEGER NOT NULL DEFAULT 0;
-- Every attempt counted so far was handed out (returns took theirs off).
UPDATE tasks SET handed_out = attempt WHERE attempt > 0;
ALTER TABLE tasks ADD CONSTRAINT tasks_attempt_handed_out CHECK (attempt >= handed_out);

-- +goose Down
ALTER TABLE tasks DROP CONSTRAINT tasks_attempt_handed_out;
ALTER TABLE tasks DROP COLUMN handed_out;
CREATE TABLE task_attempts (
    task_id    TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    node_id    TEXT    NOT NULL,
    started_at BIGINT  NOT NULL,
    PRIMARY KEY (task_id, attempt)
);
INSERT INTO task_attempts (task_id, attempt, node_id, started_at)
    SELECT id, attempt, node_id, updated_at FROM tasks WHERE attempt > 0 AND state = 'Running';
-- +goose StatementBegin
CREATE FUNCTION task_attempt_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.attempt > OLD.attempt THEN
        INSERT INTO task_attempts (task_id, attempt, node_id, started_at)
            VALUES (NEW.id, NEW.attempt, NEW.node_id, NEW.updated_at);
    ELSE
        DELETE FROM task_attempts WHERE task_id = OLD.id AND attempt = OLD.attempt;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER task_attempt_moved AFTER UPDATE OF attempt ON tasks
    FOR EACH ROW WHEN (NEW.attempt <> OLD.attempt)
    EXECUTE FUNCTION task_attempt_moved();
