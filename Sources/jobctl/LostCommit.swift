import StorePort

/// What a command says when the answer to its transaction's COMMIT was lost (`StoreError.commitUnconfirmed`:
/// a PostgreSQL connection broke, or went silent past its limit, while the COMMIT ran): the server may
/// have made the change, or not. Each command says how to tell, and what running it again would do.
enum LostCommit {
    /// What every such message says after the loss itself.
    static let mayHaveCommitted = "the server may have committed the transaction before the connection went"

    /// A control's (`pause`, `resume`, `cancel`, `retry`) message for job `id` after `loss` (what
    /// `commitUnconfirmed` says happened).
    static func control(_ command: String, id: String, loss: String, withDependants: Bool = false) -> String {
        let show = "`jobctl show \(id)` says"
        let advice: String
        switch command {
        case "pause":
            advice = "so job \(id) may be paused now: \(show) (paused, or its pause requested if it was running); "
                + "pausing it again changes nothing if it is"
        case "resume":
            advice = "so job \(id) may be resumed now: \(show) (queued or running again if it was); resuming it again is refused if it was"
        case "cancel":
            advice = "so job \(id) may be cancelled now: \(show) (cancelled, or its cancel requested if it was running); "
                + "cancelling it again changes nothing if it is"
        case "retry":
            advice = "so job \(id) may be retried now" + (withDependants ? ", with the dependants it reopens" : "")
                + ": `jobctl history \(id)` shows a `retried` event (and any run since) if it was; retry it again only if not, "
                + "or it runs once more"
        default:
            advice = "so job \(id) may have changed: \(show) how it stands before the command is run again"
        }
        return loss + "; " + mayHaveCommitted + ", " + advice
    }

    /// `submit`'s: what the jobs' keys guarantee.
    static func submit(loss: String) -> String {
        loss + "; " + mayHaveCommitted + ": check what it wrote (`jobctl list`) before running the command again "
            + "(jobs with a `key:` are never created twice)"
    }

    /// `archive --before … --to FILE`'s, after FILE was written and read back: whether the jobs left the log
    /// is what the log's own events say.
    static func archive(loss: String, file: String) -> String {
        loss + "; " + mayHaveCommitted + ", so the archived jobs may have left the log, \(file) then being their only copy: "
            + "keep it; `jobctl history log` lists the archives the log records (its file name and sha256): if this one is "
            + "there the archive is done, if not nothing left the log and the same command may be run again (it writes "
            + "the file anew)"
    }

    /// `archive --blobs-before`'s.
    static func expiredBlobs(loss: String) -> String {
        loss + "; " + mayHaveCommitted + ", so the blobs may have been removed: running the same command again is safe "
            + "(it removes only blobs still stored, and says how many)"
    }

    /// `migrate --to`'s: the copy's transaction, before the check of the copy.
    static func copy(loss: String) -> String {
        loss + "; " + mayHaveCommitted + ", so the log may have been copied, unchecked: `jobctl replay --verify --db <target>` "
            + "checks the copy if the target holds it; running the same command again is safe: it copies only into an "
            + "empty target, and refuses one that holds the copy, changing nothing"
    }
}
