-- Event store: the source of truth. See design/ARCHITECTURE.md §3 and research/eventstore.md §10.
CREATE SCHEMA IF NOT EXISTS event_store;

CREATE TABLE event_store.streams (
  stream_id   text        PRIMARY KEY,
  stream_type text        NOT NULL,
  version     bigint      NOT NULL CHECK (version >= 0),
  -- xid of the last transaction that appended; the append refuses to go "back in time" so the
  -- global (xid, position) order always agrees with per-stream version order.
  last_xid    xid8        NOT NULL,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL
) WITH (fillfactor = 80);

CREATE TABLE event_store.events (
  global_position bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
  stream_id       text        NOT NULL,
  stream_version  bigint      NOT NULL CHECK (stream_version >= 1),
  event_id        uuid        NOT NULL,
  event_type      text        NOT NULL,
  schema_version  smallint    NOT NULL DEFAULT 1,
  data            jsonb       NOT NULL,
  metadata        jsonb       NOT NULL DEFAULT '{}',
  recorded_at     timestamptz NOT NULL,
  CONSTRAINT events_stream_version_uq UNIQUE (stream_id, stream_version),
  CONSTRAINT events_event_id_uq UNIQUE (event_id)
);
-- The gap-safe global read scans this index: (transaction_id, global_position) > checkpoint.
CREATE INDEX events_tx_order_idx ON event_store.events (transaction_id, global_position);

-- Events are immutable: no UPDATE, DELETE or TRUNCATE, ever. Erasure is crypto-shredding.
CREATE FUNCTION event_store.refuse_mutation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'event_store.events is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER events_immutable_rows BEFORE UPDATE OR DELETE ON event_store.events
  FOR EACH ROW EXECUTE FUNCTION event_store.refuse_mutation();
CREATE TRIGGER events_immutable_truncate BEFORE TRUNCATE ON event_store.events
  FOR EACH STATEMENT EXECUTE FUNCTION event_store.refuse_mutation();

-- Append in one round trip. p_expected: NULL = any, -1 = stream must not exist, n >= 0 = exact
-- (0 also means "must not exist yet"). p_events: jsonb array of
-- {id, type, schemaVersion, data, metadata}. Returns one row:
--   outcome 'ok'                      version = new stream version, positions of the batch in event order
--   outcome 'wrong_expected_version'  version = actual current version (0 when absent)
--   outcome 'ordering_conflict'       a newer transaction already appended: retry in a new tx
-- No EXCEPTION blocks (each would open a subtransaction per call).
CREATE FUNCTION event_store.append_events(
  p_stream_id text, p_stream_type text, p_expected bigint, p_events jsonb, p_recorded_at timestamptz
) RETURNS TABLE (outcome text, stream_version bigint, first_position bigint, last_position bigint,
                 transaction_id text, positions bigint[])
LANGUAGE plpgsql AS $$
DECLARE
  v_xid     xid8   := pg_current_xact_id();
  v_count   bigint := jsonb_array_length(p_events);
  v_new     bigint;
  v_current bigint;
  v_first   bigint;
  v_last    bigint;
  v_positions bigint[];
