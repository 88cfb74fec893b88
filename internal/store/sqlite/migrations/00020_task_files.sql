-- The files tasks name: one row per (task, input or output, digest), so
-- that who may see a blob is answered off an index, not by reading every
-- task's JSON (a task may have 10,000 inputs, all fetched at once):
--
--   - a node may download a blob while it holds (Running on it) a task
--     that names it as an input, or that runs after a task that output it
--     (input_from takes outputs of tasks in after): tasks_running gives
--     the node's tasks, and (task_id, kind, digest) the answer;
--   - a user or node may learn that a blob exists when a task of a suite
--     in a group it works in names it: (digest, grp) answers that;
--   - the blob store's collection keeps every digest named here.
--
-- Triggers keep it, as task_attempts (00019) is kept: from a task's spec
-- when it is added and from its result whenever that changes, so that no
-- code path can store a task without its files. grp is the suite's group,
-- copied because a suite never changes group. A spec or result without
-- the key "inputs"/"outputs" has no files: the WHEN clauses skip parsing it.

-- +goose Up
CREATE TABLE task_files (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    kind    TEXT NOT NULL, -- 'in': an input of the spec; 'out': an output of the result
    digest  TEXT NOT NULL,
    grp     TEXT NOT NULL, -- the task's suite's group
    PRIMARY KEY (task_id, kind, digest)
) WITHOUT ROWID;
CREATE INDEX task_files_digest ON task_files (digest, grp);

INSERT OR IGNORE INTO task_files (task_id, kind, digest, grp)
    SELECT t.id, 'in', j.value ->> 'digest', s.group_name
    FROM tasks AS t JOIN suites AS s ON s.id = t.suite_id, json_each(t.spec, '$.inputs') AS j
    WHERE j.value ->> 'digest' IS NOT NULL;
INSERT OR IGNORE INTO task_files (task_id, kind, digest, grp)
    SELECT t.id, 'out', j.value ->> 'digest', s.group_name
    FROM tasks AS t JOIN suites AS s ON s.id = t.suite_id, json_each(t.result, '$.outputs') AS j
    WHERE t.result IS NOT NULL AND j.value ->> 'digest' IS NOT NULL;

-- +goose StatementBegin
CREATE TRIGGER task_files_added AFTER INSERT ON tasks
    WHEN instr(NEW.spec, '"inputs"') > 0 OR instr(NEW.result, '"outputs"') > 0
BEGIN
    INSERT OR IGNORE INTO task_files (task_id, kind, digest, grp)
        SELECT NEW.id, 'in', j.value ->> 'digest', (SELECT group_name FROM suites WHERE id = NEW.suite_id)
        FROM json_each(NEW.spec, '$.inputs') AS j
        WHERE j.value ->> 'digest' IS NOT NULL;
    INSERT OR IGNORE INTO task_files (task_id, kind, digest, grp)
        SELECT NEW.id, 'out', j.value ->> 'digest', (SELECT group_name FROM suites WHERE id = NEW.suite_id)
        FROM json_each(NEW.result, '$.outputs') AS j
        WHERE NEW.result IS NOT NULL AND j.value ->> 'digest' IS NOT NULL;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER task_files_result AFTER UPDATE OF result ON tasks
    WHEN NEW.result IS NOT OLD.result
        AND (instr(OLD.result, '"outputs"') > 0 OR instr(NEW.result, '"outputs"') > 0)
BEGIN
    DELETE FROM task_files WHERE task_id = OLD.id AND kind = 'out';
    INSERT OR IGNORE INTO task_files (task_id, kind, digest, grp)
        SELECT NEW.id, 'out', j.value ->> 'digest', (SELECT group_name FROM suites WHERE id = NEW.suite_id)
        FROM json_each(NEW.result, '$.outputs') AS j
        WHERE NEW.result IS NOT NULL AND j.value ->> 'digest' IS NOT NULL;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER task_files_result;
DROP TRIGGER task_files_added;
DROP TABLE task_files;
