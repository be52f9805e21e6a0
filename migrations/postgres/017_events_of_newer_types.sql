-- jobctl event store on PostgreSQL, schema version 17: an index of the events of types this schema's jobctl does not
-- know, which a newer jobctl appends to a log it shares with older ones during a rolling upgrade.
--
-- Such an event may change what its job may do (a newer "hold this job"), and an older worker claimed
-- and ran the job as if it were not there; `history` and `replay --verify` called the log damaged. Claims,
-- controls and listings now leave a job with such an event alone, and find those events here: the index
-- holds only events whose type is none of those below, so it stays empty while every jobctl writing the
-- log knows every type in it. A claim's look is a probe of an empty index, and an append of any of these
-- types writes no entry. The condition is spelt as comparisons, not an IN list, for the reason schema 9
-- of the SQLite log gives (an IN list checked on every insert is a temporary b-tree built each time).
--
-- The condition is never changed: a planner uses a partial index only for a query whose WHERE clause
-- holds its condition, so every query names it word for word (`NewerEvents.condition`), and a later
-- jobctl that knows more types adds its own types to the query, not to this index.
CREATE INDEX IF NOT EXISTS events_of_newer_types ON events (job_id)
    WHERE type <> 'submitted' AND type <> 'claimed' AND type <> 'started' AND type <> 'progress' AND
      type <> 'pause_requested' AND type <> 'paused' AND type <> 'resume_requested' AND
      type <> 'cancel_requested' AND type <> 'cancelled' AND type <> 'attempt_failed' AND
      type <> 'lease_expired' AND type <> 'released' AND type <> 'succeeded' AND type <> 'failed' AND
      type <> 'retried' AND type <> 'archived';
