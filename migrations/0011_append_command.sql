-- A command's event-store writes in one statement round trip (issue #17: round trips were most of a
-- command's statements): the data keys its personal fields were sealed with, the shared advisory
-- locks of the inline projections the events feed, the append itself (event_store.append_events,
-- unchanged semantics and result), and — only when the append succeeded — the public events derived
-- from the appended events.
--
-- p_new_keys: jsonb array of {subject, wrapped (base64), kek}: keys the caller drew for subjects it
--   knew no key of, inserted here. p_live_keys: jsonb array of {subject, wrapped (base64)}: keys
--   the caller already held; each must still be the subject's key (the same wrapped bytes: not
--   forgotten, not a key whose transaction rolled back). When a new key's subject already has a row
--   (a key or a tombstone) or a held key is not the row's, nothing else is written and the outcome is
--   'subject_keys_stale' (stream_version etc. NULL): the caller seals again after reading the keys.
--
-- p_lock_class, p_locks: each name is locked with pg_advisory_xact_lock_shared(p_lock_class,
--   hashtext(name)) before anything is written (what the command runner took in a statement of its
--   own before writing a projection's tables; a rebuild's swap takes the same lock exclusively).
-- p_public: jsonb array of {id, type, data, occurred_at, source_event_id, stream_id, subject_id}, as
--   event_store.public_events rows, inserted in array order (positions follow it).
-- No EXCEPTION blocks (each would open a subtransaction per call).
CREATE FUNCTION event_store.append_command(
  p_stream_id text, p_stream_type text, p_expected bigint, p_events jsonb, p_recorded_at timestamptz,
  p_lock_class integer, p_locks text[], p_public jsonb, p_new_keys jsonb, p_live_keys jsonb
) RETURNS TABLE (outcome text, stream_version bigint, first_position bigint, last_position bigint,
                 transaction_id text, positions bigint[])
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  r record;
  v_count integer;
BEGIN
  IF coalesce(jsonb_array_length(p_new_keys), 0) > 0 THEN
    WITH created AS (
      INSERT INTO event_store.subject_keys (subject_id, wrapped_dek, kek_id, created_at)
      SELECT k.value->>'subject', decode(k.value->>'wrapped', 'base64'), k.value->>'kek', p_recorded_at
        FROM jsonb_array_elements(p_new_keys) AS k(value)
      ON CONFLICT (subject_id) DO NOTHING
      RETURNING 1
    )
    SELECT count(*) INTO v_count FROM created;
    IF v_count < jsonb_array_length(p_new_keys) THEN
      RETURN QUERY SELECT 'subject_keys_stale'::text, NULL::bigint, NULL::bigint, NULL::bigint,
        pg_current_xact_id()::text, NULL::bigint[];
      RETURN;
    END IF;
  END IF;
  IF coalesce(jsonb_array_length(p_live_keys), 0) > 0 THEN
    SELECT count(*) INTO v_count
      FROM jsonb_array_elements(p_live_keys) AS l(value)
      JOIN event_store.subject_keys k
        ON k.subject_id = l.value->>'subject' AND k.wrapped_dek = decode(l.value->>'wrapped', 'base64');
    IF v_count < jsonb_array_length(p_live_keys) THEN
      RETURN QUERY SELECT 'subject_keys_stale'::text, NULL::bigint, NULL::bigint, NULL::bigint,
        pg_current_xact_id()::text, NULL::bigint[];
      RETURN;
    END IF;
  END IF;

  PERFORM pg_advisory_xact_lock_shared(p_lock_class, hashtext(l.name))
     FROM unnest(coalesce(p_locks, '{}'::text[])) AS l(name);

  SELECT a.outcome, a.stream_version, a.first_position, a.last_position, a.transaction_id, a.positions
    INTO r
    FROM event_store.append_events(p_stream_id, p_stream_type, p_expected, p_events, p_recorded_at) AS a;

  IF r.outcome = 'ok' AND coalesce(jsonb_array_length(p_public), 0) > 0 THEN
    INSERT INTO event_store.public_events (id, type, data, occurred_at, source_event_id, stream_id, subject_id)
    SELECT p.value->>'id', p.value->>'type', p.value->'data', (p.value->>'occurred_at')::timestamptz,
           (p.value->>'source_event_id')::uuid, p.value->>'stream_id', p.value->>'subject_id'
      FROM jsonb_array_elements(p_public) WITH ORDINALITY AS p(value, ord)
     ORDER BY p.ord;
  END IF;

  RETURN QUERY SELECT r.outcome, r.stream_version, r.first_position, r.last_position, r.transaction_id,
                      r.positions;
END
$$;
