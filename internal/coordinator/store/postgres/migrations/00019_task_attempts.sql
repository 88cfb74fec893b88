-- One row per attempt handed out, as SQLite's 00019, keyed by (task,
-- attempt): the database itself refuses to hand out an attempt of a task
-- twice, whatever the code that claims does. A trigger on tasks.attempt
-- writes them, since that column is what says an attempt started (a claim
-- adds one) or was taken back unrun (a return takes one off).

-- +goose Up
CREATE TABLE task_attempts (
    task_id    TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    node_id    TEXT    NOT NULL,
    started_at BIGINT  NOT NULL,          -- unix nanoseconds
    PRIMARY KEY (task_id, attempt)
);

-- The attempts running now: earlier ones are not known.
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

-- +goose Down
DROP TRIGGER task_attempt_moved ON tasks;
DROP FUNCTION task_attempt_moved();
DROP TABLE task_attempts;
