-- Identity read models (src/identity/projection.ts), projected inline from user, session, API key
-- and OAuth client events; rebuildable with `npm run projections:rebuild -- identity`.
CREATE SCHEMA IF NOT EXISTS identity;

CREATE TABLE identity.users (
  user_id              text        PRIMARY KEY,
  email                text        NOT NULL,
  -- Lower-cased, trimmed: one account per address whatever its spelling.
  email_normalized     text        NOT NULL UNIQUE,
  first_name           text        NOT NULL,
  last_name            text        NOT NULL,
  role                 text        NOT NULL CHECK (role IN ('admin', 'customer')),
  customer_id          text,
  password_hash        text        NOT NULL,
  created_at           timestamptz NOT NULL,
  last_login_at        timestamptz NOT NULL,
  -- A password reset revokes every session started before this instant.
  sessions_valid_after timestamptz
);
CREATE INDEX users_customer_idx ON identity.users (customer_id) WHERE customer_id IS NOT NULL;

CREATE TABLE identity.sessions (
  session_id    text        PRIMARY KEY,
  user_id       text        NOT NULL,
  started_at    timestamptz NOT NULL,
  refreshed_at  timestamptz,
  expires_at    timestamptz NOT NULL,
  revoked_at    timestamptz,
  revoke_reason text
);
CREATE INDEX sessions_user_idx ON identity.sessions (user_id, started_at);

CREATE TABLE identity.api_keys (
  key_id          text        PRIMARY KEY,
  -- SHA-256 of the secret: what a presented key is looked up by.
  key_hash        text        NOT NULL UNIQUE,
  key_last4       text        NOT NULL,
  name            text        NOT NULL,
  scopes          text[]      NOT NULL,
  created_by_type text        NOT NULL,
  created_by_id   text        NOT NULL,
  created_at      timestamptz NOT NULL,
  revoked_at      timestamptz
);
CREATE INDEX api_keys_live_idx ON identity.api_keys (created_at, key_id) WHERE revoked_at IS NULL;

CREATE TABLE identity.oauth_clients (
  client_id   text        PRIMARY KEY,
  name        text        NOT NULL,
  scopes      text[]      NOT NULL,
  secret_hash text        NOT NULL,
  created_at  timestamptz NOT NULL,
  deleted_at  timestamptz
);
CREATE INDEX oauth_clients_live_idx ON identity.oauth_clients (created_at, client_id) WHERE deleted_at IS NULL;

-- What makes a still-unexpired access token invalid, polled by every API process (src/identity/
-- Revocations.ts): kind 'session' (logout, refresh-token reuse), 'user' (a password reset: sessions
-- started before revoked_at), 'client' (a deleted OAuth client), 'token' (one client token, by jti).
CREATE TABLE identity.revocations (
  kind       text        NOT NULL CHECK (kind IN ('session', 'user', 'client', 'token')),
  subject_id text        NOT NULL,
  revoked_at timestamptz NOT NULL,
  PRIMARY KEY (kind, subject_id)
);
CREATE INDEX revocations_time_idx ON identity.revocations (revoked_at);
