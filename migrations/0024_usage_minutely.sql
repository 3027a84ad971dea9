-- The minute rollup (src/billing/usage/projection.ts): per (subscription, meter, minute) what the
-- hourly rollup holds per hour. A summary range rarely starts or ends on an hour (a period starts
-- when its subscription did): its partial edge hours are read as whole minutes from here and only
-- the partial minutes at the very ends from the raw records — tens of rows instead of the thousands
-- a busy hour holds. Filled from the raw records already there; from now on written by the usage
-- projection in the record's own transaction, like the hourly rollup.
CREATE TABLE billing.usage_minutely (
  subscription_id text        NOT NULL,
  meter           text        COLLATE "C" NOT NULL,
  minute          timestamptz NOT NULL,
  event_count     bigint      NOT NULL,
  sum_value       numeric     NOT NULL,
  max_value       numeric     NOT NULL,
  last_value      numeric     NOT NULL,
  last_at         timestamptz NOT NULL,
  last_identifier text        COLLATE "C" NOT NULL,
  PRIMARY KEY (subscription_id, meter, minute)
);

INSERT INTO billing.usage_minutely (subscription_id, meter, minute, event_count, sum_value, max_value,
    last_value, last_at, last_identifier)
  SELECT subscription_id, meter, date_trunc('minute', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
      count(*), sum(value), max(value),
      (array_agg(value ORDER BY occurred_at DESC, identifier DESC))[1], max(occurred_at),
      (array_agg(identifier ORDER BY occurred_at DESC, identifier DESC))[1]
    FROM billing.usage_records
    GROUP BY 1, 2, 3;
