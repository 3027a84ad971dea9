-- Usage records are appended one stream per WRITE (a batch, or the single posts written together:
-- `usage-<UUIDv7>`), no longer one per record (`usage-<hash of meter and identifier>`, whose random
-- ids put a random page of two indexes — streams and events by stream — under every record). An
-- identifier still records once: the usage read model's key (meter, identifier), written by the
-- inline projection in the same transaction, is the guard. Two writes of one identifier racing: the
-- second's insert waits for the first, and when the first committed a DIFFERENT record under the key
-- this function raises (a replay of the same record id changes nothing, as before): SQLSTATE 23505,
-- constraint usage_records_pkey, which the use case takes as a lost race and runs again, now finding
-- the record (a 200 replay or a 409). Called from the projection's ON CONFLICT DO UPDATE, whose WHERE
-- lets only the other-record case reach it.
CREATE FUNCTION billing.refuse_taken_usage_identifier(p_meter text, p_identifier text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'usage identifier % of meter % is already recorded', p_identifier, p_meter
    USING ERRCODE = 'unique_violation', CONSTRAINT = 'usage_records_pkey';
END
$$;
