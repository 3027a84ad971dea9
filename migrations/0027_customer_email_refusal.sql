-- POST /user refuses an email another customer record or login holds. The check as one statement
-- that raises instead of answering rows: nothing is read back, so inside the use case's own
-- transaction it travels with the append after it (src/db/PipelinedStatements.ts), one round trip
-- fewer. Its refusal is SQLSTATE 23505, the unique index's own, which the use case answers 409.
-- p_email: normalized (kernel/Email.ts normalizeEmail), as email_normalized holds it.
CREATE FUNCTION customers.refuse_taken_email(p_email text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM customers.customers WHERE email_normalized = p_email)
     OR EXISTS (SELECT 1 FROM identity.users WHERE email_normalized = p_email) THEN
    RAISE EXCEPTION 'email address already in use' USING ERRCODE = 'unique_violation';
  END IF;
END
$$;
