-- Leases, as SQLite's 00018: one holder at a time for work that must not
-- run twice at once, such as the server's singleton loops (lease
-- "leader"). A row is never deleted, so its term only grows and the fence
-- of an old term never matches again. A released lease keeps its term,
-- with no holder and no expiry (NULL).
--
-- A fenced write reads its lease's row FOR SHARE in its own transaction,
-- and a takeover updates the row: the takeover waits for the fenced
-- writes under way, and a fenced write after it sees the new term.

-- +goose Up
CREATE TABLE leases (
    name    TEXT COLLATE "C" PRIMARY KEY,
    holder  TEXT COLLATE "C" NOT NULL DEFAULT '',
    term    BIGINT  NOT NULL DEFAULT 0,
    expires BIGINT                        -- unix nanoseconds; NULL once released
);

-- +goose Down
DROP TABLE leases;
