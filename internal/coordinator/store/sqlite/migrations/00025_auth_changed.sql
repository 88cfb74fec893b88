-- PostgreSQL's 00025 signals changes to tokens, users and memberships to
-- the other servers on the database. A SQLite store has one server (the
-- data dir's lock), whose store sees every change it makes itself: there
-- is nothing to add, and the version keeps both schemas in step.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
