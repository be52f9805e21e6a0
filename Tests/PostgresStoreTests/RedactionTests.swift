import Testing
@testable import PostgresStore

@Suite("Database URLs with their passwords redacted")
struct RedactionTests {
    @Test("every password is replaced by REDACTED and nothing else of value is lost",
          arguments: [
              ("postgres://jobs:s3cret@db.example:5432/jobctl?sslmode=require",
               "postgres://jobs:REDACTED@db.example:5432/jobctl?sslmode=require"),
              ("postgresql://jobs:p%40ss%2Fword@db/jobctl", "postgresql://jobs:REDACTED@db/jobctl"),
              ("postgres://jobs:raw@pass/with/slash@db:5432/jobctl", "postgres://jobs:REDACTED@db:5432/jobctl"),
              ("postgres://jobs:@db/jobctl", "postgres://jobs:REDACTED@db/jobctl"),
              ("postgres://jobs@db:5432/jobctl?sslmode=verify-full", "postgres://jobs@db:5432/jobctl?sslmode=verify-full"),
              ("postgres://db/jobctl?user=jobs&password=s3cret&sslmode=require",
               "postgres://db/jobctl?user=jobs&password=REDACTED&sslmode=require"),
              ("postgres://db/jobctl?sslpassword=keypass", "postgres://db/jobctl?sslpassword=REDACTED"),
              ("host=db user=jobs password=s3cret dbname=jobctl", "host=db user=jobs password=REDACTED dbname=jobctl"),
              ("host=db password = 's3 cr\\'et' dbname=jobctl", "host=db password = REDACTED dbname=jobctl"),
              ("password=s3cret", "password=REDACTED"),
              ("PASSWORD=s3cret host=db", "PASSWORD=REDACTED host=db"),
              ("/var/lib/jobctl/jobs.db", "/var/lib/jobctl/jobs.db"),
          ])
    func redacts(input: String, expected: String) {
        let redacted = redactedDatabaseURL(input)
        #expect(redacted == expected)
        for secret in ["s3cret", "p%40ss", "raw@pass", "keypass", "s3 cr"] {
            #expect(!redacted.contains(secret))
        }
    }

    @Test("an @ in a query value makes redaction remove more, never leave a password")
    func ambiguousAt() {
        let redacted = redactedDatabaseURL("postgres://jobs:s3cret@db/jobctl?application_name=a@b")
        #expect(!redacted.contains("s3cret"))
        #expect(redacted.hasPrefix("postgres://jobs:REDACTED@"))
    }

    @Test("postgres URLs are told apart from file paths")
    func recognisesURLs() {
        #expect(isPostgresURL("postgres://db/jobctl"))
        #expect(isPostgresURL("PostgreSQL://db/jobctl"))
        #expect(!isPostgresURL("jobs.db"))
        #expect(!isPostgresURL("/tmp/postgres://x"))
    }
}
