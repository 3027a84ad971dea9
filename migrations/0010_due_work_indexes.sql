-- Claims scan pending (and expired claimed) items of their kind in time order. Indexed by
-- (kind, time) the scan is an ordered index range read that stops at the claim's LIMIT, whatever the
-- planner's statistics say: with the older single-column indexes and stale or missing statistics
-- (a fast-growing queue, autovacuum behind) the planner bitmap-joined the whole backlog and sorted it
-- on every claim (20 ms at 60,000 pending instead of 1 ms).
CREATE INDEX due_work_pending_kind_idx ON processors.due_work (kind, due_at) WHERE status = 'pending';
CREATE INDEX due_work_claimed_kind_idx ON processors.due_work (kind, lease_until) WHERE status = 'claimed';
DROP INDEX processors.due_work_pending_idx;
DROP INDEX processors.due_work_claimed_idx;

-- Finished due work (done or cancelled) is history nobody reads after a while: the purge processor
-- deletes it by completion time, through this index, in small batches. Failed items stay (ops look).
CREATE INDEX due_work_finished_idx ON processors.due_work (completed_at)
  WHERE status IN ('done', 'cancelled');
