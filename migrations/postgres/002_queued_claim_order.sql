-- jobctl event store on PostgreSQL, schema version 2: an index that hands a claim its jobs in claim
-- order without sorting the whole queue.
--
-- A claim asks for the first few queued jobs by priority (highest first), run_after, then submission
-- order, usually across every queue. `jobs_claim` leads with (state, queue), so a claim without a
-- queue filter read every queued row and sorted them all: with 10,000 queued jobs that was ~6 ms per
-- claim and 70 % of the server's statement time during a drain. This partial index holds only queued
-- jobs, in exactly that order, so the claim reads its first rows and stops (skipping rows other workers
-- have locked); a queue filter is checked on the rows it reads.
CREATE INDEX jobs_queued_claim_order ON jobs (priority DESC, run_after_ms, seq) WHERE state = 'queued';
