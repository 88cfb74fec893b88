-- Who may see a file of the blob store, answered off indexes, not by
-- reading every task's JSON (a task may have 10,000 inputs, all fetched
-- at once).
--
-- task_files: one row per (task, input or output, digest). A node may
-- download a blob while it holds (Running on it) a task that names it as
-- an input, or that runs after a task that output it (input_from takes
-- outputs of tasks in after): tasks_running gives the node's tasks, and
-- the primary key the answer. Keyed by the task's seq, so a submission
-- appends to it rather than inserting all over it. Triggers keep it, as
-- task_attempts (00019) is kept: from a task's spec when it is added and
-- from its result whenever that changes, so no code path can store a task
-- without its files. A spec or result without the key "inputs"/"outputs"
-- has no files: the WHEN clauses skip parsing it. The blob store's
-- collection keeps every digest named here.
--
-- blob_groups: the groups a blob was uploaded into (by a user with Write
-- there, or by a node running a task of a suite of the group). A HEAD
-- says a blob exists only to whom it was uploaded for, so it tells no
-- group whether another holds a file; rows are added at upload, off the
-- submission's path.

-- +goose Up
CREATE TABLE task_files (
    task_seq INTEGER NOT NULL, -- tasks.seq; no foreign key: see task_files_gone
    kind     TEXT    NOT NULL, -- 'in': an input of the spec; 'out': an output of the result
    digest   TEXT    NOT NULL,
    PRIMARY KEY (task_seq, kind, digest)
) WITHOUT ROWID;

CREATE TABLE blob_groups (
    digest TEXT NOT NULL,
    grp    TEXT NOT NULL,
    PRIMARY KEY (digest, grp)
) WITHOUT ROWID;

INSERT OR IGNORE INTO task_files (task_seq, kind, digest)
    SELECT t.seq, 'in', j.value ->> 'digest' FROM tasks AS t, json_each(t.spec, '$.inputs') AS j
    WHERE j.value ->> 'digest' IS NOT NULL;
INSERT OR IGNORE INTO task_files (task_seq, kind, digest)
    SELECT t.seq, 'out', j.value ->> 'digest' FROM tasks AS t, json_each(t.result, '$.outputs') AS j
    WHERE t.result IS NOT NULL AND j.value ->> 'digest' IS NOT NULL;
-- What tasks name was uploaded for their groups.
INSERT OR IGNORE INTO blob_groups (digest, grp)
    SELECT DISTINCT f.digest, s.group_name FROM task_files AS f
        JOIN tasks AS t ON t.seq = f.task_seq JOIN suites AS s ON s.id = t.suite_id;

-- +goose StatementBegin
CREATE TRIGGER task_files_added AFTER INSERT ON tasks
    WHEN instr(NEW.spec, '"inputs"') > 0 OR instr(NEW.result, '"outputs"') > 0
BEGIN
    INSERT OR IGNORE INTO task_files (task_seq, kind, digest)
        SELECT NEW.seq, 'in', j.value ->> 'digest' FROM json_each(NEW.spec, '$.inputs') AS j
        WHERE j.value ->> 'digest' IS NOT NULL;
    INSERT OR IGNORE INTO task_files (task_seq, kind, digest)
        SELECT NEW.seq, 'out', j.value ->> 'digest' FROM json_each(NEW.result, '$.outputs') AS j
        WHERE NEW.result IS NOT NULL AND j.value ->> 'digest' IS NOT NULL;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER task_files_result AFTER UPDATE OF result ON tasks
    WHEN NEW.result IS NOT OLD.result
        AND (instr(OLD.result, '"outputs"') > 0 OR instr(NEW.result, '"outputs"') > 0)
BEGIN
    DELETE FROM task_files WHERE task_seq = OLD.seq AND kind = 'out';
    INSERT OR IGNORE INTO task_files (task_seq, kind, digest)
        SELECT NEW.seq, 'out', j.value ->> 'digest' FROM json_each(NEW.result, '$.outputs') AS j
        WHERE NEW.result IS NOT NULL AND j.value ->> 'digest' IS NOT NULL;
END;
-- +goose StatementEnd

-- A foreign key would check every row a submission adds; tasks are
-- deleted only with their suite, if ever, and this takes their files with
-- them.
-- +goose StatementBegin
CREATE TRIGGER task_files_gone AFTER DELETE ON tasks
BEGIN
    DELETE FROM task_files WHERE task_seq = OLD.seq;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER task_files_gone;
DROP TRIGGER task_files_result;
DROP TRIGGER task_files_added;
DROP TABLE blob_groups;
DROP TABLE task_files;
