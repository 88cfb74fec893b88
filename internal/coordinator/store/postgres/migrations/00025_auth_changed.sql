-- Servers cache the tokens and users that requests authenticate with
-- (store.AuthCache). Any change to them signals nodemgr_auth at commit,
-- whoever makes it: another replica, `server --reset-admin-token`, or a
-- cascade from a deleted node or user. A statement trigger runs once per
-- statement, not per row, and only on these tables (the payload names the
-- table); the writes that every request and heartbeat make (tokens' uses
-- and last_used) do not fire it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('nodemgr_auth', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER tokens_auth_changed
    AFTER DELETE OR UPDATE OF id, kind, hash, user_name, node_id, group_names, expires_at, deployment_id ON tokens
    FOR EACH STATEMENT EXECUTE FUNCTION auth_changed();
CREATE TRIGGER users_auth_changed AFTER DELETE OR UPDATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION auth_changed();
CREATE TRIGGER memberships_auth_changed AFTER INSERT OR DELETE OR UPDATE ON memberships
    FOR EACH STATEMENT EXECUTE FUNCTION auth_changed();

-- +goose Down
DROP TRIGGER memberships_auth_changed ON memberships;
DROP TRIGGER users_auth_changed ON users;
DROP TRIGGER tokens_auth_changed ON tokens;
DROP FUNCTION auth_changed();
