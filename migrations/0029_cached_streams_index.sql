-- The events the in-process read caches watch (src/kernel/ReadCache.ts: products, orders, and the
-- customer erasure that clears the orders cache), in the gap-safe (transaction_id, global_position)
-- order. Each cache polls the store every 250 ms for other processes' changes to its streams; before
-- this index that poll read EVERY event since the last one (by events_tx_order_idx, a heap fetch per
-- row) to pick out the few of its streams, so a usage batch's 1,000 events cost each cache a scan:
-- measured on bench:billing's batch row, 15-20 µs of PostgreSQL CPU per usage record. With it the
-- poll reads only its own streams' events, and moves its checkpoint to the newest event below the
-- horizon by one backward index probe. A cache whose streams are not covered here is still right:
-- its poll filters the order index instead (ReadCache's test caches do), only slower.
-- Partial: only the few matching rows are indexed, so the appends of every other stream pay nothing
-- but the predicate. The predicate is spelled exactly as the caches' queries spell theirs (literal
-- starts_with calls), which is what lets the planner prove the index applies.
CREATE INDEX events_cached_streams_idx ON event_store.events (transaction_id, global_position)
  WHERE starts_with(stream_id, 'product-') OR starts_with(stream_id, 'order-')
     OR event_type = 'customer.erased';
