-- The files tasks name, as SQLite's 00020: one row per (task, input or
-- output, digest), so that who may see a blob is answered off an index
-- (a node: a file of a task it holds, off tasks_running and the primary
-- key; a user: a file named in a group, off task_files_digest), and the
-- blob store's collection reads the digests in use without parsing tasks.
--
-- Triggers keep it, as task_attempts (00019) is kept. Tasks are added a
-- batch per statement, so the insert trigger runs once per statement over
-- its transition table; a result changes row by row, and the row trigger's
-- WHEN skips (without calling the function) results that hold no outputs
-- before or after, as a claim's or an output-less report's do. grp is the
-- suite's group, copied because a suite never changes group.

-- +goose Up
CREATE TABLE task_files (
    task_id TEXT COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    kind    TEXT COLLATE "C" NOT NULL, -- 'in': an input of the spec; 'out': an output of the result
    digest  TEXT COLLATE "C" NOT NULL,
    grp     TEXT COLLATE "C" NOT NULL, -- the task's suite's group
    PRIMARY KEY (task_id, kind, digest)
);
CREATE INDEX task_files_digest ON task_files (digest, grp);

-- task_file_digests lists the digests of the files in the array at key of
-- a spec or result (JSON text; a \u0000 in it reads as U+FFFD, as asJSON
-- in postgres.go does, since json refuses it).
-- +goose StatementBegin
CREATE FUNCTION task_file_digests(doc TEXT, key TEXT) RETURNS SETOF TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT DISTINCT f ->> 'digest'
    FROM (SELECT replace(doc, E'\\u0000', E'\\ufffd')::json -> key AS files) AS d,
        json_array_elements(CASE WHEN json_typeof(d.files) = 'array' THEN d.files ELSE '[]'::json END) AS f
    WHERE f ->> 'digest' IS NOT NULL
$$;
-- +goose StatementEnd

INSERT INTO task_files (task_id, kind, digest, grp)
    SELECT t.id, 'in', d, s.group_name
    FROM tasks AS t JOIN suites AS s ON s.id = t.suite_id, task_file_digests(t.spec, 'inputs') AS d
    WHERE t.spec LIKE '%"inputs"%'
    UNION
    SELECT t.id, 'out', d, s.group_name
    FROM tasks AS t JOIN suites AS s ON s.id = t.suite_id, task_file_digests(t.result, 'outputs') AS d
    WHERE t.result LIKE '%"outputs"%';

-- +goose StatementBegin
CREATE FUNCTION task_files_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_files (task_id, kind, digest, grp)
        SELECT t.id, 'in', d, s.group_name
        FROM added AS t JOIN suites AS s ON s.id = t.suite_id, task_file_digests(t.spec, 'inputs') AS d
        WHERE t.spec LIKE '%"inputs"%'
        UNION
        SELECT t.id, 'out', d, s.group_name
        FROM added AS t JOIN suites AS s ON s.id = t.suite_id, task_file_digests(t.result, 'outputs') AS d
        WHERE t.result LIKE '%"outputs"%'
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER task_files_added AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION task_files_added();

-- +goose StatementBegin
CREATE FUNCTION task_files_result() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_files WHERE task_id = OLD.id AND kind = 'out';
    INSERT INTO task_files (task_id, kind, digest, grp)
        SELECT NEW.id, 'out', d, s.group_name
        FROM suites AS s, task_file_digests(NEW.result, 'outputs') AS d
        WHERE s.id = NEW.suite_id
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER task_files_result AFTER UPDATE OF result ON tasks
    FOR EACH ROW WHEN (OLD.result IS DISTINCT FROM NEW.result
        AND (OLD.result LIKE '%"outputs"%' OR NEW.result LIKE '%"outputs"%'))
    EXECUTE FUNCTION task_files_result();

-- +goose Down
DROP TRIGGER task_files_result ON tasks;
DROP FUNCTION task_files_result();
DROP TRIGGER task_files_added ON tasks;
DROP FUNCTION task_files_added();
DROP FUNCTION task_file_digests(TEXT, TEXT);
DROP TABLE task_files;
