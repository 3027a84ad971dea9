-- A command's event-store writes in one statement round trip (issue #17: round trips were most of a
-- command's statements): the shared advisory locks of the inline projections the events feed, the
-- append itself (event_store.append_events, unchanged semantics and result), and — only when the
-- append succeeded — the public events derived from the appended events.
--
-- p_lock_class, p_locks: each name is locked with pg_advisory_xact_lock_shared(p_lock_class,
--   hashtext(name)) before anything is written (what the command runner took in a statement of its
--   own before writing a projection's tables; a rebuild's swap takes the same lock exclusively).
-- p_public: jsonb array of {id, type, data, occurred_at, source_event_id, stream_id, subject_id}, as
--   event_store.public_events rows, inserted in array order (positions follow it).
-- No EXCEPTION blocks (each would open a subtransaction per call).
CREATE FUNCTION event_store.append_command(
  p_stream_id text, p_stream_type text, p_expected bigint, p_events jsonb, p_recorded_at timestamptz,
  p_lock_class integer, p_locks text[], p_public jsonb
) RETURNS TABLE (outcome text, stream_version bigint, first_position bigint, last_position bigint,
                 transaction_id text, positions bigint[])
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  r record;
BEGIN
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
