-- Bulk append: several streams in one statement round trip, all or nothing.
--
-- p_streams: jsonb array of
--   {"streamId", "streamType", "expected", "events": [{id, type, schemaVersion, data, metadata}]}
-- with "expected" as for append_events: null = any, -1 or 0 = the stream must not exist, n = exact.
-- Per stream the semantics are those of append_events (same ordering guard on
-- streams.last_xid <= pg_current_xact_id(), same stream row insert/update, consecutive versions).
--
-- Returns one row per input stream, in input order: the new stream version, the global positions of
-- its events (in event order) and the transaction id. Events are inserted in input order (stream by
-- stream, event by event), so positions ascend in that order.
--
-- The first conflict, in stream id order, raises SQLSTATE CP409 — nothing of the call is written —
-- with the message
--   wrong_expected_version <actual version, 0 when absent> <stream id>
--   ordering_conflict <actual version> <stream id>    (a newer transaction appended: retry in a new tx)
-- Stream ids never contain spaces (EventStore validates them), so the message splits on spaces.
-- Malformed input (a stream without streamId, streamType or events; a stream id twice) raises
-- invalid_parameter_value.
--
-- Set-based: one statement upserts every stream row, in stream id order (COLLATE "C"), so two calls
-- on overlapping streams take their row locks and unique-index waits in the same order and cannot
-- deadlock each other. Every stream row is claimed the "any" way (insert, or update when the ordering
-- guard holds) and the expected versions are checked afterwards from the returned versions: the
-- version before the append is new - count (0 = the row was just inserted; an existing stream has at
-- least one event). A failed check raises, which undoes the whole statement, so claiming first and
-- checking after writes exactly what append_events would. (One difference, only in a race: an exact
-- version on a stream that another transaction is creating waits for it and is checked against what
-- it committed, where append_events reports actual 0 at once.) No EXCEPTION blocks (no subtransactions).
CREATE FUNCTION event_store.append_many(p_streams jsonb, p_recorded_at timestamptz)
RETURNS TABLE (stream_id text, stream_version bigint, positions bigint[], transaction_id text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_xid       xid8 := pg_current_xact_id();
  v_ids       text[];
  v_types     text[];
  v_expected  bigint[];
  v_counts    bigint[];
  v_new       bigint[];
  v_bad_id    text;
  v_bad_exp   bigint;
  v_bad_new   bigint;
  v_bad_count bigint;
  v_actual    bigint;
  v_malformed text;
BEGIN
  -- Parse the stream headers once, in input order.
  SELECT array_agg(t.value->>'streamId' ORDER BY t.ord),
         array_agg(t.value->>'streamType' ORDER BY t.ord),
         array_agg((t.value->>'expected')::bigint ORDER BY t.ord),
         array_agg(jsonb_array_length(t.value->'events')::bigint ORDER BY t.ord),
         CASE
           WHEN bool_or(t.value->>'streamId' IS NULL) THEN 'a stream without streamId'
           WHEN bool_or(t.value->>'streamType' IS NULL) THEN 'a stream without streamType'
           WHEN bool_or(coalesce(jsonb_array_length(t.value->'events'), 0) = 0) THEN 'a stream without events'
           WHEN count(DISTINCT t.value->>'streamId') <> count(*) THEN 'the same streamId twice'
         END
    INTO v_ids, v_types, v_expected, v_counts, v_malformed
    FROM jsonb_array_elements(p_streams) WITH ORDINALITY AS t(value, ord);
  IF v_malformed IS NOT NULL THEN
    RAISE EXCEPTION 'append_many: %', v_malformed USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF v_ids IS NULL THEN
    RETURN; -- no streams
  END IF;

  -- Claim every stream row in stream id order; a row whose ordering guard fails is locked, not returned.
  WITH claimed AS (
    INSERT INTO event_store.streams AS s (stream_id, stream_type, version, last_xid, created_at, updated_at)
    SELECT i.id, i.type, i.n, v_xid, p_recorded_at, p_recorded_at
      FROM unnest(v_ids, v_types, v_counts) AS i(id, type, n)
     ORDER BY i.id COLLATE "C"
    ON CONFLICT (stream_id) DO UPDATE
      SET version = s.version + excluded.version, last_xid = excluded.last_xid, updated_at = excluded.updated_at
      WHERE s.last_xid <= excluded.last_xid
    RETURNING s.stream_id, s.version
  )
  SELECT array_agg(c.version ORDER BY i.ord)
    INTO v_new
    FROM unnest(v_ids) WITH ORDINALITY AS i(id, ord)
    LEFT JOIN claimed c ON c.stream_id = i.id;

  -- The first conflict in stream id order, if any.
  SELECT c.id, c.expected, c.new, c.n
    INTO v_bad_id, v_bad_exp, v_bad_new, v_bad_count
    FROM unnest(v_ids, v_expected, v_counts, v_new) AS c(id, expected, n, new)
   WHERE c.new IS NULL OR (c.expected IS NOT NULL AND c.new - c.n <> greatest(c.expected, 0))
   ORDER BY c.id COLLATE "C"
   LIMIT 1;
  IF FOUND THEN
    IF v_bad_new IS NOT NULL THEN
      RAISE EXCEPTION 'wrong_expected_version % %', v_bad_new - v_bad_count, v_bad_id USING ERRCODE = 'CP409';
    END IF;
    -- The ordering guard refused the row (locked by the claim above, so its version is settled).
    SELECT s.version INTO v_actual FROM event_store.streams s WHERE s.stream_id = v_bad_id;
    IF v_bad_exp IS NOT NULL AND v_actual <> greatest(v_bad_exp, 0) THEN
      RAISE EXCEPTION 'wrong_expected_version % %', v_actual, v_bad_id USING ERRCODE = 'CP409';
    END IF;
    RAISE EXCEPTION 'ordering_conflict % %', v_actual, v_bad_id USING ERRCODE = 'CP409';
  END IF;

  RETURN QUERY
  WITH v AS (
    SELECT v.id, v.new, v.n, v.ord FROM unnest(v_ids, v_new, v_counts) WITH ORDINALITY AS v(id, new, n, ord)
  ), inserted AS (
    INSERT INTO event_store.events
      (stream_id, stream_version, event_id, event_type, schema_version, data, metadata, recorded_at)
    SELECT v.id, v.new - v.n + e.ord, (e.value->>'id')::uuid, e.value->>'type',
           (e.value->>'schemaVersion')::smallint, e.value->'data', coalesce(e.value->'metadata', '{}'::jsonb),
           p_recorded_at
      FROM jsonb_array_elements(p_streams) WITH ORDINALITY AS t(value, ord)
      JOIN v ON v.ord = t.ord
     CROSS JOIN LATERAL jsonb_array_elements(t.value->'events') WITH ORDINALITY AS e(value, ord)
     ORDER BY t.ord, e.ord
    RETURNING stream_id, global_position
  ), grouped AS (
    -- Rows are inserted in that order and take identity values in that order.
    SELECT i.stream_id, array_agg(i.global_position ORDER BY i.global_position) AS positions
      FROM inserted i
     GROUP BY i.stream_id
  )
  SELECT v.id, v.new, g.positions, v_xid::text
    FROM v JOIN grouped g ON g.stream_id = v.id
   ORDER BY v.ord;
END
$$;