BEGIN
  IF v_count = 0 THEN
    RAISE EXCEPTION 'append_events needs at least one event' USING ERRCODE = 'invalid_parameter_value';
  END IF;

  IF p_expected IS NULL THEN
    INSERT INTO event_store.streams AS s (stream_id, stream_type, version, last_xid, created_at, updated_at)
    VALUES (p_stream_id, p_stream_type, v_count, v_xid, p_recorded_at, p_recorded_at)
    ON CONFLICT (stream_id) DO UPDATE
      SET version = s.version + v_count, last_xid = v_xid, updated_at = p_recorded_at
      WHERE s.last_xid <= v_xid
    RETURNING s.version INTO v_new;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 'ordering_conflict'::text, NULL::bigint, NULL::bigint, NULL::bigint, v_xid::text, NULL::bigint[];
      RETURN;
    END IF;
  ELSIF p_expected <= 0 THEN
    INSERT INTO event_store.streams (stream_id, stream_type, version, last_xid, created_at, updated_at)
    VALUES (p_stream_id, p_stream_type, v_count, v_xid, p_recorded_at, p_recorded_at)
    ON CONFLICT (stream_id) DO NOTHING
    RETURNING version INTO v_new;
    IF NOT FOUND THEN
      SELECT s.version INTO v_current FROM event_store.streams s WHERE s.stream_id = p_stream_id;
      RETURN QUERY SELECT 'wrong_expected_version'::text, coalesce(v_current, 0), NULL::bigint, NULL::bigint,
        v_xid::text, NULL::bigint[];
      RETURN;
    END IF;
  ELSE
    UPDATE event_store.streams s
       SET version = p_expected + v_count, last_xid = v_xid, updated_at = p_recorded_at
     WHERE s.stream_id = p_stream_id AND s.version = p_expected AND s.last_xid <= v_xid
    RETURNING s.version INTO v_new;
    IF NOT FOUND THEN
      SELECT s.version INTO v_current FROM event_store.streams s WHERE s.stream_id = p_stream_id;
      IF v_current IS NULL OR v_current <> p_expected THEN
        RETURN QUERY SELECT 'wrong_expected_version'::text, coalesce(v_current, 0), NULL::bigint, NULL::bigint,
          v_xid::text, NULL::bigint[];
      ELSE
        RETURN QUERY SELECT 'ordering_conflict'::text, v_current, NULL::bigint, NULL::bigint, v_xid::text, NULL::bigint[];
      END IF;
      RETURN;
    END IF;
  END IF;

  WITH inserted AS (
    INSERT INTO event_store.events
      (stream_id, stream_version, event_id, event_type, schema_version, data, metadata, recorded_at)
    SELECT p_stream_id, v_new - v_count + e.ord, (e.value->>'id')::uuid, e.value->>'type',
           (e.value->>'schemaVersion')::smallint, e.value->'data', coalesce(e.value->'metadata', '{}'::jsonb),
           p_recorded_at
      FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(value, ord)
     ORDER BY e.ord
    RETURNING global_position
  )
  -- Rows are inserted in event order and take identity values in that order.
  SELECT min(global_position), max(global_position), array_agg(global_position ORDER BY global_position)
    INTO v_first, v_last, v_positions FROM inserted;

  RETURN QUERY SELECT 'ok'::text, v_new, v_first, v_last, v_xid::text, v_positions;
END
$$;

-- Per-subject data keys for personal fields (crypto-shredding). wrapped_dek is the subject's AES-256
-- key encrypted under the master key; shredding sets it to NULL and keeps the row as a tombstone so
-- no new personal data is ever written for a forgotten subject.
CREATE TABLE event_store.subject_keys (
  subject_id  text        PRIMARY KEY,
  wrapped_dek bytea,
  kek_id      text        NOT NULL,
  created_at  timestamptz NOT NULL,
  shredded_at timestamptz,
  CONSTRAINT subject_keys_shredded_ck CHECK ((wrapped_dek IS NULL) = (shredded_at IS NOT NULL))
);

-- Snapshots of long streams (a cache: always safe to delete).
CREATE TABLE event_store.snapshots (
  stream_id      text        PRIMARY KEY,
  version        bigint      NOT NULL,
  state_version  integer     NOT NULL,
  state          jsonb       NOT NULL,
  created_at     timestamptz NOT NULL
);

-- Checkpointed consumers (projections rebuilding, reactors) with leases and fencing.
CREATE TABLE event_store.subscriptions (
  subscription_id text        PRIMARY KEY,
  last_xid        xid8        NOT NULL DEFAULT '0',
  last_position   bigint      NOT NULL DEFAULT 0,
  owner           text,
  generation      bigint      NOT NULL DEFAULT 0,
  lease_until     timestamptz,
  status          text        NOT NULL DEFAULT 'running',
  error           text,
  last_event_at   timestamptz,
  updated_at      timestamptz
);

-- Public events (spec §6.1 / §6.5): the snapshot as of the domain event, written in the same
-- transaction. Webhooks, notifications and GET /v1/events read from here with the same gap-safe
-- (transaction_id, position) protocol as the event store.
CREATE TABLE event_store.public_events (
  position        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
  id              text        NOT NULL UNIQUE,
  type            text        NOT NULL,
  data            jsonb       NOT NULL,
  occurred_at     timestamptz NOT NULL,
  source_event_id uuid        NOT NULL,
  stream_id       text        NOT NULL,
  subject_id      text
);
CREATE INDEX public_events_tx_order_idx ON event_store.public_events (transaction_id, position);
CREATE INDEX public_events_type_idx ON event_store.public_events (type, occurred_at);
CREATE INDEX public_events_subject_idx ON event_store.public_events (subject_id) WHERE subject_id IS NOT NULL;
