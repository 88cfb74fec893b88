-- One spelling of states everywhere (issue 31 item 12): lower case, kebab
-- case for two words, as node statuses always were. Tasks, suites and
-- agent states were capitalized (Mitosis), container statuses in capitals
-- (the Oakestra seed), an ensemble shut down had a space. The partial
-- indexes that name a state are made again with its new spelling; the
-- statements that use them name states by api's constants.

-- +goose Up
UPDATE tasks SET state = lower(state) WHERE state <> lower(state);
UPDATE suites SET state = lower(state) WHERE state <> lower(state);
UPDATE nodes SET agent_state = CASE agent_state WHEN 'ShuttingDown' THEN 'shutting-down' ELSE lower(agent_state) END
    WHERE agent_state <> lower(agent_state);
UPDATE containers SET status = lower(status) WHERE status <> lower(status);
UPDATE ensembles SET state = 'shut-down' WHERE state = 'shut down';

DROP INDEX suites_live_name;
CREATE UNIQUE INDEX suites_live_name ON suites (name) WHERE state IN ('open', 'closed');
DROP INDEX tasks_ready;
CREATE INDEX tasks_ready ON tasks (suite_id, priority DESC, seq, not_before) WHERE state = 'ready';
DROP INDEX tasks_running;
CREATE INDEX tasks_running ON tasks (node_id) WHERE state = 'running';
DROP INDEX tasks_failed;
CREATE INDEX tasks_failed ON tasks (suite_id, seq) WHERE state = 'failed';
DROP INDEX ensembles_live_name;
CREATE UNIQUE INDEX ensembles_live_name ON ensembles (name) WHERE state NOT IN ('shut-down', 'failed');

-- +goose Down
UPDATE tasks SET state = upper(substr(state, 1, 1)) || substr(state, 2);
UPDATE suites SET state = upper(substr(state, 1, 1)) || substr(state, 2);
UPDATE nodes SET agent_state = CASE agent_state WHEN 'shutting-down' THEN 'ShuttingDown'
    ELSE upper(substr(agent_state, 1, 1)) || substr(agent_state, 2) END;
UPDATE containers SET status = upper(status);
UPDATE ensembles SET state = 'shut down' WHERE state = 'shut-down';
DROP INDEX ensembles_live_name;
CREATE UNIQUE INDEX ensembles_live_name ON ensembles (name) WHERE state NOT IN ('shut down', 'failed');
DROP INDEX tasks_failed;
CREATE INDEX tasks_failed ON tasks (suite_id, seq) WHERE state = 'Failed';
DROP INDEX tasks_running;
CREATE INDEX tasks_running ON tasks (node_id) WHERE state = 'Running';
DROP INDEX tasks_ready;
CREATE INDEX tasks_ready ON tasks (suite_id, priority DESC, seq, not_before) WHERE state = 'Ready';
DROP INDEX suites_live_name;
CREATE UNIQUE INDEX suites_live_name ON suites (name) WHERE state IN ('Open', 'Closed');
