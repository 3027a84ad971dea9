-- The test payment processor's own records (src/payments/testProcessor.ts, PAYMENT_PROCESSOR=test):
-- what it answered to each idempotency key, and the charges it holds. They play the processor's side
-- of the wire, as Stripe keeps its idempotency keys and charges on its side: a key asked again — by
-- the same process, another process or a process started after a crash — gets its first answer and
-- moves no money twice, and a charge authorized before a restart can still be captured or refunded.
-- Not a read model (nothing rebuilds them from the event store); unused by any other processor.
CREATE TABLE payments.test_processor_calls (
  idempotency_key text        PRIMARY KEY,
  -- The order keys were first asked in.
  seq             bigserial   NOT NULL,
  operation       text        NOT NULL,
  amount          integer     NOT NULL,
  -- The first answer, which every repeat of the key gets again.
  result          jsonb       NOT NULL,
  -- How many times the key was asked in all (1 + repeats).
  requests        integer     NOT NULL DEFAULT 1,
  created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE payments.test_processor_charges (
  processor_reference text    PRIMARY KEY,
  -- The test card's token (never a number).
  card                text    NOT NULL,
  amount              integer NOT NULL,
  capture             boolean NOT NULL,
  status              text    NOT NULL,
  captured            integer NOT NULL DEFAULT 0,
  refunded            integer NOT NULL DEFAULT 0
);
