-- Leases: one holder at a time for work that must not run twice at once,
-- such as the server's singleton loops (lease "leader"). A row is never
-- deleted, so its term only grows and the fence of an old term never
-- matches again. A released lease keeps its term, with no holder and no
-- expiry (NULL).

-- +goose Up
CREATE TABLE leases (
    name    TEXT    PRIMARY KEY,
    holder  TEXT    NOT NULL DEFAULT '',
    term    INTEGER NOT NULL DEFAULT 0,
    expires INTEGER                       -- unix nanoseconds; NULL once released
);

-- +goose Down
DROP TABLE leases;
