-- GET /v1/events?type=<exact type> (src/events/queries.ts): the feed is read newest first by
-- (transaction_id, position), the gap-safe key of the public events, and a consumer of one type
-- should not scan every other type's events to fill a page. Prefix filters (`order.*`) and the
-- unfiltered feed walk public_events_tx_order_idx (0001) backwards instead.
CREATE INDEX public_events_type_feed_idx ON event_store.public_events (type, transaction_id, position);
