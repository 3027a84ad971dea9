-- Test clocks (src/billing/testClocks): one row per live test clock, projected from the clock streams
-- (rebuildable; a deleted clock's row goes). `frozen_time` also moves item by item while an advance
-- runs (so `BillingClock.nowFor` answers the time of the item being run); `heartbeat_at` is the real
-- time of the advance's last step (a stalled advance can be taken over). Customers on a test clock
-- carry its id (`customers.customers.test_clock_id`, null for everyone else).
CREATE SCHEMA IF NOT EXISTS billing;

CREATE TABLE billing.test_clocks (
  clock_id     text        PRIMARY KEY,
  name         text,
  frozen_time  timestamptz NOT NULL,
  status       text        NOT NULL,
  advancing_to timestamptz,
  heartbeat_at timestamptz,
  created_at   timestamptz NOT NULL,
  updated_at   timestamptz NOT NULL,
  version      integer     NOT NULL
);
CREATE INDEX test_clocks_created_idx ON billing.test_clocks (created_at, clock_id);

ALTER TABLE customers.customers ADD COLUMN test_clock_id text;
