-- Who may see a file of the blob store, as SQLite's 00020: task_files,
-- one row per (task, input or output, digest), keyed by the task's seq
-- and kept by triggers, tells whether a node holds a task naming a blob
-- off tasks_running and the primary key; blob_groups, the groups a blob
-- was uploaded into, whether a HEAD may say it exists.
--
-- Tasks are added a batch per statement, so the insert trigger runs once
-- per statement over its transition table; a result changes row by row,
-- and the row trigger's WHEN skips (without calling the function) results
-- that hold no outputs before or after, as a claim's or an output-less
-- report's do.

-- +goose Up
CREATE TABLE task_files (
    task_seq BIGINT NOT NULL, -- tasks.seq; no foreign key: see task_files_gone
    kind     TEXT COLLATE "C" NOT NULL, -- 'in': an input of the spec; 'out': an output of the result
    digest   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (task_seq, kind, digest)
);

CREATE TABLE blob_groups (
    digest TEXT COLLATE "C" NOT NULL,
    grp    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (digest, grp)
);

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

INSERT INTO task_files (task_seq, kind, digest)
    SELECT t.seq, 'in', d FROM tasks AS t, task_file_digests(t.spec, 'inputs') AS d
    WHERE t.spec LIKE '%"inputs"%'
    UNION
    SELECT t.seq, 'out', d FROM tasks AS t, task_file_digests(t.result, 'outputs') AS d
    WHERE t.result LIKE '%"outputs"%';
-- What tasks name was uploaded for their groups.
INSERT INTO blob_groups (digest, grp)
    SELECT DISTINCT f.digest, s.group_name FROM task_files AS f
        JOIN tasks AS t ON t.seq = f.task_seq JOIN suites AS s ON s.id = t.suite_id;

-- +goose StatementBegin
CREATE FUNCTION task_files_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- New seqs, digests distinct per document and kind: nothing can
    -- clash, so no ON CONFLICT (its speculative inserts cost) and no UNION
    -- sort.
    INSERT INTO task_files (task_seq, kind, digest)
        SELECT t.seq, 'in', d FROM added AS t, task_file_digests(t.spec, 'inputs') AS d
        WHERE t.spec LIKE '%"inputs"%'
        UNION ALL
        SELECT t.seq, 'out', d FROM added AS t, task_file_digests(t.result, 'outputs') AS d
        WHERE t.result LIKE '%"outputs"%';
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
    DELETE FROM task_files WHERE task_seq = OLD.seq AND kind = 'out';
    INSERT INTO task_files (task_seq, kind, digest)
        SELECT NEW.seq, 'out', d FROM task_file_digests(NEW.result, 'outputs') AS d;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER task_files_result AFTER UPDATE OF result ON tasks
    FOR EACH ROW WHEN (OLD.result IS DISTINCT FROM NEW.result
        AND (OLD.result LIKE '%"outputs"%' OR NEW.result LIKE '%"outputs"%'))
    EXECUTE FUNCTION task_files_result();

-- A foreign key would check every row a submission adds (an RI query
-- each); tasks are deleted only with their suite, if ever, and this takes
-- their files with them.
-- +goose StatementBegin
CREATE FUNCTION task_files_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_files WHERE task_seq IN (SELECT seq FROM gone);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER task_files_gone AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION task_files_gone();

-- +goose Down
DROP TRIGGER task_files_gone ON tasks;
DROP FUNCTION task_files_gone();
DROP TRIGGER task_files_result ON tasks;
DROP FUNCTION task_files_result();
DROP TRIGGER task_files_added ON tasks;
DROP FUNCTION task_files_added();
DROP FUNCTION task_file_digests(TEXT, TEXT);
DROP TABLE blob_groups;
DROP TABLE task_files;
