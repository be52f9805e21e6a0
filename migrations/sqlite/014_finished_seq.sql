-- jobctl event store, schema version 14: the seq of a final job's last event, in its row.
--
-- A leftover sweep reads the jobs that create local files and became final since the last sweep's
-- position (a seq). The row kept only the time of the final event, and event times do not follow seqs
-- (a worker stamps an event when it decides it, before its commit), so each sweep first scanned every
-- event after the position for the earliest final event's time, then probed each job finished since
-- then for a final event after the position. A draining worker's last sweep read the whole drain's
-- events that way, whatever their kind: ~10 ms for 10,000 download-memory jobs that left no file, and
-- each of four worker processes draining one log read all four drains' events.
--
-- `finished_seq` is the seq of the event at the job's version while the job is final (its final event:
-- nothing follows a final event but `retried`, which makes the job unfinished again), NULL otherwise.
-- Workers set it in the update that makes a job final; `jobctl replay` rebuilds it and `--verify`
-- compares it with the log. The sweep's index is by kind and that seq: a sweep reads exactly the jobs
-- of its kinds final after its position, and no event.
ALTER TABLE jobs ADD COLUMN finished_seq INTEGER;

UPDATE jobs SET finished_seq = (SELECT events.seq FROM events
                                WHERE events.job_id = jobs.id AND events.version = jobs.version)
WHERE finished_at_ms IS NOT NULL;

DROP INDEX IF EXISTS jobs_finished_by_kind;
CREATE INDEX jobs_finished_seq_by_kind ON jobs (kind, finished_seq) WHERE finished_seq IS NOT NULL;
