-- Payments (src/payments): what the processor's events (POST /v1/processor-events/stripe) are
-- matched by. A Stripe object carries the idempotency key it was created under, whose prefix is the
-- intent's `call_key_prefix` (its id, or `ik_…` when the creating request had an Idempotency-Key),
-- or the processor's reference of one of our payments. Both columns are projected (rebuildable).
ALTER TABLE payments.payment_intents ADD COLUMN call_key_prefix text;
UPDATE payments.payment_intents SET call_key_prefix = payment_intent_id WHERE call_key_prefix IS NULL;
CREATE INDEX payment_intents_call_key_prefix_idx ON payments.payment_intents (call_key_prefix);
CREATE INDEX payments_processor_reference_idx ON payments.payments (processor, processor_reference);
