-- Indexes on tasks that dispatch maintains cheaply.
--
-- Every index whose key holds the state changes twice per attempt (a claim
-- and a report), and with the counts kept in suite_counts (00003) nothing
-- needs an index of every task by state. So tasks_claim and tasks_node give
-- way to partial indexes of the tasks in one state: a claim now takes a
-- task out of tasks_ready and puts it in tasks_running, a report takes it
-- out of tasks_running, and a Finished task is in no index that changes.
-- That halves the index work per task.
--
-- tasks_failed keeps "the failed tasks of a suite" quick to list however
-- large the suite; tasks rarely fail for good, so it costs little. Listing
-- a suite's tasks in another state walks tasks_suite in order.

-- +goose Up
DROP INDEX tasks_claim;
DROP INDEX tasks_node;
-- Claims read the first Ready tasks of a suite in dispatch order off it.
CREATE INDEX tasks_ready ON tasks (suite_id, priority DESC, seq) WHERE state = 'Ready';
-- Reclaiming a lost node's tasks, and returning a node's tasks.
CREATE INDEX tasks_running ON tasks (node_id) WHERE state = 'Running';
CREATE INDEX tasks_failed ON tasks (suite_id, seq) WHERE state = 'Failed';

-- +goose Down
DROP INDEX tasks_failed;
DROP INDEX tasks_running;
DROP INDEX tasks_ready;
CREATE INDEX tasks_claim ON tasks (suite_id, state, priority DESC, seq);
CREATE INDEX tasks_node ON tasks (node_id, state);
